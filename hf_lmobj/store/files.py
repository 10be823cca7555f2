"""The token store's own files: format constants, ``meta.json`` and ``offsets.npy`` readers, hashing.

Every reader checks before it trusts (keys and types, sizes, strictly increasing offsets in O(1)
memory) and names the file and the fix; :func:`token_dtype` is the on-disk dtype rule. The format
itself and the reader built on these: :mod:`hf_lmobj.store.token_store`; its held-out files:
:mod:`hf_lmobj.store.held_out_files`; nanoGPT's and Megatron's files: :mod:`hf_lmobj.store.foreign`.
"""

from __future__ import annotations

import hashlib
import numbers
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from hf_lmobj.checks import check_length
from hf_lmobj.files import read_json
from hf_lmobj.held_out import HASH_NAME, SKIP_REASONS

TOKEN_STORE_FORMAT = "hf_lmobj.token_store"
TOKEN_STORE_VERSION = 1
TOKENS_FILE, OFFSETS_FILE, META_FILE = "tokens.bin", "offsets.npy", "meta.json"
_SCAN_TOKENS = 1 << 24  # tokens read per step when a whole token file is scanned (hash, EOS search)
_OFFSET_DTYPE = np.dtype("<i8")
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
    _check_held_out_meta(meta_path, meta)
    return meta


def _count(value: Any) -> bool:
    return type(value) is int and value >= 0


def _check_held_out_meta(meta_path: Path, meta: dict[str, Any]) -> None:
    """``held_out``, ``skipped_documents`` and ``tokenizer_origin``: absent / null, or of their documented shape."""
    held_out = meta.get("held_out")
    if held_out is not None:
        fraction = held_out.get("fraction") if isinstance(held_out, dict) else None
        if (
            not isinstance(held_out, dict)
            or held_out.get("hash") != HASH_NAME
            or isinstance(fraction, bool)
            or not isinstance(fraction, (int, float))
            or not 0 <= fraction < 1
            or not (_count(held_out.get("documents")) and _count(held_out.get("bytes")))
        ):
            raise ValueError(
                f"{meta_path}: held_out must be {{'hash': {HASH_NAME!r}, 'fraction': a number in [0, 1), 'documents': "
                f"int >= 0, 'bytes': int >= 0}} or null, got {held_out!r}; {_REWRITE}"
            )
    skipped = meta.get("skipped_documents")
    if skipped is not None and (
        not isinstance(skipped, dict)
        or sorted(skipped) != sorted(SKIP_REASONS)
        or not all(map(_count, skipped.values()))
    ):
        raise ValueError(
            f"{meta_path}: skipped_documents must map {list(SKIP_REASONS)} to ints >= 0, or be null, got {skipped!r}; "
            f"{_REWRITE}"
        )
    origin = meta.get("tokenizer_origin")
    if origin is not None and (not isinstance(origin, dict) or not isinstance(origin.get("origin"), str)):
        raise ValueError(
            f"{meta_path}: tokenizer_origin must be an object with a string 'origin' ('trained' or 'given'), or null, "
            f"got {origin!r}; {_REWRITE}"
        )


def _load_offsets(offsets_path: Path) -> np.ndarray:
    if not offsets_path.is_file():
        raise ValueError(f"{offsets_path} is missing; {_REWRITE}")
    return _load_npy(offsets_path)


def _load_npy(path: Path) -> np.ndarray:
    """A store's ``.npy`` file, memory-mapped; one that cannot be read as an array is a ``ValueError`` naming it."""
    try:
        return np.load(path, mmap_mode="r")  # allow_pickle=False: an object array is refused
    except (OSError, ValueError, EOFError) as error:
        raise ValueError(f"{path}: unreadable, cut short or not a .npy array ({error}); {_REWRITE}") from None


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
