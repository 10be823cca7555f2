"""A token store: a corpus tokenized once into memory-mapped token files plus a document index.

A store is a folder of three files:

* ``tokens.bin``: every document's token ids back to back, little-endian, ``uint16`` when
  ``vocab_size <= 65536`` else ``uint32`` (:func:`token_dtype`);
* ``offsets.npy``: ``int64``, shape ``(D + 1,)``, ``offsets[0] == 0``; document ``i`` is
  ``tokens[offsets[i]:offsets[i + 1]]``, never empty;
* ``meta.json``: ``format`` (:data:`TOKEN_STORE_FORMAT`) and ``version``, ``dtype``, ``vocab_size``,
  ``num_documents``, ``num_tokens``, ``tokenizer``, ``add_bos``, ``add_eos``, ``text_column``,
  ``content_hash`` (BLAKE2b of the token bytes, then of the offsets, computed while writing) and
  ``tokenizer_fingerprint`` (:func:`~hf_lmobj.data.tokenizer_fingerprint.tokenizer_fingerprint` of the
  tokenizer that wrote it; ``null`` when the writer was given ids only, absent in older stores).

A store is written into a temporary sibling folder renamed into place at the end, so a folder
at ``path`` is always complete. :meth:`TokenStore.open` trusts nothing: ``meta.json``'s keys and
their types, the size of ``tokens.bin``, and ``offsets.npy`` (``int64``, ``D + 1`` entries from 0 to
``num_tokens``, strictly increasing: no document empty, none overlapping or past the end) are
checked, in O(1) memory (the offsets in chunks; ``tokens.bin`` is never read at open), and
:meth:`TokenStore.check_tokenizer` refuses a run's tokenizer that is not the store's.
Reading is O(1) per document (two offsets, one slice of the memory map) and opening is cheap,
so a :class:`TokenStore` travels to DataLoader workers by pickle and reopens its maps there.
Extra files (a ``tokenizer/`` folder beside the three) are allowed. Written by
:mod:`hf_lmobj.data.token_store_writer`; nanoGPT's and Megatron's token files open as stores with
:meth:`TokenStore.from_nanogpt_bin` / :meth:`TokenStore.from_megatron`.

Example:
    >>> import tempfile
    >>> from hf_lmobj.data.token_store_writer import write_token_store
    >>> store = write_token_store(tempfile.mkdtemp() + "/store", [[5, 6, 7], [8], [9, 10]], vocab_size=512)
    >>> len(store), store.num_tokens, store.dtype.name, store.document(2).tolist()
    (3, 6, 'uint16', [9, 10])
    >>> TokenStore.open(store.path).lengths.tolist()
    [3, 1, 2]

Why: tokenizing a corpus once and reading slices of a memory map keeps memory bounded by the
pages touched, whatever the corpus size, and costs nothing per epoch.
"""

from __future__ import annotations

import functools
import hashlib
import json
import numbers
import os
import re
import struct
from pathlib import Path
from typing import Any

import numpy as np

from hf_lmobj.checks import check_length
from hf_lmobj.files import read_json

TOKEN_STORE_FORMAT = "hf_lmobj.token_store"
TOKEN_STORE_VERSION = 1
TOKENS_FILE, OFFSETS_FILE, META_FILE = "tokens.bin", "offsets.npy", "meta.json"
_SCAN_TOKENS = 1 << 24  # tokens read per step when a whole token file is scanned (hash, EOS search)
_OFFSET_DTYPE = np.dtype("<i8")
_MEGATRON_HEADER = b"MMIDIDX\x00\x00"
_MEGATRON_DTYPES = {1: "u1", 2: "i1", 3: "<i2", 4: "<i4", 5: "<i8", 8: "<u2"}  # 6, 7: float64, float32
_MEGATRON_HEADER_BYTES = 34  # magic (9), version (8), dtype code (1), sequence and document counts (8 + 8)
_CHECK_OFFSETS = 1 << 20  # offsets checked per step at open (8 MiB): the check's memory bound
_VOCAB_LIMIT = 2**32
_REWRITE = "rewrite it with write_token_store(..., overwrite=True) or recipes/tokenize_corpus.py --overwrite true"
_FINGERPRINT = re.compile(r"[0-9a-f]{16}")


def _check_vocab_size(value: Any, field: str = "vocab_size") -> int:
    """An int in ``[1, 2**32]`` (numpy ints accepted; bools, floats and strings refused).

    Example:
        >>> _check_vocab_size(512)
        512
        >>> _check_vocab_size("512")
        Traceback (most recent call last):
        ...
        TypeError: vocab_size must be an int >= 1 (the number of token ids), got '512'
    """
    vocab_size = check_length(value, field, 1, "the number of token ids")
    if vocab_size > _VOCAB_LIMIT:
        raise ValueError(f"{field} must be at most 2**32 (ids are stored as uint32), got {vocab_size}")
    return vocab_size


def _integer(value: Any, field: str) -> int:
    """An int index or bound (numpy ints too); bools and floats are a ``TypeError`` naming ``field``."""
    if type(value) is int:
        return value
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{field} must be an int, got {value!r}")
    return int(value)


def _as_path(value: Any, field: str) -> Path:
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{field} must be a path (str or os.PathLike), got {type(value).__name__}")
    return Path(value)


def token_dtype(vocab_size: int) -> np.dtype:
    """The on-disk dtype of token ids below ``vocab_size``: little-endian uint16 up to 65,536 ids, else uint32.

    Example:
        >>> token_dtype(65_536).name, token_dtype(65_537).name
        ('uint16', 'uint32')
    """
    vocab_size = _check_vocab_size(vocab_size)
    return np.dtype("<u2" if vocab_size <= 2**16 else "<u4")


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
                mis-sized ``tokens.bin``, or an ``offsets.npy`` that disagrees with them; the message
                names the file and the fix.
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
        return cls._from_arrays(tokens_path, dtype, offsets_path, meta, folder)

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
        path = _as_path(path, "path")
        vocab_size = _check_vocab_size(vocab_size)
        eos_token_id = _integer(eos_token_id, "eos_token_id")
        if not 0 <= eos_token_id < vocab_size:
            raise ValueError(f"eos_token_id {eos_token_id} is outside [0, vocab_size={vocab_size})")
        dtype = _integer_dtype(dtype)
        if not path.is_file():
            raise ValueError(f"{path}: no such file (nanoGPT's train.bin / val.bin)")
        size = path.stat().st_size
        if size == 0 or size % dtype.itemsize:
            raise ValueError(
                f"{path}: {size} bytes is not a positive whole number of {dtype.name} tokens "
                f"({dtype.itemsize} bytes each); pass the dtype it was written with (dtype=)"
            )
        tokens = np.memmap(path, dtype=dtype, mode="r")
        ends = []
        for start in range(0, tokens.size, _SCAN_TOKENS):
            block = tokens[start : start + _SCAN_TOKENS]
            if int(block.min()) < 0 or int(block.max()) >= vocab_size:
                bad = start + int(np.flatnonzero((block < 0) | (block >= vocab_size))[0])
                raise ValueError(
                    f"{path}: token {bad} is id {tokens[bad]}, outside [0, vocab_size={vocab_size}); "
                    "pass the vocab_size and dtype it was written with"
                )
            ends.append(np.flatnonzero(block == eos_token_id) + (start + 1))
        ends = np.concatenate(ends)
        if ends.size == 0 or ends[-1] != tokens.size:
            ends = np.append(ends, tokens.size)
        offsets = np.concatenate([[0], ends]).astype(_OFFSET_DTYPE)
        meta = _meta(dtype, vocab_size, offsets, tokenizer="", add_bos=False, add_eos=True, text_column=None)
        meta |= {"source": "nanogpt", "eos_token_id": int(eos_token_id)}
        return cls._from_arrays(path, dtype, offsets, meta, path)

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
        prefix = _as_path(prefix, "prefix")
        vocab_size = _check_vocab_size(vocab_size)
        if prefix.suffix in (".bin", ".idx"):
            prefix = prefix.with_suffix("")
        idx_path, bin_path = prefix.with_name(prefix.name + ".idx"), prefix.with_name(prefix.name + ".bin")
        for file in (idx_path, bin_path):
            if not file.is_file():
                raise ValueError(f"{file}: no such file (a Megatron dataset is prefix.bin + prefix.idx)")
        dtype, num_sequences, num_indices = _megatron_header(idx_path)
        raw = np.memmap(idx_path, dtype=np.uint8, mode="r")
        lengths = np.frombuffer(raw, dtype="<i4", count=num_sequences, offset=_MEGATRON_HEADER_BYTES)
        if int(lengths.min()) <= 0:
            bad = int(np.flatnonzero(lengths <= 0)[0])
            raise ValueError(
                f"{idx_path}: sequence {bad} has length {int(lengths[bad])}; lengths must be > 0 (a negative one is "
                "corrupt, an empty one a document without tokens, which a token store refuses); rebuild the index"
            )
        offsets = np.zeros(num_sequences + 1, dtype=_OFFSET_DTYPE)
        np.cumsum(lengths, dtype=np.int64, out=offsets[1:])
        pointers = np.frombuffer(
            raw, dtype="<i8", count=num_sequences, offset=_MEGATRON_HEADER_BYTES + 4 * num_sequences
        )
        mismatch = np.flatnonzero(pointers != offsets[:-1] * dtype.itemsize)
        if mismatch.size:
            bad = int(mismatch[0])
            raise ValueError(
                f"{idx_path}: sequence {bad} starts at byte {int(pointers[bad])} of {bin_path.name}, but the lengths "
                f"before it put it at byte {int(offsets[bad]) * dtype.itemsize}; sequences must be stored back to "
                "back, in order"
            )
        if bin_path.stat().st_size != offsets[-1] * dtype.itemsize:
            raise ValueError(
                f"{bin_path}: {bin_path.stat().st_size} bytes, but {idx_path.name} indexes "
                f"{offsets[-1]} {dtype.name} tokens ({offsets[-1] * dtype.itemsize} bytes)"
            )
        documents = np.frombuffer(
            raw, dtype="<i8", count=num_indices, offset=_MEGATRON_HEADER_BYTES + 12 * num_sequences
        )
        if documents[0] != 0 or documents[-1] > num_sequences or bool(np.any(documents[1:] < documents[:-1])):
            raise ValueError(
                f"{idx_path}: document indices must run from 0 up to at most the {num_sequences} sequences, never "
                f"decreasing; got {documents[:3].tolist()} ... {documents[-3:].tolist()}"
            )
        meta = _meta(dtype, vocab_size, offsets, tokenizer="", add_bos=False, add_eos=False, text_column=None)
        meta |= {"source": "megatron", "megatron_documents": num_indices - 1}
        return cls._from_arrays(bin_path, dtype, offsets, meta, prefix)

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
            >>> from hf_lmobj.data.token_store_writer import write_token_store
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
        :func:`~hf_lmobj.data.tokenizer_fingerprint.tokenizer_fingerprint` must equal it too. An
        older store, or one written from ids alone (and nanoGPT / Megatron files), is checked by
        vocabulary size only. ``where`` (e.g. ``"source 'web'"``) starts the message.

        Example:
            >>> import tempfile
            >>> from hf_lmobj.corpus import build_tokenizer
            >>> from hf_lmobj.data.token_store_writer import write_token_store
            >>> store = write_token_store(tempfile.mkdtemp() + "/s", [[5, 6]], vocab_size=105)
            >>> store.check_tokenizer(build_tokenizer(512, max_documents=20), "source 's'")  # doctest: +ELLIPSIS
            Traceback (most recent call last):
            ...
            ValueError: source 's': the token store ... holds ids of a 105-id vocabulary (meta.json vocab_size), ...

        Raises:
            TypeError: ``tokenizer`` is not a tokenizer.
            ValueError: another vocabulary size or another fingerprint.
        """
        from hf_lmobj.data.tokenizer_fingerprint import tokenizer_fingerprint

        prefix = f"{where}: " if where else ""
        if not hasattr(tokenizer, "__len__") or isinstance(tokenizer, (str, bytes, os.PathLike)):
            raise TypeError(f"{prefix}tokenizer must be a transformers tokenizer, got {type(tokenizer).__name__}")
        fix = (
            "tokenize the corpus again with this tokenizer (recipes/tokenize_corpus.py --tokenizer_name ...) or "
            "train with the store's own tokenizer (--tokenizer_name <store>/tokenizer)"
        )
        size = len(tokenizer)
        if size != self.vocab_size:
            raise ValueError(
                f"{prefix}the token store {self.path} holds ids of a {self.vocab_size}-id vocabulary (meta.json "
                f"vocab_size), but the run's tokenizer has {size} ids; {fix}"
            )
        recorded = self.meta.get("tokenizer_fingerprint")
        if recorded is not None:
            actual = tokenizer_fingerprint(tokenizer)
            if actual != recorded:
                raise ValueError(
                    f"{prefix}the token store {self.path} was written with another tokenizer: meta.json "
                    f"tokenizer_fingerprint {recorded} ({self.meta.get('tokenizer') or 'unnamed'}), the run's "
                    f"tokenizer {actual} ({getattr(tokenizer, 'name_or_path', '') or type(tokenizer).__name__}); "
                    f"same vocabulary size, other ids for the same text; {fix}"
                )

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


def _integer_dtype(value: Any) -> np.dtype:
    """A little-endian integer dtype from a name or a dtype; anything else is a ``ValueError`` naming it."""
    try:
        dtype = np.dtype(value)
    except TypeError:
        raise ValueError(f"dtype {value!r} is not a numpy dtype; pass e.g. 'uint16' or 'uint32'") from None
    if dtype.kind not in "iu":
        raise ValueError(f"dtype must be an integer dtype (token ids), got {dtype}")
    if dtype.byteorder == ">":
        raise ValueError(f"dtype {dtype.str} is big-endian; token files are little-endian (pass e.g. 'uint16')")
    return dtype.newbyteorder("<")


def _megatron_header(idx_path: Path) -> tuple[np.dtype, int, int]:
    """The dtype, sequence count and document-index count of a Megatron ``.idx``, checked against its size."""
    with open(idx_path, "rb") as file:
        header = file.read(_MEGATRON_HEADER_BYTES)
    if not header or header[: len(_MEGATRON_HEADER)] != _MEGATRON_HEADER[: len(header)]:
        raise ValueError(f"{idx_path}: not a Megatron index (no {_MEGATRON_HEADER!r} header)")
    if len(header) < _MEGATRON_HEADER_BYTES:
        raise ValueError(
            f"{idx_path}: cut short ({len(header)} bytes; the header alone is {_MEGATRON_HEADER_BYTES}); "
            "rebuild the index"
        )
    (version,) = struct.unpack_from("<Q", header, 9)
    code = header[17]
    num_sequences, num_indices = struct.unpack_from("<QQ", header, 18)
    if version != 1:
        raise ValueError(f"{idx_path}: index version {version}, only version 1 is read")
    if code not in _MEGATRON_DTYPES:
        raise ValueError(
            f"{idx_path}: dtype code {code} is not an integer token dtype (known codes {sorted(_MEGATRON_DTYPES)})"
        )
    if num_sequences == 0:
        raise ValueError(f"{idx_path}: holds no sequence")
    if num_indices == 0:
        raise ValueError(f"{idx_path}: holds no document index (Megatron's list starts with 0); rebuild the index")
    size = idx_path.stat().st_size
    expected = _MEGATRON_HEADER_BYTES + 12 * num_sequences + 8 * num_indices
    if size not in (expected, expected + num_sequences):
        raise ValueError(
            f"{idx_path}: {size} bytes, but its header counts {num_sequences} sequences and {num_indices} document "
            f"indices ({expected} bytes, or {expected + num_sequences} with sequence modes); cut short or corrupt"
        )
    return np.dtype(_MEGATRON_DTYPES[code]), num_sequences, num_indices


def _read_meta(meta_path: Path) -> dict[str, Any]:
    """``meta.json`` read and checked: format and version first, then every key the reader uses, by type."""
    meta = read_json(meta_path, "the token store's metadata", fix=_REWRITE)
    kind, version = meta.get("format"), meta.get("version")
    if kind != TOKEN_STORE_FORMAT or type(version) is not int or version != TOKEN_STORE_VERSION:
        raise ValueError(
            f"{meta_path}: format {kind!r} version {version!r}, expected {TOKEN_STORE_FORMAT!r} version "
            f"{TOKEN_STORE_VERSION}; {_REWRITE}"
        )
    missing = [key for key in ("dtype", "vocab_size", "num_documents", "num_tokens") if key not in meta]
    if missing:
        raise ValueError(f"{meta_path} has no {', '.join(map(repr, missing))}; {_REWRITE}")
    for key, low, high in (("vocab_size", 1, _VOCAB_LIMIT), ("num_documents", 1, None), ("num_tokens", 1, None)):
        value = meta[key]
        if type(value) is not int or value < low or (high is not None and value > high):
            bounds = f"in [{low}, 2**32]" if high else f">= {low}"
            raise ValueError(f"{meta_path}: {key} must be an int {bounds}, got {value!r}; {_REWRITE}")
    if meta["num_tokens"] < meta["num_documents"]:
        raise ValueError(
            f"{meta_path}: {meta['num_tokens']} tokens cannot fill {meta['num_documents']} documents (none is "
            f"empty); {_REWRITE}"
        )
    expected = token_dtype(meta["vocab_size"]).name
    if meta["dtype"] != expected:
        raise ValueError(
            f"{meta_path}: dtype {meta['dtype']!r} does not fit vocab_size {meta['vocab_size']} (expected "
            f"{expected!r}); {_REWRITE}"
        )
    content_hash, fingerprint = meta.get("content_hash"), meta.get("tokenizer_fingerprint")
    if content_hash is not None and (not isinstance(content_hash, str) or not content_hash):
        raise ValueError(f"{meta_path}: content_hash must be a hex string or null, got {content_hash!r}; {_REWRITE}")
    if fingerprint is not None and (not isinstance(fingerprint, str) or not _FINGERPRINT.fullmatch(fingerprint)):
        raise ValueError(
            f"{meta_path}: tokenizer_fingerprint must be 16 hex digits or null, got {fingerprint!r}; {_REWRITE}"
        )
    return meta


def _load_offsets(offsets_path: Path) -> np.ndarray:
    if not offsets_path.is_file():
        raise ValueError(f"{offsets_path} is missing; {_REWRITE}")
    try:
        return np.load(offsets_path, mmap_mode="r")  # allow_pickle=False: an object array is refused
    except (OSError, ValueError, EOFError) as error:
        raise ValueError(f"{offsets_path}: unreadable, cut short or not a .npy array ({error}); {_REWRITE}") from None


def _check_offsets(offsets: np.ndarray, offsets_path: Path, num_documents: int, num_tokens: int) -> None:
    """``int64``, ``(D + 1,)``, from 0 to ``num_tokens``, strictly increasing; read in chunks (O(1) memory)."""
    if offsets.dtype != _OFFSET_DTYPE or offsets.shape != (num_documents + 1,):
        raise ValueError(
            f"{offsets_path}: {offsets.dtype} of shape {offsets.shape}, but meta.json says int64 of shape "
            f"({num_documents + 1},) (num_documents + 1); {_REWRITE}"
        )
    first, last = int(offsets[0]), int(offsets[-1])
    if first != 0 or last != num_tokens:
        raise ValueError(
            f"{offsets_path}: runs from {first} to {last}, but meta.json says from 0 to num_tokens={num_tokens}; "
            f"{_REWRITE}"
        )
    for start in range(0, num_documents, _CHECK_OFFSETS):
        block = np.asarray(offsets[start : start + _CHECK_OFFSETS + 1])
        outside = np.flatnonzero((block < 0) | (block > num_tokens))
        if outside.size:
            index = start + int(outside[0])
            raise ValueError(
                f"{offsets_path}: offsets[{index}]={int(offsets[index])} is outside [0, num_tokens={num_tokens}]: "
                f"a document would be read outside tokens.bin; {_REWRITE}"
            )
        bad = np.flatnonzero(block[1:] <= block[:-1])
        if bad.size:
            index = start + int(bad[0])
            begin, end = int(offsets[index]), int(offsets[index + 1])
            problem = "is empty" if begin == end else "ends before it starts (offsets decrease)"
            raise ValueError(
                f"{offsets_path}: document {index} {problem}: offsets[{index}]={begin}, offsets[{index + 1}]={end}; "
                f"offsets must increase strictly from 0 to num_tokens={num_tokens}, or documents would be read "
                f"twice, overlap or be cut short; {_REWRITE}"
            )


def _meta(
    dtype: np.dtype, vocab_size: int, offsets: np.ndarray, *, tokenizer: str, add_bos: bool, add_eos: bool, **extra
) -> dict[str, Any]:
    return {
        "format": TOKEN_STORE_FORMAT,
        "version": TOKEN_STORE_VERSION,
        "dtype": np.dtype(dtype).name,
        "vocab_size": int(vocab_size),
        "num_documents": int(offsets.size - 1),
        "num_tokens": int(offsets[-1]),
        "tokenizer": tokenizer,
        "add_bos": bool(add_bos),
        "add_eos": bool(add_eos),
        "content_hash": None,
        **extra,
    }


def _hash_tokens(tokens: np.ndarray) -> bytes:
    digest = hashlib.blake2b(digest_size=16)
    for start in range(0, tokens.size, _SCAN_TOKENS):
        digest.update(np.ascontiguousarray(tokens[start : start + _SCAN_TOKENS]))
    return digest.digest()


def _content_hash(tokens_digest: bytes, offsets: np.ndarray) -> str:
    digest = hashlib.blake2b(tokens_digest, digest_size=16)
    digest.update(np.ascontiguousarray(offsets, dtype=_OFFSET_DTYPE))
    return digest.hexdigest()
