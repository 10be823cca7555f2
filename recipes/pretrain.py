"""Pre-train a small language model with one of hf_lmobj's objectives.

Supported setups: one CPU process, several CPU processes (gloo), one or many GPUs, FSDP2 and
DeepSpeed, chosen by the accelerate config alone.

    accelerate launch recipes/pretrain.py --config recipes/configs/clm/demo.yaml
    accelerate launch --config_file recipes/accelerate_configs/multi_process.yaml \\
        recipes/pretrain.py --config recipes/configs/clm/demo.yaml --max_steps 20
    python recipes/pretrain.py --config recipes/configs/clm/demo.yaml --max_steps 3 --output_dir out/quick

Any ``TrainingArguments`` field, and every field of ``DataArguments`` / ``ModelArguments`` /
``AuxiliaryArguments`` / ``FimArguments`` / ``ReportArguments``, can be set in the YAML file or
overridden on the command line. The run writes the model (safetensors), the tokenizer, ``metrics.json``,
``loss_curve.png`` and ``README.md`` (the model card) into ``--output_dir``. The printed report ends
with, for clm, bits per byte of the validation text beside a Kneser-Ney n-gram model of the same
training tokens and zlib / bz2 / xz; for mlm and span, eval_loss beside the unigram entropy of the
training tokens and the target accuracy; with ``fim_rate > 0`` (``clm/fim_demo.yaml``:
fill-in-the-middle) also the left-to-right bits per byte and the single-line infilling exact match (PSM,
SPM, prefix-only), beside a plain run's ``metrics.json`` when ``fim_baseline_metrics`` names one; then
the time of each phase and the training tokens per second. Torch's CPU threads follow the cores other
processes leave free (``--torch_threads N`` fixes them).
"""

from __future__ import annotations

import copy
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import AutoTokenizer, TrainingArguments, set_seed

from hf_lmobj.corpus import build_tokenizer, load_text_splits
from hf_lmobj.generation.sampling import encode_prompts, sampling_generate_kwargs
from hf_lmobj.metrics.scoring import bits_per_byte_from_sums, encode_texts, perplexity_from_sums, score_texts
from hf_lmobj.recipes.support.auxiliary_pretraining import (
    AuxiliaryArguments,
    auxiliary_hyperparameters,
    build_pretraining_model,
    token_predictor,
)
from hf_lmobj.recipes.support.cards import write_model_card
from hf_lmobj.recipes.support.compression import compression_bits_per_byte
from hf_lmobj.recipes.support.config_parsing import cpu_aware_argv, parse_args_with_config
from hf_lmobj.recipes.support.cpu_threads import AdaptiveThreadsCallback, RuntimeArguments
from hf_lmobj.recipes.support.fim_pretraining import (
    FimArguments,
    prepare_pretraining_data,
    print_fim_comparison,
    validation_infilling,
)
from hf_lmobj.recipes.support.models import ModelArguments
from hf_lmobj.recipes.support.ngram import KneserNeyLM
from hf_lmobj.recipes.support.phase_timer import PhaseTimer
from hf_lmobj.recipes.support.pretraining import (
    CAUSAL_OBJECTIVES,
    MASKED_OBJECTIVES,
    DataArguments,
    target_token_accuracy,
    unigram_entropy,
)
from hf_lmobj.recipes.support.time_budget import StepBudget, fit_max_steps_to_budget
from hf_lmobj.trainer.auxiliary import AuxiliaryObjectiveTrainer
from hf_lmobj.trainer.objective_trainer import ObjectiveTrainer

__all__ = ["ReportArguments", "main", "baseline_key"]


@dataclass
class ReportArguments:
    """What the end of the run measures and shows."""

    eval_batch_size: int = field(
        default=16, metadata={"help": "Windows per forward pass when scoring the validation text."}
    )
    eval_max_length: int | None = field(
        default=None, metadata={"help": "Window length when scoring; None = max_length."}
    )
    eval_stride: int | None = field(default=None, metadata={"help": "Window stride when scoring; None = window // 2."})
    ngram_orders: list[int] = field(
        default_factory=lambda: [3, 4, 5],
        metadata={
            "help": "clm: Kneser-Ney baseline orders tried on the validation text (the best is reported); [] = none."
        },
    )
    sample_prompt: str = field(default="def ", metadata={"help": "Prompt of the sampled continuation (causal models)."})
    sample_max_new_tokens: int = field(default=64, metadata={"help": "Length of the sampled continuation."})
    sample_top_p: float = field(default=0.9, metadata={"help": "Nucleus of the sampled continuation."})
    sample_seed: int = field(default=0, metadata={"help": "Seed of the sampled continuation."})


def main(argv: list[str] | None = None) -> dict[str, float]:
    data_args, model_args, aux_args, fim_args, report_args, runtime_args, train_args = parse_args_with_config(
        (
            DataArguments,
            ModelArguments,
            AuxiliaryArguments,
            FimArguments,
            ReportArguments,
            RuntimeArguments,
            TrainingArguments,
        ),
        cpu_aware_argv(argv),
        description=__doc__,
    )
    timer = PhaseTimer()
    threads = _thread_control(runtime_args)
    set_seed(train_args.seed)
    with timer.phase("corpus"):
        splits = load_text_splits(
            data_args.dataset_name,
            data_args.dataset_config,
            data_args.text_column,
            data_args.validation_fraction,
            data_args.max_documents,
        )
    with timer.phase("tokenizer"):
        tokenizer = (
            AutoTokenizer.from_pretrained(data_args.tokenizer_name)
            if data_args.tokenizer_name
            else build_tokenizer(data_args.vocab_size)
        )
    with timer.phase("data"):
        model = build_pretraining_model(data_args.objective, tokenizer, model_args, aux_args, train_args.seed)
        with train_args.main_process_first(desc="prepare data"):
            data = prepare_pretraining_data(
                data_args.objective, tokenizer, splits, data_args, fim_args, model, train_args.seed
            )
    trainer_class = AuxiliaryObjectiveTrainer if aux_args.auxiliary_objective else ObjectiveTrainer
    trainer = trainer_class(
        model=model,
        args=train_args,
        callbacks=[*data.callbacks, *([threads] if threads else [])],
        data_collator=data.collator,
        train_dataset=data.train_dataset,
        eval_dataset=data.eval_dataset,
    )
    with timer.phase("training"):
        budget = _fit_to_budget(trainer, runtime_args, threads)
        train_metrics = trainer.train(resume_from_checkpoint=train_args.resume_from_checkpoint).metrics
    with timer.phase("evaluation"):
        metrics = trainer.evaluate()
        if data_args.objective not in CAUSAL_OBJECTIVES:  # a fresh collator: epoch 0 noise, comparable across runs
            fresh = copy.copy(data.collator)
            fresh.set_epoch(0)
            name = "eval_masked_accuracy" if data_args.objective in MASKED_OBJECTIVES else "eval_span_accuracy"
            metrics[name] = target_token_accuracy(token_predictor(trainer.model), data.eval_dataset, fresh)
    metrics.update(_train_statistics(train_metrics, trainer, data))
    validation_texts = list(splits["validation"][data_args.text_column])
    if data_args.objective in CAUSAL_OBJECTIVES:
        with timer.phase("scoring"):
            if threads:
                threads.adapt()
            predictor = token_predictor(trainer.model)  # MTP: the causal LM itself
            progress = not train_args.disable_tqdm and trainer.is_world_process_zero()
            metrics.update(_score_texts(predictor, tokenizer, validation_texts, data_args, report_args, progress))
        if fim_args.infill_cases:  # 200 by default when fim_rate > 0, none for a plain run
            with timer.phase("infilling"):
                metrics.update(validation_infilling(
                    predictor, tokenizer, splits["validation"], data_args.text_column, fim_args, data_args.max_length
                ))  # fmt: skip
    # Collective work on every rank (FSDP2 / ZeRO-3 gather the full state dict and run the sharded
    # model together); files are written and lines printed by the main process only.
    with timer.phase("saving"):
        trainer.save_model(train_args.output_dir)
    sample = None
    if data_args.objective in CAUSAL_OBJECTIVES:
        with timer.phase("sampling"):
            sample = _sample(token_predictor(trainer.model), tokenizer, report_args)
    if trainer.is_world_process_zero():
        baselines = {}
        if data_args.objective in CAUSAL_OBJECTIVES:
            baselines = _baselines(data, tokenizer, validation_texts, report_args, timer)
            metrics.update({baseline_key(name): rate for name, rate in baselines.items()})
        _write_and_report(
            trainer,
            tokenizer,
            metrics,
            baselines,
            data,
            data_args,
            model_args,
            aux_args,
            fim_args,
            report_args,
            sample,
            timer,
            threads,
            budget,
        )
    return metrics


def _thread_control(runtime_args: RuntimeArguments) -> AdaptiveThreadsCallback | None:
    """Fixed torch threads when asked for, else a callback that follows the cores left free."""
    if runtime_args.torch_threads is not None:
        torch.set_num_threads(runtime_args.torch_threads)
        return None
    return AdaptiveThreadsCallback(runtime_args.thread_check_steps)


def _fit_to_budget(trainer, runtime_args: RuntimeArguments, threads) -> StepBudget | None:
    """``max_train_minutes``: lower ``max_steps`` to the steps that fit, timed at the thread count training starts with."""
    if runtime_args.max_train_minutes is None:
        return None
    if threads:
        threads.adapt()
    return fit_max_steps_to_budget(trainer, runtime_args.max_train_minutes)


def _train_statistics(train_metrics: dict, trainer, data) -> dict[str, float]:
    """Training throughput (tokens per second of the training phase) and the unigram entropy of the tokens."""
    stats = {
        "train_runtime": train_metrics["train_runtime"],
        "train_unigram_entropy": unigram_entropy(data.train_dataset),
    }
    if trainer.state.num_input_tokens_seen:
        stats["train_tokens_seen"] = trainer.state.num_input_tokens_seen
        stats["train_tokens_per_second"] = trainer.state.num_input_tokens_seen / train_metrics["train_runtime"]
    return stats


def _score_texts(model, tokenizer, texts, data_args, report_args, progress: bool) -> dict[str, float]:
    """Corpus perplexity and bits per byte of raw texts (every token scored once, strided windows, a tqdm bar)."""
    window = report_args.eval_max_length or data_args.max_length
    stride = report_args.eval_stride or max(window // 2, 1)
    scores = score_texts(
        model,
        tokenizer,
        texts,
        max_length=window,
        stride=stride,
        batch_size=report_args.eval_batch_size,
        progress=progress,
    )
    nll, tokens, num_bytes = ([getattr(s, name) for s in scores] for name in ("nll", "num_tokens", "num_bytes"))
    return {
        "validation_perplexity": perplexity_from_sums(nll, tokens),
        "validation_bits_per_byte": bits_per_byte_from_sums(nll, num_bytes),
        "validation_tokens": sum(tokens),
        "validation_bytes": sum(num_bytes),
    }


def _baselines(data, tokenizer, texts, report_args, timer: PhaseTimer) -> dict[str, float]:
    """Bits per byte of the same validation texts under Kneser-Ney n-grams (same training tokens) and compressors.

    Keys are display names (``"Kneser-Ney 5-gram"``, ``"xz -9e"``), in the order they are printed.
    """
    out: dict[str, float] = {}
    if report_args.ngram_orders and data.train_documents is not None:
        with timer.phase("n-gram"):
            documents = data.train_documents.with_format("numpy")["input_ids"]
            lm = KneserNeyLM.fit(documents, max(report_args.ngram_orders), len(tokenizer))
            sequences = encode_texts(tokenizer, texts, add_start_token=True)  # the tokens the model is scored on
            num_bytes = [len(text.encode("utf-8")) for text in texts]
            for order in sorted(report_args.ngram_orders):
                out[f"Kneser-Ney {order}-gram"] = bits_per_byte_from_sums(lm.sequence_nll(sequences, order), num_bytes)
    with timer.phase("compressors"):
        out.update(compression_bits_per_byte(texts))
    return out


def baseline_key(name: str) -> str:
    """The metrics.json key of a baseline's bits per byte.

    >>> baseline_key("Kneser-Ney 5-gram"), baseline_key("xz -9e")
    ('baseline_kneser_ney_5_gram_bits_per_byte', 'baseline_xz_9e_bits_per_byte')
    """
    return "baseline_" + re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_") + "_bits_per_byte"


def _write_and_report(
    trainer,
    tokenizer,
    metrics,
    baselines,
    data,
    data_args,
    model_args,
    aux_args,
    fim_args,
    report_args,
    sample,
    timer,
    threads,
    budget,
) -> None:
    output = Path(trainer.args.output_dir)
    tokenizer.save_pretrained(output)
    (output / "metrics.json").write_text(json.dumps(metrics, indent=2) + "\n")
    hyperparameters = {
        **data.hyperparameters,
        "learning_rate": trainer.args.learning_rate,
        "max_steps": trainer.state.max_steps,
        "per_device_train_batch_size": trainer.args.per_device_train_batch_size,
        "parameters": trainer.model.num_parameters(),
        "vocab_size": len(tokenizer),
        **auxiliary_hyperparameters(aux_args),
    }
    write_model_card(
        output,
        objective=data_args.objective,
        metrics=metrics,
        hyperparameters=hyperparameters,
        model_name=output.name,
        dataset_name=data_args.dataset_name or "python-stdlib",
        base_model=model_args.model_name_or_path,
        log_history=trainer.state.log_history,
        extra={"launch command": " ".join(sys.argv)},
    )
    print(f"\n== {data_args.objective} run written to {output}")
    for key, value in metrics.items():
        if not key.startswith("baseline_"):
            print(f"  {key:32s} {value:.4f}" if isinstance(value, float) else f"  {key:32s} {value}")
    if data_args.objective not in CAUSAL_OBJECTIVES:
        loss_key = "eval_mlm_loss" if "eval_mlm_loss" in metrics else "eval_loss"  # ELECTRA: the generator's MLM loss
        print(
            f"  {loss_key} {metrics[loss_key]:.3f} vs unigram entropy of the training tokens "
            f"{metrics['train_unigram_entropy']:.3f} nats/token (a model that ignores context)"
        )
    else:
        _print_comparison(metrics, baselines)
        print_fim_comparison(metrics, fim_args.fim_baseline_metrics)
    threads_line = threads.summary() if threads else f"fixed at {torch.get_num_threads()}"
    print(f"  time (wall clock; torch threads {threads_line}):")
    for line in timer.lines():
        print(f"    {line}")
    if "train_tokens_per_second" in metrics:
        print(
            f"    training throughput {metrics['train_tokens_per_second']:,.0f} tokens/s "
            f"({metrics['train_tokens_seen']:,} tokens)"
        )
    if budget is not None:
        print(f"    training budget {budget.summary()}")
    if sample is not None:
        print(f"  sample ({report_args.sample_prompt!r}, top_p={report_args.sample_top_p}):")
        print(sample)


def _print_comparison(metrics: dict[str, float], baselines: dict[str, float]) -> None:
    print(f"  bits per byte on the same validation text ({metrics['validation_bytes']:,} bytes):")
    print(f"    {'this model':20s} {metrics['validation_bits_per_byte']:.3f}")
    ngrams = {name: rate for name, rate in baselines.items() if name.startswith("Kneser-Ney")}
    if ngrams:
        best = min(ngrams, key=ngrams.get)
        tried = ", ".join(f"{name.split()[1].split('-')[0]}: {rate:.3f}" for name, rate in ngrams.items())
        print(f"    {best:20s} {ngrams[best]:.3f}   (n chosen on this text; {tried})")
    for name, rate in baselines.items():
        if name not in ngrams:
            print(f"    {name:20s} {rate:.3f}")


def _sample(model, tokenizer, report_args) -> str:
    inputs = encode_prompts(tokenizer, [report_args.sample_prompt], add_bos=tokenizer.bos_token is not None)
    model.eval()
    devices = [model.device] if model.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):  # seeded draws, the caller's RNG left untouched
        torch.manual_seed(report_args.sample_seed)
        output = model.generate(
            **inputs.to(model.device),
            max_new_tokens=report_args.sample_max_new_tokens,
            pad_token_id=tokenizer.pad_token_id,
            **sampling_generate_kwargs(top_p=report_args.sample_top_p),
        )
    return tokenizer.decode(output[0], skip_special_tokens=True)


if __name__ == "__main__":
    main()
