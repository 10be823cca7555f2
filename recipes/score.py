"""Perplexity and bits per byte of any causal LM on any text dataset: per domain, with intervals, comparisons and
a contamination scan.

Supported setups: one CPU process, several CPU processes (gloo), one or many GPUs, chosen by the
accelerate config alone; each process scores its share of the texts, the main process gathers the
per-document sums (NLL, tokens, bytes, words; each document with its domain) and computes every figure from
them, so any number of processes gives the figures of one.

    accelerate launch recipes/score.py --config recipes/configs/eval/default.yaml \\
        --model_name_or_path out/causal-demo
    accelerate launch --config_file recipes/accelerate_configs/multi_process.yaml \\
        recipes/score.py --config recipes/configs/eval/default.yaml --model_name_or_path out/causal-demo
    python recipes/score.py --model_name_or_path gpt2 --dataset_name wikitext \\
        --dataset_config wikitext-2-raw-v1 --split test --max_length 1024 --stride 512
    python recipes/score.py --model_name_or_path out/causal-demo --dataset_name paloma_like/ --split train \\
        --compare_model out/other --contamination_source data/train_store

Domains: a ``--domain_column`` of the data (default ``domain``; tag paths such as ``code/python`` give every
level), else each file's name without its extensions (a local folder of several files, Paloma-style), else the
dataset's name; the embedded corpus's domain is a file's top-level stdlib package. Figures per domain, micro
(sum over sum) and macro (mean over the top-level domains), with stratified document-bootstrap percentile
intervals (``--bootstrap_samples``, ``--confidence``, ``--bootstrap_seed``); ``--compare_model`` scores a second
causal LM (its own tokenizer) on the same documents: paired differences, win rate, sign test, minimum detectable
effect, and, when the tokenizers differ, the tokenizer-free per-byte gap; ``--contamination_source`` scans
training data for the evaluation documents' 13-grams.

Every field of ``EvalArguments`` can be set in the YAML file or overridden on the command line.
The run prints a table (one row per domain, then micro and macro) and writes ``metrics.json`` (its keys are
listed in the README, "The score command and its metrics.json") and ``README.md`` (a model card carrying the
results in its ``model-index``) into ``--output_dir``.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:
    __package__ = "hf_lmobj.recipes"  # run as a file: resolve relative imports in the shipped package

import os
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from accelerate import PartialState
from accelerate.utils import gather_object
from transformers import AutoTokenizer

from hf_lmobj.cards.writer import write_model_card
from hf_lmobj.config import parse_args_with_config
from hf_lmobj.evaluation.contamination_scans import scan_sources
from hf_lmobj.evaluation.documents import EvalDocuments, score_documents
from hf_lmobj.evaluation.preflight import check_bootstrap_budget, check_models_fit, load_compare_tokenizer
from hf_lmobj.evaluation.shards import byte_gap_shard, corpus_figures, score_shard
from hf_lmobj.evaluation.training_locations import merge_repeated_flag

from .report.score_figures import comparison_keys, document_table, figure_keys, tokenizer_free_keys
from .report.score_report import card_extras, score_table, tokenizer_free_lines
from .runtime.after_training import write_metrics
from .runtime.score_inputs import EvalArguments


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Score, gather, compute every figure on the main process, print the table and write the files.

    Returns the metrics (complete on the main process; the other processes return the corpus figures)."""
    (args,) = parse_args_with_config((EvalArguments,), merge_repeated_flag(argv, "--contamination_source"),
                                     description=__doc__)  # fmt: skip
    state = PartialState(cpu=args.use_cpu or not torch.cuda.is_available())
    documents = score_documents(args)
    check_bootstrap_budget(args.bootstrap_samples, documents.domains)
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer_name or args.model_name_or_path)
    compare_tokenizer, per_byte = load_compare_tokenizer(args.compare_model, tokenizer)
    check_models_fit(args.max_length, {"model_name_or_path": args.model_name_or_path,
                                       "compare_model": args.compare_model})  # fmt: skip
    contamination = _contamination(args, documents, tokenizer) if state.is_main_process else {}
    window = {"max_length": args.max_length, "stride": args.stride, "batch_size": args.batch_size}
    texts, start = documents.texts, {"add_start_token": args.add_start_token}
    rows = gather_object(score_shard(texts, state, args.model_name_or_path, tokenizer, **window, **start))
    compare_rows = gather_object(score_shard(texts, state, args.compare_model, compare_tokenizer, **window, **start)) if (
        compare_tokenizer is not None) else []  # fmt: skip
    gap_rows = gather_object(byte_gap_shard(texts, state, args.model_name_or_path, tokenizer, args.compare_model,
                                            compare_tokenizer, **window)) if per_byte else []  # fmt: skip
    metrics: dict[str, Any] = corpus_figures(rows, args.split)
    if state.is_main_process:
        top = _add_figures(metrics, args, documents, rows, compare_rows, gap_rows, contamination)
        _report(args, metrics, state.num_processes, top)
    state.wait_for_everyone()
    return metrics


def _contamination(args: EvalArguments, documents: EvalDocuments, tokenizer: Any) -> dict[str, Any]:
    """``contamination/...`` keys: the evaluation documents' 13-grams looked up in every training source."""
    if not args.contamination_source:
        return {}
    name = args.tokenizer_name or args.model_name_or_path
    return scan_sources(args.contamination_source, args.text_column, documents.texts, documents.domains, tokenizer,
                        name)  # fmt: skip


def _add_figures(metrics: dict[str, Any], args: EvalArguments, documents: EvalDocuments, rows: list[tuple],
                 compare_rows: list[tuple], gap_rows: list[tuple], contamination: dict[str, Any]) -> list[dict]:  # fmt: skip
    """Every figure into ``metrics`` (main process); the documents of largest tokenizer-free gap."""
    table = document_table(rows, documents.domains, {row[0] for row in rows if row[2] >= 1})
    metrics["documents_without_targets"] = len(rows) - len(table)
    metrics.update({f"documents_skipped/{reason}": count for reason, count in documents.skipped.items()})
    metrics.update(figure_keys(table, args))
    top: list[dict] = []
    if compare_rows:
        metrics.update(comparison_keys(table, compare_rows, documents.domains, args))
    if gap_rows:
        gaps, top = tokenizer_free_keys(gap_rows, documents.domains)
        metrics.update(gaps)
    metrics.update(contamination)
    return top


def _report(args: EvalArguments, metrics: dict[str, Any], num_processes: int, top: list[dict] | None = None) -> None:
    output = Path(args.output_dir)
    output.mkdir(parents=True, exist_ok=True)
    write_metrics(output, metrics)
    model_path = args.model_name_or_path
    settings = {k: v for k, v in asdict(args).items() if k not in ("output_dir", "use_cpu") and v is not None}
    samples = getattr(args, "bootstrap_samples", 0)
    method = (f"{args.confidence:.0%} stratified document bootstrap (percentile), {samples} resamples, seed "
              f"{args.bootstrap_seed}") if samples else None  # fmt: skip
    numbers, facts = card_extras(metrics, method)
    write_model_card(
        output,
        objective="causal",
        metrics=numbers,
        hyperparameters={**settings, "num_processes": num_processes},
        model_name=Path(model_path).name if os.path.isdir(model_path) else model_path,
        dataset_name=args.dataset_name or "python-stdlib",
        base_model=model_path,
        extra={"evaluated model": model_path, "split": args.split, **facts},
    )
    if any(key.startswith("bits_per_byte/") for key in metrics):
        print(score_table(metrics, _counts(metrics), args.confidence if samples else None))
    if top:
        print("\n".join(tokenizer_free_lines(metrics, top)))
    print(f"{len(metrics)} metrics written to {output / 'metrics.json'}")


def _counts(metrics: dict[str, Any]) -> dict[str, dict[str, int]]:
    """``{node: {"documents", "bytes"}}`` read back from the ``documents/<node>`` and ``bytes/<node>`` keys."""
    nodes = [key[len("documents/") :] for key in metrics if key.startswith("documents/")]
    return {node: {"documents": metrics[f"documents/{node}"], "bytes": metrics[f"bytes/{node}"]} for node in nodes}


if __name__ == "__main__":
    main()
