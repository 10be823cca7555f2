"""Loss by position: summed NLL, target counts and context per log-spaced position bucket, with exact sums.

Positions. :func:`.scoring.score_texts` ``(..., return_token_nll=True)`` gives per text a
:class:`.scoring.TokenScore` whose ``token_nll[i]`` is the NLL of the target at index ``t = i + 1`` of the
encoded text; ``t`` is the target's position. Buckets are half-open ranges of positions between integer
edges, by default :func:`position_buckets`' powers of two ``[1, 2), [2, 4), [4, 8), ...``.

BOS and EOS. BOS (prepended when ``add_start_token``, index 0) is never a target: it is the context of the
text's first token, which sits at position 1. The scorer adds no EOS, so no synthetic EOS is ever scored
(flash-linear-attention's PR#1222 fixed a script that scored one); a text whose own last token is EOS (its
text ends with the EOS token's text) has it scored as its last target, at its position, like any token.

Windows. A position is the target's index in the whole text, never its index in the window that scored it.
A text longer than ``max_length`` is scored by strided windows, so a target at position ``t`` saw ``t - begin``
tokens of context (``TokenScore.token_context``): ``t`` while the text fits the first window, ``max_length``
at most and ``max_length - stride + 1`` at least after it. Each bucket reports ``mean_context``, the mean
context its targets actually had, so a bucket beyond ``max_length`` reads as what it is: loss at that place
in a document, under a bounded context. Plain arrays (no contexts known) give ``mean_context`` None.

Exact sums. Each bucket's NLL is summed exactly (float64 values as integers of a common power-of-two
scale) and kept as ``nll_partials``: non-overlapping floats whose exact sum is the bucket's (``nll`` is the
first, the correctly rounded sum). So ``math.fsum`` of all buckets' partials is the ``total``'s ``nll``, which
is ``math.fsum`` of all the token NLLs, and :func:`merge_buckets` of the ranks' results equals the result
of one process bit for bit. Standard library, numpy and siblings only (it can ship beside ``.scoring``).

Example:
    >>> position_buckets(5)
    [1, 2, 4, 8]
    >>> result = loss_by_position([[1.0, 0.5, 0.25], [2.0]], [1, 2, 4])
    >>> [(b["start"], b["stop"], b["count"], b["nll"], b["mean"]) for b in result["buckets"]]
    [(1, 2, 2, 3.0, 1.5), (2, 4, 2, 0.75, 0.375)]
    >>> result["total"]["nll"], result["total"]["count"]
    (3.75, 4)
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from fractions import Fraction
from typing import Any

import numpy as np

from .sums import _check_int

#: The keys of a bucket (and of the total) in :func:`loss_by_position`'s result.
BUCKET_KEYS = ("start", "stop", "texts", "count", "nll", "nll_partials", "mean", "context_sum", "mean_context")
#: The fix named when matplotlib is missing.


def position_buckets(max_position: int, base: int = 2) -> list[int]:
    """Log-spaced integer edges ``[1, base, base**2, ...]``, the last one beyond ``max_position``.

    The buckets are ``[edges[k], edges[k + 1])``; the last one may reach past the longest text (the
    edges stay powers of ``base``, so runs of different lengths share their buckets).

    Example:
        >>> position_buckets(1), position_buckets(8), position_buckets(99, base=10)
        ([1, 2], [1, 2, 4, 8, 16], [1, 10, 100])
    """
    max_position = _check_int(max_position, "max_position", 1, "the last target position to cover")
    base = _check_int(base, "base", 2, "the ratio of consecutive edges")
    edges = [1]
    while edges[-1] <= max_position:
        edges.append(edges[-1] * base)
    return edges


def _check_edges(edges: Any) -> list[int]:
    """Strictly increasing ints starting at 1 (every target, position 1 on, must fall in a bucket)."""
    if isinstance(edges, (str, bytes)) or not isinstance(edges, Sequence) or len(edges) < 2:
        raise TypeError(f"edges must be a list of at least two ints (e.g. position_buckets(n)), got {edges!r}")
    edges = [_check_int(edge, f"edges[{k}]", 1) for k, edge in enumerate(edges)]
    if edges[0] != 1:
        raise ValueError(f"edges must start at 1 (position 1 is the first target), got {edges[0]}")
    for k in range(1, len(edges)):
        if edges[k] <= edges[k - 1]:
            raise ValueError(f"edges must be strictly increasing: edges[{k}]={edges[k]} <= {edges[k - 1]}")
    return edges


def _check_values(values: Any, field: str) -> np.ndarray:
    """A 1-D float64 array of NLLs, each ``>= 0`` (``inf`` allowed, NaN not)."""
    try:
        array = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{field} must be a 1-D list or array of per-target NLLs (floats)") from None
    if array.ndim != 1:
        raise ValueError(f"{field} must be 1-D (one NLL per target), got shape {array.shape}")
    bad = np.flatnonzero(np.isnan(array) | (array < 0))
    if bad.size:
        raise ValueError(f"{field}[{bad[0]}] = {array[bad[0]]}: an NLL must be >= 0 (inf allowed, NaN not)")
    return array


def _check_contexts(values: Any, field: str, length: int) -> np.ndarray:
    """A 1-D int64 array of ``length`` context sizes, each ``>= 1``."""
    array = np.asarray(values)
    if array.ndim != 1 or len(array) != length or not np.issubdtype(array.dtype, np.integer):
        raise ValueError(
            f"{field} must be {length} ints (one context size per target), got {array.dtype} {array.shape}"
        )
    if length and array.min() < 1:
        raise ValueError(f"{field} holds a context of {array.min()} tokens: every target has at least 1")
    return array.astype(np.int64)


def _per_text(scores: Any, contexts: Any) -> list[tuple[np.ndarray, np.ndarray | None]]:
    """``(token_nll, token_context or None)`` per text, checked; ``TokenScore`` s carry their own contexts."""
    if isinstance(scores, (str, bytes)) or not isinstance(scores, Sequence) or not scores:
        raise TypeError("scores must be a non-empty list: one TokenScore (or per-target NLL array) per text")
    if contexts is not None and (not isinstance(contexts, Sequence) or len(contexts) != len(scores)):
        raise ValueError(f"contexts must be a list of {len(scores)} arrays, one per entry of scores")
    texts = []
    for i, score in enumerate(scores):
        own = getattr(score, "token_context", None)
        if own is not None and contexts is not None:
            raise ValueError(f"scores[{i}] is a TokenScore with its own contexts: pass contexts=None")
        values = _check_values(getattr(score, "token_nll", score), f"scores[{i}]")
        given = own if own is not None else (contexts[i] if contexts is not None else None)
        texts.append((values, None if given is None else _check_contexts(given, f"contexts[{i}]", len(values))))
    if len({ctx is None for _, ctx in texts}) > 1:
        raise ValueError("some texts have contexts and others not: pass TokenScores (or contexts) for all")
    return texts


def exact_sum(values: np.ndarray) -> Fraction | float:
    """The exact sum of float64 values ``>= 0``, as a Fraction (``inf`` when one is ``inf``).

    Each finite value is an integer times a power of two (``np.frexp``); the integers are added per
    exponent in int64 halves (no overflow below 2**36 values) and shifted together as Python ints.

    Example:
        >>> exact_sum(np.array([0.1, 0.2])) == Fraction(0.1) + Fraction(0.2) != Fraction(0.1 + 0.2)
        True
    """
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0:
        return Fraction(0)
    if np.isinf(values).any():
        return math.inf
    mantissa, exponent = np.frexp(values)
    ints = np.ldexp(mantissa, 53).astype(np.int64)  # exact: 53 significant bits
    order = np.argsort(exponent, kind="stable")
    exponent, ints = exponent[order], ints[order]
    starts = np.flatnonzero(np.r_[True, exponent[1:] != exponent[:-1]])
    high, low = np.add.reduceat(ints >> 26, starts), np.add.reduceat(ints & (2**26 - 1), starts)
    lowest = int(exponent[0]) - 53
    total = sum(((int(h) << 26) + int(lo)) << (int(exponent[s]) - 53 - lowest) for h, lo, s in zip(high, low, starts))
    return Fraction(total) * Fraction(2) ** lowest


def partials(value: Fraction | float) -> list[float]:
    """Non-overlapping floats, largest first, whose exact sum is ``value`` (``[0.0]`` for 0, ``[inf]`` for inf).

    Example:
        >>> partials(Fraction(1) + Fraction(2) ** -60)
        [1.0, 8.673617379884035e-19]
    """
    if value == math.inf or (value != math.inf and abs(Fraction(value)) > Fraction(sys.float_info.max)):
        return [math.inf]  # a sum past the largest float (e.g. two NLLs of 1e308) has no finite partials
    out, rest = [], Fraction(value)
    while rest:
        out.append(float(rest))  # correctly rounded
        rest -= Fraction(out[-1])
    return out or [0.0]


def _bucket(start: int, stop: int, texts: int, count: int, nll: Fraction | float, context_sum: int | None) -> dict:
    """One bucket's (or the total's) entry: exact sums and the means derived from them."""
    if count == 0:
        mean = None
    else:
        mean = math.inf if nll == math.inf or partials(nll) == [math.inf] else float(Fraction(nll) / count)
    context = None if context_sum is None or count == 0 else context_sum / count
    parts = partials(nll)
    return dict(start=start, stop=stop, texts=texts, count=count, nll=parts[0], nll_partials=parts, mean=mean,
                context_sum=context_sum, mean_context=context)  # fmt: skip


def _result(edges: list[int], rows: list[tuple[int, int, Fraction | float, int | None]], texts: int) -> dict:
    """The result from exact per-bucket ``(texts, count, nll, context_sum)``: buckets and their total."""
    buckets = [_bucket(edges[k], edges[k + 1], *row) for k, row in enumerate(rows)]
    known = rows[0][3] is not None
    total_nll = sum((row[2] for row in rows), Fraction(0))
    total_context = sum(row[3] for row in rows) if known else None
    total = _bucket(edges[0], edges[-1], texts, sum(row[1] for row in rows), total_nll, total_context)
    return {"edges": list(edges), "buckets": buckets, "total": total}


def loss_by_position(scores: Sequence[Any], edges: Sequence[int], contexts: Sequence[Any] | None = None) -> dict:
    """Summed NLL (nats), target count, mean NLL and mean context per position bucket, over all texts.

    Args:
        scores: one entry per text: a :class:`.scoring.TokenScore` (its ``token_nll`` and ``token_context``)
            or a 1-D array of per-target NLLs (entry ``i`` at position ``i + 1``).
        edges: strictly increasing ints from 1 (e.g. :func:`position_buckets`); every target must fall in
            ``[edges[0], edges[-1])``, else a ``ValueError`` names the position and the fix.
        contexts: per-text context sizes for plain arrays (None: ``mean_context`` is None).

    Returns:
        ``{"edges", "buckets": [...], "total"}``; each bucket (and the total) holds :data:`BUCKET_KEYS`:
        ``texts`` (texts with a target there), ``count``, ``nll`` and its exact ``nll_partials``, ``mean``
        (nats per target, None when empty), ``context_sum`` and ``mean_context`` (None when unknown).
    """
    edges, per_text = _check_edges(edges), _per_text(scores, contexts)
    longest = max(len(values) for values, _ in per_text)
    if longest >= edges[-1]:
        raise ValueError(
            f"a text has a target at position {longest}, past the last edge {edges[-1]} (buckets are half-open): "
            f"use edges=position_buckets({longest})"
        )
    known = per_text[0][1] is not None
    rows = []
    for k in range(len(edges) - 1):
        lo, hi = edges[k] - 1, edges[k + 1] - 1  # token_nll indices of positions [edges[k], edges[k + 1])
        hits = [(values[lo:hi], ctx[lo:hi] if known else None) for values, ctx in per_text if len(values) > lo]
        nll = exact_sum(np.concatenate([v for v, _ in hits])) if hits else Fraction(0)
        context = sum(int(c.sum()) for _, c in hits) if known else None
        rows.append((len(hits), sum(len(v) for v, _ in hits), nll, context))
    return _result(edges, rows, sum(1 for values, _ in per_text if len(values)))


def _exact_from(entry: Any, field: str) -> tuple[int, int, Fraction | float, int | None]:
    """A result entry's exact ``(texts, count, nll, context_sum)``, checked."""
    if not isinstance(entry, dict) or any(key not in entry for key in BUCKET_KEYS):
        raise ValueError(f"{field} must be a bucket of a loss_by_position result (keys {BUCKET_KEYS})")
    parts = entry["nll_partials"]
    if not isinstance(parts, Sequence) or not parts or not all(isinstance(p, (int, float)) for p in parts):
        raise ValueError(f"{field}['nll_partials'] must be a non-empty list of floats, got {parts!r}")
    nll = math.inf if math.inf in parts else sum((Fraction(p) for p in parts), Fraction(0))
    texts = _check_int(entry["texts"], f"{field}['texts']", 0)
    count = _check_int(entry["count"], f"{field}['count']", 0)
    context = entry["context_sum"]
    return texts, count, nll, None if context is None else _check_int(context, f"{field}['context_sum']", 0)


def merge_buckets(results: Sequence[dict]) -> dict:
    """One :func:`loss_by_position` result from several (e.g. one per rank, gathered): exact sums added.

    The results must share their edges and all carry contexts or none; the merged result equals what
    one process scoring all the texts returns, bit for bit (texts counted once per result they are in).

    Example:
        >>> a, b = loss_by_position([[1.0, 2.0]], [1, 2, 4]), loss_by_position([[3.0]], [1, 2, 4])
        >>> merge_buckets([a, b]) == loss_by_position([[1.0, 2.0], [3.0]], [1, 2, 4])
        True
    """
    if isinstance(results, dict) or not isinstance(results, Sequence) or not results:
        raise TypeError("results must be a non-empty list of loss_by_position results (one per rank)")
    for i, result in enumerate(results):
        if not isinstance(result, dict) or not {"edges", "buckets", "total"} <= set(result):
            raise ValueError(f"results[{i}] is not a loss_by_position result (keys edges, buckets, total)")
        if not isinstance(result["total"], dict):
            raise ValueError(f"results[{i}]['total'] must be a bucket dict (keys {BUCKET_KEYS})")
    edges = _check_edges(results[0]["edges"])
    rows = None
    for i, result in enumerate(results):
        if list(result["edges"]) != edges or len(result["buckets"]) != len(edges) - 1:
            raise ValueError(f"results[{i}] has edges {result['edges']}, results[0] {edges}: bucket all ranks alike")
        exact = [_exact_from(b, f"results[{i}]['buckets'][{k}]") for k, b in enumerate(result["buckets"])]
        if rows is not None and (rows[0][3] is None) != (exact[0][3] is None):
            raise ValueError(f"results[{i}] and results[0] differ in having contexts: score all ranks alike")
        rows = exact if rows is None else [_add(x, y) for x, y in zip(rows, exact)]
    texts = sum(
        _check_int(r["total"].get("texts"), f"results[{i}]['total']['texts']", 0) for i, r in enumerate(results)
    )
    return _result(edges, rows, texts)


def _add(x: tuple, y: tuple) -> tuple:
    """Two exact ``(texts, count, nll, context_sum)`` added."""
    return x[0] + y[0], x[1] + y[1], x[2] + y[2], None if x[3] is None else x[3] + y[3]
