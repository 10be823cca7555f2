"""Fine-tune a causal LM with a PEFT LoRA adapter: instruction tuning or continued pre-training.

Supported setups: one CPU process, several CPU processes (gloo), one or many GPUs, FSDP2 and
DeepSpeed, chosen by the accelerate config alone. Only the adapter is saved.

    accelerate launch recipes/finetune_lora.py --config recipes/configs/causal/finetune_lora.yaml \\
        --model_name_or_path out/causal-demo
    accelerate launch --config_file recipes/accelerate_configs/multi_process.yaml recipes/finetune_lora.py \\
        --config recipes/configs/causal/finetune_lora.yaml --model_name_or_path out/causal-demo --max_steps 20
    python recipes/finetune_lora.py --config recipes/configs/causal/finetune_lora.yaml \\
        --model_name_or_path out/causal-demo --mode continue --max_steps 3 --output_dir out/lora-quick

Modes. ``instruction`` trains on prompt / response pairs with the prompt tokens masked from the loss
(per-feature ``labels`` = -100, respected by ``DataCollatorForCausalLM``); without ``--dataset_name``
the pairs are built from the standard library (prompt = a function's signature and docstring,
response = its code). ``continue`` packs raw text, as ``recipes/pretrain.py`` does.

Any ``TrainingArguments`` field and every field of ``ModelArguments`` / ``LoraArguments`` can be set
in the YAML file or overridden on the command line. The run writes the adapter
(``adapter_model.safetensors`` + ``adapter_config.json``), the tokenizer, ``metrics.json``,
``loss_curve.png`` and ``README.md`` into ``--output_dir``. Load it with
``PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base), output_dir)``.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:
    __package__ = "hf_lmobj.recipes"  # run as a file: resolve relative imports in the shipped package

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import datasets
from peft import LoraConfig, get_peft_model
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, TrainingArguments, set_seed

from hf_lmobj.cards.writer import write_model_card
from hf_lmobj.checks import check_length, check_name, check_number
from hf_lmobj.collators.causal import DataCollatorForCausalLM
from hf_lmobj.config import cpu_aware_argv, parse_args_with_config
from hf_lmobj.data.prepare import DataArguments
from hf_lmobj.data.prepare_run import prepare_run_data
from hf_lmobj.data.run_sources import open_sources
from hf_lmobj.labelled_sets import build_instruction_dataset, tokenize_instructions
from hf_lmobj.models.stock import ModelArguments, check_positions, position_limit
from hf_lmobj.trainer.objective_trainer import ObjectiveTrainer
from hf_lmobj.trainer.teardown import close_distributed

from .runtime.after_training import nothing_lost, save_trained_model, write_metrics
from .runtime.run_checks import check_training_arguments

MODES = ("instruction", "continue")


@dataclass
class LoraArguments:
    """What to fine-tune on and the shape of the adapter."""

    #: The YAML config section of these fields (hf_lmobj.config): ``lora: {...}``.
    SECTION: ClassVar[str] = "lora"

    mode: str = field(default="instruction", metadata={"help": f"One of {MODES}."})
    dataset_name: str | None = field(
        default=None, metadata={"help": "Hub/local dataset; None = built from the stdlib."}
    )
    dataset_config: str | None = field(default=None, metadata={"help": "Dataset configuration name."})
    prompt_column: str = field(default="prompt", metadata={"help": "instruction: column of the (unscored) prompts."})
    response_column: str = field(default="response", metadata={"help": "instruction: column of the trained responses."})
    text_column: str = field(default="text", metadata={"help": "continue: column of the raw text."})
    packages: str | None = field(
        default=None, metadata={"help": "Built set: comma-separated stdlib packages; None = all."}
    )
    max_chars: int | None = field(default=1200, metadata={"help": "Built set: only functions of at most N characters."})
    max_examples: int | None = field(default=None, metadata={"help": "Use only the first N examples / documents."})
    validation_fraction: float = field(
        default=0.1, metadata={"help": "Held-out share when there is no validation split."}
    )
    max_eval_examples: int | None = field(
        default=64, metadata={"help": "Validation examples / rows scored; None = all."}
    )
    max_length: int = field(default=512, metadata={"help": "Longest row; longer examples are split, never truncated."})
    lora_r: int = field(default=8, metadata={"help": "Rank of the LoRA update."})
    lora_alpha: int = field(default=16, metadata={"help": "LoRA scaling numerator (scale = alpha / r)."})
    lora_dropout: float = field(default=0.0, metadata={"help": "Dropout on the LoRA input."})
    lora_target_modules: str = field(
        default="all-linear", metadata={"help": "'all-linear' or comma-separated module names."}
    )

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"mode must be one of {MODES}, got {self.mode!r}")
        for name in ("dataset_name", "dataset_config", "packages"):
            setattr(self, name, check_name(getattr(self, name), name, optional=True))
        for name in ("prompt_column", "response_column", "text_column", "lora_target_modules"):
            setattr(self, name, check_name(getattr(self, name), name))
        for name in ("lora_r", "lora_alpha"):
            setattr(self, name, check_length(getattr(self, name), name, 1))
        self.lora_dropout = check_number(self.lora_dropout, "lora_dropout", 0.0, 1.0, high_open=True)
        self.max_length = check_length(self.max_length, "max_length", 2, "a token and the next one")
        for name in ("max_examples", "max_eval_examples", "max_chars"):
            setattr(self, name, check_length(getattr(self, name), name, 1, "or null", optional=True))
        self.validation_fraction = check_number(self.validation_fraction, "validation_fraction", 0.0, 1.0,
                                                low_open=True, high_open=True, hint="the held-out share")  # fmt: skip


def instruction_data(tokenizer, args: LoraArguments) -> tuple[datasets.Dataset, datasets.Dataset]:
    """Tokenized (train, validation) prompt / response pairs, prompts masked with -100."""
    if args.dataset_name is None:
        packages = tuple(p.strip() for p in args.packages.split(",")) if args.packages else None
        splits = build_instruction_dataset(packages, args.max_chars, args.validation_fraction, args.max_examples)
    else:
        splits = datasets.load_dataset(args.dataset_name, args.dataset_config)
        if "validation" not in splits:
            held = splits["train"].train_test_split(test_size=args.validation_fraction, seed=0)
            splits = datasets.DatasetDict(train=held["train"], validation=held["test"])
        if args.max_examples is not None:
            splits["train"] = splits["train"].select(range(min(args.max_examples, splits["train"].num_rows)))
    for name in ("train", "validation"):
        if splits[name].num_rows == 0:
            raise ValueError(f"the {name} split is empty; use more data (packages, max_examples, validation_fraction)")
    columns = (args.prompt_column, args.response_column)
    train, evaluation = (tokenize_instructions(splits[name], tokenizer, *columns) for name in ("train", "validation"))
    return train, _head(evaluation, args.max_eval_examples)


def continue_data(tokenizer, args: LoraArguments, model, batch_size: int, seed: int = 0):
    """Packed raw text, on the data path of ``recipes/pretrain.py`` (held-out documents by content hash)."""
    data_args = DataArguments(objective="causal", dataset_name=args.dataset_name, dataset_config=args.dataset_config,
                              text_column=args.text_column, max_length=args.max_length,
                              validation_fraction=args.validation_fraction, max_documents=args.max_examples,
                              max_eval_rows=args.max_eval_examples)  # fmt: skip
    data = prepare_run_data(open_sources(data_args), "causal", tokenizer, data_args, batch_size, model, seed)
    return data.train_dataset, data.eval_dataset, data.collator


def _head(dataset: datasets.Dataset, n: int | None) -> datasets.Dataset:
    return dataset if n is None else dataset.select(range(min(n, dataset.num_rows)))


def build_lora_model(model_args: ModelArguments, args: LoraArguments):
    """The base causal LM wrapped in a fresh LoRA adapter (base weights frozen)."""
    model = AutoModelForCausalLM.from_pretrained(model_args.model_name_or_path,
                                                 attn_implementation=model_args.attn_implementation)  # fmt: skip
    targets = args.lora_target_modules
    config = LoraConfig(
        task_type="CAUSAL_LM",
        r=args.lora_r,
        lora_alpha=args.lora_alpha,
        lora_dropout=args.lora_dropout,
        target_modules=targets if targets == "all-linear" else [t.strip() for t in targets.split(",")],
    )
    return get_peft_model(model, config)


def finetune(argv: list[str] | None = None) -> tuple[ObjectiveTrainer, dict[str, float]]:
    """Run the recipe; return the trainer (its model is the trained PeftModel) and the metrics."""
    model_args, lora_args, train_args = parse_args_with_config(
        (ModelArguments, LoraArguments, TrainingArguments), cpu_aware_argv(argv), description=__doc__
    )
    if not model_args.model_name_or_path:
        raise ValueError("model_name_or_path is required: pass --model_name_or_path <causal LM folder or Hub id>")
    check_training_arguments(train_args)
    _check_positions(model_args, lora_args)
    set_seed(train_args.seed)
    tokenizer = AutoTokenizer.from_pretrained(model_args.model_name_or_path)
    if tokenizer.pad_token is None:  # padding is decided by the attention mask, so EOS is still trained
        tokenizer.pad_token = tokenizer.eos_token
    model = build_lora_model(model_args, lora_args)
    with train_args.main_process_first(desc="prepare data"):
        if lora_args.mode == "instruction":
            train, evaluation = instruction_data(tokenizer, lora_args)
            collator = DataCollatorForCausalLM(tokenizer, max_length=lora_args.max_length)
        else:
            train, evaluation, collator = continue_data(
                tokenizer, lora_args, model.get_base_model(), train_args.per_device_train_batch_size, train_args.seed
            )
    # eval_loss / eval_perplexity over every target token of the eval set (not a mean of batch means)
    trainer = ObjectiveTrainer(model=model, args=train_args, data_collator=collator, train_dataset=train,
                               eval_dataset=evaluation)  # fmt: skip
    base_loss = trainer.evaluate()["eval_loss"]  # the adapter starts as the identity (B = 0)
    train_metrics = trainer.train().metrics
    save_trained_model(trainer, tokenizer, train_args.output_dir)  # first; a PeftModel saves only its adapter
    trainable, total = model.get_nb_trainable_parameters()
    metrics = {
        "base_eval_loss": base_loss, "train_loss": train_metrics["train_loss"], "num_train_examples": train.num_rows,
        "trainable_parameters": trainable, "total_parameters": total,
    }  # fmt: skip
    saved = " (the LoRA adapter, with the tokenizer)"
    with nothing_lost(train_args.output_dir, metrics, trainer.is_world_process_zero(), saved=saved):
        final = trainer.evaluate()
        metrics.update(eval_loss=final["eval_loss"], eval_perplexity=final["eval_perplexity"])
        if trainer.is_world_process_zero():
            _report(trainer, metrics, model_args, lora_args)
    return trainer, metrics


def _check_positions(model_args: ModelArguments, lora_args: LoraArguments) -> None:
    """``max_length`` against the base model's positions (its config), before any data or training."""
    try:
        config = AutoConfig.from_pretrained(model_args.model_name_or_path)
    except (OSError, ValueError, KeyError):
        return  # unreadable here: from_pretrained reports it when the model is loaded
    check_positions(lora_args.max_length, position_limit(config), f"max_length {lora_args.max_length}",
                    f"lower --max_length (the base model {model_args.model_name_or_path} reads at most that)")  # fmt: skip


def main(argv: list[str] | None = None) -> dict[str, float]:
    trainer, metrics = finetune(argv)
    close_distributed(trainer)  # last: no collective after it
    return metrics


def _report(trainer, metrics, model_args: ModelArguments, lora_args: LoraArguments) -> None:
    output = Path(trainer.args.output_dir)
    write_metrics(output, metrics)
    base = model_args.model_name_or_path
    hyperparameters = {
        "mode": lora_args.mode, "lora_r": lora_args.lora_r, "lora_alpha": lora_args.lora_alpha,
        "lora_dropout": lora_args.lora_dropout, "lora_target_modules": lora_args.lora_target_modules,
        "prompt_tokens_in_loss": False if lora_args.mode == "instruction" else "n/a",
        "max_length": lora_args.max_length, "learning_rate": trainer.args.learning_rate,
        "max_steps": trainer.args.max_steps, "per_device_train_batch_size": trainer.args.per_device_train_batch_size,
    }  # fmt: skip
    write_model_card(
        output,
        objective="causal",
        metrics=metrics,
        hyperparameters=hyperparameters,
        model_name=f"{Path(base).name}-lora-{lora_args.mode}",
        log_history=trainer.state.log_history,
        dataset_name=lora_args.dataset_name or "python-stdlib-functions",
        base_model=base,
        extra={"base model": base, "adapter": "PEFT LoRA; load with PeftModel.from_pretrained(base, this folder)"},
    )
    print(json.dumps(metrics, indent=2))


if __name__ == "__main__":
    main()
