"""Mixing sources by tokens: the next document comes from the source furthest behind its weight.

Deterministic (no RNG): source ``i`` is picked while ``taken[i] / weight[i]`` is the smallest
(ties to the lowest index), so after any prefix each source's share of the tokens is within one
document of its weight. The state is the tokens taken so far.

Example:
    >>> mixer = TokenMixer([0.75, 0.25])
    >>> picks = []
    >>> for _ in range(8):
    ...     i = mixer.choose()
    ...     mixer.add(i, 10)
    ...     picks.append(i)
    >>> picks, mixer.shares().round(2).tolist()
    ([0, 1, 0, 0, 0, 1, 0, 0], [0.75, 0.25])
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from hf_lmobj.checks import check_counts, check_unique_names, check_weights


def check_mixture_weights(weights: Any, names: Sequence[str]) -> list[float]:
    """``weights`` checked (finite, > 0, one per source) and returned normalised to sum 1 (overflow-safe).

    A weight of 0 (or one so small next to the largest that its share is 0) is refused by the source's
    name: that source would never be read.

    Example:
        >>> check_mixture_weights([1e308, 1e308], ["web", "code"])
        [0.5, 0.5]
        >>> check_mixture_weights([3, 0], ["web", "code"])
        Traceback (most recent call last):
        ...
        ValueError: weight of source 'code' is 0: it would never be read; give it a weight > 0 or remove it
    """
    names = check_unique_names(names, "names")
    shares = check_weights(weights, "weights", count=len(names))
    for name, weight, share in zip(names, weights, shares):
        if share == 0:
            problem = "0" if float(weight) == 0 else f"{weight!r}, so small next to the largest that its share is 0"
            raise ValueError(f"weight of source {name!r} is {problem}: it would never be read; give it a weight > 0 "
                             "or remove it")  # fmt: skip
    return shares


def normalized_weights(weights: Sequence[float], names: Sequence[str]) -> np.ndarray:
    """``weights`` checked (:func:`check_mixture_weights`) and scaled to sum to 1.

    Weights whose plain sum is finite are divided by it (the values earlier runs were fingerprinted and
    mixed with); larger ones (``[1e308, 1e308]``) are scaled by the largest first, never overflowing.

    Example:
        >>> normalized_weights([3, 1], ["a", "b"]).tolist(), normalized_weights([1e308, 1e308], ["a", "b"]).tolist()
        ([0.75, 0.25], [0.5, 0.5])
    """
    shares = check_mixture_weights(weights, names)
    checked = [float(w) for w in weights]
    total = float(sum(checked))
    if not math.isfinite(total):
        return np.asarray(shares, dtype=np.float64)
    return np.asarray(checked, dtype=np.float64) / total


class TokenMixer:
    """Which source the next document comes from, so that tokens follow ``weights``.

    ``weights`` are finite and > 0 (any scale: only their ratios count); ``taken`` (a resumed
    mixer's tokens so far) holds one count >= 0 per source.
    """

    def __init__(self, weights: Sequence[float], taken: Sequence[int] | None = None) -> None:
        check_mixture_weights(weights, [f"source{i}" for i in range(len(check_weights(weights, "weights")))])
        self.weights = np.asarray(weights, dtype=np.float64)
        if taken is not None:
            taken = check_counts(taken, "taken", minimum=0)
            if len(taken) != self.weights.size:
                raise ValueError(f"taken has {len(taken)} counts for {self.weights.size} sources; give one per source")
        self.taken = np.zeros(self.weights.size, dtype=np.int64) if taken is None else np.array(taken, dtype=np.int64)

    def choose(self) -> int:
        return int(np.argmin(self.taken / self.weights))

    def add(self, source: int, tokens: int) -> None:
        self.taken[source] += tokens

    def shares(self) -> np.ndarray:
        return self.taken / max(int(self.taken.sum()), 1)
