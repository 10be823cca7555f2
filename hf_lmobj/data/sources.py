"""Streamed document sources: raw text read in order and tokenized on the fly, as token ids.

A :class:`TextStream` reads a streamed ``datasets.IterableDataset`` of raw text (Hub or local files; an
in-memory ``Dataset`` is read as one) and tokenizes it in batches; each (rank, worker) *unit* reads a
disjoint slice (``datasets.distributed.split_dataset_by_node``: by shards when they divide evenly, else by
examples). The other kind, random access (lengths known up front, any document in O(1)):
:mod:`hf_lmobj.data.random_access`.

Every argument is checked where it enters (:mod:`hf_lmobj.checks`), and a stream's rows are
checked as they are read: a row without the text column, a ``None`` or non-string text, a file that is
not UTF-8 or not valid JSON raise a ``ValueError`` / ``TypeError`` naming the source, the file being
read, the row and the fix, never a bare ``KeyError`` or an error from inside pyarrow.

Example:
    >>> from hf_lmobj.corpus import build_tokenizer
    >>> tok = build_tokenizer(vocab_size=512, max_documents=20)
    >>> stream = TextStream(datasets.Dataset.from_dict({"text": ["a b", "c"]}), tok, name="web")
    >>> [d if isinstance(d, str) else "document" for d in stream.documents_or_reasons(["a b", "", " "])]
    ['document', 'empty', 'whitespace']
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import datasets
import numpy as np
import pyarrow as pa
import torch
from datasets.table import CastError
from transformers import PreTrainedTokenizerBase

from hf_lmobj.checks import check_count, check_flag, check_length, check_name
from hf_lmobj.held_out import HeldOut, content_hash, text_problem
from hf_lmobj.plain_text import check_document_tokenizer, encode_texts_as_documents
from hf_lmobj.store.tokenizer_fingerprint import tokenizer_fingerprint

#: What reading a stream's files raises when a file is bad (not UTF-8, not valid JSON, other columns).
READ_ERRORS = (UnicodeError, pa.ArrowException, CastError, json.JSONDecodeError)


class TextStream:
    """Raw text streamed from a ``datasets.IterableDataset`` (or a ``Dataset``), tokenized in batches.

    Args:
        dataset: ``load_dataset(..., streaming=True)`` (Hub id or local json / parquet / text /
            arrow files) or an in-memory ``Dataset`` of text (read as a stream; at least one row).
        tokenizer: a fast tokenizer; documents get BOS / EOS by id when ``add_bos`` / ``add_eos``.
        text_column: the column holding the text.
        batch_size: texts tokenized per call (the fast tokenizer's batch), >= 1.
        name: how logs, errors and the fingerprint call this source.
        encode: a per-text transform (texts -> the documents each becomes, e.g.
            :class:`~hf_lmobj.data.transforms.FimPieces`); None encodes each text as one document.
        held_out: the run's held-out rule (:class:`~hf_lmobj.held_out.HeldOut`): a text it holds out is
            never trained; None trains every text.
        exclude: a :class:`~hf_lmobj.contamination.index.ContaminationIndex` of the validation text: a document
            holding any of its n-grams is left out (``"contaminated"``); None keeps them.

    A text that is empty or only whitespace, and a document of fewer than 2 tokens, is skipped (nothing to
    learn from it); :meth:`documents_or_reasons` says why each was left out, so a reader can count them.

    Rows are checked as they are read: a row without ``text_column``, a ``None`` or non-string text,
    and a file that cannot be read (not UTF-8, not valid JSON) raise an error naming this stream,
    the file being read, the row and the fix.

    Example:
        >>> from hf_lmobj.corpus import build_tokenizer
        >>> tok = build_tokenizer(vocab_size=512, max_documents=20)
        >>> stream = TextStream(datasets.Dataset.from_dict({"text": ["a b", None]}), tok, name="web")
        >>> list(stream.iter_documents(stream.dataset))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: stream 'web': row 1 has no text (None in column 'text'); drop or fill the rows without text...
    """

    def __init__(
        self,
        dataset: datasets.IterableDataset | datasets.Dataset,
        tokenizer: PreTrainedTokenizerBase,
        text_column: str = "text",
        add_bos: bool = True,
        add_eos: bool = True,
        batch_size: int = 1000,
        name: str = "stream",
        encode: Callable[[list[str]], list[list[np.ndarray]]] | None = None,
        held_out: HeldOut | None = None,
        exclude: Any = None,
    ) -> None:
        name = check_name(name, "name")
        if exclude is not None and not (
            callable(getattr(exclude, "contaminated", None)) and hasattr(exclude, "describe")
        ):
            raise TypeError(
                f"exclude must be a ContaminationIndex (its contaminated() and describe()), got {exclude!r}"
            )
        if held_out is not None and not isinstance(held_out, HeldOut):
            raise TypeError(f"held_out must be a HeldOut rule or None, got {type(held_out).__name__}")
        if isinstance(dataset, datasets.Dataset):
            if dataset.num_rows == 0:
                raise ValueError(f"stream {name!r}: the dataset has 0 rows; a source needs at least one document")
            dataset = dataset.to_iterable_dataset(num_shards=min(64, max(dataset.num_rows, 1)))
        if not isinstance(dataset, datasets.IterableDataset):
            raise TypeError(f"TextStream takes a datasets IterableDataset or Dataset, got {type(dataset).__name__}")
        add_bos, add_eos = check_flag(add_bos, "add_bos"), check_flag(add_eos, "add_eos")
        check_document_tokenizer(tokenizer, add_bos, add_eos)
        text_column = check_name(text_column, "text_column")
        names = dataset.column_names
        if names is not None and text_column not in names:
            raise ValueError(f"the stream has no column {text_column!r} (has {names}); set text_column=<column>")
        kind = getattr((dataset.features or {}).get(text_column), "dtype", None)
        if kind is not None and kind not in ("string", "large_string"):
            raise TypeError(
                f"stream {name!r}: column {text_column!r} holds {kind}, not text; set text_column= to the text column"
            )
        if encode is not None and not callable(encode):
            raise TypeError(f"encode must be a callable (texts -> documents of each) or None, got {encode!r}")
        self.dataset, self.tokenizer, self.text_column = dataset, tokenizer, text_column
        self.add_bos, self.add_eos, self.name = add_bos, add_eos, name
        self.batch_size = check_length(batch_size, "batch_size", why="texts tokenized per call")
        self.encode, self.held_out, self.exclude = encode, held_out, exclude

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        """The documents of a batch of texts, in order, without the skipped and held-out ones."""
        return [doc for doc in self.documents_or_reasons(texts) if not isinstance(doc, str)]

    def documents_or_reasons(self, texts: list[str]) -> list[np.ndarray | str]:
        """Each text's documents in order; where one is left out, why instead (a
        :data:`~hf_lmobj.held_out.SKIP_REASONS` word or ``"held_out"``), so readers count what they pass."""
        held = self.held_out
        reasons = [
            text_problem(t) or ("held_out" if held is not None and held.holds_out(content_hash(t)) else None)
            for t in texts
        ]
        kept = [text for text, reason in zip(texts, reasons) if reason is None]
        made = iter(self._encode(kept) if kept else [])
        return [d for reason in reasons for d in ([reason] if reason is not None else map(self._kept, next(made)))]

    def _kept(self, doc: np.ndarray) -> np.ndarray | str:
        if doc.size < 2:
            return "one_token"
        return "contaminated" if self.exclude is not None and self.exclude.contaminated(doc) else doc

    def _encode(self, texts: list[str]) -> list[list[np.ndarray]]:
        """The documents each text becomes: one (BOS / EOS by id), or what ``encode`` makes of it."""
        if self.encode is None:
            return [[doc] for doc in encode_texts_as_documents(self.tokenizer, texts, self.add_bos, self.add_eos)]
        made = self.encode(texts)
        if not isinstance(made, Sequence) or len(made) != len(texts):
            count = len(made) if isinstance(made, Sequence) else type(made).__name__
            raise ValueError(
                f"stream {self.name!r}: encode={self.encode!r} made {count} entries for {len(texts)} texts; "
                "it must return one list of documents per text"
            )
        for doc in (doc for docs in made for doc in docs):
            if not isinstance(doc, np.ndarray) or doc.ndim != 1 or not np.issubdtype(doc.dtype, np.integer):
                raise TypeError(
                    f"stream {self.name!r}: encode={self.encode!r} must make 1-D integer numpy arrays of token ids, "
                    f"got {type(doc).__name__}{'' if not isinstance(doc, np.ndarray) else f' {doc.dtype} {doc.shape}'}"
                )
        return [list(docs) for docs in made]

    def unit_slice(self, unit: int, num_units: int, epoch: int = 0) -> datasets.IterableDataset:
        """The examples unit ``unit`` of ``num_units`` reads (disjoint, together all of them).

        Units are ``rank * workers + worker``. The rank's slice comes from ``split_dataset_by_node``;
        inside a ``DataLoader`` worker, ``datasets`` itself gives each worker its own shards.
        """
        from datasets.distributed import split_dataset_by_node

        unit, num_units = check_unit(unit, num_units)
        epoch = check_count(epoch, "epoch")
        info = torch.utils.data.get_worker_info()
        workers = info.num_workers if info is not None else 1
        if num_units % workers:
            raise ValueError(f"num_units ({num_units}) must be processes x workers, a multiple of {workers} workers")
        rank, world = unit // workers, num_units // workers
        self.dataset.set_epoch(epoch)
        return split_dataset_by_node(self.dataset, rank=rank, world_size=world) if world > 1 else self.dataset

    def read_texts(self, rows: Iterator[dict[str, Any]], count: int, examples: Any, first_row: int = 0) -> list[str]:
        """Up to ``count`` texts from ``rows`` (an iterator over ``examples``), fewer only at its end.

        ``first_row`` numbers the first of them in errors; a bad row or an unreadable file is refused
        naming this stream, the file being read (when ``datasets`` says) and the fix.
        """
        texts: list[str] = []
        for _ in range(count):
            try:
                row = next(rows)
            except StopIteration:
                break
            except READ_ERRORS as error:
                raise ValueError(self._read_error(error, examples, first_row + len(texts))) from error
            texts.append(self._text_of(row, first_row + len(texts), examples))
        return texts

    def _text_of(self, row: Any, number: int, examples: Any) -> str:
        column = self.text_column
        where = f"stream {self.name!r}: row {number}{_in_file(examples)}"
        if not isinstance(row, dict) or column not in row:
            columns = sorted(row) if isinstance(row, dict) else type(row).__name__
            raise ValueError(
                f"{where} has no column {column!r} (its columns: {columns}); set text_column= to the column "
                "that holds the text"
            )
        text = row[column]
        if text is None:
            raise ValueError(
                f"{where} has no text (None in column {column!r}); drop or fill the rows without text, e.g. "
                f"dataset.filter(lambda row: row[{column!r}] is not None)"
            )
        if not isinstance(text, str):
            raise TypeError(
                f"{where}: column {column!r} must hold strings, got {type(text).__name__} ({text!r:.60}); fix that "
                "row, or set text_column= to the column that holds the text"
            )
        return text

    def _read_error(self, error: Exception, examples: Any, number: int) -> str:
        where = f"stream {self.name!r}: reading row {number}{_in_file(examples)} failed"
        if isinstance(error, UnicodeError):
            return f"{where}: the file is not UTF-8 text ({error}); re-encode it as UTF-8"
        if isinstance(error, CastError):
            return f"{where}: its columns differ from the first file's ({error}); give every file the same columns"
        return f"{where}: {type(error).__name__}: {error}; fix or remove that file (JSON Lines: one object per line)"

    def iter_documents(self, examples: Iterable[dict[str, Any]]) -> Iterator[np.ndarray]:
        """Token ids of each example of ``examples``, in order (tokenized ``batch_size`` at a time)."""
        rows, read = iter(examples), 0
        while texts := self.read_texts(rows, self.batch_size, examples, read):
            read += len(texts)
            yield from self.encode_batch(texts)

    def fingerprint(self) -> str:
        info = self.dataset.info
        described = {
            "name": self.name,
            "dataset": [info.dataset_name, info.config_name, str(info.splits), self.dataset.n_shards],
            "text_column": self.text_column,
            "tokenizer": [tokenizer_fingerprint(self.tokenizer), len(self.tokenizer), self.add_bos, self.add_eos],
            "encode": None if self.encode is None else repr(self.encode),
            "held_out": None if self.held_out is None else [self.held_out.fraction, sorted(self.held_out.validation)],
            "exclude": None if self.exclude is None else self.exclude.describe(),
        }
        return "stream:" + hashlib.blake2b(json.dumps(described, default=str).encode(), digest_size=8).hexdigest()


def check_unit(unit: Any, num_units: Any, field: str = "unit", count_field: str = "num_units") -> tuple[int, int]:
    """``(unit, num_units)`` as ints with ``0 <= unit < num_units`` (a unit is one process x worker; the fields
    name them in errors: ``"rank"`` of ``"world_size"`` too)."""
    num_units = check_count(num_units, count_field, 1)
    unit = check_count(unit, field)
    if unit >= num_units:
        raise ValueError(f"{field} must be in [0, {count_field}={num_units}), got {unit}")
    return unit, num_units


def _in_file(examples: Any) -> str:
    """`` (in <file>)`` for the file ``datasets`` is reading for ``examples``, or ``""`` when it does not say."""
    files = _files_being_read(getattr(examples, "_ex_iterable", None), set(), 0)
    return f" (in {', '.join(files)})" if files else ""


def _files_being_read(node: Any, seen: set[int], depth: int) -> list[str]:
    """The files a ``datasets`` examples iterable is reading now (its ``FilesIterable`` s' current item)."""
    from datasets.utils.track import TrackedIterableFromGenerator

    if node is None or id(node) in seen or depth > 12 or isinstance(node, (str, bytes)):
        return []
    seen.add(id(node))
    if isinstance(node, TrackedIterableFromGenerator):
        return [str(node.last_item)] if node.last_item is not None else []
    if isinstance(node, (list, tuple)):
        children = node
    elif isinstance(node, dict):
        children = list(node.values())
    else:
        children = [getattr(node, attr, None) for attr in ("ex_iterable", "ex_iterables", "kwargs")]
    return [file for child in children for file in _files_being_read(child, seen, depth + 1)]
