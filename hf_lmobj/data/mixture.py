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

from collections.abc import Sequence

import numpy as np

from hf_lmobj.validation import check_number

__all__ = ["TokenMixer", "normalized_weights"]


def normalized_weights(weights: Sequence[float], names: Sequence[str]) -> np.ndarray:
    """``weights`` checked (finite, > 0, one per source) and scaled to sum to 1."""
    if len(weights) != len(names):
        raise ValueError(f"got {len(weights)} weights for {len(names)} sources; give one weight per source")
    checked = [check_number(w, f"weight of source {n!r}", 0.0, low_open=True) for w, n in zip(weights, names)]
    total = float(sum(checked))
    return np.asarray(checked, dtype=np.float64) / total


class TokenMixer:
    """Which source the next document comes from, so that tokens follow ``weights``."""

    def __init__(self, weights: Sequence[float], taken: Sequence[int] | None = None) -> None:
        self.weights = np.asarray(weights, dtype=np.float64)
        self.taken = np.zeros(self.weights.size, dtype=np.int64) if taken is None else np.array(taken, dtype=np.int64)

    def choose(self) -> int:
        return int(np.argmin(self.taken / self.weights))

    def add(self, source: int, tokens: int) -> None:
        self.taken[source] += tokens

    def shares(self) -> np.ndarray:
        return self.taken / max(int(self.taken.sum()), 1)
