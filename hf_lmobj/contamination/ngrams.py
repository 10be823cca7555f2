"""The n-gram table under the contamination scan: every n-gram of the evaluation documents, found exactly.

The evaluation documents arrive as ids (token ids, or word codes: see :mod:`hf_lmobj.contamination.index`),
back to back in one flat array with their offsets. An n-gram is ``n`` consecutive ids of one document; a
document of fewer than ``n`` ids has none. The table holds:

* ``keys`` ``(M,) uint64``: a 64-bit hash of each *distinct* n-gram, sorted (two distinct n-grams that share a
  hash are two entries with one key); ``starts`` ``(M,) int64``: where one copy of each begins in ``ids``;
* ``position_ngram`` / ``position_doc`` ``(P,)``: for each n-gram position of each document, its entry and
  its document (a document's n-grams are counted by position: a repeated n-gram counts each time);
* a bit filter of ``2**b >= 64 M`` bits, the top ``b`` bits of each key set: at most 1/64 of the bits are
  set, so a scanned window that is not an evaluation n-gram passes it with probability <= 1/64.

A scanned window is an evaluation n-gram when it passes the filter, its hash is a key, and its ``n`` ids
equal that entry's ids, compared one by one: **the hash only finds the entry, the comparison decides**. No
hash collision can make a false hit (false-positive rate 0, whatever the data); a collision only costs one
comparison. The hash is polynomial over the ids, ``h = (...((x0 + 0) B + x1) B + ... + x_{n-1}) B mod 2**64``
with an odd 64-bit ``B``: ``n`` vectorised multiply-adds per window, no Python loop over tokens.

Memory: ~50 bytes per evaluation id (the ids, the positions' maps, the keys, the filter): bounded by the
evaluation set. A scan holds one chunk of the training data at a time (:data:`CHUNK_TOKENS` ids).

Example:
    >>> table = NgramTable.build(np.array([1, 2, 3, 4, 9, 9]), np.array([0, 4, 6]), n=3)
    >>> table.num_ngrams, table.position_doc.tolist()  # document 1 has 2 ids: no 3-gram
    (2, [0, 0])
    >>> ids = np.array([7, 2, 3, 4, 1, 2, 3])  # two training documents: ids[:5] and ids[5:]
    >>> positions, entries = table.hits(ids, boundaries=np.array([5]), windows=5)
    >>> positions.tolist()  # [2, 3, 4] at 1; [1, 2, 3] at 4 crosses the start of the second document
    [1]

Why: exact matching with a vectorised hash scans a token store at memory speed, and a reported hit is a
real copy of ``n`` evaluation ids, never a hash accident.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

#: The hash's multiplier (odd: multiplying by it is a bijection of 64-bit words); 2**64 / golden ratio.
BASE = np.uint64(0x9E3779B97F4A7C15)
#: Training ids hashed per step of a scan: the scan's working memory is ~40 bytes per id of one chunk (~10 MiB).
CHUNK_TOKENS = 1 << 18
_FILTER_BITS_PER_NGRAM = 64  # a window that is no evaluation n-gram passes the filter with probability <= 1/64
_VERIFY_BATCH = 1 << 15  # candidates compared at once: (batch, n) int64 gathers


def window_hashes(ids: np.ndarray, n: int) -> np.ndarray:
    """``(len(ids) - n + 1,) uint64``: the polynomial hash of every window of ``n`` ids (empty when fewer ids).

    ``ids`` hold ints >= 0. Example:
        >>> window_hashes(np.array([5, 6, 7]), 2).shape, window_hashes(np.array([5]), 2).shape
        ((2,), (0,))
    """
    count = ids.size - n + 1
    if count <= 0:
        return np.zeros(0, np.uint64)
    words = ids.astype(np.uint64, copy=False)  # int64 >= 0 -> the same value
    hashes = np.zeros(count, np.uint64)
    for k in range(n):
        np.add(hashes, words[k : k + count], out=hashes)
        np.multiply(hashes, BASE, out=hashes)  # wraps mod 2**64, as intended
    return hashes


def _window_ids(ids: np.ndarray, starts: np.ndarray, n: int) -> np.ndarray:
    """``(len(starts), n)``: the ``n`` ids from each start."""
    return ids[starts[:, None] + np.arange(n)]


def valid_windows(starts: np.ndarray, boundaries: np.ndarray, n: int) -> np.ndarray:
    """Bool per window start: the window ``[s, s + n)`` lies inside one document.

    ``boundaries`` are the sorted positions where a new document starts (a window crossing one is no n-gram).
    """
    if boundaries.size == 0:
        return np.ones(starts.size, bool)
    following = np.searchsorted(boundaries, starts, side="right")  # first boundary after each start
    limit = np.append(boundaries, np.iinfo(np.int64).max)[following]
    return starts + n <= limit


@dataclass(frozen=True, eq=False)
class NgramTable:
    """Every n-gram of the evaluation documents (see the module docstring); build it with :meth:`build`."""

    n: int
    ids: np.ndarray  # (T,) int64: the evaluation documents' ids, back to back
    keys: np.ndarray  # (M,) uint64, sorted: the hash of each distinct n-gram
    starts: np.ndarray  # (M,) int64: where one copy of each distinct n-gram starts in ids
    position_ngram: np.ndarray  # (P,) int64: the entry of each n-gram position of the documents
    position_doc: np.ndarray  # (P,) int64: the document of each n-gram position
    num_documents: int
    bits: np.ndarray  # the filter: 2**shift_bits bits, packed in uint8
    shift_bits: int

    def __post_init__(self) -> None:
        if self.keys.shape != self.starts.shape or self.position_ngram.shape != self.position_doc.shape:
            raise ValueError("NgramTable: keys / starts and position_ngram / position_doc must have equal shapes")

    @classmethod
    def build(cls, ids: np.ndarray, offsets: np.ndarray, n: int) -> NgramTable:
        """The table of the documents ``ids[offsets[i]:offsets[i + 1]]`` (ids >= 0, offsets from 0 to ``len(ids)``)."""
        ids = np.ascontiguousarray(ids, dtype=np.int64)
        offsets = np.asarray(offsets, dtype=np.int64)
        lengths = np.diff(offsets)
        counts = np.maximum(lengths - n + 1, 0)  # n-gram positions per document
        position_doc = np.repeat(np.arange(lengths.size, dtype=np.int64), counts)
        first = np.repeat(offsets[:-1] - (np.cumsum(counts) - counts), counts)  # start - rank within the doc
        position_start = first + np.arange(position_doc.size, dtype=np.int64)
        hashes = window_hashes(ids, n)[position_start] if position_doc.size else np.zeros(0, np.uint64)
        keys, starts, position_ngram = _distinct(ids, position_start, hashes, n)
        shift_bits = max(10, int(np.ceil(np.log2(max(keys.size, 1) * _FILTER_BITS_PER_NGRAM))))
        bits = np.zeros(1 << (shift_bits - 3), np.uint8)
        slots = keys >> np.uint64(64 - shift_bits)
        np.bitwise_or.at(
            bits, (slots >> np.uint64(3)).astype(np.int64), np.left_shift(1, slots & np.uint64(7)).astype(np.uint8)
        )
        return cls(n, ids, keys, starts, position_ngram, position_doc, int(lengths.size), bits, shift_bits)

    @property
    def num_ngrams(self) -> int:
        """The number of distinct n-grams of the evaluation documents."""
        return int(self.keys.size)

    @property
    def nbytes(self) -> int:
        """Bytes the table holds (its arrays)."""
        arrays = (self.ids, self.keys, self.starts, self.position_ngram, self.position_doc, self.bits)
        return sum(int(array.nbytes) for array in arrays)

    def hits(self, ids: np.ndarray, boundaries: np.ndarray, windows: int) -> tuple[np.ndarray, np.ndarray]:
        """The windows of ``ids`` that are evaluation n-grams: ``(positions, entries)``, both ``(H,) int64``.

        Windows start at ``0 .. windows - 1`` (``ids`` carries the ``n - 1`` ids after the last, where they
        exist); ``boundaries`` are the sorted positions in ``ids`` where a new document starts: a window that
        crosses one is no n-gram. ``entries`` index :attr:`keys` (the distinct n-gram found at each position).
        """
        hashes = window_hashes(ids, self.n)[:windows]
        if hashes.size == 0 or self.keys.size == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        slots = hashes >> np.uint64(64 - self.shift_bits)
        passed = (self.bits[slots >> np.uint64(3)] >> (slots & np.uint64(7)).astype(np.uint8)) & 1
        candidates = np.flatnonzero(passed)
        candidates = candidates[valid_windows(candidates, boundaries, self.n)]
        found = [
            self._verify(ids, hashes, candidates[i : i + _VERIFY_BATCH])
            for i in range(0, candidates.size, _VERIFY_BATCH)
        ]
        if not found:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        return np.concatenate([f[0] for f in found]), np.concatenate([f[1] for f in found])

    def _verify(self, ids: np.ndarray, hashes: np.ndarray, candidates: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """The candidates whose ids equal an entry with their hash (entries sharing a key are tried in turn)."""
        wanted = hashes[candidates]
        entry = np.searchsorted(self.keys, wanted)
        windows = _window_ids(ids, candidates, self.n)  # (C, n)
        positions, entries = [], []
        while candidates.size:
            inside = entry < self.keys.size
            keep = np.zeros(candidates.size, bool)
            keep[inside] = self.keys[entry[inside]] == wanted[inside]  # still an entry with this hash
            candidates, wanted, entry, windows = candidates[keep], wanted[keep], entry[keep], windows[keep]
            same = (windows == _window_ids(self.ids, self.starts[entry], self.n)).all(axis=1)
            positions.append(candidates[same])
            entries.append(entry[same])
            candidates, wanted, entry, windows = candidates[~same], wanted[~same], entry[~same] + 1, windows[~same]
        return np.concatenate(positions), np.concatenate(entries)

    def seen_fractions(self, seen: np.ndarray) -> np.ndarray:
        """``(D,) float64``: per document, the share of its n-gram positions whose n-gram is ``seen``; NaN without any."""
        total = np.bincount(self.position_doc, minlength=self.num_documents)
        hit = np.bincount(self.position_doc, weights=seen[self.position_ngram], minlength=self.num_documents)
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(total > 0, hit / np.maximum(total, 1), np.nan)


def _distinct(
    ids: np.ndarray, position_start: np.ndarray, hashes: np.ndarray, n: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(keys, starts, position_ngram)``: the distinct n-grams by content, sorted by hash.

    Positions are sorted by hash; a run of equal hashes is one n-gram when every neighbour pair's ids are
    equal (the usual case: one n-gram repeated), otherwise the run is split by content (a hash collision).
    """
    order = np.argsort(hashes, kind="stable")
    sorted_hashes, sorted_starts = hashes[order], position_start[order]
    new = np.ones(order.size, bool)
    new[1:] = sorted_hashes[1:] != sorted_hashes[:-1]
    same_key = np.flatnonzero(~new)  # positions whose hash equals the one before
    differ = np.zeros(order.size, bool)
    for i in range(0, same_key.size, _VERIFY_BATCH):
        batch = same_key[i : i + _VERIFY_BATCH]
        here, before = _window_ids(ids, sorted_starts[batch], n), _window_ids(ids, sorted_starts[batch - 1], n)
        differ[batch] = (here != before).any(axis=1)
    if differ.any():  # a hash shared by distinct n-grams: order each such run by content, then split it
        order, sorted_starts, new = _split_collisions(ids, order, sorted_hashes, sorted_starts, new, differ, n)
        sorted_hashes = hashes[order]
    group = np.cumsum(new) - 1  # (P,) entry of each sorted position
    position_ngram = np.empty(order.size, np.int64)
    position_ngram[order] = group
    firsts = np.flatnonzero(new)
    return sorted_hashes[firsts], sorted_starts[firsts], position_ngram


def _split_collisions(
    ids: np.ndarray,
    order: np.ndarray,
    sorted_hashes: np.ndarray,
    sorted_starts: np.ndarray,
    new: np.ndarray,
    differ: np.ndarray,
    n: int,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Within each run of equal hashes that holds distinct n-grams, sort by the ids and start a group at each change."""
    order, sorted_starts, new = order.copy(), sorted_starts.copy(), new.copy()
    run_starts = np.flatnonzero(new)
    run_ends = np.append(run_starts[1:], order.size)
    for begin, end in zip(run_starts.tolist(), run_ends.tolist()):
        if not differ[begin + 1 : end].any():
            continue
        contents = [tuple(ids[s : s + n].tolist()) for s in sorted_starts[begin:end]]
        ranked = sorted(range(end - begin), key=lambda i: contents[i])
        order[begin:end] = order[begin:end][ranked]
        sorted_starts[begin:end] = sorted_starts[begin:end][ranked]
        for i in range(1, end - begin):
            new[begin + i] = contents[ranked[i]] != contents[ranked[i - 1]]
    return order, sorted_starts, new


def store_chunks(store: Any, n: int, chunk: int) -> Iterator[tuple]:
    """A token store's windows ``chunk`` at a time, as batches ``(ids, starts, windows, first_document, documents,
    units)`` (see :meth:`hf_lmobj.contamination.index.ContaminationIndex.scan`).

    A chunk tests the windows starting in ``[begin, end)`` on the ids ``[begin, end + n - 1)``; it counts the
    documents starting in ``[begin, end)`` (the last chunk: up to the end), so each document is counted once.
    """
    offsets, total = store.offsets, store.num_tokens
    last = max(total - n + 1, 0)  # windows start at 0 .. last - 1
    for begin in range(0, max(last, 1), chunk):
        end = min(begin + chunk, last)
        first = int(np.searchsorted(offsets, begin, side="right")) - 1  # the document holding begin
        stop = int(np.searchsorted(offsets, end + n - 1, side="left"))  # offsets[first + 1:stop]: starts inside
        starts = np.maximum(np.asarray(offsets[first:stop], dtype=np.int64) - begin, 0)
        counted_to = end if end < last else total
        count = int(
            np.searchsorted(offsets[:-1], counted_to, side="left") - np.searchsorted(offsets[:-1], begin, side="left")
        )
        ids = store.tokens(begin, min(end + n - 1, total))
        yield ids, starts, end - begin, first, count, (end - begin if end < last else total - begin)
