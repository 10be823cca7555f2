"""A FIM run beside a plain one, from their metrics: the best infilling mode and the comparison table.

Both read the ``validation_infill_<mode>_exact_match`` / ``_edit_similarity`` and
``validation_bits_per_byte`` keys that the pre-training recipe writes to ``metrics.json`` (modes
``psm``, ``spm``, ``prefix_only``).

Example:
    >>> best_infill({"validation_infill_spm_exact_match": 0.2, "validation_infill_prefix_only_exact_match": 0.2})
    ('spm', 0.2)
"""

from __future__ import annotations

from typing import Any

REPORTED_METRICS = ("exact_match", "edit_similarity")


def best_infill(metrics: dict[str, Any], metric: str = "exact_match") -> tuple[str, float] | None:
    """The run's best single-line ``metric`` (``exact_match`` or ``edit_similarity``) and its mode (FIM
    modes first on a tie), or None when the run has none.

    >>> best_infill({"validation_infill_psm_exact_match": 0.4, "validation_infill_prefix_only_exact_match": 0.1})
    ('psm', 0.4)
    >>> best_infill({"validation_infill_spm_edit_similarity": 0.5}, "edit_similarity")
    ('spm', 0.5)
    """
    if metric not in REPORTED_METRICS:
        raise ValueError(f"metric must be one of {REPORTED_METRICS}, got {metric!r}")
    if not isinstance(metrics, dict):
        raise TypeError(f"metrics must be a dict of the recipe's metrics, got {type(metrics).__name__}")
    found = {m: metrics[f"validation_infill_{m}_{metric}"] for m in ("psm", "spm", "prefix_only")
             if f"validation_infill_{m}_{metric}" in metrics}  # fmt: skip
    if not found:
        return None
    mode = max(found, key=lambda m: (found[m], m != "prefix_only"))
    return mode, found[mode]


def comparison_lines(metrics: dict[str, Any], baseline: dict[str, Any], baseline_name: str = "plain CLM") -> list[str]:
    """Rows of the FIM-vs-plain table: left-to-right bits per byte, single-line exact match and edit
    similarity (each run's best mode; a row only when both runs have the figure).

    >>> fim = {"validation_bits_per_byte": 1.7, "validation_infill_psm_exact_match": 0.4,
    ...        "validation_infill_spm_edit_similarity": 0.61}
    >>> plain = {"validation_bits_per_byte": 1.68, "validation_infill_prefix_only_exact_match": 0.1,
    ...          "validation_infill_prefix_only_edit_similarity": 0.5}
    >>> for line in comparison_lines(fim, plain):
    ...     print(line)
    metric                                 this run            plain CLM    ratio
    left-to-right bits per byte               1.700                1.680    1.012
    single-line infilling exact match         0.400 (psm)          0.100 (prefix_only)
    single-line infilling edit similarity     0.610 (spm)          0.500 (prefix_only)
    """
    lines = [f"{'metric':37s} {'this run':>9s} {'':8s} {baseline_name:>11s}    ratio"]
    ours, theirs = metrics.get("validation_bits_per_byte"), baseline.get("validation_bits_per_byte")
    if ours is not None and theirs is not None:
        ratio = f"{ours / theirs:.3f}" if theirs else "n/a"  # a baseline of 0 bits per byte has no ratio
        lines.append(f"{'left-to-right bits per byte':37s} {ours:9.3f} {'':8s} {theirs:11.3f}    {ratio}")
    for metric in ("exact_match", "edit_similarity"):
        mine, base = best_infill(metrics, metric), best_infill(baseline, metric)
        if mine and base:
            name = f"single-line infilling {metric.replace('_', ' ')}"
            lines.append(f"{name:37s} {mine[1]:9.3f} {f'({mine[0]})':8s} {base[1]:11.3f} ({base[0]})")
    return lines
