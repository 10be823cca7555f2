"""The one row layout of the causal and the masked collators: documents cut into chunks, chunks placed in rows.

A batch is a flat token stream (every feature's tokens back to back) and its documents, given as
arrays of flat ``starts`` and ``lengths``. Documents longer than ``max_length`` are cut into
chunks; a :class:`Layout` says which row each chunk goes to and at which offset. Each chunk starts
a fresh context: its first token gets position 0 and label -100 (nothing before it in the row may
predict it). Everything is numpy index arithmetic over arrays, O(tokens + chunks log chunks).

Example:
    >>> layout = pack_layout(np.array([0, 3, 5]), np.array([3, 2, 4]), max_length=5)
    >>> layout.rows.tolist(), layout.offsets.tolist(), layout.fills.tolist()
    ([1, 1, 0], [0, 3, 0], [4, 5])
    >>> out = assemble_rows(np.arange(9), np.arange(9), None, layout, width=5, pad_id=-1)
    >>> out.input_ids.tolist()
    [[5, 6, 7, 8, -1], [0, 1, 2, 3, 4]]
    >>> out.position_ids.tolist()
    [[0, 1, 2, 3, 0], [0, 1, 2, 0, 1]]
    >>> out.labels.tolist()
    [[-100, 6, 7, 8, -100], [-100, 1, 2, -100, 4]]
    >>> out.shift_labels.tolist()
    [[6, 7, 8, -100, -100], [1, 2, -100, 4, -100]]
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch

from hf_lmobj.constants import IGNORE_INDEX, round_up
from hf_lmobj.packing.bins import best_fit_placement

#: Rows (``max_length``) shorter than 2 tokens have no next-token target: a chunk's first token is not trained.
MIN_ROW_LENGTH = 2
ROW_NEEDS = "a row needs a token and the next one to train on; shorter chunks have no target"


class AssembledRows(NamedTuple):
    """Tensors of one assembled batch, all (B, T)."""

    input_ids: torch.Tensor  # (B, T) int64, pad_id on padding
    labels: torch.Tensor  # (B, T) int64, -100 on padding and at every chunk start
    shift_labels: torch.Tensor  # (B, T) int64, labels[:, t + 1]; -100 at the last position
    position_ids: torch.Tensor  # (B, T) int64, 0 at every chunk start and at the padding start
    real: torch.Tensor  # (B, T) bool, True on real tokens (not collator padding)


@dataclass(frozen=True)
class Layout:
    """Where each chunk of the stream goes: row ``rows[c]`` from column ``offsets[c]``."""

    starts: np.ndarray  # (C,) flat start of each chunk
    lengths: np.ndarray  # (C,)
    rows: np.ndarray  # (C,)
    offsets: np.ndarray  # (C,)
    fills: np.ndarray  # (B,) tokens in each row

    @property
    def num_rows(self) -> int:
        return int(self.fills.size)

    @property
    def longest_row(self) -> int:
        return int(self.fills.max()) if self.fills.size else 0


@dataclass(frozen=True)
class PackingStats:
    """How full a batch's rectangle is: ``efficiency = num_tokens / (num_rows * row_length)``."""

    num_tokens: int
    num_rows: int
    row_length: int

    @property
    def efficiency(self) -> float:
        return self.num_tokens / max(self.num_rows * self.row_length, 1)


def chunk_documents(
    starts: np.ndarray, lengths: np.ndarray, max_length: int | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cut every document longer than ``max_length`` into consecutive chunks (no token dropped).

    Returns ``(chunk_starts, chunk_lengths, chunk_document)``, in stream order.

    Example:
        >>> [a.tolist() for a in chunk_documents(np.array([0, 5]), np.array([5, 2]), max_length=2)]
        [[0, 2, 4, 5], [2, 2, 1, 2], [0, 0, 0, 1]]
    """
    starts, lengths = np.asarray(starts, dtype=np.int64), np.asarray(lengths, dtype=np.int64)
    if max_length is None or not lengths.size or int(lengths.max()) <= max_length:
        return starts, lengths, np.arange(lengths.size)
    per_doc = -(-lengths // max_length)  # (D,) chunks per document
    document = np.repeat(np.arange(lengths.size), per_doc)  # (C,)
    rank = np.arange(document.size) - np.repeat(np.cumsum(per_doc) - per_doc, per_doc)  # (C,) chunk index in its doc
    chunk_starts = starts[document] + rank * max_length
    chunk_lengths = np.minimum(max_length, lengths[document] - rank * max_length)
    return chunk_starts, chunk_lengths, document


def pack_layout(starts: np.ndarray, lengths: np.ndarray, max_length: int) -> Layout:
    """Best-fit-decreasing of the documents' chunks into rows of at most ``max_length`` tokens."""
    chunk_starts, chunk_lengths, _ = chunk_documents(starts, lengths, max_length)
    placed, per_row = best_fit_placement(chunk_lengths, max_length)  # (C,), (B,)
    rows = np.empty_like(chunk_lengths)
    rows[placed] = np.repeat(np.arange(per_row.size), per_row)
    sizes = chunk_lengths[placed]  # (C,) in row order
    row_first = np.repeat(np.cumsum(per_row) - per_row, per_row)  # (C,) first chunk of its row
    cumulative = np.cumsum(sizes) - sizes  # (C,) tokens before each chunk, over all rows
    offsets = np.empty_like(chunk_lengths)
    offsets[placed] = cumulative - cumulative[row_first] if placed.size else cumulative
    fills = np.bincount(rows, weights=chunk_lengths, minlength=per_row.size).astype(np.int64)
    return Layout(chunk_starts, chunk_lengths, rows, offsets, fills)


def next_fit_layout(starts: np.ndarray, lengths: np.ndarray, owners: np.ndarray, max_length: int | None) -> Layout:
    """Keep the chunks in order; a new row starts with each owner (feature) and when one is full.

    Used in padding mode: one feature gives one row unless it is longer than ``max_length``.

    Example:
        >>> layout = next_fit_layout(np.array([0, 3, 6]), np.array([3, 3, 5]), np.array([0, 0, 1]), 4)
        >>> layout.rows.tolist(), layout.offsets.tolist(), layout.fills.tolist()
        ([0, 1, 2, 3], [0, 0, 0, 0], [3, 3, 4, 1])
    """
    chunk_starts, chunk_lengths, document = chunk_documents(starts, lengths, max_length)
    chunk_owner = np.asarray(owners)[document].tolist()
    rows, offsets, fills = [], [], []
    previous = None
    for owner, size in zip(chunk_owner, chunk_lengths.tolist()):
        if owner != previous or (max_length is not None and fills[-1] + size > max_length):
            fills.append(0)
        rows.append(len(fills) - 1)
        offsets.append(fills[-1])
        fills[-1] += size
        previous = owner
    as_array = lambda values: np.asarray(values, dtype=np.int64)  # noqa: E731
    return Layout(chunk_starts, chunk_lengths, as_array(rows), as_array(offsets), as_array(fills))


def stack_layouts(top: Layout, bottom: Layout) -> Layout:
    """The rows of ``top`` then those of ``bottom`` (chunk starts index the same flat stream).

    Example:
        >>> a = next_fit_layout(np.array([0]), np.array([3]), np.array([0]), None)
        >>> b = next_fit_layout(np.array([3]), np.array([2]), np.array([1]), None)
        >>> stack_layouts(a, b).rows.tolist(), stack_layouts(a, b).fills.tolist()
        ([0, 1], [3, 2])
    """
    return Layout(
        np.concatenate([top.starts, bottom.starts]),
        np.concatenate([top.lengths, bottom.lengths]),
        np.concatenate([top.rows, bottom.rows + top.num_rows]),
        np.concatenate([top.offsets, bottom.offsets]),
        np.concatenate([top.fills, bottom.fills]),
    )


def assemble_rows(
    ids: np.ndarray,
    labels: np.ndarray,
    valid: np.ndarray | None,
    layout: Layout,
    width: int,
    pad_id: int,
) -> AssembledRows:
    """Lay the chunks out into a (B, T=width) batch, right-padded.

    ``ids``, ``labels`` and ``valid`` are flat (N,) arrays; ``valid`` (bool, optional) marks the
    tokens a feature's own ``attention_mask`` keeps. A label is kept only where the token is valid,
    is not a chunk start, and follows a valid token: a target is always predicted from its own
    document's real prefix. Padding positions count 0, 1, ... as one extra dummy document.

    The work is numpy index arithmetic (single-threaded: tiny multi-threaded torch kernels stall
    on a busy CPU); the results are wrapped as torch tensors without a copy.
    """
    batch, lengths = layout.num_rows, layout.lengths
    first = np.cumsum(lengths) - lengths  # (C,) index of each chunk's first token among the N
    within = np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(first, lengths)  # (N,)
    source = np.repeat(layout.starts - first, lengths) + np.arange(within.size)  # (N,)
    dest = np.repeat(layout.rows * width + layout.offsets - first, lengths) + np.arange(within.size)  # (N,)
    out_ids = np.full(batch * width, pad_id, dtype=np.int64)
    out_ids[dest] = ids[source]
    out_labels = np.full(batch * width, IGNORE_INDEX, dtype=np.int64)
    out_labels[dest] = labels[source]
    out_labels[layout.rows * width + layout.offsets] = IGNORE_INDEX  # chunk starts
    positions = (np.arange(width)[None, :] - layout.fills[:, None]).reshape(-1)  # padding part
    positions[dest] = within
    labels_2d = out_labels.reshape(batch, width)
    real = np.zeros(batch * width, dtype=bool)
    real[dest] = True if valid is None else valid[source]
    real_2d = real.reshape(batch, width)
    if valid is not None:  # a label needs a real token and a real token before it
        labels_2d[~real_2d] = IGNORE_INDEX
        labels_2d[:, 1:][~real_2d[:, :-1]] = IGNORE_INDEX
    shifted = np.full_like(labels_2d, IGNORE_INDEX)  # (B, T)
    shifted[:, :-1] = labels_2d[:, 1:]
    return AssembledRows(
        torch.from_numpy(out_ids.reshape(batch, width)),
        torch.from_numpy(labels_2d),
        torch.from_numpy(shifted),
        torch.from_numpy(positions.reshape(batch, width)),
        torch.from_numpy(real_2d),
    )


def packing_stats(lengths: Sequence[int], max_length: int, pad_to_multiple_of: int | None = None) -> PackingStats:
    """The stats packing mode would give for documents of ``lengths`` (tokens, rows, row length).

    Example:
        >>> stats = packing_stats([6, 5, 4, 3, 2], max_length=10)
        >>> stats.num_rows, stats.row_length, stats.efficiency
        (2, 10, 1.0)
    """
    sizes = np.asarray(lengths, dtype=np.int64)
    layout = pack_layout(np.cumsum(sizes) - sizes, sizes, max_length)
    width = round_up(layout.longest_row, pad_to_multiple_of)
    return PackingStats(num_tokens=int(sizes.sum()), num_rows=layout.num_rows, row_length=width)
