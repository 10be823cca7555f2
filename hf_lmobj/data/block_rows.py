"""A block of documents laid out into rows: where each of its tokens goes, for every objective.

A *block* is a group of documents laid out together. Two row kinds:

* ``"packed"`` (causal): best-fit-decreasing of the block's documents into rows of at most
  ``max_length`` tokens; a document longer than a row is cut into chunks. A row is one feature
  ``{"input_ids": ids, "seq_lengths": [...]}`` (ids an int64 array) that :class:`~hf_lmobj.DataCollatorForCausalLM`
  keeps as one row, each chunk its own document.
* ``"pieces"`` (masked, span, UL2, text infilling): each document cut into consecutive near-equal
  pieces of at most ``max_length`` tokens (so no piece of a 2+ token document is a lone token); one piece
  is one feature ``{"input_ids": [...]}`` that the objective's collator masks or corrupts on its own.

Nothing is dropped: every token of the block lands in exactly one row. The layout depends on the
lengths alone, so a plan can be made without reading a token (see :mod:`hf_lmobj.data.planned`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from hf_lmobj.checks import check_count, check_length
from hf_lmobj.packing.rows import pack_layout

ROW_KINDS = ("packed", "pieces")


@dataclass(frozen=True)
class RowFormat:
    """How documents become rows: ``kind`` (``"packed"`` / ``"pieces"``) and the row length.

    Example:
        >>> layout = block_layout(np.array([3, 2, 4]), RowFormat("packed", 5))
        >>> layout.num_rows, layout.chunk_doc.tolist(), layout.row_offsets.tolist()
        (2, [2, 0, 1], [0, 1, 3])
        >>> docs = [np.array([1, 2, 3]), np.array([4, 5]), np.array([6, 7, 8, 9])]
        >>> row = row_feature(layout, 1, docs, RowFormat("packed", 5))
        >>> row["input_ids"].tolist(), row["seq_lengths"]
        ([1, 2, 3, 4, 5], [3, 2])
        >>> block_layout(np.array([5, 2]), RowFormat("pieces", 2)).chunk_len.tolist()
        [1, 2, 2, 2]
    """

    kind: str
    max_length: int

    def __post_init__(self) -> None:
        if not isinstance(self.kind, str) or self.kind not in ROW_KINDS:
            raise ValueError(f"row kind must be one of {ROW_KINDS}, got {self.kind!r}")
        length = check_length(self.max_length, "max_length", 2, "a row needs a token and the next one")
        object.__setattr__(self, "max_length", length)  # a numpy int becomes an int (fingerprints are JSON)


@dataclass(frozen=True)
class BlockLayout:
    """The rows of one block: chunk ``c`` is ``docs[chunk_doc[c]][chunk_start[c]:][:chunk_len[c]]``."""

    chunk_doc: np.ndarray  # (C,) document index within the block
    chunk_start: np.ndarray  # (C,) first token within its document
    chunk_len: np.ndarray  # (C,)
    row_offsets: np.ndarray  # (R + 1,) chunks of row r are row_offsets[r]:row_offsets[r + 1]

    def __post_init__(self) -> None:
        chunks = {name: np.asarray(getattr(self, name)) for name in ("chunk_doc", "chunk_start", "chunk_len")}
        sizes = {name: array.shape for name, array in chunks.items()}
        if any(len(shape) != 1 for shape in sizes.values()) or len(set(sizes.values())) != 1:
            raise ValueError(f"chunk_doc, chunk_start and chunk_len must be 1-D of one size, got shapes {sizes}")
        offsets = np.asarray(self.row_offsets)
        size = next(iter(sizes.values()))[0]
        if offsets.ndim != 1 or offsets.size == 0 or offsets[0] != 0 or offsets[-1] != size:
            raise ValueError(f"row_offsets must be 1-D, from 0 to the {size} chunks, got {offsets!r:.80}")

    @property
    def num_rows(self) -> int:
        return int(self.row_offsets.size - 1)

    @property
    def num_tokens(self) -> int:
        return int(self.chunk_len.sum())


def check_lengths(lengths: Any, field: str = "lengths") -> np.ndarray:
    """Document lengths as a 1-D int64 array of counts >= 0 (floats and bools refused, never cut to ints).

    Example:
        >>> check_lengths([3, 0, 2]).tolist()
        [3, 0, 2]
        >>> check_lengths([2.5])
        Traceback (most recent call last):
        ...
        TypeError: lengths must hold ints (token counts), got float64
    """
    array = np.asarray(lengths)
    if array.size == 0:
        return np.zeros(0, dtype=np.int64)
    if array.dtype == np.bool_ or not np.issubdtype(array.dtype, np.integer):
        raise TypeError(f"{field} must hold ints (token counts), got {array.dtype}")
    if array.ndim != 1:
        raise ValueError(f"{field} must be 1-D (one length per document), got shape {array.shape}")
    if int(array.min()) < 0:
        raise ValueError(f"{field} must be >= 0, got {int(array.min())} at {int(array.argmin())}")
    return array.astype(np.int64, copy=False)


def block_layout(lengths: np.ndarray, fmt: RowFormat) -> BlockLayout:
    """The rows of documents of ``lengths`` (empty documents hold no token and get no row)."""
    if not isinstance(fmt, RowFormat):
        raise TypeError(f"fmt must be a RowFormat, got {type(fmt).__name__}")
    lengths = check_lengths(lengths)  # (D,)
    doc_starts = np.cumsum(lengths) - lengths  # (D,) flat start of each document
    keep = np.flatnonzero(lengths > 0)
    if fmt.kind == "pieces":  # near-equal cuts: every piece of a document of >= 2 tokens has >= 2
        count = -(-lengths[keep] // fmt.max_length)  # (K,) pieces per document
        docs = np.repeat(keep, count)  # (P,)
        rank = np.arange(docs.size) - np.repeat(np.cumsum(count) - count, count)  # (P,) piece index in its doc
        total, parts = lengths[docs], np.repeat(count, count)
        starts, ends = total * rank // parts, total * (rank + 1) // parts
        return BlockLayout(docs, starts, ends - starts, np.arange(docs.size + 1))
    layout = pack_layout(doc_starts[keep], lengths[keep], fmt.max_length)
    order = np.lexsort((layout.offsets, layout.rows))  # (C,) chunks in row order
    starts, sizes, rows = layout.starts[order], layout.lengths[order], layout.rows[order]
    docs = np.searchsorted(doc_starts, starts, side="right") - 1  # (C,) owning document (the last starting there)
    offsets = np.concatenate([[0], np.cumsum(np.bincount(rows, minlength=layout.num_rows))])
    return BlockLayout(docs, starts - doc_starts[docs], sizes, offsets)


def shuffle_rows(layout: BlockLayout, rng: np.random.Generator) -> BlockLayout:
    """``layout`` with its rows in a random order (best-fit emits them longest first, document by document).

    Example:
        >>> layout = block_layout(np.array([3, 2, 4]), RowFormat("pieces", 5))
        >>> shuffle_rows(layout, np.random.default_rng(0)).chunk_doc.tolist()
        [2, 0, 1]
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy Generator (np.random.default_rng(seed)), got {type(rng).__name__}")
    order = rng.permutation(layout.num_rows)  # (R,) new row r is old row order[r]
    counts = np.diff(layout.row_offsets)[order]  # (R,) chunks per new row
    first = np.repeat(layout.row_offsets[:-1][order], counts)  # (C,) old first chunk of each chunk's row
    within = np.arange(int(counts.sum())) - np.repeat(np.cumsum(counts) - counts, counts)  # (C,)
    chunks = first + within  # (C,) old chunk index of each new chunk
    offsets = np.concatenate([[0], np.cumsum(counts)])
    return BlockLayout(layout.chunk_doc[chunks], layout.chunk_start[chunks], layout.chunk_len[chunks], offsets)


def row_feature(layout: BlockLayout, row: int, docs: Any, fmt: RowFormat) -> dict[str, Any]:
    """Row ``row`` of ``layout`` as the feature its collator takes (``docs``: the block's token ids, or a function
    ``(doc, start, stop) -> ids`` that reads a chunk of one)."""
    row = check_count(row, "row")
    if row >= layout.num_rows:
        raise ValueError(f"row must be in [0, {layout.num_rows}) (the block's rows), got {row}")
    first, last = int(layout.row_offsets[row]), int(layout.row_offsets[row + 1])
    read = docs if callable(docs) else lambda d, start, stop: docs[d][start:stop]
    spans = zip(*(getattr(layout, name)[first:last].tolist() for name in ("chunk_doc", "chunk_start", "chunk_len")))
    chunks = [read(d, s, s + n) for d, s, n in spans]
    ids = np.concatenate(chunks) if len(chunks) > 1 else np.asarray(chunks[0], dtype=np.int64)
    if fmt.kind == "pieces":
        return {"input_ids": ids}
    return {"input_ids": ids, "seq_lengths": layout.chunk_len[first:last].tolist()}
