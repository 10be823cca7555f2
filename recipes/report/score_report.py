"""What the score recipe prints: one row per domain, then micro and macro, with intervals and comparisons.

:func:`score_table` reads the figures from the run's ``metrics.json`` keys (``bits_per_byte/<domain>``,
``perplexity/<domain>``, their ``_ci_low`` / ``_ci_high``, ``compare/bits_per_byte/<domain>``,
``contamination/<domain>/rate``) and the documents and bytes of each domain from :func:`node_counts`; it computes
nothing of its own, so the table and the file always agree. :func:`tokenizer_free_lines` prints the per-byte
comparison of two models with different tokenizers and its documents of largest gap.

Example:
    >>> from hf_lmobj.metrics.slices import DocumentSums, domain_figures
    >>> table = DocumentSums(nll=[2.0, 4.0], tokens=[2, 2], bytes=[4, 4], words=[0, 0], doc_id=[0, 1],
    ...                      domain=["code", "wiki"])
    >>> print(score_table(domain_figures(table), node_counts(table)))
    domain  documents  bytes  bits/byte  perplexity
    code            1      4     0.7213       2.718
    wiki            1      4     1.4427       7.389
    micro           2      8     1.0820       4.482
    macro      2 sets      -     1.0820       4.482
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from hf_lmobj.metrics.slices import DocumentSums, domain_tree

_LOW, _HIGH = "_ci_low", "_ci_high"


def node_counts(table: DocumentSums) -> dict[str, dict[str, int]]:
    """``{node: {"documents", "tokens", "bytes"}}`` for every domain node (each tag level) and ``micro``."""
    tree = domain_tree(table.domain, levels=True)
    leaves: dict[str, list[int]] = {leaf: [0, 0, 0] for leaf in tree.leaves}
    for domain, tokens, size in zip(table.domain, table.tokens, table.bytes):
        counts = leaves[domain]
        counts[0], counts[1], counts[2] = counts[0] + 1, counts[1] + tokens, counts[2] + size
    out = {}
    for node in tree.nodes:
        members = [leaves[leaf] for leaf in tree.members[node]]
        out[node] = {name: sum(c[i] for c in members) for i, name in enumerate(("documents", "tokens", "bytes"))}
    out["micro"] = {"documents": len(table), "tokens": sum(table.tokens), "bytes": sum(table.bytes)}
    return out


def _number(value: Any, spec: str) -> str:
    """``value`` in format ``spec``; ``n/a`` for a value not measured (None, NaN)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return format(value, spec)


def _cell(metrics: Mapping[str, Any], key: str, spec: str) -> str:
    """``value`` or ``value [low, high]`` of ``key`` in format ``spec``; empty when the key is absent."""
    if key not in metrics:
        return ""
    text = _number(metrics[key], spec)
    if key + _LOW in metrics:
        text += f" [{_number(metrics[key + _LOW], spec)}, {_number(metrics[key + _HIGH], spec)}]"
    return text


def _row_name_and_counts(suffix: str, counts: Mapping[str, Mapping[str, int]], tops: int) -> list[str]:
    if suffix == "macro":
        return ["macro", f"{tops} sets", "-"]
    if suffix.endswith("/macro"):
        return [suffix, f"{counts[suffix[: -len('/macro')]]['documents']} docs", "-"]
    return [suffix, str(counts[suffix]["documents"]), str(counts[suffix]["bytes"])]


def score_table(
    metrics: Mapping[str, Any], counts: Mapping[str, Mapping[str, int]], confidence: float | None = None
) -> str:
    """The table: per domain node (then its ``/macro``), ``micro`` and ``macro``; documents, bytes, bits per byte
    and perplexity (``[low, high]`` when the intervals are in ``metrics``), the paired difference when comparing
    (``compare/bits_per_byte/...``) and the contamination rate when a source was scanned."""
    suffixes = [key[len("bits_per_byte/") :] for key in metrics
                if key.startswith("bits_per_byte/") and not key.endswith((_LOW, _HIGH))]  # fmt: skip
    tops = len({s.split("/")[0] for s in suffixes if s not in ("micro", "macro") and not s.endswith("/macro")})
    ci = "" if confidence is None else f" [{confidence:.0%} CI]"
    header = ["domain", "documents", "bytes", f"bits/byte{ci}", f"perplexity{ci}"]
    comparing = any(key.startswith("compare/bits_per_byte/") for key in metrics)
    scanned = "contamination/rate" in metrics
    header += [f"compare - model, bits/byte{ci}"] * comparing + ["contaminated"] * scanned
    rows = [header]
    for suffix in suffixes:
        row = _row_name_and_counts(suffix, counts, tops)
        row += [_cell(metrics, f"bits_per_byte/{suffix}", ".4f"), _cell(metrics, f"perplexity/{suffix}", ".4g")]
        if comparing:
            row.append(_cell(metrics, f"compare/bits_per_byte/{suffix}", "+.4f"))
        if scanned:
            rate = metrics.get("contamination/rate" if suffix == "micro" else f"contamination/{suffix}/rate")
            row.append("" if rate is None else f"{rate:.1%}")
        rows.append(row)
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths)))
             for row in rows]  # fmt: skip
    return "\n".join(line.rstrip() for line in lines)


def tokenizer_free_lines(metrics: Mapping[str, Any], top: Sequence[Mapping[str, Any]]) -> list[str]:
    """The per-byte comparison (compare model minus model, bits per byte over the same bytes) per domain, and the
    documents of largest ``|gap|`` (``top``: ``{"index", "domain", "gap"}``)."""
    prefix = "compare/tokenizer_free/bits_per_byte/"
    parts = [f"{key[len(prefix) :]} {value:+.4f}" for key, value in metrics.items() if key.startswith(prefix)]
    lines = ["tokenizer-free gap (compare model - model, bits per byte, every token scored): " + ", ".join(parts)]
    if top:
        lines.append("documents of largest gap: " + ", ".join(
            f"#{row['index']} ({row['domain']}) {row['gap']:+.4f}" for row in top))  # fmt: skip
    return lines


def card_extras(metrics: Mapping[str, Any], bootstrap: str | None) -> tuple[dict[str, Any], dict[str, Any]]:
    """``(numbers, facts)``: the card takes numbers as metrics; the other values (the contamination unit) and how
    the intervals were computed go under "Additional information"."""
    numbers = {key: value for key, value in metrics.items() if value is None or (
        isinstance(value, (int, float)) and not isinstance(value, bool))}  # fmt: skip
    facts = {f"metrics.json {key}": value for key, value in metrics.items() if key not in numbers}
    if bootstrap is not None:
        facts["confidence intervals"] = bootstrap
    return numbers, facts
