"""The infilling report of a FIM run: seeded single-line cases from the validation files, their metrics, the table.

Example:
    >>> import datasets
    >>> split = datasets.Dataset.from_dict({"text": ["def f(a):\\n    b = a + 1\\n    c = b * 2\\n    return c\\n"]})
    >>> len(infilling_cases(split, "text", FimArguments(infill_cases=2)))
    2
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import datasets
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from hf_lmobj.data.prepare_fim import DEFAULT_INFILL_CASES, FimArguments
from hf_lmobj.fim.evaluation import InfillingCase, evaluate_infilling, single_line_cases
from hf_lmobj.fim.report import best_infill, comparison_lines


def infilling_cases(split: datasets.Dataset, text_column: str, fim_args: FimArguments) -> list[InfillingCase]:
    """The validation split's single-line infilling cases (none when ``infill_cases`` is 0), drawn before
    training so that a split without a function body to hide fails in seconds, not after the run."""
    if fim_args.infill_cases == 0:
        return []
    names = split["path"] if "path" in split.column_names else None
    return single_line_cases(split[text_column], fim_args.infill_cases, fim_args.infill_seed, names=names)


def validation_infilling(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    split: datasets.Dataset,
    text_column: str,
    fim_args: FimArguments,
    max_length: int,
    cases: Sequence[InfillingCase] | None = None,
) -> dict[str, float]:
    """:func:`infilling_metrics` on a validation split (cases named by its ``path`` column when it has one);
    ``cases``: those :func:`infilling_cases` drew from it already."""
    cases = infilling_cases(split, text_column, fim_args) if cases is None else cases
    return infilling_metrics(model, tokenizer, [], fim_args, max_length, cases=cases)


def infilling_metrics(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str],
    fim_args: FimArguments,
    max_length: int,
    names: Sequence[str] | None = None,
    cases: Sequence[InfillingCase] | None = None,
) -> dict[str, float]:
    """Single-line infilling on ``texts`` (the validation files): ``validation_infill_<mode>_*`` metrics.

    Modes: ``psm``, ``spm`` and ``prefix_only`` for a FIM model (``fim_rate > 0``), ``prefix_only``
    for a plain one. Empty when ``infill_cases`` is 0. ``cases``, when given, are used instead of
    drawing them from ``texts``.
    """
    if fim_args.infill_cases == 0:
        return {}
    if cases is None:
        cases = single_line_cases(texts, fim_args.infill_cases, fim_args.infill_seed, names=names)
    modes = ("psm", "spm", "prefix_only") if fim_args.fim_rate > 0 else ("prefix_only",)
    metrics: dict[str, float] = {"validation_infill_samples": len(cases)}
    for mode in modes:
        result = evaluate_infilling(model, tokenizer, cases, mode, max_length, fim_args.infill_max_new_tokens)
        metrics[f"validation_infill_{mode}_exact_match"] = result.exact_match
        metrics[f"validation_infill_{mode}_edit_similarity"] = result.edit_similarity
        metrics[f"validation_infill_{mode}_middle_bits_per_byte"] = result.middle_bits_per_byte
    return metrics


def print_fim_comparison(metrics: dict[str, Any], baseline_path: str | None) -> None:
    """Print this run's left-to-right bits per byte and infilling figures and, when ``baseline_path``
    exists, the table beside that run. Prints nothing for a run without infilling metrics."""
    keys = sorted(k for k in metrics if k.startswith("validation_infill_") and k.endswith("_exact_match"))
    if not keys:
        return
    modes = [k.removeprefix("validation_infill_").removesuffix("_exact_match") for k in keys]
    print("  left to right and in the middle (validation files):")
    if "validation_bits_per_byte" in metrics:
        print(f"    left-to-right bits per byte {metrics['validation_bits_per_byte']:.3f}")
    print(f"    single-line infilling ({int(metrics['validation_infill_samples'])} cases), by prompt:")
    for metric in ("exact_match", "edit_similarity", "middle_bits_per_byte"):
        shown = ", ".join(f"{mode} {metrics[f'validation_infill_{mode}_{metric}']:.3f}" for mode in modes
                          if f"validation_infill_{mode}_{metric}" in metrics)  # fmt: skip
        print(f"      {metric.replace('_', ' '):22s} {shown}")
    if not baseline_path:
        return
    path = Path(baseline_path)
    if not path.is_file():
        print(f"  (no plain-CLM metrics at {path}: run causal/demo.yaml with --infill_cases {DEFAULT_INFILL_CASES} "
              "first to print the two side by side)")  # fmt: skip
        return
    baseline = json.loads(path.read_text())
    print(f"  beside the plain run {path}:")
    for line in comparison_lines(metrics, baseline):
        print(f"    {line}")
    if best_infill(baseline) is None:
        print(f"    (that run has no infilling metrics: train it with --infill_cases {DEFAULT_INFILL_CASES})")
