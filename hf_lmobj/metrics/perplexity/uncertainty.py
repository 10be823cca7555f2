# Generated from hf_lmobj/metrics/uncertainty.py by hf_lmobj.metrics.export_space: do not edit here.
# Edit the package file, then run `python -c "import hf_lmobj.metrics as m; m.sync_space_copies()"`.
"""Uncertainty of per-domain figures: document-bootstrap intervals and paired comparisons of two models.

Contract. :func:`bootstrap_intervals` gives a confidence interval for every figure of
:func:`.slices.domain_figures` (each domain and tag level, micro and macro). :func:`paired_comparison`
compares two models scored on the same documents: per domain, micro and macro, the difference of bits
per byte (``b`` minus ``a``) with a paired interval, and per document set the win rate, an exact sign
test and the minimum detectable effect.

Method. Stratified document-level bootstrap: each resample draws, within every domain (the full tag
path), as many documents as the domain holds, uniformly with replacement, so every domain keeps its
size and a macro figure keeps its weights; a figure is recomputed from the resampled sums (sum over
sum, as the point estimate). Intervals are percentile intervals: the ``(1 - confidence) / 2`` and
``(1 + confidence) / 2`` quantiles of the resampled figures (numpy's default ``linear`` interpolation
between order statistics), taken on the log-loss scale (nats per token / byte / word, bits per byte)
and mapped by ``exp`` for perplexities, so ``byte_perplexity``'s interval is ``2 **`` that of bits per
byte. A domain of one document has a zero-width interval (no document-level spread to resample).

Randomness: a ``numpy.random.Generator`` seeded with ``seed``; within each domain the documents are
taken in ``doc_id`` order, so a table and any reordering of it (or a merge of its ranks) give the same
intervals, and :func:`paired_comparison` with a seed resamples the very documents that
:func:`bootstrap_intervals` does with that seed. Vectorised: per domain and chunk of resamples, one
draw of indices, a ``bincount`` into a matrix of counts and one matrix product with the document
sums; no Python loop over documents (1,000 resamples of 100k documents: about 0.6 s on one core).

Standard library, numpy and the siblings :mod:`.sums` / :mod:`.slices` only (ships in a Space folder).

Example:
    >>> # DocumentSums: this module's own import (.slices), so the Space copies run the example too
    >>> table = DocumentSums(nll=[1.0, 2.0, 3.0, 4.0], tokens=[2] * 4, bytes=[4] * 4, words=[0] * 4,
    ...                      doc_id=[0, 1, 2, 3], domain=["x"] * 4)
    >>> low, high = bootstrap_intervals(table, samples=200, seed=0)["bits_per_byte/micro"]
    >>> bool(low < 2.5 / 4 / LN2 < high)
    True
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

from .slices import LN2, DocumentSums, DomainTree, _check_levels, _check_table, domain_figures, domain_tree
from .sums import _is_bool, exp_or_inf

#: Seeds are ints in ``[0, _SEED_LIMIT)`` (numpy's range, as :func:`hf_lmobj.checks.check_seed`).
_SEED_LIMIT = 2**32
#: Entries of one chunk's matrix of counts (resamples x documents of a domain): bounds the memory.
CHUNK_ENTRIES = 1 << 20
#: The most resampled figures kept at once (samples x keys), about 800 MB of float64.
MAX_REPLICATE_ENTRIES = 10**8
#: The figures' numerator / denominator columns and unit: (count column, scale of the nll).
_RATE_COLUMNS = {
    "perplexity": ("tokens", 1.0),
    "bits_per_byte": ("bytes", LN2),
    "byte_perplexity": ("bytes", 1.0),
    "word_perplexity": ("words", 1.0),
}


def _check_samples(value: Any) -> int:
    if _is_bool(value) or not isinstance(value, numbers.Integral):
        raise TypeError(f"samples must be an int >= 1 (bootstrap resamples), got {value!r}")
    if value < 1:
        raise ValueError(f"samples must be an int >= 1 (bootstrap resamples), got {value!r}; to skip intervals, "
                         "do not call the bootstrap")  # fmt: skip
    return int(value)


def _check_probability(value: Any, field: str) -> float:
    """A real number strictly inside ``(0, 1)``."""
    if _is_bool(value) or not isinstance(value, numbers.Real):
        raise TypeError(f"{field} must be a number in (0, 1), got {value!r}")
    number = float(value)
    if not 0.0 < number < 1.0:  # NaN fails too
        raise ValueError(f"{field} must be a number in (0, 1) (e.g. 0.95), got {value!r}")
    return number


def _check_seed(value: Any) -> int:
    if _is_bool(value) or not isinstance(value, numbers.Integral):
        raise TypeError(f"seed must be an int in [0, 2**32), got {value!r}")
    if not 0 <= value < _SEED_LIMIT:
        raise ValueError(f"seed must be an int in [0, 2**32), got {value!r}")
    return int(value)


@dataclass(frozen=True)
class _Layout:
    """The resampling plan of a table: its domain tree, strata and node membership."""

    tree: DomainTree
    strata: tuple[np.ndarray, ...]  # per leaf (sorted), its rows in doc_id order
    nodes: tuple[str, ...]  # every node that gets a figure, the top level included
    membership: np.ndarray  # (leaves, nodes) 0/1


def _layout(sums: DocumentSums, levels: bool) -> _Layout:
    tree = domain_tree(sums.domain, levels)
    leaf_index = {leaf: i for i, leaf in enumerate(tree.leaves)}
    rows: list[list[int]] = [[] for _ in tree.leaves]
    for row in sorted(range(len(sums)), key=lambda i: sums.doc_id[i]):
        rows[leaf_index[sums.domain[row]]].append(row)
    nodes = tuple(sorted({*tree.nodes, *tree.top}))
    membership = np.zeros((len(tree.leaves), len(nodes)))
    for j, node in enumerate(nodes):
        for leaf in tree.members[node]:
            membership[leaf_index[leaf], j] = 1.0
    return _Layout(tree, tuple(np.asarray(r, dtype=np.intp) for r in rows), nodes, membership)


def _check_budget(samples: int, keys: int) -> None:
    if samples * keys > MAX_REPLICATE_ENTRIES:
        raise ValueError(
            f"samples={samples} x {keys} figures = {samples * keys} resampled values, beyond "
            f"{MAX_REPLICATE_ENTRIES}; use fewer samples (1000 is usual) or levels=False"
        )


def _resampled_node_sums(columns: np.ndarray, layout: _Layout, samples: int, seed: int) -> tuple:
    """Stratified resampled sums: per node ``(samples, nodes, columns)`` and overall ``(samples, columns)``."""
    rng = np.random.default_rng(seed)
    leaf_sums = np.empty((samples, len(layout.strata), columns.shape[1]))
    for leaf, rows in enumerate(layout.strata):
        values, n = columns[rows], len(rows)
        if n == 1:
            leaf_sums[:, leaf] = values[0]
            continue
        chunk = max(1, min(samples, CHUNK_ENTRIES // n))
        for start in range(0, samples, chunk):
            k = min(chunk, samples - start)
            picks = rng.integers(0, n, size=(k, n))
            picks += (np.arange(k) * n)[:, None]
            counts = np.bincount(picks.ravel(), minlength=k * n).reshape(k, n).astype(np.float64)
            leaf_sums[start : start + k, leaf] = counts @ values
    node_sums = np.einsum("rlc,ln->rnc", leaf_sums, layout.membership, optimize=True)
    return node_sums, leaf_sums.sum(axis=1)


def _scaled_nll(*columns: Sequence[float]) -> tuple:
    """NLL columns divided by their largest entry, and that unit: resampled sums never overflow a float.

    A rate ``sum nll / sum counts`` (counts >= 1 each) is at most the largest ``nll``, so ``rate * unit``
    stays a float too.
    """
    arrays = [np.asarray(column, dtype=np.float64) for column in columns]
    unit = max(float(array.max()) for array in arrays)
    unit = unit if unit > 0 else 1.0
    return (*(array / unit for array in arrays), unit)


def _keyed_rates(node_rates: np.ndarray, overall: np.ndarray, layout: _Layout) -> dict[str, np.ndarray]:
    """Per key suffix (``<node>``, ``<node>/macro``, ``micro``, ``macro``) the resampled log-loss rates."""
    index = {node: j for j, node in enumerate(layout.nodes)}
    tree, out = layout.tree, {}
    for node in tree.nodes:
        out[node] = node_rates[:, index[node]]
        if node in tree.parents:
            out[f"{node}/macro"] = node_rates[:, [index[c] for c in tree.parents[node]]].mean(axis=1)
    out["micro"] = overall
    out["macro"] = node_rates[:, [index[t] for t in tree.top]].mean(axis=1)
    return out


def _percentiles(replicates: dict[str, np.ndarray], confidence: float) -> dict[str, tuple[float, float]]:
    keys = list(replicates)
    stacked = np.stack([replicates[key] for key in keys])
    tail = (1.0 - confidence) / 2.0
    low, high = np.quantile(stacked, [tail, 1.0 - tail], axis=1)
    return {key: (float(lo), float(hi)) for key, lo, hi in zip(keys, low, high)}


def bootstrap_intervals(
    sums: DocumentSums, samples: int = 1000, confidence: float = 0.95, seed: int = 0, *, levels: bool = True
) -> dict[str, tuple[float, float]]:
    """``(low, high)`` for every key of :func:`.slices.domain_figures` (same ``levels``), same order.

    Stratified document bootstrap, percentile method (see the module docstring): ``samples`` resamples
    (an int >= 1), ``confidence`` in ``(0, 1)``, ``seed`` an int in ``[0, 2**32)``. Deterministic for
    a seed, whatever the order of the table's rows.

    Example:
        >>> # DocumentSums: this module's own import (.slices), so the Space copies run the example too
        >>> table = DocumentSums(nll=[2.0], tokens=[1], bytes=[1], words=[0], doc_id=[0], domain=["x"])
        >>> bootstrap_intervals(table, samples=10)["perplexity/x"] == (math.exp(2.0), math.exp(2.0))
        True
    """
    sums, levels = _check_table(sums), _check_levels(levels)
    samples, confidence, seed = _check_samples(samples), _check_probability(confidence, "confidence"), _check_seed(seed)
    keys = list(domain_figures(sums, levels))
    _check_budget(samples, len(keys))
    layout = _layout(sums, levels)
    names = [name for name in _RATE_COLUMNS if name != "word_perplexity" or sums.has_words]
    nll, unit = _scaled_nll(sums.nll)
    columns = np.column_stack([nll] + [
        np.asarray(getattr(sums, column), dtype=np.float64) for column in ("tokens", "bytes", "words")
    ])  # fmt: skip
    node_sums, overall = _resampled_node_sums(columns, layout, samples, seed)
    position = {"tokens": 1, "bytes": 2, "words": 3}
    replicates: dict[str, np.ndarray] = {}
    for name in names:
        count, scale = _RATE_COLUMNS[name]
        j, factor = position[count], unit / scale
        node_rates = node_sums[:, :, 0] / node_sums[:, :, j] * factor
        for suffix, rates in _keyed_rates(node_rates, overall[:, 0] / overall[:, j] * factor, layout).items():
            replicates[f"{name}/{suffix}"] = rates
    intervals = _percentiles(replicates, confidence)
    out = {}
    for key in keys:
        low, high = intervals[key]
        if not key.startswith("bits_per_byte/"):
            low, high = exp_or_inf(low), exp_or_inf(high)
        out[key] = (low, high)
    return out


def interval_keys(intervals: dict[str, tuple[float, float]]) -> dict[str, float]:
    """Flat ``metrics.json`` keys: ``<key>_ci_low`` and ``<key>_ci_high`` for each interval.

    Example:
        >>> interval_keys({"bits_per_byte/micro": (0.9, 1.1)})
        {'bits_per_byte/micro_ci_low': 0.9, 'bits_per_byte/micro_ci_high': 1.1}
    """
    out = {}
    for key, (low, high) in intervals.items():
        out[f"{key}_ci_low"], out[f"{key}_ci_high"] = low, high
    return out


def sign_test(wins: int, losses: int) -> float:
    """Exact two-sided sign test p-value: ``min(1, 2 P(X <= min(wins, losses)))``, ``X ~ Binomial(n, 1/2)``.

    ``n = wins + losses`` (ties are dropped before); no pair at all gives 1. Computed with exact
    integers (the tail summed from its largest term down, stopped once the rest is below ``2**-60`` of
    the sum), so the float is correctly rounded up to that bound; ``math`` only.

    Example:
        >>> sign_test(9, 1), sign_test(5, 5), sign_test(0, 0)
        (0.021484375, 1.0, 1.0)
    """
    for name, value in (("wins", wins), ("losses", losses)):
        if _is_bool(value) or not isinstance(value, numbers.Integral):
            raise TypeError(f"{name} must be an int >= 0 (a number of documents), got {value!r}")
        if value < 0:
            raise ValueError(f"{name} must be an int >= 0 (a number of documents), got {value!r}")
    n, k = int(wins) + int(losses), min(int(wins), int(losses))
    if n == 0:
        return 1.0
    term = math.comb(n, k)
    total, i = term, k
    while i > 0 and term * i * 2**60 >= total * (n - 2 * i + 1):  # the rest <= term * r / (1 - r), r = i / (n-i+1)
        term = term * i // (n - i + 1)
        total += term
        i -= 1
    return min(1.0, 2 * total / 2**n)


def minimum_detectable_effect(differences: Sequence[float], alpha: float = 0.05, power: float = 0.8) -> float:
    """``(z_{1-alpha/2} + z_power) * sd / sqrt(n)``: the smallest mean difference a two-sided test detects.

    ``sd`` is the sample standard deviation (``n - 1``) of the per-document differences, ``n`` their
    number (at least 2); a normal approximation for the mean of per-document differences (for bits per
    byte it is the byte-weighted micro difference's when the documents are of equal length).

    Example:
        >>> round(minimum_detectable_effect([0.1, 0.2, 0.3, 0.4]), 6)
        0.180842
    """
    alpha, power = _check_probability(alpha, "alpha"), _check_probability(power, "power")
    values = np.asarray(differences, dtype=np.float64)
    if values.ndim != 1 or len(values) < 2 or not np.isfinite(values).all():
        raise ValueError("differences must be at least 2 finite per-document differences")
    z = NormalDist().inv_cdf(1 - alpha / 2) + NormalDist().inv_cdf(power)
    return float(z * values.std(ddof=1) / math.sqrt(len(values)))


def _aligned(a: DocumentSums, b: DocumentSums) -> list[int]:
    """The rows of ``b`` in ``a``'s document order; refuses different documents by name."""
    if type(a.doc_id[0]) is not type(b.doc_id[0]):
        raise TypeError("a and b must use the same kind of doc_id (both strings or both ints)")
    rows = {doc: i for i, doc in enumerate(b.doc_id)}
    only_a = [doc for doc in a.doc_id if doc not in rows]
    only_b = sorted(set(b.doc_id) - set(a.doc_id))
    if only_a or only_b:
        raise ValueError(
            f"a and b must score the same documents: {len(only_a)} doc_id only in a (first: {only_a[:3]!r}), "
            f"{len(only_b)} only in b (first: {only_b[:3]!r}); score both models on one evaluation set"
        )
    order = [rows[doc] for doc in a.doc_id]
    for i, j in enumerate(order):
        if a.domain[i] != b.domain[j]:
            raise ValueError(f"doc_id {a.doc_id[i]!r} has domain {a.domain[i]!r} in a and {b.domain[j]!r} in b")
        if a.bytes[i] != b.bytes[j]:
            raise ValueError(
                f"doc_id {a.doc_id[i]!r} has {a.bytes[i]} bytes in a and {b.bytes[j]} in b: not the same text"
            )
    return order


def paired_comparison(
    a: DocumentSums,
    b: DocumentSums,
    samples: int = 1000,
    confidence: float = 0.95,
    seed: int = 0,
    *,
    levels: bool = True,
    alpha: float = 0.05,
    power: float = 0.8,
) -> dict[str, float]:
    """Model ``b`` against model ``a`` on the same documents, in flat ``metrics.json`` keys.

    ``a`` and ``b`` must hold the same ``doc_id`` s (any order), each with the same domain and bytes
    (tokens may differ: bits per byte compares across tokenizers). For every key suffix ``K`` of
    :func:`.slices.domain_figures`'s bits per byte (``<domain>``, ``<parent>/macro``, ``micro``,
    ``macro``): ``compare/bits_per_byte/K`` (``b`` minus ``a``, exact) and its paired interval
    ``..._ci_low`` / ``..._ci_high`` (the same resampled documents for both models; stratified
    bootstrap, percentile method, as :func:`bootstrap_intervals`). For every document set (each
    domain node and ``micro``; a macro has no document-level test): ``compare/documents/K``,
    ``compare/ties/K`` (equal NLL), ``compare/win_rate/K`` (share of all its documents where ``b``
    has the lower bits per byte; a tie is no win), ``compare/sign_test_p/K`` (:func:`sign_test`,
    ties dropped) and, with at least 2 documents, ``compare/mde_bits_per_byte/K``
    (:func:`minimum_detectable_effect` of the per-document bits-per-byte differences at ``alpha``
    and ``power``).

    Example:
        >>> # DocumentSums: this module's own import (.slices), so the Space copies run the example too
        >>> a = DocumentSums(nll=[1.0, 2.0], tokens=[1, 1], bytes=[2, 2], words=[0, 0], doc_id=[0, 1],
        ...                  domain=["x", "x"])
        >>> out = paired_comparison(a, a, samples=50)
        >>> out["compare/bits_per_byte/micro"], out["compare/bits_per_byte/micro_ci_low"], out["compare/sign_test_p/x"]
        (0.0, 0.0, 1.0)
    """
    a, b, levels = _check_table(a, "a"), _check_table(b, "b"), _check_levels(levels)
    samples, confidence, seed = _check_samples(samples), _check_probability(confidence, "confidence"), _check_seed(seed)
    alpha, power = _check_probability(alpha, "alpha"), _check_probability(power, "power")
    order = _aligned(a, b)
    b = DocumentSums(
        nll=[b.nll[j] for j in order],
        tokens=[b.tokens[j] for j in order],
        bytes=a.bytes,
        words=[b.words[j] for j in order],
        doc_id=a.doc_id,
        domain=a.domain,
    )
    exact_a, exact_b = domain_figures(a, levels), domain_figures(b, levels)
    suffixes = [key[len("bits_per_byte/") :] for key in exact_a if key.startswith("bits_per_byte/")]
    _check_budget(samples, len(suffixes))
    layout = _layout(a, levels)
    nll_a, nll_b, unit = _scaled_nll(a.nll, b.nll)
    columns = np.column_stack([nll_a, nll_b, np.asarray(a.bytes, dtype=np.float64)])
    node_sums, overall = _resampled_node_sums(columns, layout, samples, seed)
    factor = unit / LN2
    rates_a = _keyed_rates(
        node_sums[:, :, 0] / node_sums[:, :, 2] * factor, overall[:, 0] / overall[:, 2] * factor, layout
    )
    rates_b = _keyed_rates(
        node_sums[:, :, 1] / node_sums[:, :, 2] * factor, overall[:, 1] / overall[:, 2] * factor, layout
    )
    intervals = _percentiles({k: rates_b[k] - rates_a[k] for k in suffixes}, confidence)
    out: dict[str, float] = {}
    for suffix in suffixes:
        key = f"compare/bits_per_byte/{suffix}"
        out[key] = exact_b[f"bits_per_byte/{suffix}"] - exact_a[f"bits_per_byte/{suffix}"]
        out[f"{key}_ci_low"], out[f"{key}_ci_high"] = intervals[suffix]
    out.update(_document_tests(a, b, layout, suffixes, alpha, power))
    return out


def _document_tests(
    a: DocumentSums, b: DocumentSums, layout: _Layout, suffixes: list[str], alpha: float, power: float
) -> dict[str, float]:
    """Win rate, sign test and MDE per document set (each node and ``micro``), from aligned tables."""
    nll_a, nll_b = np.asarray(a.nll), np.asarray(b.nll)
    differences = (nll_b - nll_a) / LN2 / np.asarray(a.bytes, dtype=np.float64)
    leaf_rows = dict(zip(layout.tree.leaves, layout.strata))
    out: dict[str, float] = {}
    for suffix in suffixes:
        if suffix == "micro":
            rows = np.arange(len(a))
        elif suffix == "macro" or suffix.endswith("/macro"):
            continue
        else:
            rows = np.concatenate([leaf_rows[leaf] for leaf in layout.tree.members[suffix]])
        wins, losses = int((nll_b[rows] < nll_a[rows]).sum()), int((nll_b[rows] > nll_a[rows]).sum())
        n = len(rows)
        out[f"compare/documents/{suffix}"] = n
        out[f"compare/ties/{suffix}"] = n - wins - losses
        out[f"compare/win_rate/{suffix}"] = wins / n
        out[f"compare/sign_test_p/{suffix}"] = sign_test(wins, losses)
        if n >= 2:
            out[f"compare/mde_bits_per_byte/{suffix}"] = minimum_detectable_effect(differences[rows], alpha, power)
    return out
