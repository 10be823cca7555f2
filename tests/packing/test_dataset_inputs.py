"""Adversarial inputs to ``pack_dataset`` (and the ``pack_documents`` it maps): clear errors or exact rows.

Input classes: lengths (``max_length``, ``buffer_size``, ``num_proc``), the strategy, the dataset
itself, and its id columns (floats, strings, missing values, negative ids, misaligned labels).
"""

from __future__ import annotations

import datasets
import numpy as np
import pytest

from hf_lmobj.packing.dataset import pack_dataset, pack_documents

DOCS = {"input_ids": [[1, 2, 3], [4, 5], [6, 7, 8, 9]]}


@pytest.mark.parametrize(
    "kwargs, error, word",
    [
        ({"max_length": 1}, ValueError, ">= 2"),
        ({"max_length": 0}, ValueError, ">= 2"),
        ({"max_length": 4.0}, TypeError, "max_length"),
        ({"max_length": "4"}, TypeError, "max_length"),
        ({"max_length": True}, TypeError, "max_length"),
        ({"max_length": 4, "buffer_size": 0}, ValueError, "buffer_size"),
        ({"max_length": 4, "buffer_size": 2.5}, TypeError, "buffer_size"),
        ({"max_length": 4, "num_proc": 0}, ValueError, "num_proc"),
        ({"max_length": 4, "strategy": "first_fit"}, ValueError, "strategy"),
    ],
)
def test_arguments(kwargs, error, word):
    with pytest.raises(error, match=word):
        pack_dataset(datasets.Dataset.from_dict(DOCS), **kwargs)


@pytest.mark.parametrize(
    "columns, error, word",
    [
        ({"input_ids": [[1, 2.5], [3, 4]]}, TypeError, "lists of ints"),
        ({"input_ids": [["a", "b"]]}, TypeError, "lists of ints"),
        ({"input_ids": [[1, None, 3]]}, ValueError, "missing values"),
        ({"input_ids": [[1, 2], None]}, ValueError, "missing values"),
        ({"input_ids": [[-5, 2]]}, ValueError, ">= 0"),
        ({"input_ids": [[1, 2]], "labels": [[1]]}, ValueError, "same length"),
        ({"input_ids": [[1, 2]], "labels": [[1.0, 2.0]]}, TypeError, "labels"),
        ({"text": ["a"]}, ValueError, "no 'input_ids' column"),
        ({"input_ids": [[1, 2]], "position_ids": [[0, 1]]}, ValueError, "already packed"),
    ],
)
def test_bad_columns(columns, error, word):
    with pytest.raises(error, match=word):
        pack_dataset(datasets.Dataset.from_dict(columns), max_length=4)


def test_bad_column_in_a_stream_is_refused_when_read():
    stream = datasets.Dataset.from_dict({"input_ids": [[1, 2.5]]}).to_iterable_dataset()
    with pytest.raises(TypeError, match="lists of ints"):
        list(pack_dataset(stream, max_length=4))


@pytest.mark.parametrize("dataset", [DOCS["input_ids"], {"input_ids": [[1, 2]]}, None])
def test_not_a_dataset(dataset):
    with pytest.raises(TypeError, match="datasets.Dataset"):
        pack_dataset(dataset, max_length=4)


def test_smallest_rows_exactly():
    rows = pack_dataset(datasets.Dataset.from_dict({"input_ids": [[1, 2, 3]]}), max_length=2, strategy="fixed")
    assert rows.to_dict() == {"input_ids": [[1, 2], [3]], "attention_mask": [[2, 2], [2]], "seq_lengths": [[2], [1]]}
    assert rows.features["attention_mask"].feature.dtype == "int16"  # never int8: sets of any max_length combine


def test_numpy_max_length_and_int_dtypes_give_the_docstring_rows():
    ds = datasets.Dataset.from_dict(DOCS).cast_column("input_ids", datasets.Sequence(datasets.Value("int16")))
    packed = pack_dataset(ds, max_length=np.int64(5)).to_dict()
    assert packed["input_ids"] == [[6, 7, 8, 9], [1, 2, 3, 4, 5]]
    assert packed["seq_lengths"] == [[4], [3, 2]]


def test_labels_are_int32_with_every_chunk_start_unset():
    """Hand-worked: [1 2 3 | 4 5 6 7 8] at max_length 4 -> rows [4 5 6 7], [1 2 3 | 8] (best fit)."""
    ds = datasets.Dataset.from_dict(
        {"input_ids": [[1, 2, 3], [4, 5, 6, 7, 8]], "labels": [[-100, 2, 3], [4, 5, -100, 7, 8]]}
    )
    packed = pack_dataset(ds, max_length=4)
    assert packed.to_dict() == {
        "input_ids": [[4, 5, 6, 7], [1, 2, 3, 8]],
        "attention_mask": [[2, 2, 2, 2], [2, 2, 2, 3]],
        "labels": [[-100, 5, -100, 7], [-100, 2, 3, -100]],
        "seq_lengths": [[4], [3, 1]],
    }
    assert {packed.features[c].feature.dtype for c in packed.column_names} == {"int32", "int16"}


@pytest.mark.parametrize("dtype", ("int64", "uint32"))
def test_ids_past_int32_are_refused(dtype):
    ds = datasets.Dataset.from_dict({"input_ids": [[1, 2**31]]}).cast_column(
        "input_ids", datasets.Sequence(datasets.Value(dtype))
    )
    with pytest.raises(ValueError, match="input_ids must be < 2\\*\\*31"):
        pack_dataset(ds, max_length=4)


@pytest.mark.parametrize(
    "documents, labels, error, word",
    [
        ([[1, 2.5]], None, TypeError, "input_ids"),
        ([[1, True]], None, TypeError, "bool"),
        ([[1, "2"]], None, TypeError, "input_ids"),
        ([[-1, 2]], None, ValueError, ">= 0"),
        ([[1, 2]], [[1]], ValueError, "same length"),
        ([[1, 2]], [[1, 2.0]], TypeError, "labels"),
    ],
)
def test_pack_documents_inputs(documents, labels, error, word):
    with pytest.raises(error, match=word):
        pack_documents(documents, max_length=4, labels=labels)
