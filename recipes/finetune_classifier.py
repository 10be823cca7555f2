"""Pre-train, then fine-tune: f = g(h(x)), a classification head g on a pre-trained encoder h.

Takes an encoder pre-trained by the masked recipe (a BERT / RoBERTa from ``masked/bert_tiny.yaml``, or the ELECTRA
discriminator that ``masked/electra_tiny.yaml`` saves: a stock ``ElectraForPreTraining`` folder, whose
``generator/`` subfolder is ignored), adds a sequence-classification head
(``AutoModelForSequenceClassification`` from that checkpoint, optionally with a LoRA adapter) and
fine-tunes it on a small labelled set built locally from standard-library functions: whether some
of a function's tokens were replaced at random (``--task replaced_tokens``, the default, where even
a short pre-training helps clearly) or which package it comes from (``--task package``). The same
architecture is then trained from scratch with the same steps and data; both accuracies are reported.

Supported setups: one CPU process, several CPU processes (gloo), one or many GPUs, FSDP2 and
DeepSpeed, chosen by the accelerate config alone.

    accelerate launch recipes/finetune_classifier.py --config recipes/configs/masked/finetune_classifier.yaml \\
        --model_name_or_path out/masked-bert-tiny
    accelerate launch --config_file recipes/accelerate_configs/multi_process.yaml recipes/finetune_classifier.py \\
        --config recipes/configs/masked/finetune_classifier.yaml --model_name_or_path out/masked-bert-tiny
    python recipes/finetune_classifier.py --config recipes/configs/masked/finetune_classifier.yaml \\
        --model_name_or_path out/masked-bert-tiny --use_lora true --max_steps 3 --output_dir out/cls-quick
    accelerate launch recipes/finetune_classifier.py --config recipes/configs/masked/finetune_classifier.yaml \\
        --model_name_or_path out/masked-electra-tiny     # the ELECTRA discriminator

Any ``TrainingArguments`` field and every field of ``ModelArguments`` / ``ClassifierArguments`` can be
set in the YAML file or overridden on the command line. The run writes the fine-tuned classifier
(or its adapter with ``--use_lora``), the tokenizer, ``metrics.json`` (``eval_accuracy`` and
``scratch_eval_accuracy``), ``loss_curve.png`` and ``README.md`` into ``--output_dir``.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:
    __package__ = "hf_lmobj.recipes"  # run as a file: resolve relative imports in the shipped package

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import numpy as np
from transformers import (
    AutoConfig,
    AutoModelForSequenceClassification,
    AutoTokenizer,
    DataCollatorWithPadding,
    Trainer,  # fmt: skip
    TrainingArguments,
    set_seed,
)

from hf_lmobj.cards.writer import write_model_card
from hf_lmobj.checks import check_flag, check_length, check_number
from hf_lmobj.config import cpu_aware_argv, parse_args_with_config
from hf_lmobj.labelled_sets import (
    DEFAULT_PACKAGES,
    build_package_classification_dataset,
    build_replaced_token_dataset,
    tokenize_classification,
)
from hf_lmobj.models.stock import ModelArguments
from hf_lmobj.trainer.teardown import close_distributed

from .runtime.after_training import nothing_lost, save_trained_model, write_metrics
from .runtime.run_checks import check_training_arguments

TASKS = ("package", "replaced_tokens")


@dataclass
class ClassifierArguments:
    """The labelled task, the optional adapter and the from-scratch comparison."""

    #: The YAML config section of these fields (hf_lmobj.config): ``classifier: {...}``.
    SECTION: ClassVar[str] = "classifier"

    task: str = field(
        default="replaced_tokens",
        metadata={"help": "package (which stdlib package) | replaced_tokens (real or corrupted)."},
    )
    packages: str = field(
        default=",".join(DEFAULT_PACKAGES),
        metadata={"help": "Comma-separated stdlib packages (the classes of 'package')."},
    )
    train_per_class: int = field(default=64, metadata={"help": "Labelled training functions per class."})
    eval_per_class: int = field(default=48, metadata={"help": "Held-out functions per class."})
    max_chars: int | None = field(default=800, metadata={"help": "Only functions of at most N characters (never cut)."})
    use_lora: bool = field(default=False, metadata={"help": "Train a LoRA adapter + the head instead of all weights."})
    lora_r: int = field(default=8, metadata={"help": "Rank of the LoRA update."})
    lora_alpha: int = field(default=16, metadata={"help": "LoRA scaling numerator (scale = alpha / r)."})
    replace_prob: float = field(
        default=0.15, metadata={"help": "replaced_tokens: share of a corrupted function's tokens replaced."}
    )
    compare_with_scratch: bool = field(
        default=True, metadata={"help": "Also train the same architecture from scratch."}
    )

    def __post_init__(self) -> None:
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {TASKS}, got {self.task!r}")
        if not isinstance(self.packages, str):
            raise TypeError(f"packages must be a comma-separated string such as 'json,email', got {self.packages!r}")
        names = [p.strip() for p in self.packages.split(",") if p.strip()]
        if len(names) < 2:
            raise ValueError(f"packages must name at least 2 comma-separated packages, got {self.packages!r}")
        if len(set(names)) != len(names):
            raise ValueError(f"packages names a package twice: {self.packages!r}; each class once")
        for name in ("train_per_class", "eval_per_class", "lora_r", "lora_alpha"):
            setattr(self, name, check_length(getattr(self, name), name, 1))
        self.max_chars = check_length(self.max_chars, "max_chars", 1, "None = any length", optional=True)
        self.replace_prob = check_number(self.replace_prob, "replace_prob", 0.0, 1.0, low_open=True,
                                         hint="the share of a corrupted function's tokens replaced")  # fmt: skip
        for name in ("use_lora", "compare_with_scratch"):
            setattr(self, name, check_flag(getattr(self, name), name))

    @property
    def package_list(self) -> tuple[str, ...]:
        return tuple(p.strip() for p in self.packages.split(",") if p.strip())


def accuracy(prediction) -> dict[str, float]:
    """Share of argmax predictions equal to the label (``Trainer``'s ``compute_metrics``)."""
    logits = prediction.predictions[0] if isinstance(prediction.predictions, tuple) else prediction.predictions
    return {"accuracy": float((np.argmax(logits, axis=-1) == prediction.label_ids).mean())}


def build_classifier(path: str, labels: tuple[str, ...], pretrained: bool, args: ClassifierArguments, attn: str):
    """The checkpoint's encoder + a fresh head (``pretrained``), or the same architecture from config."""
    label_kwargs = dict(num_labels=len(labels), id2label=dict(enumerate(labels)),
                        label2id={name: i for i, name in enumerate(labels)})  # fmt: skip
    if pretrained:
        model = AutoModelForSequenceClassification.from_pretrained(path, attn_implementation=attn, **label_kwargs)
    else:
        config = AutoConfig.from_pretrained(path, **label_kwargs)
        model = AutoModelForSequenceClassification.from_config(config, attn_implementation=attn)
    if not args.use_lora:
        return model
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(task_type="SEQ_CLS", r=args.lora_r, lora_alpha=args.lora_alpha, target_modules="all-linear",
                        modules_to_save=["classifier", "score", "pooler"])  # fmt: skip
    return get_peft_model(model, config)


def labelled_data(tokenizer, args: ClassifierArguments, seed: int) -> tuple[tuple[str, ...], dict]:
    """The class names and the tokenized train / validation sets of ``args.task``."""
    sizes = (args.train_per_class, args.eval_per_class, args.max_chars)
    if args.task == "package":
        splits = build_package_classification_dataset(args.package_list, *sizes)
        return args.package_list, {name: tokenize_classification(split, tokenizer) for name, split in splits.items()}
    splits = build_replaced_token_dataset(tokenizer, args.package_list, *sizes, args.replace_prob, seed)
    return ("original", "corrupted"), dict(splits)


def build_trainer(model, train_args: TrainingArguments, data: dict, tokenizer) -> Trainer:
    """A ``Trainer`` of ``model`` on the labelled ``data``, scoring accuracy."""
    return Trainer(model=model, args=train_args, train_dataset=data["train"], eval_dataset=data["validation"],
                   data_collator=DataCollatorWithPadding(tokenizer), compute_metrics=accuracy)  # fmt: skip


def train_and_evaluate(model, train_args: TrainingArguments, data: dict, tokenizer) -> tuple[Trainer, dict]:
    trainer = build_trainer(model, train_args, data, tokenizer)
    trainer.train()
    return trainer, trainer.evaluate()


def main(argv: list[str] | None = None) -> dict[str, float]:
    model_args, cls_args, train_args = parse_args_with_config(
        (ModelArguments, ClassifierArguments, TrainingArguments), cpu_aware_argv(argv)
    )
    path = model_args.model_name_or_path
    if not path:
        raise ValueError("model_name_or_path is required: pass --model_name_or_path <encoder from the masked recipe>")
    check_training_arguments(train_args)
    tokenizer = AutoTokenizer.from_pretrained(path)
    with train_args.main_process_first(desc="prepare data"):
        labels, data = labelled_data(tokenizer, cls_args, train_args.seed)
    _check_lengths(data, AutoConfig.from_pretrained(path))
    set_seed(train_args.seed)
    trainer = build_trainer(build_classifier(path, labels, True, cls_args, model_args.attn_implementation),
                            train_args, data, tokenizer)  # fmt: skip
    trainer.train()
    save_trained_model(trainer, tokenizer, train_args.output_dir)  # first: the comparison may fail, never the model
    metrics: dict[str, float] = {}
    with nothing_lost(train_args.output_dir, metrics, trainer.is_world_process_zero(), saved=" with its tokenizer"):
        results = trainer.evaluate()
        metrics.update({k: v for k, v in results.items() if k in ("eval_loss", "eval_accuracy")})
        if cls_args.compare_with_scratch:
            scratch_args = dataclasses.replace(train_args, output_dir=str(Path(train_args.output_dir) / "scratch"),
                                               save_strategy="no")  # fmt: skip
            set_seed(train_args.seed)
            scratch = build_classifier(path, labels, False, cls_args, model_args.attn_implementation)
            _, scratch_results = train_and_evaluate(scratch, scratch_args, data, tokenizer)
            metrics.update(
                scratch_eval_loss=scratch_results["eval_loss"], scratch_eval_accuracy=scratch_results["eval_accuracy"]
            )
            metrics["accuracy_gain_over_scratch"] = metrics["eval_accuracy"] - metrics["scratch_eval_accuracy"]
        metrics.update(num_train_examples=data["train"].num_rows, num_eval_examples=data["validation"].num_rows,
                       chance_accuracy=1.0 / len(labels))  # fmt: skip
        if trainer.is_world_process_zero():
            _report(trainer, metrics, path, cls_args)
    close_distributed(trainer)  # last: no collective after it
    return metrics


def _check_lengths(data: dict, config) -> None:
    longest = max(len(ids) for split in data.values() for ids in split["input_ids"])
    limit = getattr(config, "max_position_embeddings", None)
    if limit is not None and longest > limit:
        raise ValueError(f"the longest example has {longest} tokens but the encoder reads at most {limit}; "
                         "lower max_chars so that every function fits (examples are never truncated)")  # fmt: skip


def _report(trainer, metrics, path: str, cls_args: ClassifierArguments) -> None:
    output = Path(trainer.args.output_dir)
    write_metrics(output, metrics)
    hyperparameters = {
        "task": cls_args.task, "functions from": cls_args.packages, "train_per_class": cls_args.train_per_class,
        "eval_per_class": cls_args.eval_per_class, "max_chars": cls_args.max_chars, "use_lora": cls_args.use_lora,
        "learning_rate": trainer.args.learning_rate, "max_steps": trainer.args.max_steps,
        "per_device_train_batch_size": trainer.args.per_device_train_batch_size,
    }  # fmt: skip
    write_model_card(
        output, objective="sequence_classification", metrics=metrics, hyperparameters=hyperparameters,
        model_name=f"{Path(path).name}-{cls_args.task}-classifier", dataset_name="python-stdlib-packages",
        base_model=path, log_history=trainer.state.log_history,
        extra={"pre-trained encoder": path, "head": "AutoModelForSequenceClassification (fresh classification head)",
               "baseline": "the same architecture trained from scratch, same steps and data"},
    )  # fmt: skip
    print(json.dumps(metrics, indent=2))


if __name__ == "__main__":
    main()
