"""``pack_dataset`` on a stream (``IterableDataset``, with and without known features): hostile documents.

The stream is packed lazily, so each error is raised at the first row read, with the same message as for a
``Dataset``; an empty document has no tokens to lose and packs into nothing.
"""

from __future__ import annotations

import datasets
import pytest

from hf_lmobj import pack_dataset


def _stream(rows: list[dict], typed: bool) -> datasets.IterableDataset:
    if typed:  # features known up front (Dataset.to_iterable_dataset)
        return datasets.Dataset.from_list(rows).to_iterable_dataset()
    return datasets.IterableDataset.from_generator(lambda: iter(rows))  # features inferred per batch


BAD = {
    "floats": ([{"input_ids": [1.5, 2.0]}], TypeError, "lists of ints"),
    "strings": ([{"input_ids": ["a", "b"]}], TypeError, "lists of ints"),
    "nested": ([{"input_ids": [[1, 2], [3]]}], TypeError, "lists of ints"),
    "none": ([{"input_ids": None}], TypeError, "lists of ints"),
    "negative": ([{"input_ids": [-1, 2]}], ValueError, ">= 0"),
    "too_large": ([{"input_ids": [2**31, 1]}], ValueError, "int32"),
    "labels_misaligned": ([{"input_ids": [1, 2, 3], "labels": [1, 2]}], ValueError, "same length"),
    "no_input_ids": ([{"text": "abc"}], ValueError, "tokenize it first"),
}


@pytest.mark.parametrize("typed", [True, False], ids=["typed", "inferred"])
@pytest.mark.parametrize("case", sorted(BAD))
def test_hostile_documents_in_a_stream_are_refused_by_name(case, typed):
    rows, error, word = BAD[case]
    with pytest.raises(error, match=word):
        list(pack_dataset(_stream(rows, typed), max_length=4))


@pytest.mark.parametrize("typed", [True, False], ids=["typed", "inferred"])
def test_a_one_token_document_is_kept_as_its_own_piece(typed):
    assert list(pack_dataset(_stream([{"input_ids": [5]}], typed), max_length=4)) == [
        {"input_ids": [5], "attention_mask": [2], "seq_lengths": [1]}
    ]


def test_an_empty_document_packs_into_nothing_and_loses_no_token():
    rows = [{"input_ids": []}, {"input_ids": [1, 2, 3]}, {"input_ids": [4, 5, 6, 7, 8]}]
    out = list(pack_dataset(_stream(rows, True), max_length=4))
    assert sorted(t for row in out for t in row["input_ids"]) == list(range(1, 9))
    assert sum(sum(row["seq_lengths"]) for row in out) == 8


@pytest.mark.parametrize(("field", "value", "word"), [
    ("max_length", 1, ">= 2"), ("max_length", 2.5, "int"), ("max_length", True, "int"),
    ("buffer_size", 0, ">= 1"), ("buffer_size", -3, ">= 1"), ("strategy", "first_fit", "strategy"),
])  # fmt: skip
def test_hostile_arguments_are_refused_before_the_stream_is_read(field, value, word):
    kwargs = {"max_length": 4, field: value}
    with pytest.raises((TypeError, ValueError), match=word):
        pack_dataset(_stream([{"input_ids": [1, 2]}], True), **kwargs)


def test_an_already_packed_stream_is_refused():
    packed = pack_dataset(_stream([{"input_ids": [1, 2, 3]}], True), max_length=4)
    with pytest.raises(ValueError, match="already packed"):
        pack_dataset(datasets.Dataset.from_list(list(packed)).to_iterable_dataset(), max_length=4)
