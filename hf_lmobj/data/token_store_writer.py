"""Writing token stores: documents in, a complete store folder out (atomically).

:func:`write_token_store` streams token ids to disk in chunks (memory: one chunk plus 8 bytes per
document); raw text is tokenized into a store by :mod:`hf_lmobj.data.tokenize_store`. Everything goes into a temporary sibling folder; its files are written,
flushed to disk and the folder opened (every check of :meth:`TokenStore.open`) before it is renamed
into place, so a folder at ``path`` is always a complete store (format: :mod:`hf_lmobj.data.token_store`),
and a failed write leaves neither a half store nor the temporary folder. Every id is checked: ints
only (bools and floats are refused, not cast), in ``[0, vocab_size)``; documents are never empty
(an empty one is refused by its index, not skipped). Given the tokenizer, the writer records its
``tokenizer_fingerprint`` in ``meta.json`` so that a run can refuse another tokenizer
(:meth:`TokenStore.check_tokenizer`); with ``save_tokenizer=True`` it also saves the tokenizer as
``tokenizer/`` inside the temporary folder, checked to load back as itself, so the store appears with
its tokenizer or not at all.

Example:
    >>> import tempfile
    >>> write_token_store(tempfile.mkdtemp() + "/s", [[5, 6], [7]], vocab_size=512).lengths.tolist()
    [2, 1]
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import uuid
from array import array
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

from hf_lmobj.checks import check_flag, check_name, id_sequence
from hf_lmobj.data.token_store import TokenStore
from hf_lmobj.data.token_store_files import (
    _OFFSET_DTYPE,
    _SCAN_TOKENS,
    META_FILE,
    OFFSETS_FILE,
    TOKENS_FILE,
    _as_path,
    _check_vocab_size,
    _content_hash,
    _meta,
    token_dtype,
)
from hf_lmobj.data.tokenizer_fingerprint import tokenizer_fingerprint
from hf_lmobj.files import write_atomic

_CHUNK_TOKENS = 1 << 20  # tokens buffered before a write: the writer's memory bound (8 MiB as int64)
TOKENIZER_FOLDER = "tokenizer"  #: where ``save_tokenizer=True`` saves the tokenizer inside the store
#: What a store folder may hold for ``overwrite=True`` to replace it (anything else is someone's data).
_STORE_ENTRIES = {TOKENS_FILE, OFFSETS_FILE, META_FILE, TOKENIZER_FOLDER}


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
        where = f"document {index}"
        if isinstance(document, np.ndarray) and document.dtype == np.uint64 and document.size:
            if int(document.max()) >= self.vocab_size:  # would wrap to a negative id in int64
                raise ValueError(
                    f"{where}: token id {int(document.max())} is outside [0, vocab_size={self.vocab_size})"
                )
        if isinstance(document, (int, np.integer)):
            raise TypeError(
                f"{where} is the int {document!r}, not a sequence of ids: documents must be an iterable of "
                "token-id sequences ([[5, 6], [7]]), not one flat list"
            )
        ids = id_sequence(document, "token ids", where)  # ints only: bools, floats, strings, None refused
        if ids.size == 0:
            raise ValueError(
                f"{where} is empty: a token store refuses empty documents (they carry no token); "
                "drop empty texts first or add BOS / EOS"
            )
        self._pending.append(ids)
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
        """Flush, write ``offsets.npy`` then ``meta.json`` (last), each complete on disk, and return the meta."""
        self._flush()
        self._file.flush()
        os.fsync(self._file.fileno())
        self._file.close()
        if not self._lengths:
            raise ValueError(
                "no documents to write: a token store holds at least one document; pass a non-empty list of "
                "documents (or a dataset with at least one row)"
            )
        offsets = np.zeros(len(self._lengths) + 1, dtype=_OFFSET_DTYPE)  # (D + 1,)
        np.cumsum(np.frombuffer(self._lengths, dtype=np.int64), out=offsets[1:])
        with open(self.folder / OFFSETS_FILE, "wb") as file:
            np.save(file, offsets)
            file.flush()
            os.fsync(file.fileno())
        written = _meta(self.dtype, self.vocab_size, offsets, **meta)
        written["content_hash"] = _content_hash(self._digest.digest(), offsets)
        write_atomic(self.folder / META_FILE, json.dumps(written, indent=2) + "\n")
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
    """A temporary sibling of ``path``, renamed to ``path`` when the block ends well, removed when it raises.

    With ``overwrite``, what is at ``path`` is replaced only once the new store is complete (and is
    put back if the rename fails); it must be a token store or an empty folder, never other data.
    """
    _check_replaceable(path, overwrite)
    if path.parent.exists() and not path.parent.is_dir():
        raise ValueError(f"{path}: its parent {path.parent} is a file, not a folder; choose another path")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    tmp.mkdir()
    try:
        yield tmp
        TokenStore.open(tmp)  # every check of a reader, before the store appears at path
        if path.exists() or path.is_symlink():
            if not overwrite:  # appeared while writing: never replace what this call was not allowed to
                raise ValueError(f"{path} appeared while writing; pass overwrite=True to replace it")
            _check_replaceable(path, overwrite)
            _replace(tmp, path)
        else:
            tmp.rename(path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _check_save_tokenizer(save_tokenizer: bool, tokenizer: Any) -> bool:
    """``save_tokenizer`` as a bool; ``True`` needs the tokenizer itself (a name cannot be saved)."""
    save_tokenizer = check_flag(save_tokenizer, "save_tokenizer")
    if save_tokenizer and isinstance(tokenizer, str):
        raise TypeError(
            f"save_tokenizer=True needs the tokenizer itself, got its name {tokenizer!r}; pass the tokenizer "
            "(AutoTokenizer.from_pretrained(...)) or save_tokenizer=False"
        )
    return save_tokenizer


def _save_tokenizer(tokenizer: PreTrainedTokenizerBase, folder: Path) -> None:
    """Save ``tokenizer`` to ``folder / "tokenizer"`` and check that it loads back as itself (same fingerprint).

    A tokenizer that reloads as another one (a slow tokenizer converted to a fast one on loading, a
    class ``AutoTokenizer`` cannot build) would be refused by :meth:`TokenStore.check_tokenizer` later,
    in the training run; it is refused here, before any text is tokenized.
    """
    from transformers import AutoTokenizer

    target = folder / TOKENIZER_FOLDER
    tokenizer.save_pretrained(target)
    fix = "save a tokenizer that reloads as itself (a fast tokenizer), or pass save_tokenizer=False"
    try:
        reloaded = AutoTokenizer.from_pretrained(target)
    except Exception as error:  # whatever transformers raises: the saved folder is not loadable
        raise ValueError(
            f"the tokenizer saved for the store does not load back with AutoTokenizer.from_pretrained "
            f"({type(error).__name__}: {error}); {fix}"
        ) from error
    expected, actual = tokenizer_fingerprint(tokenizer), tokenizer_fingerprint(reloaded)
    if actual != expected:
        raise ValueError(
            f"the tokenizer saved for the store loads back as another tokenizer ({type(reloaded).__name__}, "
            f"fingerprint {actual}, not {type(tokenizer).__name__} {expected}): a run would refuse the store "
            f"with its own tokenizer/; {fix}"
        )


def _check_replaceable(path: Path, overwrite: bool) -> None:
    """Refuse an existing ``path`` unless ``overwrite``, and then unless it is a store folder (or empty)."""
    if not (path.exists() or path.is_symlink()):
        return
    if not overwrite:
        raise ValueError(f"{path} already exists; pass overwrite=True to replace it")
    if path.is_symlink() or not path.is_dir():
        raise ValueError(
            f"{path} is not a folder (a file or a link), not a token store; overwrite=True replaces a store only"
        )
    others = sorted(entry.name for entry in path.iterdir() if entry.name not in _STORE_ENTRIES)
    if others:
        raise ValueError(
            f"{path} holds {others[:3]}{' ...' if len(others) > 3 else ''}, which a token store does not; "
            "overwrite=True replaces a store (or an empty folder) only: remove that folder yourself or choose another"
        )


def _replace(tmp: Path, path: Path) -> None:
    """Swap ``tmp`` in for the folder at ``path``; the old folder comes back if the second rename fails."""
    old = path.with_name(f".{path.name}.old-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    path.rename(old)
    try:
        tmp.rename(path)
    except BaseException:
        old.rename(path)
        raise
    shutil.rmtree(old, ignore_errors=True)


def _check_documents(documents: Any) -> None:
    if isinstance(documents, (str, bytes, dict)) or not hasattr(documents, "__iter__"):
        raise TypeError(
            f"documents must be an iterable of token-id sequences ([[5, 6], [7]]), got {type(documents).__name__}"
        )


def _tokenizer_meta(tokenizer: Any, vocab_size: int | None) -> dict[str, Any]:
    """``tokenizer`` and ``tokenizer_fingerprint`` for ``meta.json``: from a name (no fingerprint) or a tokenizer."""
    if isinstance(tokenizer, str):
        return {"tokenizer": tokenizer, "tokenizer_fingerprint": None}
    if not hasattr(tokenizer, "__len__") or not hasattr(tokenizer, "get_vocab"):
        raise TypeError(f"tokenizer must be a name (str) or a transformers tokenizer, got {type(tokenizer).__name__}")
    if vocab_size is not None and vocab_size != len(tokenizer):
        raise ValueError(
            f"vocab_size is {vocab_size} but len(tokenizer) is {len(tokenizer)}; the store's vocabulary is the "
            "tokenizer's: pass vocab_size=len(tokenizer)"
        )
    name = str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__)
    return {"tokenizer": name, "tokenizer_fingerprint": tokenizer_fingerprint(tokenizer)}


def write_token_store(
    path: str | os.PathLike,
    documents: Iterable[Sequence[int] | np.ndarray],
    vocab_size: int,
    *,
    tokenizer: str | PreTrainedTokenizerBase = "",
    add_bos: bool = False,
    add_eos: bool = False,
    text_column: str | None = None,
    overwrite: bool = False,
    save_tokenizer: bool = False,
) -> TokenStore:
    """Write ``documents`` (token id sequences, streamed in chunks) as a store at ``path`` and open it.

    Memory stays bounded (one chunk of tokens plus 8 bytes per document): the corpus is never held.
    ``tokenizer`` (a name, or the tokenizer itself: then its ``tokenizer_fingerprint`` is recorded and
    ``vocab_size`` must be ``len(tokenizer)``), ``add_bos``, ``add_eos`` and ``text_column`` are
    recorded in ``meta.json``. The store appears at ``path`` only once complete: an error (or an
    exception raised by the ``documents`` iterable) leaves no folder at ``path`` (or the old store,
    with ``overwrite``) and no temporary folder beside it. ``overwrite=True`` replaces a token store
    or an empty folder, never a folder holding other files. ``save_tokenizer=True`` (``tokenizer``
    must then be the tokenizer, not a name) saves it as ``path/tokenizer/`` before the store is
    renamed into place, checked to load back with ``AutoTokenizer.from_pretrained`` as the same
    tokenizer: the store appears with its tokenizer, and a failed save leaves nothing, like any error.

    Example:
        >>> import os, tempfile
        >>> from hf_lmobj.corpus import build_tokenizer
        >>> tok = build_tokenizer(512, max_documents=20)
        >>> store = write_token_store(tempfile.mkdtemp() + "/s", [[5, 6]], 512, tokenizer=tok, save_tokenizer=True)
        >>> sorted(os.listdir(store.path))
        ['meta.json', 'offsets.npy', 'tokenizer', 'tokens.bin']

    Raises:
        TypeError: a document holding something else than ints (a bool, a float, a string, None),
            ``vocab_size`` or a flag of the wrong type, ``documents`` not an iterable,
            ``save_tokenizer=True`` with a tokenizer name.
        ValueError: ``path`` exists and not ``overwrite`` (or is not a store), ``vocab_size`` outside
            ``[1, 2**32]``, an id ``< 0`` or ``>= vocab_size``, an empty document (a store refuses
            them: they carry no token) or no document at all (the message names the document index),
            a saved tokenizer that does not load back as itself.
    """
    path = _as_path(path, "path")
    vocab_size = _check_vocab_size(vocab_size)
    _check_documents(documents)
    save_tokenizer = _check_save_tokenizer(save_tokenizer, tokenizer)
    meta = {
        **_tokenizer_meta(tokenizer, vocab_size),
        "add_bos": check_flag(add_bos, "add_bos"),
        "add_eos": check_flag(add_eos, "add_eos"),
        "text_column": check_name(text_column, "text_column", optional=True),
    }
    with _atomic_folder(path, check_flag(overwrite, "overwrite")) as tmp:
        if save_tokenizer:
            _save_tokenizer(tokenizer, tmp)
        _write_files(tmp, documents, vocab_size, **meta)
    return TokenStore.open(path)
