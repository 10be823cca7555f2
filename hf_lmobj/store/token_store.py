"""A token store: a corpus tokenized once into memory-mapped token files plus a document index.

A store is a folder of three files:

* ``tokens.bin``: every document's token ids back to back, little-endian, ``uint16`` when
  ``vocab_size <= 65536`` else ``uint32`` (:func:`~hf_lmobj.store.files.token_dtype`);
* ``offsets.npy``: ``int64``, shape ``(D + 1,)``, ``offsets[0] == 0``; document ``i`` is
  ``tokens[offsets[i]:offsets[i + 1]]``, never empty;
* ``meta.json``: ``format`` (:data:`~hf_lmobj.store.files.TOKEN_STORE_FORMAT`) and
  ``version``, ``dtype``, ``vocab_size``, ``num_documents``, ``num_tokens``, ``tokenizer``, ``add_bos``, ``add_eos``, ``text_column``,
  ``content_hash`` (BLAKE2b of the token bytes, then of the offsets, computed while writing) and
  ``tokenizer_fingerprint`` (:func:`~hf_lmobj.store.tokenizer_fingerprint.tokenizer_fingerprint` of the
  tokenizer that wrote it; ``null`` when the writer was given ids only, absent in older stores); stores
  written from text add ``held_out`` (``{"hash", "fraction", "documents", "bytes"}``: the rule of
  :mod:`hf_lmobj.held_out` and what it held out), ``skipped_documents`` (``{"empty", "whitespace",
  "one_token"}`` counts) and ``tokenizer_origin`` (``{"origin": "trained", ...}`` or ``"given"``).

Stores written from text also hold ``document_hashes.npy`` (``(D,) uint64``: each stored document's
content hash, :func:`~hf_lmobj.held_out.content_hash` of its text) and, when a share was held out,
``held_out.jsonl`` (the held-out documents, one ``{"text": ...}`` per line, in source order).

A store is written into a temporary sibling folder renamed into place at the end, so a folder
at ``path`` is always complete. :meth:`TokenStore.open` trusts nothing: ``meta.json``'s keys and
their types, the size of ``tokens.bin``, and ``offsets.npy`` (``int64``, ``D + 1`` entries from 0 to
``num_tokens``, strictly increasing: no document empty, none overlapping or past the end) are
checked, in O(1) memory (the offsets in chunks; ``tokens.bin`` is never read at open), and
:meth:`TokenStore.check_tokenizer` refuses a run's tokenizer that is not the store's.
Reading is O(1) per document (two offsets, one slice of the memory map) and opening is cheap,
so a :class:`TokenStore` travels to DataLoader workers by pickle and reopens its maps there.
Extra files (a ``tokenizer/`` folder beside the three) are allowed. Written by
:mod:`hf_lmobj.store.writer`; files read and checked by :mod:`hf_lmobj.store.files` and
:mod:`hf_lmobj.store.held_out_files`, the tokenizer by :mod:`hf_lmobj.store.tokenizer`; nanoGPT's
and Megatron's token files (:mod:`hf_lmobj.store.foreign`) open as stores with
:meth:`TokenStore.from_nanogpt_bin` / :meth:`TokenStore.from_megatron`.

Why: tokenizing a corpus once and reading slices of a memory map keeps memory bounded by the
pages touched, whatever the corpus size, and costs nothing per epoch.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from hf_lmobj.checks import check_length
from hf_lmobj.store.files import (
    _REWRITE,
    META_FILE,
    OFFSETS_FILE,
    TOKENS_FILE,
    _as_path,
    _check_offsets,
    _content_hash,
    _hash_tokens,
    _integer,
    _load_offsets,
    _read_meta,
    token_dtype,
)
from hf_lmobj.store.foreign import _megatron_arrays, _nanogpt_arrays
from hf_lmobj.store.held_out_files import _check_hashes, _check_held_out_file, _read_held_out
from hf_lmobj.store.tokenizer import _check_run_tokenizer


class TokenStore:
    """Read side of a token store: ``document(i)`` in O(1) over memory-mapped tokens.

    Open a folder with :meth:`open`, nanoGPT's flat ``train.bin`` with :meth:`from_nanogpt_bin`, or a
    Megatron-LM indexed dataset with :meth:`from_megatron`; the three share one reader. Pickling
    keeps the paths (and an in-memory index, for the two foreign formats), never the tokens.

    Attributes:
        path: the store's folder (the ``.bin`` file for nanoGPT, the prefix for Megatron).
        dtype: the token file's dtype; ``vocab_size``, ``num_documents``, ``num_tokens``: from ``meta``.
        meta: the ``meta.json`` mapping (built in memory for the foreign formats).
        offsets: ``(D + 1,)`` int64, memory-mapped for a store folder.

    Example:
        >>> import tempfile
        >>> from hf_lmobj.store.write import write_token_store
        >>> store = write_token_store(tempfile.mkdtemp() + "/store", [[5, 6, 7], [8], [9, 10]], vocab_size=512)
        >>> len(store), store.num_tokens, store.dtype.name, store.document(2).tolist()
        (3, 6, 'uint16', [9, 10])
        >>> TokenStore.open(store.path).lengths.tolist()
        [3, 1, 2]
    """

    path: Path
    dtype: np.dtype
    vocab_size: int
    meta: dict[str, Any]
    num_documents: int
    num_tokens: int
    offsets: np.ndarray

    def __init__(self) -> None:
        raise TypeError(
            "build a TokenStore with TokenStore.open(path), from_nanogpt_bin(...), from_megatron(...) "
            "or write_token_store(...)"
        )

    @classmethod
    def _from_arrays(
        cls, tokens_path: Path, dtype: np.dtype, offsets: Path | np.ndarray, meta: dict[str, Any], path: Path
    ) -> TokenStore:
        """The shared reader: ``offsets`` is an ``.npy`` path (memory-mapped) or an in-memory array."""
        store = cls.__new__(cls)
        if isinstance(offsets, np.ndarray):
            offsets.flags.writeable = False
        state = {"tokens_path": Path(tokens_path), "dtype": np.dtype(dtype).str, "offsets": offsets}
        store.__setstate__(state | {"meta": meta, "path": Path(path)})
        return store

    def __getstate__(self) -> dict[str, Any]:
        return dict(self._state)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self._state = state
        self.path, self.meta = state["path"], state["meta"]
        self.dtype = np.dtype(state["dtype"])
        self.vocab_size = int(self.meta["vocab_size"])
        self.num_documents, self.num_tokens = int(self.meta["num_documents"]), int(self.meta["num_tokens"])
        offsets = state["offsets"]
        # plain ndarray views of the maps: slicing a np.memmap subclass costs more than the copy it makes
        self.offsets = np.asarray(np.load(offsets, mmap_mode="r")) if isinstance(offsets, Path) else offsets
        self._tokens = (
            np.asarray(np.memmap(state["tokens_path"], dtype=self.dtype, mode="r", shape=(self.num_tokens,)))
            if self.num_tokens
            else np.zeros(0, self.dtype)
        )

    @classmethod
    def open(cls, path: str | os.PathLike) -> TokenStore:
        """Open the store folder ``path`` written by :func:`write_token_store` (memory maps, no read of the tokens).

        Every file is checked before it is trusted: ``meta.json`` (format, version, keys and their
        types), the size of ``tokens.bin`` and ``offsets.npy`` (dtype, shape, ``0`` first,
        ``num_tokens`` last, strictly increasing), in O(1) memory.

        Raises:
            TypeError: ``path`` is not a path.
            ValueError: no folder, no ``meta.json`` (an incomplete store), a ``meta.json`` cut short,
                of another format or version, missing a key or holding a wrong type, a missing or
                mis-sized ``tokens.bin``, an ``offsets.npy`` that disagrees with them, a
                ``document_hashes.npy`` of another length or dtype, or a ``held_out.jsonl`` missing while
                ``meta.json`` counts held-out documents; the message names the file and the fix.
        """
        folder = _as_path(path, "path")
        if not folder.is_dir():
            raise ValueError(f"{folder}: no token store here (not a folder); write one with write_token_store()")
        meta_path = folder / META_FILE
        if not meta_path.is_file():
            raise ValueError(
                f"{meta_path} is missing: {folder} is not a complete token store (meta.json is written last); "
                f"{_REWRITE}"
            )
        meta = _read_meta(meta_path)
        dtype = token_dtype(meta["vocab_size"])
        tokens_path = folder / TOKENS_FILE
        expected = meta["num_tokens"] * dtype.itemsize
        actual = tokens_path.stat().st_size if tokens_path.is_file() else None
        if actual != expected:
            raise ValueError(
                f"{tokens_path}: {'missing' if actual is None else f'{actual} bytes'}, but meta.json says "
                f"{meta['num_tokens']} {dtype.name} tokens ({expected} bytes); {_REWRITE}"
            )
        offsets_path = folder / OFFSETS_FILE
        _check_offsets(_load_offsets(offsets_path), offsets_path, meta["num_documents"], meta["num_tokens"])
        store = cls._from_arrays(tokens_path, dtype, offsets_path, meta, folder)
        store._state["hashes"] = _check_hashes(folder, meta["num_documents"])
        store._state["held_out"] = _check_held_out_file(folder, meta)
        return store

    @classmethod
    def from_nanogpt_bin(
        cls, path: str | os.PathLike, *, dtype: str | np.dtype = "uint16", eos_token_id: int, vocab_size: int
    ) -> TokenStore:
        """Read nanoGPT's flat ``train.bin`` (token ids back to back, no index) as a store.

        Documents are the runs that end with ``eos_token_id`` (the EOS belongs to the document it
        ends; the last run may lack one). The index is built in memory by one chunked scan of the
        memory map (``np.flatnonzero``), which also checks every id against ``vocab_size``; tokens
        are never copied.

        Raises:
            TypeError: ``vocab_size`` or ``eos_token_id`` not an int, ``path`` not a path.
            ValueError: no such file, a size that is not whole ``dtype`` tokens, an empty file, a
                dtype that is not an integer one, an ``eos_token_id`` or a token id outside
                ``[0, vocab_size)``.
        """
        return cls._from_arrays(*_nanogpt_arrays(path, dtype, eos_token_id, vocab_size))

    @classmethod
    def from_megatron(cls, prefix: str | os.PathLike, *, vocab_size: int) -> TokenStore:
        """Read a Megatron-LM indexed dataset (``prefix.bin`` + ``prefix.idx``); each *sequence* is a document.

        The ``.idx`` holds the header ``MMIDIDX\\x00\\x00``, version 1 (little-endian uint64), a dtype
        code (uint8), the sequence count and the document count (uint64 each), then the int32
        sequence lengths, the int64 byte pointers into ``.bin`` and the int64 document indices
        (optionally followed by one int8 mode per sequence, Megatron-Core's multimodal datasets).
        Sequences must be non-empty and lie back to back in ``.bin``. Every count, length and
        pointer is checked against the file sizes; ids are not checked against ``vocab_size``
        (that would read every token).

        Raises:
            ValueError: a missing file, a header cut short, another header or version, an unknown
                or float dtype code, an index whose size disagrees with its counts, a length that is
                not positive, pointers that do not follow the lengths, a ``.bin`` of another size,
                or document indices that do not run from 0 up to the sequence count.
        """
        return cls._from_arrays(*_megatron_arrays(prefix, vocab_size))

    @functools.cached_property
    def document_hashes(self) -> np.ndarray | None:
        """``(D,) uint64``: each document's content hash (memory-mapped); None for a store without them.

        Stores written from text have them (:func:`~hf_lmobj.held_out.content_hash` of each stored
        document's text); stores written from ids alone, older stores and nanoGPT / Megatron files do not.
        """
        path = self._state.get("hashes")
        return None if path is None else np.asarray(np.load(path, mmap_mode="r"))

    def held_out_texts(self, limit: int | None = None) -> list[str] | None:
        """The held-out documents' texts in source order (the first ``limit``); None when the store has none.

        Raises:
            TypeError: ``limit`` not an int (or None).
            ValueError: ``limit`` below 0; a line of ``held_out.jsonl`` that is not UTF-8, not JSON or not an
                object with a string ``text`` (the file and line named); fewer or more lines than ``meta.json``
                counts.
        """
        limit = check_length(limit, "limit", 0, "None reads every held-out document", optional=True)
        path = self._state.get("held_out")
        if path is None:
            return None
        return _read_held_out(path, limit, (self.held_out_info or {}).get("documents"))

    @property
    def held_out_info(self) -> dict[str, Any] | None:
        """``meta.json``'s ``held_out`` (``hash``, ``fraction``, ``documents``, ``bytes``), or None."""
        return self.meta.get("held_out")

    @property
    def skipped_documents(self) -> dict[str, int] | None:
        """``meta.json``'s ``skipped_documents`` (``empty``, ``whitespace``, ``one_token`` counts), or None."""
        return self.meta.get("skipped_documents")

    @property
    def tokenizer_origin(self) -> dict[str, Any] | None:
        """``meta.json``'s ``tokenizer_origin`` (``{"origin": "trained", ...}`` or ``{"origin": "given", ...}``)."""
        return self.meta.get("tokenizer_origin")

    @functools.cached_property
    def lengths(self) -> np.ndarray:
        """``(D,)`` int64 token counts of the documents (computed once, in memory)."""
        return np.diff(self.offsets).astype(np.int64)

    def __len__(self) -> int:
        return self.num_documents

    def document(self, index: int) -> np.ndarray:
        """An int64 copy of document ``index``'s ids (reads only its slice of the memory map).

        Raises:
            TypeError: ``index`` is not an int (a bool or a float is refused, not read as 1 or cut).
            ValueError: ``index`` outside ``[0, num_documents)``.
        """
        i = self._document_index(index, "document")
        return self._tokens[self.offsets.item(i) : self.offsets.item(i + 1)].astype(np.int64)

    def document_slice(self, index: int, start: int, stop: int) -> np.ndarray:
        """An int64 copy of tokens ``[start, stop)`` of document ``index`` (a chunk of a long document).

        ``0 <= start <= stop <= len(document)``: a range past the document's end is refused, never
        read from the next document or cut short.

        Example:
            >>> import tempfile
            >>> from hf_lmobj.store.write import write_token_store
            >>> store = write_token_store(tempfile.mkdtemp() + "/s", [[5, 6, 7], [8]], vocab_size=512)
            >>> store.document_slice(0, 1, 3).tolist()
            [6, 7]
            >>> store.document_slice(0, 1, 4)  # doctest: +ELLIPSIS
            Traceback (most recent call last):
            ...
            ValueError: document_slice(0, 1, 4): [start, stop) must lie within [0, 3] (document 0 has 3 tokens) ...

        Raises:
            TypeError: ``index``, ``start`` or ``stop`` is not an int.
            ValueError: ``index`` outside ``[0, num_documents)`` or the range outside the document.
        """
        # the hot path of planned rows: plain ints skip the checks' calls, offsets are read with .item()
        i = (
            index
            if type(index) is int and 0 <= index < self.num_documents
            else self._document_index(index, "document_slice")
        )
        if type(start) is not int:
            start = _integer(start, "document_slice start")
        if type(stop) is not int:
            stop = _integer(stop, "document_slice stop")
        first, end = self.offsets.item(i), self.offsets.item(i + 1)
        if not 0 <= start <= stop <= end - first:
            raise ValueError(
                f"document_slice({i}, {start}, {stop}): [start, stop) must lie within [0, {end - first}] "
                f"(document {i} has {end - first} tokens) of {self.path}"
            )
        return self._tokens[first + start : first + stop].astype(np.int64)

    def _document_index(self, index: Any, caller: str) -> int:
        i = _integer(index, f"{caller} index")
        if not 0 <= i < self.num_documents:
            raise ValueError(
                f"{caller}: document index {i} is out of range [0, {self.num_documents}) of {self.path} "
                f"(the store holds {self.num_documents} documents)"
            )
        return i

    def tokens(self, start: int, stop: int) -> np.ndarray:
        """An int64 copy of the flat token range ``[start, stop)`` (documents back to back).

        Raises:
            TypeError: ``start`` or ``stop`` is not an int.
            ValueError: unless ``0 <= start <= stop <= num_tokens``.
        """
        start, stop = _integer(start, "tokens start"), _integer(stop, "tokens stop")
        if not 0 <= start <= stop <= self.num_tokens:
            raise ValueError(f"token range [{start}, {stop}) is not within [0, {self.num_tokens}] of {self.path}")
        return self._tokens[start:stop].astype(np.int64)

    def check_tokenizer(self, tokenizer: Any, where: str = "") -> None:
        """Refuse a ``tokenizer`` that is not the one the store was written with.

        The vocabulary size must equal ``meta.json``'s ``vocab_size`` (``len(tokenizer)``); when the
        store records a ``tokenizer_fingerprint`` (stores written from a tokenizer), the tokenizer's
        :func:`~hf_lmobj.store.tokenizer_fingerprint.tokenizer_fingerprint` must equal it too. An
        older store, or one written from ids alone (and nanoGPT / Megatron files), is checked by
        vocabulary size only. ``where`` (e.g. ``"source 'web'"``) starts the message.

        Example:
            >>> import tempfile
            >>> from hf_lmobj.corpus import build_tokenizer
            >>> from hf_lmobj.store.write import write_token_store
            >>> store = write_token_store(tempfile.mkdtemp() + "/s", [[5, 6]], vocab_size=105)
            >>> store.check_tokenizer(build_tokenizer(512, max_documents=20), "source 's'")  # doctest: +ELLIPSIS
            Traceback (most recent call last):
            ...
            ValueError: source 's': the token store ... holds ids of a 105-id vocabulary (meta.json vocab_size), ...

        Raises:
            TypeError: ``tokenizer`` is not a tokenizer.
            ValueError: another vocabulary size or another fingerprint.
        """
        _check_run_tokenizer(self, tokenizer, where)

    def fingerprint(self) -> str:
        """A stable id of the content: format, dtype, vocab_size, document and token counts, content_hash.

        Equal for equal token bytes and offsets, whatever the path or the reader; for the foreign
        formats the content hash is computed here, on the first call (one read of the tokens).
        """
        if self.meta.get("content_hash") is None:
            self.meta["content_hash"] = _content_hash(_hash_tokens(self._tokens), np.asarray(self.offsets))
        described = {key: self.meta[key] for key in ("format", "vocab_size", "num_documents", "num_tokens")}
        described |= {"dtype": self.dtype.name, "content_hash": self.meta["content_hash"]}
        return (
            "token_store:" + hashlib.blake2b(json.dumps(described, sort_keys=True).encode(), digest_size=16).hexdigest()
        )

    def __repr__(self) -> str:
        return (
            f"TokenStore({str(self.path)!r}, num_documents={self.num_documents}, num_tokens={self.num_tokens}, "
            f"dtype={self.dtype.name}, vocab_size={self.vocab_size})"
        )
