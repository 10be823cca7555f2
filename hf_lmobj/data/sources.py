"""Document sources: where a pipeline's documents come from, as token ids.

Two kinds, by how they are read:

* **random access** (:class:`DatasetSource` over a tokenized in-memory ``datasets.Dataset``, and
  :class:`~hf_lmobj.data.token_store.TokenStore`): ``lengths`` known up front and ``document(i)``
  in O(1), so a whole epoch can be planned from the lengths alone (exactly once, any world size).
* **streams** (:class:`TextStream` over a streamed ``datasets.IterableDataset`` of raw text, Hub or
  local files): tokenized on the fly in batches; each (rank, worker) *unit* reads a disjoint slice
  (``datasets.distributed.split_dataset_by_node``: by shards when they divide evenly, else by
  examples).

Example:
    >>> import datasets
    >>> source = DatasetSource(datasets.Dataset.from_dict({"input_ids": [[1, 2], [3], [4, 5, 6]]}))
    >>> source.lengths.tolist(), source.document(2).tolist()
    ([2, 1, 3], [4, 5, 6])
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, runtime_checkable

import datasets
import numpy as np
import pyarrow.compute as pc
import torch
from transformers import PreTrainedTokenizerBase

from hf_lmobj.data.tokenizer_fingerprint import tokenizer_fingerprint
from hf_lmobj.plain_text import encode_plain

__all__ = ["RandomAccessSource", "DatasetSource", "TextStream", "encode_texts_as_documents", "is_random_access"]


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
    """A tokenized in-memory ``datasets.Dataset`` (one document per row in ``column``) as a source."""

    def __init__(self, dataset: datasets.Dataset, column: str = "input_ids") -> None:
        if not isinstance(dataset, datasets.Dataset):
            raise TypeError(f"DatasetSource takes a datasets.Dataset, got {type(dataset).__name__}")
        if column not in dataset.column_names:
            raise ValueError(f"dataset has no {column!r} column (has {dataset.column_names}); tokenize it first")
        self.dataset, self.column = dataset, column
        self._column = dataset.data.column(column)
        self._lengths = pc.list_value_length(self._column).to_numpy(zero_copy_only=False).astype(np.int64)

    @property
    def lengths(self) -> np.ndarray:
        return self._lengths

    def __len__(self) -> int:
        return int(self._lengths.size)

    def document(self, index: int) -> np.ndarray:
        return np.asarray(self._column[int(index)].values.to_numpy(zero_copy_only=False), dtype=np.int64)

    def document_slice(self, index: int, start: int, stop: int) -> np.ndarray:
        values = self._column[int(index)].values.slice(start, stop - start)
        return np.asarray(values.to_numpy(zero_copy_only=False), dtype=np.int64)

    def fingerprint(self) -> str:
        return f"dataset:{self.dataset._fingerprint}:{self.column}"

    def __getstate__(self) -> dict[str, Any]:  # arrow columns are rebuilt in each worker
        return {"dataset": self.dataset, "column": self.column}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["dataset"], state["column"])


def encode_texts_as_documents(
    tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], add_bos: bool, add_eos: bool
) -> list[np.ndarray]:
    """Token ids of each text with BOS / EOS by id; special-token strings in the text stay text.

    The text is encoded by :func:`hf_lmobj.plain_text.encode_plain` (a fast tokenizer's Rust
    ``encode_batch_fast``, no offsets, no Python-side ``BatchEncoding``).
    """
    rows = encode_plain(tokenizer, texts)
    head = [tokenizer.bos_token_id] if add_bos else []
    tail = [tokenizer.eos_token_id] if add_eos else []
    return [np.array(head + row + tail, dtype=np.int64) for row in rows]


class TextStream:
    """Raw text streamed from a ``datasets.IterableDataset`` (or a ``Dataset``), tokenized in batches.

    Args:
        dataset: ``load_dataset(..., streaming=True)`` (Hub id or local json / parquet / text /
            arrow files) or an in-memory ``Dataset`` of text (read as a stream).
        tokenizer: a fast tokenizer; documents get BOS / EOS by id when ``add_bos`` / ``add_eos``.
        text_column: the column holding the text.
        batch_size: texts tokenized per call (the fast tokenizer's batch).
        name: how logs and the fingerprint call this source.
        encode: a per-text transform (texts -> the documents each becomes, e.g.
            :class:`~hf_lmobj.data.transforms.FimPieces`); None encodes each text as one document.
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
    ) -> None:
        if isinstance(dataset, datasets.Dataset):
            dataset = dataset.to_iterable_dataset(num_shards=min(64, max(dataset.num_rows, 1)))
        if not isinstance(dataset, datasets.IterableDataset):
            raise TypeError(f"TextStream takes a datasets IterableDataset or Dataset, got {type(dataset).__name__}")
        for flag, role in ((add_bos, "bos"), (add_eos, "eos")):
            if flag and getattr(tokenizer, f"{role}_token_id") is None:
                raise ValueError(f"add_{role}=True but the tokenizer has no {role}_token; pass add_{role}=False")
        names = dataset.column_names
        if names is not None and text_column not in names:
            raise ValueError(f"the stream has no column {text_column!r} (has {names}); set text_column=<column>")
        self.dataset, self.tokenizer, self.text_column = dataset, tokenizer, text_column
        self.add_bos, self.add_eos, self.batch_size, self.name = add_bos, add_eos, batch_size, name
        self.encode = encode

    def encode_batch(self, texts: list[str]) -> list[np.ndarray]:
        """The documents of a batch of texts, in order: one per text, or what ``encode`` makes of each."""
        if self.encode is None:
            return encode_texts_as_documents(self.tokenizer, texts, self.add_bos, self.add_eos)
        return [doc for docs in self.encode(texts) for doc in docs]

    def unit_slice(self, unit: int, num_units: int, epoch: int = 0) -> datasets.IterableDataset:
        """The examples unit ``unit`` of ``num_units`` reads (disjoint, together all of them).

        Units are ``rank * workers + worker``. The rank's slice comes from ``split_dataset_by_node``;
        inside a ``DataLoader`` worker, ``datasets`` itself gives each worker its own shards.
        """
        from datasets.distributed import split_dataset_by_node

        info = torch.utils.data.get_worker_info()
        workers = info.num_workers if info is not None else 1
        rank, world = unit // workers, num_units // workers
        stream = self.dataset
        stream.set_epoch(epoch)
        return split_dataset_by_node(stream, rank=rank, world_size=world) if world > 1 else stream

    def iter_documents(self, examples: datasets.IterableDataset) -> Iterator[np.ndarray]:
        """Token ids of each example of ``examples``, in order (tokenized ``batch_size`` at a time)."""
        texts: list[str] = []
        for example in examples:
            text = example.get(self.text_column)
            if not isinstance(text, str):
                raise TypeError(
                    f"{self.name}: column {self.text_column!r} must hold strings, got {type(text).__name__}"
                )
            texts.append(text)
            if len(texts) == self.batch_size:
                yield from self.encode_batch(texts)
                texts = []
        if texts:
            yield from self.encode_batch(texts)

    def fingerprint(self) -> str:
        info = self.dataset.info
        described = {
            "name": self.name,
            "dataset": [info.dataset_name, info.config_name, str(info.splits), self.dataset.n_shards],
            "text_column": self.text_column,
            "tokenizer": [tokenizer_fingerprint(self.tokenizer), len(self.tokenizer), self.add_bos, self.add_eos],
            "encode": None if self.encode is None else repr(self.encode),
        }
        return "stream:" + hashlib.blake2b(json.dumps(described, default=str).encode(), digest_size=8).hexdigest()
