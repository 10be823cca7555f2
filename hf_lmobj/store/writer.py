"""The token store writer: documents appended to a store folder's files, the folder renamed into place complete.

:class:`_TokenWriter` streams token ids to ``tokens.bin`` in chunks (memory: one chunk plus 8 bytes per
document), checking every id (ints only, in ``[0, vocab_size)``; an empty document is refused by its index),
and keeps each document's content hash and the held-out texts (``held_out.jsonl``) when asked; a shard
written by another process is joined in order (:meth:`_TokenWriter.extend_part`). ``offsets.npy``, the hashes
and ``meta.json`` come last, each complete on disk. :func:`_atomic_folder` gives the writers a temporary
sibling folder, opened as a store (every check of :meth:`TokenStore.open`) before it is renamed into place:
a folder at ``path`` is always a complete store, and a failed write leaves neither a half store nor the
temporary folder. The writers built on it: :func:`~hf_lmobj.store.write.write_token_store` (token ids)
and :func:`~hf_lmobj.store.tokenize_text.tokenize_to_token_store` (text).

Example:
    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "store"
    >>> with _atomic_folder(path, overwrite=False) as tmp:
    ...     writer = _TokenWriter(tmp, vocab_size=512)
    ...     writer.add([5, 6])
    ...     writer.add([7])
    ...     meta = writer.finish(tokenizer="", add_bos=False, add_eos=False)
    >>> sorted(p.name for p in path.iterdir()), meta["num_documents"], meta["num_tokens"]
    (['meta.json', 'offsets.npy', 'tokens.bin'], 2, 3)
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import uuid
from array import array
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from hf_lmobj.checks import id_sequence
from hf_lmobj.files import atomic_output, write_atomic
from hf_lmobj.held_out import HASH_NAME, SKIP_REASONS, HeldOut, content_hash, text_problem
from hf_lmobj.store.files import (
    _OFFSET_DTYPE,
    _SCAN_TOKENS,
    META_FILE,
    OFFSETS_FILE,
    TOKENS_FILE,
    _content_hash,
    _meta,
    token_dtype,
)
from hf_lmobj.store.held_out_files import HASHES_FILE, HELD_OUT_FILE, _hash_array
from hf_lmobj.store.token_store import TokenStore
from hf_lmobj.store.tokenizer import TOKENIZER_FOLDER

_CHUNK_TOKENS = 1 << 20  # tokens buffered before a write: the writer's memory bound (8 MiB as int64)
#: What a store folder may hold for ``overwrite=True`` to replace it (anything else is someone's data).
_STORE_ENTRIES = {TOKENS_FILE, OFFSETS_FILE, META_FILE, TOKENIZER_FOLDER, HASHES_FILE, HELD_OUT_FILE}
_PART_FILE, _PART_HELD_HASHES = "part.json", "held_out_hashes.npy"  # a shard's counts and held-out hashes


class _TokenWriter:
    """Appends documents to ``folder/tokens.bin`` in chunks; :meth:`finish` writes the index and meta.json last.

    Memory: one chunk of tokens plus 8 bytes per document (the lengths), 8 more per document and per
    held-out text when content hashes are kept. ``first_document`` is the index that error messages give
    the first document (a shard's place in the whole corpus). ``rule`` is the held-out rule the documents
    were sorted by (recorded in ``meta.json``; a stored document it holds out is refused); ``held_out``
    opens ``held_out.jsonl`` for :meth:`hold_out`; ``from_text`` counts skipped documents and requires a
    content hash with every document.
    """

    def __init__(
        self,
        folder: Path,
        vocab_size: int,
        first_document: int = 0,
        *,
        rule: HeldOut | None = None,
        held_out: bool = False,
        from_text: bool = False,
    ) -> None:
        self.folder, self.vocab_size, self.first_document = folder, vocab_size, first_document
        self.dtype = token_dtype(vocab_size)
        self.rule, self.from_text = rule, from_text
        self._file = open(folder / TOKENS_FILE, "wb")  # closed by finish / close
        self._held = open(folder / HELD_OUT_FILE, "wb") if held_out else None  # closed likewise
        self._digest = hashlib.blake2b(digest_size=16)
        self._lengths = array("q")
        self._hashes, self._held_hashes = array("Q"), array("Q")
        self.held_bytes = self.held_copies = 0  # held_copies: rows equal to a named held-out text, left out
        self.skipped = dict.fromkeys(SKIP_REASONS, 0)
        self._pending: list[np.ndarray] = []
        self._pending_tokens = 0

    def add(self, document: Sequence[int] | np.ndarray, digest: int | None = None) -> None:
        """Append one document (ids checked) and its content hash ``digest`` (an int in ``[0, 2**64)``), if kept."""
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
        if digest is not None:
            self._hashes.append(digest)
        self._pending.append(ids)
        self._lengths.append(ids.size)
        self._pending_tokens += ids.size
        if self._pending_tokens >= _CHUNK_TOKENS:
            self._flush()

    def hold_out(self, text: str, where: str, digest: int | None = None) -> None:
        """Append ``text`` (its content hash ``digest``, computed when None) to ``held_out.jsonl``.

        ``where`` names the text in errors: not a string, empty or whitespace-only, a lone surrogate.
        """
        if self._held is None:
            raise ValueError(f"{where}: this store keeps no held-out texts; pass validation_fraction")
        if not isinstance(text, str):
            raise TypeError(f"{where} must be a string, got {type(text).__name__}")
        digest = content_hash(text) if digest is None else digest
        if text_problem(text) is not None:
            raise ValueError(f"{where} is {text_problem(text)}: a held-out document has text to score; drop it")
        try:
            data = text.encode("utf-8")
        except UnicodeEncodeError as error:
            raise ValueError(f"{where} is not valid Unicode (a lone surrogate at {error.start}); clean it") from None
        self._held.write(json.dumps({"text": text}, ensure_ascii=False).encode("utf-8") + b"\n")
        self._held_hashes.append(digest)
        self.held_bytes += len(data)

    def skip(self, reason: str) -> None:
        self.skipped[reason] += 1

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

    def extend_part(self, folder: Path) -> None:
        """Append the shard written by :meth:`finish_part` in ``folder`` (same dtype): tokens, hashes, held-out texts."""
        self._flush()
        offsets = np.load(folder / OFFSETS_FILE)
        count, size = int(offsets[-1]), (folder / TOKENS_FILE).stat().st_size
        if offsets.dtype != _OFFSET_DTYPE or size != count * self.dtype.itemsize:
            raise ValueError(f"{folder}: a shard's tokens ({size} bytes) and offsets ({count} tokens) disagree")
        tokens = np.memmap(folder / TOKENS_FILE, dtype=self.dtype, mode="r", shape=(count,)) if count else None
        for start in range(0, count, _SCAN_TOKENS):
            self._write(np.ascontiguousarray(tokens[start : start + _SCAN_TOKENS]))
        self._lengths.frombytes(np.diff(offsets).astype("=i8").tobytes())
        self._hashes.frombytes(np.load(folder / HASHES_FILE).astype("=u8").tobytes())
        self._held_hashes.frombytes(np.load(folder / _PART_HELD_HASHES).astype("=u8").tobytes())
        part = json.loads((folder / _PART_FILE).read_text())
        self.held_bytes += part["held_bytes"]
        self.held_copies += part["held_copies"]
        for reason in SKIP_REASONS:
            self.skipped[reason] += part["skipped"][reason]
        if self._held is not None:
            with open(folder / HELD_OUT_FILE, "rb") as held:
                shutil.copyfileobj(held, self._held)

    def _close_files(self) -> None:
        self._flush()
        for file in (self._file, self._held):
            if file is not None:
                file.flush()
                os.fsync(file.fileno())
                file.close()

    def finish_part(self) -> None:
        """A shard's files (no meta.json, possibly no document): joined in order by :meth:`extend_part`."""
        self._close_files()
        _save_npy(self.folder / OFFSETS_FILE, self._offsets())
        _save_npy(self.folder / HASHES_FILE, _hash_array(self._hashes))
        _save_npy(self.folder / _PART_HELD_HASHES, _hash_array(self._held_hashes))
        write_atomic(
            self.folder / _PART_FILE,
            json.dumps({"held_bytes": self.held_bytes, "held_copies": self.held_copies, "skipped": self.skipped}),
        )

    def finish(self, **meta: Any) -> dict[str, Any]:
        """Flush, write ``offsets.npy``, the hashes, then ``meta.json`` (last), each complete on disk; return the meta."""
        self._close_files()
        if not self._lengths:
            raise ValueError(
                "no documents to write: a token store holds at least one document; pass a non-empty list of "
                f"documents (or a dataset with at least one row){self._nothing_left()}"
            )
        self._check_hashes()
        offsets = self._offsets()
        with open(self.folder / OFFSETS_FILE, "wb") as file:
            np.save(file, offsets)
            file.flush()
            os.fsync(file.fileno())
        if self._hashes:
            _save_npy(self.folder / HASHES_FILE, _hash_array(self._hashes))
        written = _meta(self.dtype, self.vocab_size, offsets, **meta)
        written["content_hash"] = _content_hash(self._digest.digest(), offsets)
        if self.rule is not None:
            held = {"documents": len(self._held_hashes), "bytes": self.held_bytes, "copies": self.held_copies}
            written["held_out"] = {"hash": HASH_NAME, "fraction": self.rule.fraction, **held}
        if self.from_text:
            written["skipped_documents"] = dict(self.skipped)
        write_atomic(self.folder / META_FILE, json.dumps(written, indent=2) + "\n")
        return written

    def _offsets(self) -> np.ndarray:
        """``(D + 1,)`` int64: where each document written so far starts in ``tokens.bin``, then the end."""
        offsets = np.zeros(len(self._lengths) + 1, dtype=_OFFSET_DTYPE)
        np.cumsum(np.frombuffer(self._lengths, dtype=np.int64), out=offsets[1:])
        return offsets

    def _nothing_left(self) -> str:
        held, skipped = len(self._held_hashes), sum(self.skipped.values())
        if not held and not skipped:
            return ""
        counts = ", ".join(f"{count} {reason}" for reason, count in self.skipped.items() if count)
        return (
            f"; every document was held out ({held}) or skipped ({counts or 0}): give more text or a smaller "
            "validation_fraction"
        )

    def _check_hashes(self) -> None:
        """One hash per document (or none); no stored document held out by the rule or equal to a held-out text."""
        if not self._hashes and not self.from_text:
            return
        if len(self._hashes) != len(self._lengths):
            raise ValueError(
                f"document_hashes: {len(self._hashes)} content hashes for {len(self._lengths)} documents; give one "
                "hash per document, in document order"
            )
        stored = np.frombuffer(self._hashes, dtype=np.uint64)
        claimed = np.zeros(stored.size, dtype=bool) if self.rule is None else self.rule.mask(stored)
        if self._held_hashes:
            claimed |= np.isin(stored, np.frombuffer(self._held_hashes, dtype=np.uint64))
        if claimed.any():
            index = int(np.flatnonzero(claimed)[0])
            raise ValueError(
                f"document {self.first_document + index} (content hash {int(stored[index])}) is held out (by the "
                "held-out rule or as a held-out text), so it cannot be stored for training; leave it out of the "
                "documents"
            )

    def close(self) -> None:
        self._file.close()
        if self._held is not None:
            self._held.close()


def _save_npy(path: Path, values: np.ndarray) -> None:
    """``values`` as the ``.npy`` file ``path``, complete on disk (flushed and synced) when this returns."""
    with atomic_output(path) as tmp, open(tmp, "wb") as file:
        np.save(file, values)
        file.flush()
        os.fsync(file.fileno())


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
