"""A token store: a corpus tokenized once into memory-mapped token files plus a document index.

A store is a folder of three files:

* ``tokens.bin``: every document's token ids back to back, little-endian, ``uint16`` when
  ``vocab_size <= 65536`` else ``uint32`` (:func:`token_dtype`);
* ``offsets.npy``: ``int64``, shape ``(D + 1,)``, ``offsets[0] == 0``; document ``i`` is
  ``tokens[offsets[i]:offsets[i + 1]]``, never empty;
* ``meta.json``: ``format`` (:data:`TOKEN_STORE_FORMAT`) and ``version``, ``dtype``, ``vocab_size``,
  ``num_documents``, ``num_tokens``, ``tokenizer``, ``add_bos``, ``add_eos``, ``text_column`` and
  ``content_hash`` (BLAKE2b of the token bytes, then of the offsets, computed while writing).

A store is written into a temporary sibling folder renamed into place at the end, so a folder
at ``path`` is always complete; :meth:`TokenStore.open` checks the sizes against ``meta.json``.
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
import operator
import os
import struct
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    pass

__all__ = ["TOKEN_STORE_FORMAT", "TokenStore", "token_dtype"]

TOKEN_STORE_FORMAT = "hf_lmobj.token_store"
TOKEN_STORE_VERSION = 1
TOKENS_FILE, OFFSETS_FILE, META_FILE = "tokens.bin", "offsets.npy", "meta.json"
_SCAN_TOKENS = 1 << 24  # tokens read per step when a whole token file is scanned (hash, EOS search)
_OFFSET_DTYPE = np.dtype("<i8")
_MEGATRON_HEADER = b"MMIDIDX\x00\x00"
_MEGATRON_DTYPES = {1: "u1", 2: "i1", 3: "<i2", 4: "<i4", 5: "<i8", 8: "<u2"}  # 6, 7: float64, float32


def token_dtype(vocab_size: int) -> np.dtype:
    """The on-disk dtype of token ids below ``vocab_size``: little-endian uint16 up to 65,536 ids, else uint32.

    Example:
        >>> token_dtype(65_536).name, token_dtype(65_537).name
        ('uint16', 'uint32')
    """
    vocab_size = operator.index(vocab_size)
    if not 1 <= vocab_size <= 2**32:
        raise ValueError(f"vocab_size must be in [1, 2**32], got {vocab_size}")
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
        """Open the store folder ``path`` written by :func:`write_token_store` (memory maps, no read).

        Raises:
            ValueError: no folder, no ``meta.json`` (an incomplete store), another format, or file
                sizes that disagree with ``meta.json``; the message names the file and the fix.
        """
        folder = Path(path)
        rewrite = (
            "rewrite it with write_token_store(..., overwrite=True) or recipes/tokenize_corpus.py --overwrite true"
        )
        if not folder.is_dir():
            raise ValueError(f"{folder}: no token store here (not a folder); write one with write_token_store()")
        meta_path = folder / META_FILE
        if not meta_path.is_file():
            raise ValueError(
                f"{meta_path} is missing: {folder} is not a complete token store (meta.json is written last); {rewrite}"
            )
        meta = json.loads(meta_path.read_text())
        if meta.get("format") != TOKEN_STORE_FORMAT or meta.get("version") != TOKEN_STORE_VERSION:
            raise ValueError(
                f"{meta_path}: format {meta.get('format')!r} version {meta.get('version')!r}, expected "
                f"{TOKEN_STORE_FORMAT!r} version {TOKEN_STORE_VERSION}; {rewrite}"
            )
        dtype = np.dtype(meta["dtype"]).newbyteorder("<")
        if dtype != token_dtype(meta["vocab_size"]):
            raise ValueError(f"{meta_path}: dtype {dtype.name} does not fit vocab_size {meta['vocab_size']}; {rewrite}")
        tokens_path, offsets_path = folder / TOKENS_FILE, folder / OFFSETS_FILE
        expected = int(meta["num_tokens"]) * dtype.itemsize
        actual = tokens_path.stat().st_size if tokens_path.is_file() else None
        if actual != expected:
            raise ValueError(
                f"{tokens_path}: {'missing' if actual is None else f'{actual} bytes'}, but meta.json says "
                f"{meta['num_tokens']} {dtype.name} tokens ({expected} bytes); {rewrite}"
            )
        try:
            offsets = np.load(offsets_path, mmap_mode="r")
        except (OSError, ValueError) as error:
            raise ValueError(f"{offsets_path}: unreadable ({error}); {rewrite}") from error
        num_documents = int(meta["num_documents"])
        if (
            offsets.dtype != _OFFSET_DTYPE
            or offsets.shape != (num_documents + 1,)
            or int(offsets[0]) != 0
            or int(offsets[-1]) != int(meta["num_tokens"])
        ):
            raise ValueError(
                f"{offsets_path}: {offsets.dtype} {offsets.shape} from {offsets[:1].tolist()} to "
                f"{offsets[-1:].tolist()}, but meta.json says int64 ({num_documents + 1},) from 0 to "
                f"{meta['num_tokens']}; {rewrite}"
            )
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
            ValueError: no such file, a size that is not whole ``dtype`` tokens, an empty file, an
                ``eos_token_id`` or a token id outside ``[0, vocab_size)``.
        """
        path = Path(path)
        dtype = np.dtype(dtype).newbyteorder("<")
        if dtype.kind not in "iu":
            raise ValueError(f"dtype must be an integer dtype, got {dtype}")
        if not 0 <= eos_token_id < vocab_size:
            raise ValueError(f"eos_token_id {eos_token_id} is outside [0, vocab_size={vocab_size})")
        if not path.is_file():
            raise ValueError(f"{path}: no such file (nanoGPT's train.bin / val.bin)")
        size = path.stat().st_size
        if size == 0 or size % dtype.itemsize:
            raise ValueError(f"{path}: {size} bytes is not a positive whole number of {dtype.name} tokens; pass dtype=")
        tokens = np.memmap(path, dtype=dtype, mode="r")
        ends = []
        for start in range(0, tokens.size, _SCAN_TOKENS):
            block = tokens[start : start + _SCAN_TOKENS]
            if int(block.min()) < 0 or int(block.max()) >= vocab_size:
                bad = start + int(np.flatnonzero((block < 0) | (block >= vocab_size))[0])
                raise ValueError(f"{path}: token {bad} is id {tokens[bad]}, outside [0, vocab_size={vocab_size})")
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
        sequence lengths, the int64 byte pointers into ``.bin`` and the int64 document indices.
        Sequences must lie back to back in ``.bin``. Ids are not checked against ``vocab_size``
        (that would read every token).

        Raises:
            ValueError: a missing file, another header or version, a float dtype, or sizes and
                pointers that disagree with the ``.bin`` file.
        """
        prefix = Path(prefix)
        if prefix.suffix in (".bin", ".idx"):
            prefix = prefix.with_suffix("")
        idx_path, bin_path = prefix.with_name(prefix.name + ".idx"), prefix.with_name(prefix.name + ".bin")
        for file in (idx_path, bin_path):
            if not file.is_file():
                raise ValueError(f"{file}: no such file (a Megatron dataset is prefix.bin + prefix.idx)")
        raw = np.memmap(idx_path, dtype=np.uint8, mode="r")
        if raw.size < 34 or raw[:9].tobytes() != _MEGATRON_HEADER:
            raise ValueError(f"{idx_path}: not a Megatron index (no {_MEGATRON_HEADER!r} header)")
        (version,) = struct.unpack_from("<Q", raw, 9)
        code = int(raw[17])
        num_sequences, num_megatron_documents = struct.unpack_from("<QQ", raw, 18)
        if version != 1:
            raise ValueError(f"{idx_path}: index version {version}, only version 1 is read")
        if code not in _MEGATRON_DTYPES:
            raise ValueError(
                f"{idx_path}: dtype code {code} is not an integer token dtype ({sorted(_MEGATRON_DTYPES)})"
            )
        if raw.size < 34 + 12 * num_sequences + 8 * num_megatron_documents:
            raise ValueError(f"{idx_path}: {raw.size} bytes, too short for {num_sequences} sequences")
        if num_sequences == 0:
            raise ValueError(f"{idx_path}: holds no sequence")
        dtype = np.dtype(_MEGATRON_DTYPES[code])
        lengths = np.frombuffer(raw, dtype="<i4", count=num_sequences, offset=34)
        pointers = np.frombuffer(raw, dtype="<i8", count=num_sequences, offset=34 + 4 * num_sequences)
        offsets = np.zeros(num_sequences + 1, dtype=_OFFSET_DTYPE)
        np.cumsum(lengths, dtype=np.int64, out=offsets[1:])
        if not np.array_equal(pointers, offsets[:-1] * dtype.itemsize):
            raise ValueError(f"{idx_path}: sequences are not stored back to back in {bin_path.name}")
        if bin_path.stat().st_size != offsets[-1] * dtype.itemsize:
            raise ValueError(
                f"{bin_path}: {bin_path.stat().st_size} bytes, but {idx_path.name} indexes "
                f"{offsets[-1]} {dtype.name} tokens ({offsets[-1] * dtype.itemsize} bytes)"
            )
        meta = _meta(dtype, vocab_size, offsets, tokenizer="", add_bos=False, add_eos=False, text_column=None)
        meta |= {"source": "megatron", "megatron_documents": int(num_megatron_documents) - 1}
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
            ValueError: ``index`` outside ``[0, num_documents)``.
        """
        i = operator.index(index)
        if not 0 <= i < self.num_documents:
            raise ValueError(f"document index {index} is out of range [0, {self.num_documents}) of {self.path}")
        return self._tokens[int(self.offsets[i]) : int(self.offsets[i + 1])].astype(np.int64)

    def document_slice(self, index: int, start: int, stop: int) -> np.ndarray:
        """An int64 copy of tokens ``[start, stop)`` of document ``index`` (a chunk of a long document)."""
        first = int(self.offsets[index])
        return self._tokens[first + start : first + stop].astype(np.int64)

    def tokens(self, start: int, stop: int) -> np.ndarray:
        """An int64 copy of the flat token range ``[start, stop)`` (documents back to back).

        Raises:
            ValueError: unless ``0 <= start <= stop <= num_tokens``.
        """
        start, stop = operator.index(start), operator.index(stop)
        if not 0 <= start <= stop <= self.num_tokens:
            raise ValueError(f"token range [{start}, {stop}) is not within [0, {self.num_tokens}] of {self.path}")
        return self._tokens[start:stop].astype(np.int64)

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
