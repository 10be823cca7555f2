"""A token store: a corpus tokenized once into memory-mapped token files plus a document index.

A store is a folder of three files (like nanoGPT's ``train.bin``, Megatron's ``.bin`` / ``.idx``,
OLMo's ``.npy``):

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
Extra files (a ``tokenizer/`` folder beside the three) are allowed.

Example:
    >>> import tempfile
    >>> store = write_token_store(tempfile.mkdtemp() + "/store", [[5, 6, 7], [8], [9, 10]], vocab_size=512)
    >>> len(store), store.num_tokens, store.dtype.name, store.document(2).tolist()
    (3, 6, 'uint16', [9, 10])
    >>> TokenStore.open(store.path).lengths.tolist()
    [3, 1, 2]

Why: tokenizing a corpus once and reading slices of a memory map keeps memory bounded by the
pages touched, whatever the corpus size, and costs nothing per epoch.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import multiprocessing
import operator
import os
import shutil
import struct
import uuid
import warnings
from array import array
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import datasets
    from transformers import PreTrainedTokenizerBase

__all__ = ["TOKEN_STORE_FORMAT", "TokenStore", "token_dtype", "tokenize_to_token_store", "write_token_store"]

TOKEN_STORE_FORMAT = "hf_lmobj.token_store"
TOKEN_STORE_VERSION = 1
TOKENS_FILE, OFFSETS_FILE, META_FILE = "tokens.bin", "offsets.npy", "meta.json"
_CHUNK_TOKENS = 1 << 20  # tokens buffered before a write: the writer's memory bound (8 MiB as int64)
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


class _TokenWriter:
    """Appends documents to ``folder/tokens.bin`` in chunks; :meth:`finish` writes the index and meta.json last.

    Memory: one chunk of tokens plus 8 bytes per document (the lengths). ``first_document`` is the
    index that error messages give the first document (a shard's place in the whole corpus).
    """

    def __init__(self, folder: Path, vocab_size: int, first_document: int = 0) -> None:
        self.folder, self.vocab_size, self.first_document = folder, vocab_size, first_document
        self.dtype = token_dtype(vocab_size)
        self._file = open(folder / TOKENS_FILE, "wb")  # closed by finish / close
        self._digest = hashlib.blake2b(digest_size=16)
        self._lengths = array("q")
        self._pending: list[np.ndarray] = []
        self._pending_tokens = 0

    def add(self, document: Sequence[int] | np.ndarray) -> None:
        index = self.first_document + len(self._lengths)
        ids = np.asarray(document)
        if ids.ndim != 1:
            raise ValueError(f"document {index}: expected a flat sequence of token ids, got shape {ids.shape}")
        if ids.size == 0:
            raise ValueError(
                f"document {index} is empty: a token store refuses empty documents (they carry no token); "
                "drop empty texts first or add BOS / EOS"
            )
        if ids.dtype.kind not in "iu":
            raise ValueError(f"document {index}: token ids must be integers, got dtype {ids.dtype}")
        if ids.dtype == np.uint64 and int(ids.max()) >= self.vocab_size:  # would wrap in int64
            raise ValueError(
                f"document {index}: token id {int(ids.max())} is outside [0, vocab_size={self.vocab_size})"
            )
        self._pending.append(ids.astype(np.int64, copy=False))
        self._lengths.append(ids.size)
        self._pending_tokens += ids.size
        if self._pending_tokens >= _CHUNK_TOKENS:
            self._flush()

    def _flush(self) -> None:
        if not self._pending:
            return
        chunk = np.concatenate(self._pending)  # (T,) int64
        if int(chunk.min()) < 0 or int(chunk.max()) >= self.vocab_size:
            bad = int(np.flatnonzero((chunk < 0) | (chunk >= self.vocab_size))[0])
            ends = np.cumsum([ids.size for ids in self._pending])
            index = self.first_document + len(self._lengths) - len(self._pending)
            index += int(np.searchsorted(ends, bad, side="right"))
            raise ValueError(
                f"document {index}: token id {int(chunk[bad])} is outside [0, vocab_size={self.vocab_size})"
            )
        self._write(chunk.astype(self.dtype))
        self._pending, self._pending_tokens = [], 0

    def _write(self, data: np.ndarray) -> None:
        self._file.write(memoryview(data))
        self._digest.update(memoryview(data))

    def extend(self, store: TokenStore) -> None:
        """Append every document of ``store`` (already checked, same dtype) without re-reading ids one by one."""
        if store.dtype != self.dtype:
            raise ValueError(f"cannot append a {store.dtype.name} store to a {self.dtype.name} one")
        self._flush()
        for start in range(0, store.num_tokens, _SCAN_TOKENS):
            self._write(np.ascontiguousarray(store._tokens[start : start + _SCAN_TOKENS]))
        self._lengths.frombytes(store.lengths.astype("=i8").tobytes())

    def finish(self, **meta: Any) -> dict[str, Any]:
        """Flush, write ``offsets.npy`` then ``meta.json`` (last), and return the meta."""
        self._flush()
        self._file.close()
        if not self._lengths:
            raise ValueError("no documents to write: a token store holds at least one document")
        offsets = np.zeros(len(self._lengths) + 1, dtype=_OFFSET_DTYPE)  # (D + 1,)
        np.cumsum(np.frombuffer(self._lengths, dtype=np.int64), out=offsets[1:])
        np.save(self.folder / OFFSETS_FILE, offsets)
        written = _meta(self.dtype, self.vocab_size, offsets, **meta)
        written["content_hash"] = _content_hash(self._digest.digest(), offsets)
        (self.folder / META_FILE).write_text(json.dumps(written, indent=2) + "\n")
        return written

    def close(self) -> None:
        self._file.close()


def _write_files(
    folder: Path, documents: Iterable[Sequence[int] | np.ndarray], vocab_size: int, first_document: int = 0, **meta
) -> dict[str, Any]:
    writer = _TokenWriter(folder, vocab_size, first_document)
    try:
        for document in documents:
            writer.add(document)
        return writer.finish(**meta)
    finally:
        writer.close()


@contextlib.contextmanager
def _atomic_folder(path: Path, overwrite: bool) -> Iterator[Path]:
    """A temporary sibling of ``path``, renamed to ``path`` when the block ends well, removed when it raises."""
    if path.exists() and not overwrite:
        raise ValueError(f"{path} already exists; pass overwrite=True to replace it")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    tmp.mkdir()
    try:
        yield tmp
        if path.exists() or path.is_symlink():
            if not overwrite:  # appeared while writing: never replace what this call was not allowed to
                raise ValueError(f"{path} appeared while writing; pass overwrite=True to replace it")
            old = path.with_name(f".{path.name}.old-{os.getpid()}-{uuid.uuid4().hex[:8]}")
            path.rename(old)
            tmp.rename(path)
            if old.is_dir() and not old.is_symlink():
                shutil.rmtree(old)
            else:
                old.unlink()
        else:
            tmp.rename(path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def write_token_store(
    path: str | os.PathLike,
    documents: Iterable[Sequence[int] | np.ndarray],
    vocab_size: int,
    *,
    tokenizer: str = "",
    add_bos: bool = False,
    add_eos: bool = False,
    text_column: str | None = None,
    overwrite: bool = False,
) -> TokenStore:
    """Write ``documents`` (token id sequences, streamed in chunks) as a store at ``path`` and open it.

    Memory stays bounded (one chunk of tokens plus 8 bytes per document): the corpus is never held.
    ``tokenizer``, ``add_bos``, ``add_eos`` and ``text_column`` are recorded in ``meta.json``. The
    store appears at ``path`` only once complete: an error (or an exception raised by the
    ``documents`` iterable) leaves no folder at ``path`` and no temporary folder beside it.

    Raises:
        ValueError: ``path`` exists and not ``overwrite``; an id ``< 0`` or ``>= vocab_size``, an
            empty document (a store refuses them: they carry no token) or no document at all
            (the message names the document index).
    """
    path = Path(path)
    token_dtype(vocab_size)
    meta = {"tokenizer": tokenizer, "add_bos": add_bos, "add_eos": add_eos, "text_column": text_column}
    with _atomic_folder(path, overwrite) as tmp:
        _write_files(tmp, documents, vocab_size, **meta)
    return TokenStore.open(path)


def _iter_tokenized(
    dataset: datasets.Dataset | datasets.IterableDataset,
    tokenizer: PreTrainedTokenizerBase,
    text_column: str,
    add_bos: bool,
    add_eos: bool,
    batch_size: int,
) -> Iterator[np.ndarray]:
    from hf_lmobj.data.sources import encode_texts_as_documents  # split_special_tokens=True, BOS / EOS by id

    names = dataset.column_names
    if names is not None:
        dataset = dataset.select_columns([text_column])
    for batch in dataset.iter(batch_size=batch_size):
        if text_column not in batch:
            raise ValueError(f"the dataset has no column {text_column!r} (has {list(batch)}); set text_column=")
        texts = batch[text_column]
        if not all(isinstance(text, str) for text in texts):
            raise TypeError(f"column {text_column!r} must hold strings")
        yield from encode_texts_as_documents(tokenizer, texts, add_bos, add_eos)


def _tokenize_shard(
    shard: datasets.Dataset, tokenizer: PreTrainedTokenizerBase, folder: Path, first_document: int, options: dict
) -> None:
    """One worker process: tokenize ``shard`` into the store files of ``folder``."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # one thread per worker process
    folder.mkdir(parents=True)
    documents = _iter_tokenized(shard, tokenizer, **options["encode"])
    _write_files(folder, documents, options["vocab_size"], first_document, **options["meta"])


def tokenize_to_token_store(
    dataset: datasets.Dataset | datasets.IterableDataset,
    tokenizer: PreTrainedTokenizerBase,
    path: str | os.PathLike,
    *,
    text_column: str = "text",
    add_bos: bool = True,
    add_eos: bool = True,
    num_proc: int | None = None,
    batch_size: int = 1000,
    overwrite: bool = False,
) -> TokenStore:
    """Tokenize the raw text of ``dataset`` (one document per row) into a store at ``path``.

    Texts are encoded in batches of ``batch_size`` with ``add_special_tokens=False`` and
    ``split_special_tokens=True`` (a literal ``"</s>"`` in the text stays characters), then BOS /
    EOS are added by id when asked. ``vocab_size`` is ``len(tokenizer)``. A map-style ``Dataset``
    with ``num_proc > 1`` is split into ``num_proc`` contiguous shards, each tokenized by its own
    process into a shard folder, then concatenated in order: the bytes written do not depend on
    ``num_proc``. A streamed ``IterableDataset`` is tokenized in this process, batch by batch,
    never materialised (``num_proc`` is ignored, with a warning).

    Raises:
        ValueError: no ``text_column``, ``add_bos`` / ``add_eos`` without the token, ``path`` exists
            and not ``overwrite``, an empty document (an empty text with neither BOS nor EOS).
    """
    import datasets

    from hf_lmobj.corpus import require_columns

    path = Path(path)
    for flag, role in ((add_bos, "bos"), (add_eos, "eos")):
        if flag and getattr(tokenizer, f"{role}_token_id") is None:
            raise ValueError(f"add_{role}=True but the tokenizer has no {role}_token; pass add_{role}=False")
    if batch_size < 1 or (num_proc is not None and num_proc < 1):
        raise ValueError(f"batch_size and num_proc must be positive, got {batch_size} and {num_proc}")
    streaming = isinstance(dataset, datasets.IterableDataset)
    if not streaming and not isinstance(dataset, datasets.Dataset):
        raise TypeError(f"dataset must be a datasets.Dataset or IterableDataset, got {type(dataset).__name__}")
    if streaming and (num_proc or 1) > 1:
        warnings.warn("a streamed IterableDataset is tokenized in one process; num_proc is ignored", stacklevel=2)
    if not streaming:
        require_columns(dataset, text_column=text_column)
    elif dataset.column_names is not None and text_column not in dataset.column_names:
        raise ValueError(f"the dataset has no column {text_column!r} (has {dataset.column_names}); set text_column=")
    vocab_size = len(tokenizer)
    encode = {"text_column": text_column, "add_bos": add_bos, "add_eos": add_eos, "batch_size": batch_size}
    meta = {
        "tokenizer": str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__),
        "add_bos": add_bos,
        "add_eos": add_eos,
        "text_column": text_column,
    }
    workers = 1 if streaming else max(1, min(num_proc or 1, dataset.num_rows))
    with _atomic_folder(path, overwrite) as tmp:
        if workers == 1:
            _write_files(tmp, _iter_tokenized(dataset, tokenizer, **encode), vocab_size, **meta)
        else:
            shards = [dataset.shard(workers, index, contiguous=True) for index in range(workers)]
            firsts = np.concatenate([[0], np.cumsum([shard.num_rows for shard in shards])[:-1]]).tolist()
            folders = [tmp / "shards" / f"{index:05d}" for index in range(workers)]
            options = {"encode": encode, "vocab_size": vocab_size, "meta": meta}
            with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context()) as pool:
                jobs = [
                    pool.submit(_tokenize_shard, *job, options)
                    for job in zip(shards, [tokenizer] * workers, folders, firsts)
                ]
                for job in jobs:
                    job.result()
            writer = _TokenWriter(tmp, vocab_size)
            try:
                for folder in folders:
                    writer.extend(TokenStore.open(folder))
                writer.finish(**meta)
            finally:
                writer.close()
            shutil.rmtree(tmp / "shards")
    return TokenStore.open(path)
