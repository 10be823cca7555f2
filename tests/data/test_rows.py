"""Rows from documents: every token once, rows within max_length, pieces in order."""

from __future__ import annotations

import numpy as np
import pytest

from hf_lmobj.data.block_rows import RowFormat, block_layout, row_feature, shuffle_rows


def _docs(lengths, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 1000, size=n) for n in lengths]


@pytest.mark.parametrize("kind", ["packed", "pieces"])
@pytest.mark.parametrize("seed", range(5))
def test_every_token_lands_in_exactly_one_row(kind, seed):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(0, 40, size=50)
    docs = _docs(lengths, seed)
    fmt = RowFormat(kind, 16)
    layout = block_layout(lengths, fmt)
    rows = [row_feature(layout, r, docs, fmt) for r in range(layout.num_rows)]
    assert all(1 <= len(row["input_ids"]) <= 16 for row in rows)
    # chunk (doc, start, len) triples tile each document exactly
    covered = {}
    for d, s, n in zip(layout.chunk_doc.tolist(), layout.chunk_start.tolist(), layout.chunk_len.tolist()):
        covered.setdefault(d, []).append((s, n))
    for d, length in enumerate(lengths.tolist()):
        spans = sorted(covered.get(d, []))
        assert sum(n for _, n in spans) == length
        assert all(a + n == b for (a, n), (b, _) in zip(spans, spans[1:]))
    assert sorted(np.concatenate([r["input_ids"] for r in rows]).tolist()) == sorted(np.concatenate(docs).tolist())
    if kind == "packed":
        assert all(sum(row["seq_lengths"]) == len(row["input_ids"]) for row in rows)


def test_pieces_keep_document_order_and_packed_rows_hold_whole_short_documents():
    docs = [np.arange(5), np.arange(10, 12)]
    fmt = RowFormat("pieces", 2)
    layout = block_layout(np.array([5, 2]), fmt)
    assert [row_feature(layout, r, docs, fmt)["input_ids"].tolist() for r in range(layout.num_rows)] == [
        [0], [1, 2], [3, 4], [10, 11]
    ]  # fmt: skip
    packed = RowFormat("packed", 8)
    layout = block_layout(np.array([5, 2]), packed)
    rows = [row_feature(layout, r, docs, packed) for r in range(layout.num_rows)]
    assert [(row["input_ids"].tolist(), row["seq_lengths"]) for row in rows] == [([0, 1, 2, 3, 4, 10, 11], [5, 2])]


def test_row_format_refuses_bad_values():
    with pytest.raises(ValueError, match="row kind"):
        RowFormat("rows", 8)
    with pytest.raises(ValueError, match="max_length"):
        RowFormat("packed", 1)


def test_shuffled_rows_are_the_same_rows_in_another_order():
    lengths = np.random.default_rng(3).integers(1, 40, size=60)
    docs = _docs(lengths, 3)
    fmt = RowFormat("packed", 16)
    layout = block_layout(lengths, fmt)
    moved = shuffle_rows(layout, np.random.default_rng(0))
    rows = [tuple(row_feature(layout, r, docs, fmt)["input_ids"]) for r in range(layout.num_rows)]
    shuffled = [tuple(row_feature(moved, r, docs, fmt)["input_ids"]) for r in range(moved.num_rows)]
    assert sorted(rows) == sorted(shuffled) and rows != shuffled
