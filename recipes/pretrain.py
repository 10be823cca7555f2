"""Pre-train a small language model with one of hf_lmobj's objectives.

Supported setups: one CPU process, several CPU processes (gloo), one or many GPUs, FSDP2 and
DeepSpeed, chosen by the accelerate config alone.

    accelerate launch recipes/pretrain.py --config recipes/configs/clm/demo.yaml
    accelerate launch --config_file recipes/accelerate_configs/multi_process.yaml \\
        recipes/pretrain.py --config recipes/configs/clm/demo.yaml --max_steps 20
    python recipes/pretrain.py --config recipes/configs/clm/demo.yaml --max_steps 3 --output_dir out/quick

Any ``TrainingArguments`` field, and every field of ``DataArguments`` / ``ModelArguments`` /
``ReportArguments``, can be set in the YAML file or overridden on the command line. The run writes
the model (safetensors), the tokenizer, ``metrics.json``, ``loss_curve.png`` and ``README.md`` (the
model card) into ``--output_dir``.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import AutoTokenizer, TrainingArguments, set_seed

from hf_lmobj.cards import write_model_card
from hf_lmobj.compression import compression_bits_per_byte
from hf_lmobj.config_parsing import cpu_aware_argv, parse_args_with_config
from hf_lmobj.data import build_tokenizer, load_text_splits
from hf_lmobj.metrics.scoring import bits_per_byte_from_sums, perplexity_from_sums, score_texts
from hf_lmobj.models import ModelArguments, build_model
from hf_lmobj.pretraining import (
    CAUSAL_OBJECTIVES, MASKED_OBJECTIVES, DataArguments, masked_token_accuracy, prepare_objective_data,
)
from hf_lmobj.sampling import encode_prompts, sampling_generate_kwargs
from hf_lmobj.trainer import ObjectiveTrainer


@dataclass
class ReportArguments:
    """What the end of the run measures and shows."""

    eval_batch_size: int = field(default=16, metadata={"help": "Windows per forward pass when scoring the validation text."})
    eval_stride: int | None = field(default=None, metadata={"help": "Window stride when scoring; None = max_length // 2."})
    sample_prompt: str = field(default="def ", metadata={"help": "Prompt of the sampled continuation (causal models)."})
    sample_max_new_tokens: int = field(default=64, metadata={"help": "Length of the sampled continuation."})
    sample_top_p: float = field(default=0.9, metadata={"help": "Nucleus of the sampled continuation."})
    sample_seed: int = field(default=0, metadata={"help": "Seed of the sampled continuation."})


def main(argv: list[str] | None = None) -> dict[str, float]:
    data_args, model_args, report_args, train_args = parse_args_with_config(
        (DataArguments, ModelArguments, ReportArguments, TrainingArguments), cpu_aware_argv(argv)
    )
    set_seed(train_args.seed)
    splits = load_text_splits(
        data_args.dataset_name, data_args.dataset_config, data_args.text_column,
        data_args.validation_fraction, data_args.max_documents,
    )
    tokenizer = (
        AutoTokenizer.from_pretrained(data_args.tokenizer_name)
        if data_args.tokenizer_name
        else build_tokenizer(data_args.vocab_size)
    )
    model = build_model(data_args.objective, tokenizer, model_args)
    with train_args.main_process_first(desc="prepare data"):
        data = prepare_objective_data(data_args.objective, tokenizer, splits, data_args, model, train_args.seed)
    trainer = ObjectiveTrainer(
        model=model, args=train_args, callbacks=data.callbacks,
        data_collator=data.collator, train_dataset=data.train_dataset, eval_dataset=data.eval_dataset,
    )
    trainer.train(resume_from_checkpoint=train_args.resume_from_checkpoint)
    metrics = trainer.evaluate()
    validation_texts = splits["validation"][data_args.text_column]
    if data_args.objective in CAUSAL_OBJECTIVES:
        metrics.update(_score_texts(trainer.model, tokenizer, validation_texts, data_args, report_args))
    if data_args.objective in MASKED_OBJECTIVES:  # a fresh collator: epoch 0 masks, comparable across runs
        fresh = dataclasses.replace(data.collator, epoch=0)
        metrics["eval_masked_accuracy"] = masked_token_accuracy(trainer.model, data.eval_dataset, fresh)
    # Collective work on every rank (FSDP2 / ZeRO-3 gather the full state dict and run the sharded
    # model together); files are written and lines printed by the main process only.
    trainer.save_model(train_args.output_dir)
    sample = _sample(trainer.model, tokenizer, report_args) if data_args.objective in CAUSAL_OBJECTIVES else None
    if trainer.is_world_process_zero():
        _write_and_report(trainer, tokenizer, metrics, data, data_args, model_args, report_args, validation_texts, sample)
    return metrics


def _score_texts(model, tokenizer, texts, data_args, report_args) -> dict[str, float]:
    """Corpus perplexity and bits per byte of raw texts (every token scored once, strided windows)."""
    stride = report_args.eval_stride or max(data_args.max_length // 2, 1)
    scores = score_texts(
        model, tokenizer, texts, max_length=data_args.max_length, stride=stride,
        batch_size=report_args.eval_batch_size, progress=False,
    )
    nll, tokens, num_bytes = ([getattr(s, name) for s in scores] for name in ("nll", "num_tokens", "num_bytes"))
    return {
        "validation_perplexity": perplexity_from_sums(nll, tokens),
        "validation_bits_per_byte": bits_per_byte_from_sums(nll, num_bytes),
        "validation_tokens": sum(tokens),
        "validation_bytes": sum(num_bytes),
    }


def _write_and_report(trainer, tokenizer, metrics, data, data_args, model_args, report_args, texts, sample) -> None:
    output = Path(trainer.args.output_dir)
    tokenizer.save_pretrained(output)
    (output / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    hyperparameters = {
        **data.hyperparameters, "learning_rate": trainer.args.learning_rate,
        "max_steps": trainer.state.max_steps, "per_device_train_batch_size": trainer.args.per_device_train_batch_size,
        "parameters": trainer.model.num_parameters(), "vocab_size": len(tokenizer),
    }
    write_model_card(
        output, objective=data_args.objective, metrics=metrics, hyperparameters=hyperparameters,
        model_name=output.name, dataset_name=data_args.dataset_name or "python-stdlib",
        base_model=model_args.model_name_or_path, log_history=trainer.state.log_history,
        extra={"launch command": " ".join(sys.argv)},
    )
    print(f"\n== {data_args.objective} run written to {output}")
    for key, value in metrics.items():
        print(f"  {key:32s} {value:.4f}" if isinstance(value, float) else f"  {key:32s} {value}")
    if data_args.objective in CAUSAL_OBJECTIVES:
        print("  bits per byte on the same validation text:")
        print(f"    {'this model':12s} {metrics['validation_bits_per_byte']:.3f}")
        for name, rate in compression_bits_per_byte(texts).items():
            print(f"    {name:12s} {rate:.3f}")
        print(f"  sample ({report_args.sample_prompt!r}, top_p={report_args.sample_top_p}):")
        print(sample)


def _sample(model, tokenizer, report_args) -> str:
    inputs = encode_prompts(tokenizer, [report_args.sample_prompt], add_bos=tokenizer.bos_token is not None)
    model.eval()
    devices = [model.device] if model.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):  # seeded draws, the caller's RNG left untouched
        torch.manual_seed(report_args.sample_seed)
        output = model.generate(
            **inputs.to(model.device), max_new_tokens=report_args.sample_max_new_tokens,
            pad_token_id=tokenizer.pad_token_id, **sampling_generate_kwargs(top_p=report_args.sample_top_p),
        )
    return tokenizer.decode(output[0], skip_special_tokens=True)


if __name__ == "__main__":
    main()
