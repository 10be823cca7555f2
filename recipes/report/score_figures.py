"""The score recipe's figures, from the per-document sums the processes gathered (main process only).

Each gathered row is ``(index, nll, tokens, bytes, words)`` of one evaluation document (``index``: its place in
the evaluated list, the document id); the domains are indexed alike. :func:`figure_keys` gives every figure per
domain, micro and macro (:func:`hf_lmobj.metrics.slices.domain_figures`), each followed by its interval
(:func:`hf_lmobj.metrics.uncertainty.bootstrap_intervals`), and the documents, tokens and bytes of each domain;
:func:`comparison_keys` the paired comparison of a second model; :func:`tokenizer_free_keys` the per-byte gap of
two models with different tokenizers. Rows arrive in any order (one list per process, concatenated): every
function sorts them by document, so any number of processes gives the figures of one.

Example:
    >>> rows = [(1, 2.0, 2, 4, 1), (0, 1.0, 1, 2, 1)]
    >>> table = document_table(rows, ("code", "wiki"))
    >>> table.doc_id, table.domain
    ((0, 1), ('code', 'wiki'))
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from hf_lmobj.metrics.slices import LN2, DocumentSums, domain_figures, domain_tree
from hf_lmobj.metrics.uncertainty import bootstrap_intervals, interval_keys, paired_comparison

from .score_report import node_counts

#: Documents of largest tokenizer-free gap the run lists.
TOP_GAPS = 10
_TOKENIZER_FREE = "compare/tokenizer_free/bits_per_byte/"


def document_table(rows: Sequence[tuple], domains: Sequence[str], keep: set[int] | None = None) -> DocumentSums:
    """The per-document sums of the gathered ``rows`` in document order: those in ``keep`` (default: all)."""
    rows = sorted(row for row in rows if keep is None or row[0] in keep)
    if not rows:
        raise ValueError("no document has a scored token (one-token texts without a start token): nothing to report; "
                         "pass --add_start_token true")  # fmt: skip
    return DocumentSums(nll=[r[1] for r in rows], tokens=[r[2] for r in rows], bytes=[r[3] for r in rows],
                        words=[r[4] for r in rows], doc_id=[r[0] for r in rows], domain=[domains[r[0]] for r in rows])  # fmt: skip


def figure_keys(table: DocumentSums, args: Any) -> dict[str, Any]:
    """Every figure per domain, micro and macro, each followed by its interval when ``args.bootstrap_samples``;
    then ``documents/<node>``, ``tokens/<node>``, ``bytes/<node>`` and the bootstrap's settings."""
    samples = args.bootstrap_samples
    intervals = bootstrap_intervals(table, samples, args.confidence, args.bootstrap_seed) if samples else {}
    out: dict[str, Any] = {}
    for key, value in domain_figures(table).items():
        out[key] = value
        if key in intervals:
            out.update(interval_keys({key: intervals[key]}))
    for node, counts in node_counts(table).items():
        out.update({f"{name}/{node}": count for name, count in counts.items()})
    out["bootstrap/samples"] = samples
    if samples:
        out["bootstrap/confidence"], out["bootstrap/seed"] = args.confidence, args.bootstrap_seed
    return out


def comparison_keys(table: DocumentSums, compare_rows: Sequence[tuple], domains: Sequence[str], args: Any) -> dict:
    """``compare/...`` (:func:`hf_lmobj.metrics.uncertainty.paired_comparison`): the compare model minus the model,
    on the documents both scored a token of (the others counted in ``compare/documents_left_out``)."""
    both = {row[0] for row in compare_rows if row[2] >= 1} & set(table.doc_id)
    first = document_table(list(zip(table.doc_id, table.nll, table.tokens, table.bytes, table.words)), domains, both)
    second = document_table(compare_rows, domains, both)
    out = paired_comparison(first, second, max(args.bootstrap_samples, 1), args.confidence, args.bootstrap_seed)
    if not args.bootstrap_samples:  # one resample gave the exact differences: no interval is reported
        out = {key: value for key, value in out.items() if not key.endswith(("_ci_low", "_ci_high"))}
    out["compare/documents_left_out"] = len(table) - len(both)
    return out


def tokenizer_free_keys(gap_rows: Sequence[tuple], domains: Sequence[str]) -> tuple[dict[str, float], list[dict]]:
    """``compare/tokenizer_free/bits_per_byte/<node>`` for each domain node, ``micro`` (sum over sum of the
    per-byte NLL differences) and ``macro`` (mean over the top-level domains), from rows ``(index, compare minus
    model NLL, bytes)``; and the :data:`TOP_GAPS` documents of largest ``|gap|`` (``index``, ``domain``, ``gap``).

    Example:
        >>> keys, top = tokenizer_free_keys([(0, 0.0, 4), (1, 2 * LN2, 2)], ("a", "b"))
        >>> keys["compare/tokenizer_free/bits_per_byte/micro"], keys["compare/tokenizer_free/bits_per_byte/macro"]
        (0.3333333333333333, 0.5)
        >>> top[0]
        {'index': 1, 'domain': 'b', 'gap': 1.0}
    """
    rows = sorted(gap_rows)
    tree = domain_tree([domains[row[0]] for row in rows], levels=True)
    by_leaf: dict[str, list[tuple]] = {leaf: [] for leaf in tree.leaves}
    for row in rows:
        by_leaf[domains[row[0]]].append(row)

    def gap(chosen: list[tuple]) -> float:
        return math.fsum(row[1] for row in chosen) / sum(row[2] for row in chosen) / LN2

    nodes = {node: gap([row for leaf in tree.members[node] for row in by_leaf[leaf]]) for node in tree.nodes}
    out = {f"{_TOKENIZER_FREE}{node}": value for node, value in nodes.items()}
    out[f"{_TOKENIZER_FREE}micro"] = gap(list(rows))
    out[f"{_TOKENIZER_FREE}macro"] = math.fsum(nodes[top] for top in tree.top) / len(tree.top)
    ranked = sorted(rows, key=lambda row: (-abs(row[1] / row[2]), row[0]))[:TOP_GAPS]
    return out, [{"index": i, "domain": domains[i], "gap": diff / size / LN2} for i, diff, size in ranked]
