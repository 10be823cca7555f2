"""Random-access document sources: document lengths known up front, any document in O(1), as token ids.

A planned pipeline reads a :class:`RandomAccessSource` (a whole epoch is planned from the lengths alone:
exactly once, any world size): :class:`DatasetSource` (a tokenized in-memory ``datasets.Dataset``),
:class:`~hf_lmobj.store.token_store.TokenStore`, and :class:`DocumentSubset` (some documents of either).
Every argument is checked where it enters (:mod:`hf_lmobj.checks`); a document index or a token range
outside the source is refused, never wrapped or cut short. The other kind, streams of raw text tokenized on
the fly: :mod:`hf_lmobj.data.sources`.
"""

from __future__ import annotations

import hashlib
import operator
from typing import Any, Protocol, runtime_checkable

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from hf_lmobj.checks import check_count, check_name
from hf_lmobj.data.sources import TextStream


@runtime_checkable
class RandomAccessSource(Protocol):
    """What a planned pipeline reads: document lengths up front, any document in O(1)."""

    @property
    def lengths(self) -> np.ndarray: ...  # (D,) int64

    def document(self, index: int) -> np.ndarray: ...  # (L,) int64

    def document_slice(self, index: int, start: int, stop: int) -> np.ndarray: ...  # (stop - start,) int64

    def fingerprint(self) -> str: ...


def is_random_access(source: Any) -> bool:
    return isinstance(source, RandomAccessSource) and not isinstance(source, TextStream)


class DatasetSource:
    """A tokenized in-memory ``datasets.Dataset`` (one document per row in ``column``) as a source.

    The column must hold lists of token ids (ints >= 0); a dataset with no row, no token, a missing
    (``None``) document or a column of anything else is refused where it enters.

    Example:
        >>> import datasets
        >>> source = DatasetSource(datasets.Dataset.from_dict({"input_ids": [[1, 2], [3], [4, 5, 6]]}))
        >>> source.lengths.tolist(), source.document(2).tolist()
        ([2, 1, 3], [4, 5, 6])
        >>> DatasetSource(datasets.Dataset.from_dict({"input_ids": [[1, 2]]}).select([]))
        Traceback (most recent call last):
        ...
        ValueError: the dataset has 0 rows; a source needs at least one document
    """

    def __init__(self, dataset: datasets.Dataset, column: str = "input_ids") -> None:
        if not isinstance(dataset, datasets.Dataset):
            raise TypeError(f"DatasetSource takes a datasets.Dataset, got {type(dataset).__name__}")
        column = check_name(column, "column")
        if column not in dataset.column_names:
            raise ValueError(f"dataset has no {column!r} column (has {dataset.column_names}); tokenize it first")
        if dataset.num_rows == 0:
            raise ValueError("the dataset has 0 rows; a source needs at least one document")
        _check_token_column(dataset.data.column(column), column)
        self._load(dataset, column)
        if int(self._lengths.sum()) == 0:
            raise ValueError(
                f"every document of the dataset's {column!r} column is empty (0 tokens over {dataset.num_rows} rows); "
                "a source needs at least one token"
            )

    def _load(self, dataset: datasets.Dataset, column: str) -> None:
        self.dataset, self.column = dataset, column
        self._column = dataset.data.column(column)
        self._lengths = pc.list_value_length(self._column).to_numpy(zero_copy_only=False).astype(np.int64)

    @property
    def lengths(self) -> np.ndarray:
        return self._lengths

    def __len__(self) -> int:
        return int(self._lengths.size)

    def document(self, index: int) -> np.ndarray:
        index = _document_index(index, self._lengths.size)
        return np.asarray(self._column[index].values.to_numpy(zero_copy_only=False), dtype=np.int64)

    def document_slice(self, index: int, start: int, stop: int) -> np.ndarray:
        index = _document_index(index, self._lengths.size)
        start, stop = _token_span(start, stop, int(self._lengths[index]), index)
        values = self._column[index].values.slice(start, stop - start)
        return np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.int64)

    def fingerprint(self) -> str:
        return f"dataset:{self.dataset._fingerprint}:{self.column}"

    def __getstate__(self) -> dict[str, Any]:  # arrow columns are rebuilt in each worker
        return {"dataset": self.dataset, "column": self.column}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._load(state["dataset"], state["column"])  # checked when it was built


class DocumentSubset:
    """Some documents of a random-access source (``keep``: their indices, increasing) as a source of its own.

    Example:
        >>> import datasets
        >>> whole = DatasetSource(datasets.Dataset.from_dict({"input_ids": [[1, 2], [3], [4, 5, 6]]}))
        >>> subset = DocumentSubset(whole, np.array([0, 2]))
        >>> subset.lengths.tolist(), subset.document(1).tolist()
        ([2, 3], [4, 5, 6])
    """

    def __init__(self, source: RandomAccessSource, keep: np.ndarray) -> None:
        if not is_random_access(source):
            raise TypeError(f"DocumentSubset takes a random-access source, got {type(source).__name__}")
        keep = np.asarray(keep)
        if keep.ndim != 1 or keep.size == 0 or not np.issubdtype(keep.dtype, np.integer):
            raise ValueError(f"keep must be a non-empty 1-D array of document indices, got {keep!r:.60}")
        if keep[0] < 0 or keep[-1] >= len(source.lengths) or (keep.size > 1 and np.any(np.diff(keep) <= 0)):
            raise ValueError(f"keep must be increasing document indices in [0, {len(source.lengths)})")
        self.source, self.keep = source, keep.astype(np.int64)
        self._lengths = np.asarray(source.lengths)[self.keep]

    @property
    def lengths(self) -> np.ndarray:
        return self._lengths

    def document(self, index: int) -> np.ndarray:
        return self.source.document(int(self.keep[_document_index(index, self.keep.size)]))

    def document_slice(self, index: int, start: int, stop: int) -> np.ndarray:
        return self.source.document_slice(int(self.keep[_document_index(index, self.keep.size)]), start, stop)

    def fingerprint(self) -> str:
        kept = hashlib.blake2b(self.keep.tobytes(), digest_size=8).hexdigest()
        return f"subset:{kept}:{self.source.fingerprint()}"

    def __getattr__(self, name: str) -> Any:  # what else the source says of itself (check_tokenizer, path)
        if name in ("source", "keep", "_lengths"):
            raise AttributeError(name)
        return getattr(self.source, name)


def _check_token_column(column: pa.ChunkedArray, name: str) -> None:
    """Lists of ints >= 0, none missing (a float list would be cut to ints, a ``None`` read as garbage).

    Lists of nothing but empty lists (arrow's ``list<null>``) pass here: the caller refuses them as empty.
    """
    kind = column.type
    is_list = pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind)
    if not is_list or not (pa.types.is_integer(kind.value_type) or pa.types.is_null(kind.value_type)):
        raise TypeError(
            f"the dataset's {name!r} column must hold lists of token ids (ints), got {kind}; tokenize the text first"
        )
    if column.null_count:
        row = int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
        raise ValueError(f"row {row} of the dataset's {name!r} column is None; drop the rows without a document")
    smallest = pc.min(pc.list_flatten(column)).as_py()
    if smallest is not None and smallest < 0:
        raise ValueError(f"the dataset's {name!r} column holds a negative token id ({smallest}); ids must be >= 0")


def _document_index(index: Any, count: int) -> int:
    """``index`` as an int in ``[0, count)`` (a negative or past-the-end index is refused, not wrapped)."""
    try:
        value = operator.index(index)
    except TypeError:
        raise TypeError(f"document index must be an int, got {index!r}") from None
    if isinstance(index, (bool, np.bool_)) or not 0 <= value < count:
        raise ValueError(f"document index must be in [0, {count}), got {index!r}")
    return value


def _token_span(start: Any, stop: Any, length: int, index: int) -> tuple[int, int]:
    """``[start, stop)`` within a document of ``length`` tokens (never silently cut short)."""
    start, stop = check_count(start, "start"), check_count(stop, "stop")
    if not start <= stop <= length:
        raise ValueError(f"document {index} has {length} tokens; [start, stop) = [{start}, {stop}) is not inside it")
    return start, stop
