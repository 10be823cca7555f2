"""Pure helpers shared by the packing collators: bin packing, chunking and per-document masks.

A packed row holds several documents back to back. Three ways tell a model where they are (which
one a batch uses is decided in :mod:`hf_lmobj.collators._attention`):

* ``position_ids`` restarting at 0 for each document: transformers' ``create_causal_mask`` detects
  the packed rows (without a cache) and flash-attention derives ``cu_seqlens`` from them;
* ``flash_attention_kwargs``: explicit ``cu_seq_lens_q/k`` and ``max_length_q/k``;
* a 4D additive float mask ``[B, 1, T, T]`` (0 = may attend, dtype min = may not) that eager and
  sdpa attention use as given, for the models whose mask ignores ``position_ids`` (and encoders).
  transformers ignores a 4D *boolean* mask on eager attention, so the float form is the one that
  works everywhere.

Example:
    >>> best_fit_decreasing([5, 3, 4, 2], capacity=7)
    [[0, 3], [2, 1]]
    >>> import torch
    >>> doc = document_ids_from_position_ids(torch.tensor([[0, 1, 0, 1, 2]]))
    >>> doc.tolist()
    [[0, 0, 1, 1, 1]]
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence

import numpy as np
import torch

__all__ = [
    "chunk_lengths",
    "best_fit_decreasing",
    "best_fit_placement",
    "document_ids_from_position_ids",
    "block_attention_mask",
    "flash_attention_kwargs",
    "packing_efficiency",
]


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


def document_ids_from_position_ids(position_ids: torch.Tensor) -> torch.Tensor:
    """Number the documents of each row: a new document starts wherever ``position_ids == 0``.

    Shapes: ``position_ids`` (B, T) -> (B, T) int64, starting at 0 in each row.
    """
    starts = (position_ids == 0).long()  # (B, T)
    starts[:, 0] = 1
    return starts.cumsum(dim=1) - 1  # (B, T)


def block_attention_mask(document_ids: torch.Tensor, causal: bool, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """4D additive mask letting each token attend only within its own document.

    Shapes: ``document_ids`` (B, T) -> (B, 1, T, T) with 0.0 where query t may attend key s (same
    document, and s <= t when ``causal``) and ``torch.finfo(dtype).min`` elsewhere. Every query
    sees at least itself, so no softmax row is empty.

    Example:
        >>> m = block_attention_mask(torch.tensor([[0, 0, 1]]), causal=True)
        >>> (m[0, 0] == 0).int().tolist()
        [[1, 0, 0], [1, 1, 0], [0, 0, 1]]
    """
    same = document_ids[:, :, None] == document_ids[:, None, :]  # (B, T, T)
    if causal:
        position = torch.arange(document_ids.shape[1], device=document_ids.device)  # (T,)
        same &= position[:, None] >= position[None, :]  # (B, T, T)
    allowed = torch.zeros((), dtype=dtype, device=same.device)
    blocked = torch.tensor(torch.finfo(dtype).min, dtype=dtype, device=same.device)
    return torch.where(same, allowed, blocked)[:, None]  # (B, 1, T, T)


def flash_attention_kwargs(position_ids: torch.Tensor) -> dict[str, torch.Tensor | int]:
    """``cu_seq_lens_q/k`` and ``max_length_q/k`` for flash-attention over the flattened batch.

    The whole (B, T) batch is one stream of documents; each row's first token starts a document.

    Example:
        >>> kw = flash_attention_kwargs(torch.tensor([[0, 1, 2, 0, 1]]))
        >>> kw["cu_seq_lens_q"].tolist(), kw["max_length_q"]
        ([0, 3, 5], 3)
    """
    flat = position_ids.reshape(-1).cpu().numpy()  # (B * T,)
    starts = flat == 0
    starts[:: position_ids.shape[1]] = True
    cu = np.append(np.flatnonzero(starts), flat.size).astype(np.int32)  # (S + 1,)
    longest = int(np.diff(cu).max()) if cu.size > 1 else 0
    cu = torch.from_numpy(cu).to(position_ids.device)
    return {"cu_seq_lens_q": cu, "cu_seq_lens_k": cu, "max_length_q": longest, "max_length_k": longest}


def packing_efficiency(num_real_tokens: int, rows: int, row_length: int) -> float:
    """Share of the ``rows x row_length`` rectangle filled by real tokens."""
    return num_real_tokens / max(rows * row_length, 1)
