"""Pure tensor helpers behind :class:`~hf_lmobj.collators.causal.DataCollatorForCausalLM`.

A batch is described by three flat tensors (``ids``, ``labels``, ``valid``: every feature's tokens
back to back) and a *layout*: one list of spans ``(flat_start, length)`` per output row. Each span
is one document (or one chunk of a longer document); its first token starts a fresh context, so it
gets position 0 and label -100 (nothing before it in the row may predict it).

Example:
    >>> rows = pack_spans([(0, 3), (3, 2), (5, 4)], max_length=5)
    >>> rows
    [[(5, 4)], [(0, 3), (3, 2)]]
    >>> out = assemble_rows(np.arange(9), np.arange(9), None, rows, width=5, pad_id=-1)
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

from dataclasses import dataclass
from typing import NamedTuple, Sequence

import numpy as np
import torch

from hf_lmobj.collators.packing import best_fit_decreasing, chunk_lengths

IGNORE_INDEX = -100
Span = tuple[int, int]  # (start in the flat token stream, length)


class AssembledRows(NamedTuple):
    """Tensors of one assembled batch, all (B, T)."""

    input_ids: torch.Tensor  # (B, T) int64, pad_id on padding
    labels: torch.Tensor  # (B, T) int64, -100 on padding and at every span start
    shift_labels: torch.Tensor  # (B, T) int64, labels[:, t + 1]; -100 at the last position
    position_ids: torch.Tensor  # (B, T) int64, 0 at every span start and at the padding start
    real: torch.Tensor  # (B, T) bool, True on real tokens (not collator padding)


@dataclass(frozen=True)
class PackingStats:
    """How full a batch's rectangle is: ``efficiency = num_tokens / (num_rows * row_length)``."""

    num_tokens: int
    num_rows: int
    row_length: int

    @property
    def efficiency(self) -> float:
        return self.num_tokens / max(self.num_rows * self.row_length, 1)


def round_up(value: int, multiple: int | None) -> int:
    """``value`` rounded up to a multiple of ``multiple`` (unchanged when it is None).

    Example:
        >>> round_up(5, 8), round_up(16, 8), round_up(5, None)
        (8, 16, 5)
    """
    return value if not multiple else -(-value // multiple) * multiple


def chunk_spans(spans: Sequence[Span], max_length: int | None) -> list[Span]:
    """Split every span longer than ``max_length`` into consecutive chunks (no token dropped).

    Example:
        >>> chunk_spans([(0, 5), (5, 2)], max_length=2)
        [(0, 2), (2, 2), (4, 1), (5, 2)]
    """
    if max_length is None:
        return list(spans)
    out: list[Span] = []
    for start, length in spans:
        for size in chunk_lengths(length, max_length):
            out.append((start, size))
            start += size
    return out


def pack_spans(spans: Sequence[Span], max_length: int) -> list[list[Span]]:
    """Best-fit-decreasing of the (chunked) spans into rows of at most ``max_length`` tokens."""
    chunks = chunk_spans(spans, max_length)
    bins = best_fit_decreasing([length for _, length in chunks], max_length)
    return [[chunks[i] for i in members] for members in bins]


def next_fit_rows(spans: Sequence[Span], max_length: int | None) -> list[list[Span]]:
    """Keep the spans in order, starting a new row when the next chunk does not fit.

    Used in padding mode: one feature gives one row unless it is longer than ``max_length``.

    Example:
        >>> next_fit_rows([(0, 3), (3, 3)], max_length=4)
        [[(0, 3)], [(3, 3)]]
        >>> next_fit_rows([(0, 5)], max_length=2)
        [[(0, 2)], [(2, 2)], [(4, 1)]]
    """
    rows: list[list[Span]] = [[]]
    fill = 0
    for start, length in chunk_spans(spans, max_length):
        if rows[-1] and max_length is not None and fill + length > max_length:
            rows.append([])
            fill = 0
        rows[-1].append((start, length))
        fill += length
    return rows if rows[-1] else rows[:-1]


def _flat_index(rows: Sequence[Sequence[Span]], width: int) -> tuple[np.ndarray, ...]:
    """Source index, destination index (into B*T) and offset inside the span of every token."""
    starts, lengths, dests = [], [], []
    for row_index, row in enumerate(rows):
        offset = row_index * width
        for start, length in row:
            starts.append(start)
            lengths.append(length)
            dests.append(offset)
            offset += length
    length_a = np.asarray(lengths, dtype=np.int64)  # (S,)
    first = np.cumsum(length_a) - length_a  # (S,) flat index of each span's first token
    within = np.arange(int(length_a.sum()), dtype=np.int64) - np.repeat(first, length_a)  # (N,)
    source = np.repeat(np.asarray(starts, dtype=np.int64), length_a) + within  # (N,)
    dest = np.repeat(np.asarray(dests, dtype=np.int64), length_a) + within  # (N,)
    return source, dest, within


def assemble_rows(
    ids: np.ndarray,
    labels: np.ndarray,
    valid: np.ndarray | None,
    rows: Sequence[Sequence[Span]],
    width: int,
    pad_id: int,
) -> AssembledRows:
    """Lay the spans of ``rows`` out into a (B, T=width) batch, right-padded.

    ``ids``, ``labels`` and ``valid`` are flat (N,) arrays; ``valid`` (bool, optional) marks the
    tokens a feature's own ``attention_mask`` keeps. A label is kept only where the token is valid,
    is not a span start, and follows a valid token: a target is always predicted from its own
    document's real prefix. Padding positions count 0, 1, ... as one extra dummy document.

    The work is numpy index arithmetic (single-threaded: tiny multi-threaded torch kernels stall
    on a busy CPU); the results are wrapped as torch tensors without a copy.
    """
    ids, labels = np.asarray(ids, dtype=np.int64), np.asarray(labels, dtype=np.int64)
    batch = len(rows)
    source, dest, within = _flat_index(rows, width)  # (N,) each
    out_ids = np.full(batch * width, pad_id, dtype=np.int64)
    out_labels = np.full(batch * width, IGNORE_INDEX, dtype=np.int64)
    real = np.zeros(batch * width, dtype=bool)
    out_ids[dest] = ids[source]
    out_labels[dest] = np.where(within == 0, IGNORE_INDEX, labels[source])
    real[dest] = True if valid is None else np.asarray(valid, dtype=bool)[source]
    fill = np.asarray([sum(length for _, length in row) for row in rows], dtype=np.int64)
    positions = (np.arange(width)[None, :] - fill[:, None]).reshape(-1)  # padding part
    positions[dest] = within
    labels_2d, real_2d = out_labels.reshape(batch, width), real.reshape(batch, width)
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


def spans_from_position_ids(position_ids: Sequence[int], start: int = 0) -> list[Span]:
    """Documents of one pre-packed row: a new span starts wherever the position is 0.

    Raises ``ValueError`` unless positions restart at 0 for each document and count up by one.

    Example:
        >>> spans_from_position_ids([0, 1, 2, 0, 1, 0], start=10)
        [(10, 3), (13, 2), (15, 1)]
    """
    pos = np.asarray(position_ids, dtype=np.int64)  # (L,)
    counts_up = pos[1:] == pos[:-1] + 1  # (L-1,)
    bad = np.flatnonzero((pos[1:] != 0) & ~counts_up)
    if pos.size and pos[0] != 0:
        bad = np.concatenate([[-1], bad])
    if bad.size:
        offset = int(bad[0]) + 1
        previous = "the row start" if offset == 0 else int(pos[offset - 1])
        raise ValueError(
            "position_ids must restart at 0 for each document and count up by 1 "
            f"(got {int(pos[offset])} after {previous} at offset {offset})"
        )
    starts = np.flatnonzero(pos == 0)  # (D,)
    lengths = np.diff(np.append(starts, pos.size))  # (D,)
    return [(start + int(s), int(n)) for s, n in zip(starts, lengths)]


def spans_from_seq_lengths(seq_lengths: Sequence[int], start: int = 0) -> list[Span]:
    """Documents of one pre-packed row given their lengths.

    Example:
        >>> spans_from_seq_lengths([3, 2], start=4)
        [(4, 3), (7, 2)]
    """
    spans: list[Span] = []
    for length in seq_lengths:
        if int(length) <= 0:
            raise ValueError(f"seq_lengths must be positive, got {list(seq_lengths)}")
        spans.append((start, int(length)))
        start += int(length)
    return spans


def packing_stats(
    lengths: Sequence[int], max_length: int, pad_to_multiple_of: int | None = None
) -> PackingStats:
    """The stats packing mode would give for documents of ``lengths`` (tokens, rows, row length).

    Example:
        >>> stats = packing_stats([6, 5, 4, 3, 2], max_length=10)
        >>> stats.num_rows, stats.row_length, stats.efficiency
        (2, 10, 1.0)
    """
    rows = pack_spans([(0, length) for length in lengths], max_length)
    width = round_up(max((sum(n for _, n in row) for row in rows), default=0), pad_to_multiple_of)
    return PackingStats(num_tokens=int(sum(lengths)), num_rows=len(rows), row_length=width)
