"""Bin packing of documents into rows: chunking, best-fit-decreasing, and how full the rows are.

A packed row holds several documents back to back; a document longer than a row is cut into chunks
first (:func:`chunk_lengths`), and the chunks go into as few rows as best-fit-decreasing finds
(:func:`best_fit_decreasing`, or :func:`best_fit_placement` as arrays for the row layout of
:mod:`hf_lmobj.packing.rows`). How a model is then told where the documents of a row are is
:mod:`hf_lmobj.packing.masks`.

Example:
    >>> best_fit_decreasing([5, 3, 4, 2], capacity=7)
    [[0, 3], [2, 1]]
    >>> chunk_lengths(10, 4)
    [4, 4, 2]
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np


def chunk_lengths(length: int, max_length: int) -> list[int]:
    """Split a document of ``length`` tokens into chunks of at most ``max_length`` (none dropped).

    Example:
        >>> chunk_lengths(10, 4)
        [4, 4, 2]
    """
    if max_length <= 0:
        raise ValueError(f"max_length must be positive, got {max_length}")
    if length < 0:
        raise ValueError(f"length must be non-negative, got {length}")
    full, rest = divmod(length, max_length)
    return [max_length] * full + ([rest] if rest else [])


def best_fit_decreasing(lengths: Sequence[int], capacity: int) -> list[list[int]]:
    """Pack items into as few bins of ``capacity`` as best-fit-decreasing finds.

    Items are visited longest first (ties by index, so the result is deterministic); each goes into
    the open bin with the least room that still fits it (the lowest-numbered such bin), or a new
    bin. Returns, per bin, the item indices in the order they were placed. See
    :func:`best_fit_placement` for the cost.

    Example:
        >>> best_fit_decreasing([4, 4, 4], capacity=8)
        [[0, 1], [2]]
    """
    placed, bin_sizes = best_fit_placement(lengths, capacity)
    flat, ends = placed.tolist(), np.cumsum(bin_sizes).tolist()
    return [flat[start:end] for start, end in zip([0, *ends[:-1]], ends)]


def best_fit_placement(lengths: Sequence[int], capacity: int) -> tuple[np.ndarray, np.ndarray]:
    """Best-fit-decreasing as arrays: the items grouped by bin, and how many items each bin holds.

    Returns ``(placed, bin_sizes)``: ``placed`` (n,) lists bin 0's items in the order they were
    placed, then bin 1's, ...; ``bin_sizes`` (bins,) counts the items of each bin.

    Cost: O(n log n) for n items. The open rooms are one bitset (a Python int: bit r is set when
    some bin has exactly r free slots), so the best room for an item is the lowest set bit at or
    above its size (O(capacity / 64) word operations, independent of n); bins sharing one room wait
    in a heap by index. No object is allocated per bin, so the garbage collector stays idle.

    Example:
        >>> placed, sizes = best_fit_placement([5, 3, 4, 2], capacity=7)
        >>> placed.tolist(), sizes.tolist()
        ([0, 3, 2, 1], [2, 2])
    """
    if capacity <= 0:
        raise ValueError(f"capacity must be positive, got {capacity}")
    sizes = np.asarray(lengths, dtype=np.int64).reshape(-1)  # (n,)
    if sizes.size and int(sizes.max()) > capacity:
        item = int(np.argmax(sizes))
        raise ValueError(f"item {item} has length {int(sizes[item])} > capacity {capacity}; chunk it first")
    if sizes.size and int(sizes.min()) < 0:
        raise ValueError(f"lengths must be non-negative, got {int(sizes.min())}")
    order = np.argsort(-sizes, kind="stable")  # (n,) longest first, ties by index
    bin_of = [0] * sizes.size  # bin of the k-th visited item
    opened = 0
    rooms = 0  # bitset of the rooms some open bin has
    by_room: dict[int, list[int]] = {}  # room -> heap of the bin indices with exactly that room
    for k, size in enumerate(sizes[order].tolist()):
        fits = rooms >> size  # bit j set: a bin with room size + j exists
        if fits:
            room = size + (fits & -fits).bit_length() - 1
            waiting = by_room[room]
            index = heapq.heappop(waiting)
            if not waiting:
                rooms ^= 1 << room
                del by_room[room]
        else:
            room, index = capacity, opened
            opened += 1
        bin_of[k] = index
        left = room - size
        waiting = by_room.setdefault(left, [])
        if not waiting:
            rooms |= 1 << left
        heapq.heappush(waiting, index)
    bins = np.asarray(bin_of, dtype=np.int64)  # (n,)
    placed = order[np.argsort(bins, kind="stable")]  # (n,) grouped by bin, in placement order
    return placed, np.bincount(bins, minlength=opened)


def packing_efficiency(num_real_tokens: int, rows: int, row_length: int) -> float:
    """Share of the ``rows x row_length`` rectangle filled by real tokens."""
    return num_real_tokens / max(rows * row_length, 1)
