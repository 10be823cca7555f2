"""A FIM run beside a plain one, from their metrics: the best infilling mode and the comparison table.

Both read the ``validation_infill_<mode>_exact_match`` and ``validation_bits_per_byte`` keys that
the pre-training recipe writes to ``metrics.json`` (modes ``psm``, ``spm``, ``prefix_only``).

Example:
    >>> best_infill({"validation_infill_spm_exact_match": 0.2, "validation_infill_prefix_only_exact_match": 0.2})
    ('spm', 0.2)
"""

from __future__ import annotations

from typing import Any

__all__ = ["best_infill", "comparison_lines"]


def best_infill(metrics: dict[str, Any]) -> tuple[str, float] | None:
    """The run's best single-line exact match and its mode (FIM modes first), or None.

    >>> best_infill({"validation_infill_psm_exact_match": 0.4, "validation_infill_prefix_only_exact_match": 0.1})
    ('psm', 0.4)
    """
    found = {m: metrics[f"validation_infill_{m}_exact_match"] for m in ("psm", "spm", "prefix_only")
             if f"validation_infill_{m}_exact_match" in metrics}  # fmt: skip
    if not found:
        return None
    mode = max(found, key=lambda m: (found[m], m != "prefix_only"))
    return mode, found[mode]


def comparison_lines(metrics: dict[str, Any], baseline: dict[str, Any], baseline_name: str = "plain CLM") -> list[str]:
    """Rows of the FIM-vs-plain table: left-to-right bits per byte and single-line exact match.

    >>> fim = {"validation_bits_per_byte": 1.7, "validation_infill_psm_exact_match": 0.4}
    >>> plain = {"validation_bits_per_byte": 1.68, "validation_infill_prefix_only_exact_match": 0.1}
    >>> for line in comparison_lines(fim, plain):
    ...     print(line)
    metric                                this run            plain CLM    ratio
    left-to-right bits per byte              1.700                1.680    1.012
    single-line infilling exact match        0.400 (psm)          0.100 (prefix_only)
    """
    lines = [f"{'metric':36s} {'this run':>9s} {'':8s} {baseline_name:>11s}    ratio"]
    ours, theirs = metrics.get("validation_bits_per_byte"), baseline.get("validation_bits_per_byte")
    if ours is not None and theirs is not None:
        lines.append(f"{'left-to-right bits per byte':36s} {ours:9.3f} {'':8s} {theirs:11.3f}    {ours / theirs:.3f}")
    mine, base = best_infill(metrics), best_infill(baseline)
    if mine and base:
        lines.append(f"{'single-line infilling exact match':36s} {mine[1]:9.3f} {f'({mine[0]})':8s} "
                     f"{base[1]:11.3f} ({base[0]})")  # fmt: skip
    return lines
