"""The infilling report of a FIM run: seeded single-line cases from the validation files, their metrics, the table.

A plain run's figures are printed beside this run's only when both were measured on the same validation text
(the same ``validation_fingerprint``): :func:`check_comparable_baseline` refuses another text before training,
and :func:`print_fim_comparison` checks again before it prints a ratio.

Example:
    >>> import datasets
    >>> split = datasets.Dataset.from_dict({"text": ["def f(a):\\n    b = a + 1\\n    c = b * 2\\n    return c\\n"]})
    >>> len(infilling_cases(split, "text", FimArguments(infill_cases=2)))
    2
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import datasets
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from hf_lmobj.cards.provenance import check_content_fingerprint
from hf_lmobj.data.prepare_fim import DEFAULT_INFILL_CASES, FimArguments
from hf_lmobj.files import read_json
from hf_lmobj.fim.evaluation import InfillingCase, evaluate_infilling, single_line_cases
from hf_lmobj.fim.report import best_infill, comparison_lines

#: How to make a plain run whose figures compare with this one's.
SAME_TEXT_FIX = (
    f"run the plain baseline (causal/demo.yaml with --infill_cases {DEFAULT_INFILL_CASES}) with the same data "
    "arguments as this run (dataset_name / sources / token_store, validation_fraction, max_documents), so that "
    "both are measured on the same validation text, or leave fim_baseline_metrics out"
)


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


def _size(metrics: Mapping[str, Any]) -> str:
    """``37 documents, 12,345 bytes`` from a run's metrics (what of it is known)."""
    known = [f"{int(metrics[key]):,} {word}" for key, word in (("validation_documents", "documents"),
             ("validation_bytes", "bytes")) if isinstance(metrics.get(key), numbers.Real)]  # fmt: skip
    return ", ".join(known) or "size not recorded"


def _not_comparable(baseline: Mapping[str, Any], ours: Mapping[str, Any]) -> str | None:
    """Why the plain run's figures (``baseline``, its metrics.json) are not on this run's text; None when they are.

    Both carry ``validation_fingerprint`` (:func:`hf_lmobj.held_out.texts_fingerprint` of the validation texts)
    and, when known, ``validation_documents`` / ``validation_bytes``.
    """
    mine, theirs = ours.get("validation_fingerprint"), baseline.get("validation_fingerprint")
    here = f"this run's validation text is {mine} ({_size(ours)})"
    if mine is None:
        return "this run's metrics have no validation_fingerprint, so no figure of another run compares with them"
    if theirs is None:
        return (f"it has no validation_fingerprint (a run from before validation fingerprints: its text is unknown, "
                f"{_size(baseline)}); {here}")  # fmt: skip
    if not isinstance(theirs, str) or theirs != mine:
        return f"it was measured on another validation text, {theirs} ({_size(baseline)}); {here}"
    return None


def check_comparable_baseline(
    baseline_path: str | None,
    validation_fingerprint: str,
    *,
    validation_documents: int | None = None,
    validation_bytes: int | None = None,
) -> None:
    """Refuse, before training, a plain run's metrics (``fim_baseline_metrics``) measured on another validation text.

    A file that exists must be a metrics.json whose ``validation_fingerprint`` is ``validation_fingerprint`` (this
    run's: :func:`hf_lmobj.held_out.texts_fingerprint` of its validation texts); another fingerprint or none
    (an older run) is a ``ValueError`` naming both fingerprints, both sizes where known (this run's from
    ``validation_documents`` / ``validation_bytes``) and the fix. No path, or a path with no file yet, passes: the
    report then says how to make that run.

    Example:
        >>> check_comparable_baseline(None, "0123456789abcdef")  # nothing to compare with
        >>> check_comparable_baseline("/no/such/metrics.json", "0123456789abcdef")  # made later: the report says how
    """
    fingerprint = check_content_fingerprint(validation_fingerprint, "validation_fingerprint")
    if baseline_path is None or not Path(baseline_path).exists():
        return
    path = Path(baseline_path)
    what = "fim_baseline_metrics: a plain run's metrics.json"
    if path.is_dir():
        raise ValueError(f"{path} ({what}) is a folder; pass the metrics.json in it")
    baseline = read_json(path, what, fix="pass the metrics.json a plain run wrote, or leave fim_baseline_metrics out")
    ours = {"validation_fingerprint": fingerprint, "validation_documents": validation_documents,
            "validation_bytes": validation_bytes}  # fmt: skip
    problem = _not_comparable(baseline, ours)
    if problem is not None:
        raise ValueError(f"fim_baseline_metrics {path}: {problem}; a figure is compared only with one on the same "
                         f"text: {SAME_TEXT_FIX}")  # fmt: skip


def print_fim_comparison(metrics: dict[str, Any], baseline_path: str | None) -> None:
    """Print this run's left-to-right bits per byte and infilling figures and, when ``baseline_path``
    exists and was measured on the same validation text (the same ``validation_fingerprint``), the table beside
    that run; a baseline on another text is named with why, never compared. Prints nothing for a run without
    infilling metrics."""
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
              "and the same data arguments as this run first, to print the two side by side on the same validation "
              "text)")  # fmt: skip
        return
    try:
        baseline = read_json(path, "a plain run's metrics.json")
    except ValueError as error:  # changed since setup checked it: say so, never fail the report after training
        print(f"  (not compared: {error})")
        return
    problem = _not_comparable(baseline, metrics)
    if problem is not None:
        print(f"  (not compared with the plain run {path}: {problem}; {SAME_TEXT_FIX})")
        return
    print(f"  beside the plain run {path} (the same validation text, {metrics['validation_fingerprint']}):")
    for line in comparison_lines(metrics, baseline):
        print(f"    {line}")
    if best_infill(baseline) is None:
        print(f"    (that run has no infilling metrics: train it with --infill_cases {DEFAULT_INFILL_CASES})")
