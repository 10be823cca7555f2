"""The end of a pre-training run: validation scoring, the sample, files and the printed report.

``pretrain.py`` trains; this module wires the run's arguments into :mod:`hf_lmobj.evaluation` and shows the
results. Scoring and sampling run the model, so every rank calls them (a sharded model runs them together);
:func:`contamination_figures` and :func:`write_and_report` run on the main process only.

Example:
    >>> from types import SimpleNamespace
    >>> contamination_figures(None, SimpleNamespace(contamination_scan=False), None)  # the scan switched off
    {}
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from hf_lmobj.cards.provenance import check_provenance
from hf_lmobj.cards.writer import write_model_card
from hf_lmobj.evaluation.baseline_figures import baselines_not_run
from hf_lmobj.evaluation.contamination_scans import training_contamination
from hf_lmobj.evaluation.loss_positions import write_position_plot
from hf_lmobj.evaluation.report_lines import baseline_lines, domain_lines
from hf_lmobj.evaluation.validation import validation_figures
from hf_lmobj.generation.sampling import encode_prompts, sampling_generate_kwargs
from hf_lmobj.models.pretraining import auxiliary_hyperparameters
from hf_lmobj.objectives import get_objective

from ..runtime.after_training import write_metrics
from ..runtime.phase_timer import PhaseTimer
from .infilling import print_fim_comparison
from .report_arguments import ReportArguments, reference_line

if TYPE_CHECKING:
    from ..runtime.pretrain_run import Run


def score_validation_texts(
    model, tokenizer, texts, data_args, report_args, progress: bool, domains: list[str] | None = None
) -> dict[str, float]:
    """:func:`hf_lmobj.evaluation.validation.validation_figures` of the validation texts, in windows of the report's
    ``score_max_length`` (default: the data's ``max_length``) moving by ``score_stride`` (default: half a window)."""
    window = report_args.score_max_length or data_args.max_length
    stride = report_args.score_stride or max(window // 2, 1)
    return validation_figures(model, tokenizer, texts, max_length=window, stride=stride,
                              batch_size=report_args.score_batch_size, bootstrap_samples=report_args.bootstrap_samples,
                              progress=progress, domains=domains)  # fmt: skip


def contamination_figures(run: Run, report_args: ReportArguments, timer: PhaseTimer) -> dict[str, float]:
    """``contamination/rate`` (and per domain) of the validation text against the run's training tokens that the
    report's statistics read (all of an in-memory or token-store source, the first ``report_sample_tokens`` of a
    stream or mixture): :func:`hf_lmobj.evaluation.contamination_scans.training_contamination`."""
    if not report_args.contamination_scan:
        return {}
    with timer.phase("contamination"):
        return training_contamination(run.validation_texts, run.data.validation_domains, run.tokenizer,
                                      run.data.train_documents, n=report_args.contamination_ngram)  # fmt: skip


def sample_continuation(model, tokenizer, report_args: ReportArguments) -> str:
    """A seeded nucleus-sampled continuation of ``sample_prompt``; the caller's RNG is left untouched."""
    inputs = encode_prompts(tokenizer, [report_args.sample_prompt], add_bos=tokenizer.bos_token is not None)
    model.eval()
    devices = [model.device] if model.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(report_args.sample_seed)
        output = model.generate(
            **inputs.to(model.device),
            max_new_tokens=report_args.sample_max_new_tokens,
            pad_token_id=tokenizer.pad_token_id,
            **sampling_generate_kwargs(top_p=report_args.sample_top_p),
        )
    return tokenizer.decode(output[0], skip_special_tokens=True)


def write_and_report(run: Run, metrics: dict, baselines: dict[str, float]) -> None:
    """Write ``metrics.json`` and the model card into ``output_dir``, then print the report (the model and
    the tokenizer are there already: :func:`~hf_lmobj.recipes.runtime.after_training.save_trained_model`)."""
    output = Path(run.trainer.args.output_dir)
    write_metrics(output, metrics)
    not_run = (
        baselines_not_run(run.args.report, baselines) if get_objective(run.args.data.objective).scores_text else {}
    )
    plot = write_position_plot(metrics, output)
    _write_card(run, metrics, output, not_run, plot)
    print(f"\n== {run.args.data.objective} run written to {output}")
    for key, value in metrics.items():
        if not key.startswith("baseline_") and "/" not in key:  # the sliced figures: a table below
            print(f"  {key:32s} {value:.4f}" if isinstance(value, float) else f"  {key:32s} {value}")
    for line in data_lines(run.provenance):
        print(f"  {line}")
    if not get_objective(run.args.data.objective).scores_text:
        loss_key = "eval_mlm_loss" if "eval_mlm_loss" in metrics else "eval_loss"  # ELECTRA: the generator's MLM loss
        print(
            f"  {loss_key} {metrics[loss_key]:.3f} vs unigram entropy of the training tokens "
            f"{metrics['train_unigram_entropy']:.3f} nats/token (a model that ignores context)"
        )
    else:
        for line in baseline_lines(metrics, baselines, not_run):
            print(f"  {line}")
        for line in domain_lines(metrics):
            print(f"  {line}")
        print_fim_comparison(metrics, run.args.fim.fim_baseline_metrics)
        reference = reference_line(run.args.report.reference_max_steps, run.trainer.state.max_steps)
        if reference is not None:
            print(f"  {reference}")
    _print_time(run, metrics)
    if run.sample is not None:
        print(f"  sample ({run.args.report.sample_prompt!r}, top_p={run.args.report.sample_top_p}):")
        print(run.sample)


def _write_card(run: Run, metrics: dict, output: Path, not_run: dict[str, str], plot: str | None = None) -> None:
    trainer = run.trainer
    hyperparameters = {
        **run.data.hyperparameters,
        "optimizer": type(getattr(trainer.optimizer, "optimizer", trainer.optimizer)).__name__,  # unwrapped
        "learning_rate": trainer.args.learning_rate,
        "max_steps": trainer.state.max_steps,
        "per_device_train_batch_size": trainer.args.per_device_train_batch_size,
        "parameters": trainer.model.num_parameters(),
        "vocab_size": len(run.tokenizer),
        **auxiliary_hyperparameters(run.args.auxiliary),
    }
    write_model_card(
        output,
        objective=run.args.data.objective,
        metrics=metrics,
        hyperparameters=hyperparameters,
        model_name=output.resolve().name,  # "." names the folder it is
        provenance=run.provenance,
        base_model=run.args.model.model_name_or_path,
        log_history=trainer.state.log_history,
        extra={
            "launch command": " ".join(sys.argv),
            **{f"{name} baseline": why for name, why in not_run.items()},
            **({"loss by position": f"![validation loss by position]({plot})"} if plot else {}),
        },  # fmt: skip
    )


def data_lines(provenance: dict) -> list[str]:
    """The report's lines on the data, printed before the bits-per-byte table: the validation text (source,
    documents, bytes, how they were selected, fingerprint) and the skipped documents, when any.

    Example:
        >>> record = {"training": [{"name": "jsonl", "location": "/d/jsonl", "kind": "local files", "weight": 1.0}],
        ...     "validation": {"source": "jsonl", "location": "/d/jsonl", "documents": 3, "bytes": 120,
        ...                    "fingerprint": "0123456789abcdef", "selection": "held out by content hash"},
        ...     "tokenizer": {"origin": "given", "vocab_size": 512, "fingerprint": "fedcba9876543210"},
        ...     "skipped_documents": {"training": {"empty": 1, "whitespace": 0, "one_token": 0},
        ...                           "validation": {"empty": 0, "whitespace": 0, "one_token": 0}}}
        >>> for line in data_lines(record):  # doctest: +ELLIPSIS
        ...     print(line)
        validation text: 3 documents (120 bytes) of jsonl (/d/jsonl), held out by content hash; text fingerprint ...
        skipped documents (nothing to learn from): training 1 empty; validation none
    """
    record = check_provenance(provenance)
    lines = [f"validation text: {record.validation.sentence()}"]
    skipped = record.skipped_line()
    if skipped is not None:
        lines.append(f"skipped documents (nothing to learn from): {skipped}")
    return lines


def _print_time(run: Run, metrics: dict) -> None:
    threads_line = run.threads.summary() if run.threads else f"fixed at {torch.get_num_threads()}"
    print(f"  time (wall clock; torch threads {threads_line}):")
    for line in run.timer.lines():
        print(f"    {line}")
    if "train_tokens_per_second" in metrics:
        print(
            f"    training throughput {metrics['train_tokens_per_second']:,.0f} tokens/s "
            f"({metrics['train_tokens_seen']:,} tokens)"
        )
    if run.budget is not None:
        print(f"    training budget {run.budget.summary()}")
