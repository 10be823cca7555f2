"""Pack a whole tokenized dataset into rows of ``max_length`` once, before training.

:func:`pack_dataset` works on a ``datasets.Dataset`` (``Dataset.map``, cached like any map) and on
a streaming ``datasets.IterableDataset`` (lazily, holding at most ``buffer_size`` documents at a
time). Each output row stores:

* ``input_ids`` (int32);
* ``attention_mask``: the number of each token's document in the row, counted from 2 (``2, 2, 2,
  3, 3, 4``): 0 would be padding and 1 an ordinary real token, so even a one-document row reads as
  packed. Stored as int16 for rows of up to 32,766 tokens and int32 above (:func:`mask_dtype`), never
  int8: packed sets of different ``max_length`` (64 and 256, ...) share their features, so
  ``datasets.concatenate_datasets`` / ``interleave_datasets`` combine them. Combining sets of rows above
  and below 32,766 tokens needs a cast first:
  ``packed.cast_column("attention_mask", datasets.Sequence(datasets.Value("int32")))``;
* ``seq_lengths`` (int32: the lengths of the row's documents in order, as TRL's ``pack_dataset``
  writes them), plus ``labels`` (int32) when the input has them.

About 6 bytes per token on disk for rows of up to 32,766 tokens (4 for the ids, 2 for the mask).

The numbered ``attention_mask`` is not a 0/1 mask: the rows are for
:class:`~hf_lmobj.collators.causal.DataCollatorForCausalLM`, which turns the numbers into
``position_ids`` / masks. Never hand them to a model's ``forward`` directly or through another
collator (``transformers``' ``DataCollatorForLanguageModeling``, ``default_data_collator``, ...): it
would pass the numbers on as an attention mask.

The boundaries are in ``attention_mask`` because every ``transformers`` language model's ``forward``
takes it: a stock ``Trainer`` keeps it with its default ``remove_unused_columns=True`` (it drops
``seq_lengths``, which no ``forward`` takes). :class:`~hf_lmobj.collators.causal.DataCollatorForCausalLM`
reads either, keeps each row as one batch row, derives ``position_ids`` (or ``cu_seq_lens``, or the
4D mask) from them and never lets a document attend to another; the numbers never reach the model.
A model whose ``forward`` takes no ``position_ids`` (Bloom, MPT, Mamba, ...) cannot isolate packed
documents: the collator given ``model=`` refuses its rows by name.

The work is vectorised over Arrow buffers (one copy of each document chunk, no Python loop over
tokens); best-fit-decreasing is O(n log n) in documents.

Two strategies, neither drops a token:

* ``"best_fit"`` (default): best-fit-decreasing of each buffer's documents into rows of *at most*
  ``max_length``; a document is split only when it is longer than ``max_length``.
* ``"fixed"``: documents back to back, cut every ``max_length`` tokens: every row is *exactly*
  ``max_length`` long except the last row of each buffer; a document crossing a row end continues
  in the next row as a new chunk (positions restart, nothing is conditioned across rows).

Other columns (``text``, ``num_bytes``, ...) describe documents, not rows, and are removed; an input
``attention_mask`` must be all ones (unpadded documents, not rows packed already).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple, TypeVar

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hf_lmobj.checks import check_length, id_column
from hf_lmobj.constants import IGNORE_INDEX
from hf_lmobj.packing.rows import MIN_ROW_LENGTH, ROW_NEEDS, Layout, pack_layout

STRATEGIES = ("best_fit", "fixed")
PACKED_COLUMNS = ("input_ids", "attention_mask", "labels", "seq_lengths")
FIRST_DOCUMENT_NUMBER = 2  # a packed row's attention_mask numbers its documents 2, 3, ... (1 = an ordinary mask)
DatasetT = TypeVar("DatasetT", datasets.Dataset, datasets.IterableDataset)
_INT32_MAX = np.iinfo(np.int32).max


class PackedRows(NamedTuple):
    """The chunks of the packed rows in output order (R rows, C chunks), and where the rows end."""

    starts: np.ndarray  # (C,) first token of each chunk in the concatenated documents, in output order
    seq_lengths: np.ndarray  # (C,) chunk lengths, in output order (row by row)
    offsets: np.ndarray  # (R + 1,) token boundaries of the rows
    seq_offsets: np.ndarray  # (R + 1,) chunk boundaries of the rows

    def gather(self, values: np.ndarray) -> np.ndarray:
        """(N,) the tokens of flat ``values`` in output order: a fresh array, one copy per chunk."""
        if not self.starts.size:
            return values[:0].copy()
        ends = self.starts + self.seq_lengths
        return np.concatenate([values[a:b] for a, b in zip(self.starts.tolist(), ends.tolist())])

    def document_numbers(self, dtype: np.dtype) -> np.ndarray:
        """(N,) each token's document number in its row, from :data:`FIRST_DOCUMENT_NUMBER`: the
        ``attention_mask`` of the rows."""
        per_row = np.diff(self.seq_offsets)  # (R,) chunks per row
        rank = np.arange(self.seq_lengths.size) - np.repeat(self.seq_offsets[:-1], per_row)  # (C,) chunk in its row
        return np.repeat((rank + FIRST_DOCUMENT_NUMBER).astype(dtype), self.seq_lengths)


def mask_dtype(max_length: int) -> np.dtype:
    """The int type of the document numbers of rows of ``max_length`` (up to ``max_length + 1``:
    one-token documents numbered from 2): int16 up to rows of 32,766 tokens, int32 above. Never int8,
    so that packed sets of short and longer rows (64 and 256) keep one feature type and concatenate.

    Example:
        >>> [mask_dtype(n).name for n in (2, 126, 127, 32766, 32767)]
        ['int16', 'int16', 'int16', 'int16', 'int32']
    """
    largest = max_length + FIRST_DOCUMENT_NUMBER - 1
    return next(np.dtype(t) for t in (np.int16, np.int32) if largest <= np.iinfo(t).max)


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


def packed_rows(lengths: np.ndarray, max_length: int, strategy: str = "best_fit") -> PackedRows:
    """Where every token of the concatenated documents goes, and each row's chunk lengths.

    Example:
        >>> rows = packed_rows(np.array([3, 2, 4]), max_length=5)
        >>> rows.gather(np.arange(9)).tolist(), rows.offsets.tolist()
        ([5, 6, 7, 8, 0, 1, 2, 3, 4], [0, 4, 9])
        >>> rows.seq_lengths.tolist(), rows.seq_offsets.tolist()
        ([4, 3, 2], [0, 1, 3])
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    if strategy == "best_fit":
        starts = np.cumsum(lengths) - lengths
        keep = lengths > 0
        layout = pack_layout(starts[keep], lengths[keep], max_length)
    else:
        layout = fixed_layout(lengths, max_length)
    order = np.lexsort((layout.offsets, layout.rows))  # (C,) chunks in output order
    per_row = np.bincount(layout.rows, minlength=layout.num_rows)  # (R,) chunks per row
    offsets = np.concatenate([[0], np.cumsum(layout.fills)])
    seq_offsets = np.concatenate([[0], np.cumsum(per_row)])
    return PackedRows(layout.starts[order], layout.lengths[order], offsets, seq_offsets)


def pack_documents(
    documents: Sequence[Sequence[int]],
    max_length: int,
    labels: Sequence[Sequence[int]] | None = None,
    strategy: str = "best_fit",
) -> dict[str, list[list[int]]]:
    """Pack token lists into rows: ``input_ids``, ``attention_mask``, ``seq_lengths`` (and ``labels``), as lists.

    A chunk that continues a document gets label -100 at its first token (it has no prefix in
    its row), as the collator would give it anyway.

    Example:
        >>> pack_documents([[1, 2, 3], [4, 5]], max_length=3)
        {'input_ids': [[1, 2, 3], [4, 5]], 'attention_mask': [[2, 2, 2], [2, 2]], 'seq_lengths': [[3], [2]]}
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
    """The packed rows of flat ``ids`` (and ``labels``) as an Arrow table of int32 lists."""
    rows = packed_rows(lengths, max_length, strategy)
    columns = {"input_ids": _list_array(rows.offsets, _int32(rows.gather(ids), "input_ids"))}
    columns["attention_mask"] = _list_array(rows.offsets, rows.document_numbers(mask_dtype(max_length)))
    if labels is not None:
        gathered = _int32(rows.gather(labels), "labels")  # (N,) a fresh copy
        gathered[np.cumsum(rows.seq_lengths) - rows.seq_lengths] = IGNORE_INDEX  # chunk starts
        columns["labels"] = _list_array(rows.offsets, gathered)
    columns["seq_lengths"] = _list_array(rows.seq_offsets, rows.seq_lengths.astype(np.int32))
    return pa.table(columns)


def _list_array(offsets: np.ndarray, values: np.ndarray) -> pa.Array:
    """A list array over flat ``values`` (no copy); large offsets only past 2**31 values."""
    if int(offsets[-1]) <= _INT32_MAX:
        return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), pa.array(values))
    return pa.LargeListArray.from_arrays(pa.array(offsets.astype(np.int64)), pa.array(values))


def _int32(values: np.ndarray, name: str) -> np.ndarray:
    """``values`` as int32 (the stored width), or a ValueError when an id does not fit."""
    if values.dtype == np.int32:
        return values
    if values.size and int(values.max()) > _INT32_MAX:
        raise ValueError(f"{name} must be < 2**31 to be stored as int32, got {int(values.max())}")
    return values.astype(np.int32)


def _pack_table(table: pa.Table, max_length: int, strategy: str) -> pa.Table:
    """``Dataset.map`` function over Arrow batches: the documents of ``table`` as packed rows."""
    ids_column = _int_list_column(table, "input_ids")
    lengths = pc.list_value_length(ids_column).to_numpy(zero_copy_only=False).astype(np.int64)
    ids = ids_column.flatten().to_numpy(zero_copy_only=False)
    _check_non_negative(ids, "input_ids")
    if "attention_mask" in table.column_names:
        _check_document_mask(table.column("attention_mask"))
    labels = None
    if "labels" in table.column_names:
        labels_column = _int_list_column(table, "labels")
        label_lengths = pc.list_value_length(labels_column).to_numpy(zero_copy_only=False)
        if not np.array_equal(label_lengths, lengths):
            raise ValueError("labels must have the same length as input_ids in every document")
        labels = labels_column.flatten().to_numpy(zero_copy_only=False)
    return _pack_columns(ids, labels, lengths, max_length, strategy)


def _int_list_column(table: pa.Table, name: str) -> pa.Array:
    """Column ``name`` as one Arrow list array of ints, or a TypeError naming its type and the fix."""
    column = table.column(name)
    column = column.chunk(0) if column.num_chunks == 1 else column.combine_chunks()
    kind = column.type
    if not (pa.types.is_list(kind) or pa.types.is_large_list(kind)) or not pa.types.is_integer(kind.value_type):
        raise TypeError(
            f"the {name!r} column must hold lists of ints (token ids), got {kind}; cast it, e.g. "
            f"dataset.cast_column({name!r}, datasets.Sequence(datasets.Value('int32')))"
        )
    if column.null_count or column.flatten().null_count:
        raise ValueError(f"the {name!r} column has missing values (None); drop or fill those rows")
    return column


def _check_document_mask(column: pa.ChunkedArray) -> None:
    """An input ``attention_mask`` (dropped) must be all ones: padding would be packed as text, and
    numbers above 1 mean rows packed already (their documents would be packed as one)."""
    values = pc.list_flatten(column)
    if not values.type.equals(pa.bool_()):
        values = pc.cast(values, pa.float64())  # any numeric mask; 1.0 counts as 1
    low, high = (pc.min_max(values)[key].as_py() for key in ("min", "max"))
    if low is None:
        return
    if high is not None and high > 1:
        raise ValueError(
            "the 'attention_mask' column numbers documents (values above 1): these rows are packed already; "
            "train on them as they are, or pack the unpacked documents"
        )
    if not low:
        raise ValueError(
            "the 'attention_mask' column has 0s (padding): pack_dataset would pack pad tokens as text; "
            "tokenize without padding (padding=False) or drop the padded positions first"
        )


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
    """Rows of ``max_length``: ``input_ids``, ``attention_mask`` (document numbers), ``seq_lengths``
    (and ``labels``); see the module docstring.

    Train on them with ``DataCollatorForCausalLM(tokenizer, max_length=max_length, model=model)``
    (each row stays one batch row, in padding and in packing mode), through a stock ``Trainer`` with
    its defaults: it keeps ``attention_mask``, which holds the boundaries. That collator turns the
    document numbers into ``position_ids`` / masks; never hand the rows to a model's ``forward``
    directly or through another collator (``transformers``' ``DataCollatorForLanguageModeling``,
    ``default_data_collator``): it would pass the numbers on as an attention mask.

    The mask is int16 for rows of up to 32,766 tokens and int32 above, so packed sets of different
    ``max_length`` on the same side of 32,766 concatenate / interleave as they are; across it, cast
    first: ``packed.cast_column("attention_mask", datasets.Sequence(datasets.Value("int32")))``.

    Args:
        dataset: a ``Dataset`` or ``IterableDataset`` with an ``input_ids`` column (one document
            per row, ids < 2**31) and optionally ``labels`` aligned with it (and an all-ones
            ``attention_mask``, which is replaced).
        max_length: row length, >= 2 (a token and the next one); longer documents are split.
        buffer_size: documents packed together (the map batch size); for a stream, the most
            documents held in memory. Larger buffers pack tighter.
        strategy: ``"best_fit"`` (rows of at most ``max_length``) or ``"fixed"`` (exactly).
        num_proc: worker processes for ``Dataset.map`` (ignored for streams).

    Example:
        >>> import datasets
        >>> ds = datasets.Dataset.from_dict({"input_ids": [[1, 2, 3], [4, 5], [6, 7, 8, 9]]})
        >>> pack_dataset(ds, max_length=5).to_dict()  # doctest: +NORMALIZE_WHITESPACE
        {'input_ids': [[6, 7, 8, 9], [1, 2, 3, 4, 5]], 'attention_mask': [[2, 2, 2, 2], [2, 2, 2, 3, 3]],
         'seq_lengths': [[4], [3, 2]]}
        >>> pack_dataset(ds, max_length=4, strategy="fixed").to_dict()["attention_mask"]
        [[2, 2, 2, 3], [2, 3, 3, 3], [2]]
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
