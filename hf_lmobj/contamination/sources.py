"""The readers of each kind of training source a contamination scan takes, as batches of the index's units.

A scan (:meth:`~hf_lmobj.contamination.index.ContaminationIndex.scan`) reads a
:class:`~hf_lmobj.store.TokenStore` (``chunk`` ids at a time), a :class:`~hf_lmobj.data.TextStream` (what it
trains: its held-out texts left out), a :class:`~hf_lmobj.data.DatasetSource` (token ids), a ``datasets.Dataset``
/ ``IterableDataset`` of text (one column, each row checked to be text) or a list of texts. :class:`SourceReader`
turns each into batches ``(ids, starts, windows, first_document, documents, units)``: the documents' units back to
back, where each document starts in them, the windows to test, the index of the first document, and how many
documents and units the batch adds to the counts. The index's tokenizer is checked against a store's or stream's
before a reader is asked (:meth:`~hf_lmobj.contamination.index.ContaminationIndex.scan`).

Example:
    >>> import numpy as np
    >>> reader = SourceReader(2, "tokens", lambda texts: [np.arange(len(t)) for t in texts], None)
    >>> kind, batches = reader.batches(["abc", "de"], "source 'x'", "text", 10, 1)
    >>> kind, [(ids.tolist(), starts.tolist(), windows) for ids, starts, windows, *_ in batches]
    ('text', [([0, 1, 2, 0, 1], [0, 3], 4)])
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import datasets
import numpy as np

from hf_lmobj.contamination.ngrams import store_chunks
from hf_lmobj.data import DatasetSource, TextStream
from hf_lmobj.held_out import content_hash
from hf_lmobj.store import TokenStore

_SOURCE_KINDS = (
    "a TokenStore, a TextStream, a DatasetSource (token ids), a datasets.Dataset / IterableDataset of text "
    "or a list of texts"
)


class SourceReader:
    """Batches of one training source in an index's units: ``n`` (units per n-gram), ``unit`` ("tokens" or
    "words"), and the index's ``units_of_texts`` / ``units_of_ids`` (texts or token-id documents -> unit arrays)."""

    def __init__(self, n: int, unit: str, units_of_texts: Callable, units_of_ids: Callable):
        self.n, self.unit, self.units_of_texts, self.units_of_ids = n, unit, units_of_texts, units_of_ids

    def batches(self, source: Any, where: str, column: str, batch_size: int, chunk: int) -> tuple[str, Iterator]:
        """``(kind, batches)`` of ``source`` (named ``where`` in errors); a source of no known kind is refused."""
        if isinstance(source, TokenStore):
            if self.unit == "tokens":
                return "token_store", store_chunks(source, self.n, chunk)
            return "token_store", self._id_batches(source, batch_size)
        if isinstance(source, TextStream):
            return "stream", self._stream_batches(source, batch_size)
        if isinstance(source, DatasetSource) or (hasattr(source, "lengths") and hasattr(source, "document")):
            return "token_ids", self._id_batches(source, batch_size)
        if isinstance(source, (datasets.Dataset, datasets.IterableDataset)):
            names = source.column_names
            if names is not None and column not in names:
                raise ValueError(
                    f"{where}: the dataset has no column {column!r} (has {names}); set text_column=, or wrap a column "
                    "of token ids in DatasetSource"
                )
            return "text", self._text_batches(_dataset_texts(source, column, batch_size, where))
        if isinstance(source, (list, tuple)):
            bad = next((item for item in source if not isinstance(item, str)), None)
            if bad is not None:
                raise TypeError(
                    f"{where} is a {type(source).__name__} holding a {type(bad).__name__}: a list source holds texts; "
                    "pass several sources as separate arguments (scan(store, stream))"
                )
            texts = list(source)
            return "text", self._text_batches(texts[i : i + batch_size] for i in range(0, len(texts), batch_size))
        raise TypeError(f"{where} is a {type(source).__name__}; a training source is {_SOURCE_KINDS}")

    def _documents_batch(self, docs: list[np.ndarray], first: int) -> tuple:
        lengths = np.fromiter((doc.size for doc in docs), np.int64, len(docs))
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]) if docs else np.zeros(0, np.int64)
        ids = np.concatenate(docs) if docs else np.zeros(0, np.int64)
        return ids, starts, max(ids.size - self.n + 1, 0), first, len(docs), int(ids.size)

    def _batches_of(self, documents: Iterator[list[np.ndarray]]) -> Iterator[tuple]:
        first = 0
        for docs in documents:
            yield self._documents_batch(docs, first)
            first += len(docs)

    def _text_batches(self, text_batches: Any) -> Iterator[tuple]:
        return self._batches_of(self.units_of_texts(texts) for texts in text_batches)

    def _id_batches(self, source: Any, batch_size: int) -> Iterator[tuple]:
        count = len(source.lengths)
        batches = (
            [source.document(i) for i in range(s, min(s + batch_size, count))] for s in range(0, count, batch_size)
        )
        return self._batches_of(self.units_of_ids(docs) for docs in batches)

    def _stream_batches(self, stream: TextStream, batch_size: int) -> Iterator[tuple]:
        if self.unit == "tokens":
            documents = stream.iter_documents(stream.dataset)
            return self._batches_of(iter(lambda: list(itertools.islice(documents, batch_size)), []))
        rows, read = iter(stream.dataset), 0

        def texts() -> Iterator[list[str]]:
            nonlocal read
            while batch := stream.read_texts(rows, batch_size, stream.dataset, read):
                read += len(batch)
                rule = stream.held_out
                yield [t for t in batch if rule is None or not rule.holds_out(content_hash(t))]

        return self._text_batches(texts())


def _dataset_texts(dataset: Any, column: str, batch_size: int, where: str) -> Iterator[list[str]]:
    row = 0
    for batch in dataset.select_columns([column]).iter(batch_size=batch_size):
        if column not in batch:
            raise ValueError(f"{where}: the dataset has no column {column!r} (has {list(batch)}); set text_column=")
        for i, text in enumerate(batch[column]):
            if not isinstance(text, str):
                raise TypeError(
                    f"{where}: row {row + i} of column {column!r} holds {type(text).__name__}, not text; fix or drop it"
                )
        row += len(batch[column])
        yield batch[column]
