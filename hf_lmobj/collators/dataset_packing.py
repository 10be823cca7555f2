"""Pack a whole tokenized dataset into rows of ``max_length`` once, before training.

:func:`pack_dataset` works on a ``datasets.Dataset`` (``Dataset.map``, cached like any map) and on
a streaming ``datasets.IterableDataset`` (lazily, holding at most ``buffer_size`` documents at a
time). Each output row carries ``input_ids`` (plus ``labels`` when the input has them),
``position_ids`` restarting at 0 for each document, so
:class:`~hf_lmobj.collators.causal.DataCollatorForCausalLM` keeps the documents isolated, and
``attention_mask`` numbering the row's documents 1, 2, ... (every model reads it as "all real
tokens"). A stock ``Trainer`` drops ``position_ids`` (``remove_unused_columns=True``) for a model
whose ``forward`` has no such argument (Bloom, MPT, Mamba, RWKV, XLNet, ...: models that cannot
isolate packed documents anyway); ``attention_mask`` survives, so the collator sees that the
boundaries were lost and raises, naming the fix.

The work is vectorised over Arrow buffers (no Python loop over tokens): the rows are built with
one gather per column, and best-fit-decreasing is O(n log n) in documents.

Two strategies, neither drops a token:

* ``"best_fit"`` (default): best-fit-decreasing of each buffer's documents into rows of *at most*
  ``max_length``; a document is split only when it is longer than ``max_length``.
* ``"fixed"``: documents back to back, cut every ``max_length`` tokens: every row is *exactly*
  ``max_length`` long except the last row of each buffer; a document crossing a row end continues
  in the next row as a new chunk (positions restart, nothing is conditioned across rows).

Other columns (``text``, ``num_bytes``, ...) describe documents, not rows, and are removed.

Example:
    >>> import datasets
    >>> ds = datasets.Dataset.from_dict({"input_ids": [[1, 2, 3], [4, 5], [6, 7, 8, 9]]})
    >>> packed = pack_dataset(ds, max_length=5)
    >>> packed.to_dict()["input_ids"], packed.to_dict()["position_ids"]
    ([[6, 7, 8, 9], [1, 2, 3, 4, 5]], [[0, 1, 2, 3], [0, 1, 2, 0, 1]])
    >>> packed.to_dict()["attention_mask"]
    [[1, 1, 1, 1], [1, 1, 1, 2, 2]]
    >>> pack_dataset(ds, max_length=4, strategy="fixed").to_dict()["input_ids"]
    [[1, 2, 3, 4], [5, 6, 7, 8], [9]]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hf_lmobj.collators._rows import MIN_ROW_LENGTH, ROW_NEEDS, Layout, pack_layout
from hf_lmobj.constants import IGNORE_INDEX
from hf_lmobj.validation import check_length, id_column

__all__ = [
    "STRATEGIES",
    "PACKED_COLUMNS",
    "DatasetT",
    "fixed_layout",
    "packed_rows",
    "pack_documents",
    "pack_dataset",
]

STRATEGIES = ("best_fit", "fixed")
PACKED_COLUMNS = ("input_ids", "position_ids", "attention_mask", "labels")
DatasetT = TypeVar("DatasetT", datasets.Dataset, datasets.IterableDataset)


def fixed_layout(lengths: np.ndarray, max_length: int) -> Layout:
    """Documents back to back cut every ``max_length`` tokens; chunks index the concatenation.

    Example:
        >>> layout = fixed_layout(np.array([3, 2, 4]), max_length=4)
        >>> list(zip(layout.starts.tolist(), layout.lengths.tolist(), layout.rows.tolist()))
        [(0, 3, 0), (3, 1, 0), (4, 1, 1), (5, 3, 1), (8, 1, 2)]
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    total = int(lengths.sum())
    cuts = np.union1d(np.cumsum(lengths) - lengths, np.arange(0, total, max_length))  # (C,) chunk starts
    cuts = cuts[cuts < total]
    sizes = np.diff(np.append(cuts, total))
    rows = cuts // max_length
    fills = np.bincount(rows, weights=sizes, minlength=-(-total // max_length)).astype(np.int64)
    return Layout(cuts, sizes, rows, cuts % max_length, fills)


def packed_rows(lengths: np.ndarray, max_length: int, strategy: str = "best_fit") -> dict[str, np.ndarray]:
    """Where every token of the concatenated documents goes, as flat arrays in output-row order.

    Returns ``source`` (N,) index into the concatenation, ``positions`` (N,) position in its
    document chunk, ``documents`` (N,) the chunk's number in its row (1, 2, ...) and ``offsets``
    (R + 1,) row boundaries. A chunk's first token has position 0.

    Example:
        >>> rows = packed_rows(np.array([3, 2, 4]), max_length=5)
        >>> rows["source"].tolist(), rows["offsets"].tolist()
        ([5, 6, 7, 8, 0, 1, 2, 3, 4], [0, 4, 9])
        >>> rows["positions"].tolist(), rows["documents"].tolist()
        ([0, 1, 2, 3, 0, 1, 2, 0, 1], [1, 1, 1, 1, 1, 1, 1, 2, 2])
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    starts = np.cumsum(lengths) - lengths
    keep = lengths > 0
    if strategy == "best_fit":
        layout = pack_layout(starts[keep], lengths[keep], max_length)
    else:
        layout = fixed_layout(lengths, max_length)
    order = np.lexsort((layout.offsets, layout.rows))  # chunks in output order
    sizes, rows = layout.lengths[order], layout.rows[order]
    first = np.cumsum(sizes) - sizes  # (C,) output index of each chunk's first token
    positions = np.arange(int(sizes.sum()), dtype=np.int64) - np.repeat(first, sizes)  # (N,)
    source = np.repeat(layout.starts[order], sizes) + positions  # (N,)
    row_first_chunk = np.searchsorted(rows, rows, side="left")  # (C,) first chunk of each chunk's row
    documents = np.repeat(np.arange(order.size) - row_first_chunk + 1, sizes)  # (N,)
    offsets = np.concatenate([[0], np.cumsum(layout.fills)])
    return {"source": source, "positions": positions, "documents": documents, "offsets": offsets}


def pack_documents(
    documents: Sequence[Sequence[int]],
    max_length: int,
    labels: Sequence[Sequence[int]] | None = None,
    strategy: str = "best_fit",
) -> dict[str, list[list[int]]]:
    """Pack token lists into rows: ``input_ids``, ``position_ids``, ``attention_mask`` (and ``labels``).

    A chunk that continues a document gets label -100 at its first token (it has no prefix in
    its row), as the collator would give it anyway.

    Example:
        >>> pack_documents([[1, 2, 3], [4, 5]], max_length=3)["position_ids"]
        [[0, 1, 2], [0, 1]]
    """
    max_length = check_length(max_length, "max_length", MIN_ROW_LENGTH, ROW_NEEDS)
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    flat, lengths = id_column(documents, "input_ids")
    _check_non_negative(flat, "input_ids")
    flat_labels = None
    if labels is not None:
        flat_labels, label_lengths = id_column(labels, "labels")
        if not np.array_equal(label_lengths, lengths):
            raise ValueError("labels must have the same length as input_ids in every document")
    table = _pack_columns(flat, flat_labels, lengths, max_length, strategy)
    return {name: table[name].to_pylist() for name in table.column_names}


def _pack_columns(
    ids: np.ndarray, labels: np.ndarray | None, lengths: np.ndarray, max_length: int, strategy: str
) -> pa.Table:
    """The packed rows of flat ``ids`` (and ``labels``) as an Arrow table (one gather per column)."""
    rows = packed_rows(lengths, max_length, strategy)
    offsets = pa.array(rows["offsets"].astype(np.int32 if rows["offsets"][-1] < 2**31 else np.int64))
    list_of = pa.ListArray if offsets.type == pa.int32() else pa.LargeListArray
    columns = {
        "input_ids": list_of.from_arrays(offsets, pa.array(ids[rows["source"]])),
        "position_ids": list_of.from_arrays(offsets, pa.array(rows["positions"].astype(np.int32))),
        "attention_mask": list_of.from_arrays(offsets, pa.array(rows["documents"].astype(np.int32))),
    }
    if labels is not None:
        gathered = labels[rows["source"]]
        gathered[rows["positions"] == 0] = IGNORE_INDEX
        columns["labels"] = list_of.from_arrays(offsets, pa.array(gathered))
    return pa.table(columns)


def _pack_table(table: pa.Table, max_length: int, strategy: str) -> pa.Table:
    """``Dataset.map`` function over Arrow batches: the documents of ``table`` as packed rows."""
    ids_column = _int_list_column(table, "input_ids")
    lengths = pc.list_value_length(ids_column).to_numpy(zero_copy_only=False).astype(np.int64)
    ids = ids_column.flatten().to_numpy(zero_copy_only=False)
    _check_non_negative(ids, "input_ids")
    labels = None
    if "labels" in table.column_names:
        labels_column = _int_list_column(table, "labels")
        if pc.list_value_length(labels_column).to_numpy(zero_copy_only=False).tolist() != lengths.tolist():
            raise ValueError("labels must have the same length as input_ids in every document")
        labels = labels_column.flatten().to_numpy(zero_copy_only=False).astype(ids.dtype, copy=False)
    return _pack_columns(ids, labels, lengths, max_length, strategy)


def _int_list_column(table: pa.Table, name: str) -> pa.Array:
    """Column ``name`` as one Arrow list array of ints, or a TypeError naming its type and the fix."""
    column = table.column(name).combine_chunks()
    kind = column.type
    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)) or not pa.types.is_integer(kind.value_type):
        raise TypeError(
            f"the {name!r} column must hold lists of ints (token ids), got {kind}; cast it, e.g. "
            f"dataset.cast_column({name!r}, datasets.Sequence(datasets.Value('int64')))"
        )
    if column.null_count or column.flatten().null_count:
        raise ValueError(f"the {name!r} column has missing values (None); drop or fill those rows")
    return column


def _check_non_negative(ids: np.ndarray, name: str) -> None:
    if ids.size and int(ids.min()) < 0:
        raise ValueError(f"{name} must be token ids >= 0, got {int(ids.min())}; was it tokenized?")


def _column_names(dataset: datasets.Dataset | datasets.IterableDataset) -> list[str]:
    """Column names, peeking at the first example of a stream whose features are unknown."""
    if dataset.column_names is not None:
        return list(dataset.column_names)
    first = next(iter(dataset), None)
    return [] if first is None else list(first)


def pack_dataset(
    dataset: DatasetT,
    max_length: int,
    buffer_size: int = 1000,
    strategy: str = "best_fit",
    num_proc: int | None = None,
) -> DatasetT:
    """Rows of ``max_length`` (see the module docstring) from a tokenized dataset's documents.

    Args:
        dataset: a ``Dataset`` or ``IterableDataset`` with an ``input_ids`` column (one document
            per row) and optionally ``labels`` aligned with it.
        max_length: row length, >= 2 (a token and the next one); longer documents are split.
        buffer_size: documents packed together (the map batch size); for a stream, the most
            documents held in memory. Larger buffers pack tighter.
        strategy: ``"best_fit"`` (rows of at most ``max_length``) or ``"fixed"`` (exactly).
        num_proc: worker processes for ``Dataset.map`` (ignored for streams).
    """
    max_length = check_length(max_length, "max_length", MIN_ROW_LENGTH, ROW_NEEDS)
    buffer_size = check_length(buffer_size, "buffer_size")
    num_proc = check_length(num_proc, "num_proc", optional=True)
    if not isinstance(dataset, (datasets.Dataset, datasets.IterableDataset)):
        raise TypeError(f"dataset must be a datasets.Dataset or IterableDataset, got {type(dataset).__name__}")
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    columns = _column_names(dataset)
    if columns and "input_ids" not in columns:
        raise ValueError(f"dataset has no 'input_ids' column (columns: {columns}); tokenize it first")
    if "position_ids" in columns or "seq_lengths" in columns:
        raise ValueError("dataset is already packed (it has position_ids / seq_lengths)")

    # Other columns describe documents, not rows: removed. A Dataset removes them before writing the
    # function's columns; a stream removes them from what the function returns, so keep ours there.
    kwargs: dict[str, Any] = {
        "batched": True,
        "batch_size": buffer_size,
        "remove_columns": columns,
        "fn_kwargs": {"max_length": max_length, "strategy": strategy},
    }
    if isinstance(dataset, datasets.Dataset):
        kwargs.update(num_proc=num_proc, desc=f"pack into rows of {max_length}")
    else:
        kwargs["remove_columns"] = [c for c in columns if c not in PACKED_COLUMNS]
    return dataset.with_format("arrow").map(_pack_table, **kwargs).with_format(None)
