"""Interpolated modified Kneser-Ney n-gram language model over token ids, vectorised with numpy.

The baseline a neural LM is measured against on the same tokens: counts of every 1..n-gram of the
training sequences, modified Kneser-Ney discounts (Chen & Goodman 1998: ``D1, D2, D3+`` per order
from the count-of-counts), lower orders on continuation counts, and the unigram interpolated with
the uniform distribution over the vocabulary, so every token id in ``[0, vocab_size)`` (unseen ones
included) has a positive probability and every distribution sums to one.

For order ``k`` with context ``h`` (the ``k - 1`` preceding tokens) and count ``c(hw)``::

    p_k(w | h) = (max(c(hw) - D(c(hw)), 0) + (D1 N1(h) + D2 N2(h) + D3 N3+(h)) p_{k-1}(w | h')) / c(h)

where ``c(h) = sum_w c(hw)`` and ``Nr(h)`` counts the distinct ``w`` with ``c(hw) = r`` (``>= 3``
for ``N3+``). At the top order ``c`` is the raw count; below it ``c`` is the continuation count
(the number of distinct tokens seen before the n-gram), except for n-grams that open a sequence,
which nothing can precede and which keep their raw count (as KenLM does with ``<s>``). An unseen
context (``c(h) = 0``) backs off: ``p_k = p_{k-1}``. ``p_0`` is uniform, ``1 / vocab_size``.

Sequences are scored like a causal LM scores a text: the first token (BOS) is context only, each
later token is predicted from up to ``order - 1`` tokens before it, never across sequences.

Example:
    >>> lm = KneserNeyLM.fit([[0, 1, 2, 1, 2], [0, 1, 2]], order=3, vocab_size=4)
    >>> [round(float(p), 3) for p in np.exp(lm.log_probs([[0, 1, 2]]))]
    [0.662, 0.806]
    >>> round(sum(float(np.exp(lm.log_probs([[0, 1, w]])[-1])) for w in range(4)), 6)  # sums to one
    1.0
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: Discounts used for an order whose count-of-counts (n1..n4) cannot give the Chen-Goodman estimate.
FALLBACK_DISCOUNTS = (0.5, 1.0, 1.5)


@dataclass(frozen=True)
class _Order:
    """The k-grams of one order: sorted ids (``prefix rank * V + last token``) and their counts."""

    keys: np.ndarray  # (G,) int64, sorted; a k-gram's id from its (k-1)-gram prefix's rank
    raw: np.ndarray  # (G,) int64, occurrences
    continuation: np.ndarray  # (G,) int64, distinct left extensions + occurrences opening a sequence


@dataclass(frozen=True)
class _Level:
    """What order k needs at scoring time, for one choice of top order (raw or continuation counts)."""

    counts: np.ndarray  # (G,) counts of the k-grams (aligned with _Order.keys)
    discounts: np.ndarray  # (4,) D(0)=0, D1, D2, D3+
    context_total: np.ndarray  # (C,) c(h) for each (k-1)-gram rank h
    context_backoff: np.ndarray  # (C,) D1 N1(h) + D2 N2(h) + D3 N3+(h)


def flatten_sequences(sequences: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """All tokens back to back (int64) and each token's position inside its own sequence.

    Example:
        >>> flatten_sequences([[5, 6, 7], [8]])
        (array([5, 6, 7, 8]), array([0, 1, 2, 0]))
    """
    arrays = [np.asarray(s, dtype=np.int64).reshape(-1) for s in sequences]
    lengths = np.asarray([a.size for a in arrays], dtype=np.int64)
    tokens = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int64)
    starts = np.repeat(np.cumsum(lengths) - lengths, lengths)  # (N,)
    return tokens, np.arange(tokens.size, dtype=np.int64) - starts


def modified_kn_discounts(counts: np.ndarray) -> np.ndarray:
    """``[0, D1, D2, D3+]`` from the count-of-counts (Chen & Goodman), or the fallback when undefined.

    Example:
        >>> modified_kn_discounts(np.array([1] * 40 + [2] * 20 + [3] * 10 + [4] * 5))
        array([0.  , 0.5 , 1.25, 2.  ])
    """
    n = [int((counts == r).sum()) for r in (1, 2, 3, 4)]
    if min(n) == 0:
        return np.array([0.0, *FALLBACK_DISCOUNTS])
    y = n[0] / (n[0] + 2 * n[1])
    d = [1 - 2 * y * n[1] / n[0], 2 - 3 * y * n[2] / n[1], 3 - 4 * y * n[3] / n[2]]
    if not all(0 < value < r for r, value in zip((1, 2, 3), d)):
        return np.array([0.0, *FALLBACK_DISCOUNTS])
    return np.array([0.0, *d])


class KneserNeyLM:
    """Counts of every 1..``max_order``-gram of some token sequences; scores with any order up to it.

    Build it with :meth:`fit`; :meth:`log_probs` and :meth:`sequence_nll` score new sequences.
    """

    def __init__(self, orders: list[_Order], vocab_size: int) -> None:
        self.orders = orders  # orders[k - 1] holds the k-grams
        self.vocab_size = vocab_size

    @property
    def max_order(self) -> int:
        return len(self.orders)

    @classmethod
    def fit(cls, sequences: Sequence[Sequence[int]], order: int, vocab_size: int) -> KneserNeyLM:
        """Count the 1..``order``-grams inside each sequence (none spans two sequences)."""
        if order < 1:
            raise ValueError(f"order must be at least 1, got {order}")
        tokens, position = flatten_sequences(sequences)
        _check_ids(tokens, vocab_size)
        if tokens.size == 0:
            raise ValueError("no training tokens: pass at least one non-empty sequence")
        orders: list[_Order] = []
        rank = np.full(tokens.size, -1, dtype=np.int64)  # rank of the (k-1)-gram ending at each token
        for k in range(1, order + 1):
            valid = position >= k - 1  # (N,) a k-gram ends here inside its sequence
            ids = tokens if k == 1 else np.roll(rank, 1)[valid] * vocab_size + tokens[valid]
            keys, inverse, raw = np.unique(ids, return_inverse=True, return_counts=True)
            if k > 1:  # each distinct k-gram is one left extension of the (k-1)-gram ending at its last token
                suffix = np.empty(keys.size, dtype=np.int64)
                suffix[inverse] = rank[valid]
                below = orders[-1]
                extensions = np.bincount(suffix, minlength=below.keys.size)
                orders[-1] = _Order(below.keys, below.raw, below.continuation + extensions)
            rank = np.full(tokens.size, -1, dtype=np.int64)
            rank[valid] = inverse
            opening = np.bincount(rank[position == k - 1], minlength=keys.size)  # k-grams that open a sequence
            orders.append(_Order(keys, raw, opening))
        return cls(orders, vocab_size)

    def _level(self, k: int, top: int) -> _Level:
        current = self.orders[k - 1]
        counts = current.raw if k == top else current.continuation
        discounts = modified_kn_discounts(counts)
        prefix = current.keys // self.vocab_size  # (G,) rank of each k-gram's context (0 for unigrams)
        contexts = 1 if k == 1 else self.orders[k - 2].keys.size
        total = np.bincount(prefix, weights=counts, minlength=contexts)
        backoff = np.bincount(prefix, weights=discounts[np.minimum(counts, 3)], minlength=contexts)
        return _Level(counts, discounts, total, backoff)

    def log_probs(self, sequences: Sequence[Sequence[int]], order: int | None = None) -> np.ndarray:
        """Natural-log probability of every token after the first of each sequence, flat, in order.

        ``order`` (default :attr:`max_order`) is the longest n-gram used; fewer tokens of context
        are used near a sequence's start.
        """
        top = order or self.max_order
        if not 1 <= top <= self.max_order:
            raise ValueError(f"order must be in [1, {self.max_order}], got {order}")
        tokens, position = flatten_sequences(sequences)
        _check_ids(tokens, self.vocab_size)
        prob = np.full(tokens.size, 1.0 / self.vocab_size)  # (N,) p_0: uniform
        context = np.zeros(tokens.size, dtype=np.int64)  # (N,) rank of the (k-1)-gram before each token
        has_context = np.ones(tokens.size, dtype=bool)  # unigrams: the one empty context
        for k in range(1, top + 1):
            level, keys = self._level(k, top), self.orders[k - 1].keys
            ids = tokens if k == 1 else context * self.vocab_size + tokens
            found = np.searchsorted(keys, ids)  # (N,)
            found = np.minimum(found, keys.size - 1)
            seen = has_context & (keys[found] == ids)
            count = np.where(seen, level.counts[found], 0)  # (N,)
            safe_context = np.where(has_context, context, 0)
            total = np.where(has_context, level.context_total[safe_context], 0.0)
            use = total > 0  # a context never seen (or seen only at the end of a sequence) backs off
            numerator = np.maximum(count - level.discounts[np.minimum(count, 3)], 0.0)
            numerator += level.context_backoff[safe_context] * prob
            prob = np.where(use, numerator / np.where(use, total, 1.0), prob)
            # the k-gram ending at each token is the context of order k + 1 at the next token
            rank = np.where(seen, found, -1)
            context = np.roll(rank, 1)
            has_context = (position >= k) & (context >= 0)
        return np.log(prob[position > 0])

    def sequence_nll(self, sequences: Sequence[Sequence[int]], order: int | None = None) -> list[float]:
        """Summed negative log-likelihood (nats) of each sequence's tokens after the first."""
        logp = self.log_probs(sequences, order)
        bounds = np.cumsum([max(len(s) - 1, 0) for s in sequences])
        return [float(-part.sum()) for part in np.split(logp, bounds[:-1])]


def _check_ids(tokens: np.ndarray, vocab_size: int) -> None:
    if tokens.size and (tokens.min() < 0 or tokens.max() >= vocab_size):
        raise ValueError(f"token ids must be in [0, {vocab_size}), got {int(tokens.min())}..{int(tokens.max())}")
