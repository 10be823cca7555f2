"""Bin packing: best-fit-decreasing against the textbook scan, and chunking."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_lmobj.packing.bins import best_fit_decreasing, chunk_lengths


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 64), min_size=1, max_size=60), st.integers(64, 128))
def test_best_fit_decreasing_places_every_item_once_within_capacity(lengths, capacity):
    bins = best_fit_decreasing(lengths, capacity)
    placed = sorted(i for b in bins for i in b)
    assert placed == list(range(len(lengths)))
    assert all(sum(lengths[i] for i in b) <= capacity for b in bins)
    # best fit never needs more than twice the lower bound of bins
    assert len(bins) <= 2 * -(-sum(lengths) // capacity)


def reference_best_fit_decreasing(lengths, capacity):
    """The textbook O(n^2) form: scan every open bin for the tightest fit, lowest index first."""
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    bins, rooms = [], []
    for item in order:
        fitting = [b for b, room in enumerate(rooms) if room >= lengths[item]]
        if fitting:
            best = min(fitting, key=lambda b: (rooms[b], b))
        else:
            best = len(bins)
            bins.append([])
            rooms.append(capacity)
        bins[best].append(item)
        rooms[best] -= lengths[item]
    return bins


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(0, 40), max_size=80), st.integers(40, 64))
def test_best_fit_decreasing_matches_the_textbook_scan(lengths, capacity):
    assert best_fit_decreasing(lengths, capacity) == reference_best_fit_decreasing(lengths, capacity)


def test_best_fit_decreasing_is_best_fit():
    # 6 goes first into bin 0 (room 4), 5 opens bin 1 (room 5), 4 fits bin 0 exactly.
    assert best_fit_decreasing([6, 5, 4], capacity=10) == [[0, 2], [1]]
    with pytest.raises(ValueError, match="chunk it first"):
        best_fit_decreasing([11], capacity=10)


@given(st.integers(0, 500), st.integers(1, 64))
def test_chunk_lengths_cover_the_document(length, max_length):
    chunks = chunk_lengths(length, max_length)
    assert sum(chunks) == length and all(0 < c <= max_length for c in chunks)
