"""A token store's held-out files: ``document_hashes.npy`` and ``held_out.jsonl``, read and checked.

Stores written from text keep each stored document's content hash (``(D,) uint64``, in document order) and the
documents held out of the store as text, one ``{"text": ...}`` JSON object per line in source order (the rule
that chose them: :mod:`hf_lmobj.held_out`). Each file is checked before it is trusted (dtype and shape;
every line UTF-8, JSON, an object with a string ``text``; as many lines as ``meta.json`` counts), and a
refusal names the file, the line and the fix. The store itself: :mod:`hf_lmobj.store.token_store`.

Example:
    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / HELD_OUT_FILE
    >>> _ = path.write_text('{"text": "a b"}\\n{"text": "c"}\\n')
    >>> _read_held_out(path, None, expected=2), _read_held_out(path, 1, expected=2)
    (['a b', 'c'], ['a b'])
"""

from __future__ import annotations

from array import array
from pathlib import Path
from typing import Any

import numpy as np

from hf_lmobj.files import read_json_line
from hf_lmobj.store.files import _REWRITE, _load_npy

#: ``(D,) uint64``: the content hash of each stored document's text, in document order (stores written from text).
HASHES_FILE = "document_hashes.npy"
#: The documents held out of the store, one ``{"text": ...}`` JSON object per line, in source order.
HELD_OUT_FILE = "held_out.jsonl"
_HASH_DTYPE = np.dtype("<u8")


def _check_hashes(folder: Path, num_documents: int) -> Path | None:
    """``document_hashes.npy``'s path when the store has one, checked: ``uint64`` of shape ``(num_documents,)``."""
    path = folder / HASHES_FILE
    if not path.exists():
        return None
    hashes = _load_npy(path)
    if hashes.dtype != _HASH_DTYPE or hashes.shape != (num_documents,):
        raise ValueError(
            f"{path}: {hashes.dtype} of shape {hashes.shape}, but the store holds {num_documents} documents "
            f"(uint64 of shape ({num_documents},): one content hash per document); {_REWRITE}"
        )
    return path


def _check_held_out_file(folder: Path, meta: dict[str, Any]) -> Path | None:
    """``held_out.jsonl``'s path when the store has one; meta.json counting held-out documents needs the file."""
    path = folder / HELD_OUT_FILE
    if path.is_file():
        return path
    if path.exists():
        raise ValueError(f"{path} is not a file; {_REWRITE}")
    held = (meta.get("held_out") or {}).get("documents", 0)
    if held:
        raise ValueError(
            f"{path} is missing, but meta.json records {held} held-out documents (the store's validation text); "
            f"{_REWRITE}"
        )
    return None


def _read_held_out(path: Path, limit: int | None, expected: int | None) -> list[str]:
    """The texts of ``held_out.jsonl`` in order (the first ``limit``), each line checked; ``expected``: meta's count."""
    texts: list[str] = []
    with open(path, "rb") as file:
        for number, line in enumerate(file, 1):
            if limit is not None and len(texts) >= limit:
                return texts
            texts.append(_held_out_line(line, f"{path}, line {number}"))
    if expected is not None and len(texts) != expected:
        raise ValueError(
            f"{path}: {len(texts)} documents, but meta.json records {expected} held-out documents (cut short or "
            f"edited); {_REWRITE}"
        )
    return texts


def _held_out_line(line: bytes, where: str) -> str:
    value = read_json_line(line, where, _REWRITE)
    if not isinstance(value, dict) or not isinstance(value.get("text"), str):
        shown = repr(value)[:60]
        raise ValueError(f'{where}: must be a JSON object {{"text": <string>}}, got {shown}; {_REWRITE}')
    return value["text"]


def _hash_array(values: array) -> np.ndarray:
    """``(N,) uint64`` (little-endian, as ``document_hashes.npy`` holds them) of the hashes gathered in ``values``."""
    return np.frombuffer(values, dtype=np.uint64).astype(_HASH_DTYPE) if values else np.zeros(0, _HASH_DTYPE)
