"""Other tools' token files read as a token store: nanoGPT's flat ``train.bin`` and Megatron-LM's indexed dataset.

Each reader checks a file before it trusts it (its size, every id or every length and pointer, the counts)
and builds the store's ``(D + 1,)`` offsets in memory, never copying the tokens;
:meth:`~hf_lmobj.store.token_store.TokenStore.from_nanogpt_bin` and
:meth:`~hf_lmobj.store.token_store.TokenStore.from_megatron` open what they return.

Example:
    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "train.bin"
    >>> np.array([5, 6, 2, 7, 2, 8], dtype="<u2").tofile(path)
    >>> _nanogpt_offsets(path, np.dtype("<u2"), eos_token_id=2, vocab_size=512).tolist()
    [0, 3, 5, 6]
"""

from __future__ import annotations

import os
import struct
from pathlib import Path
from typing import Any

import numpy as np

from hf_lmobj.store.files import _OFFSET_DTYPE, _SCAN_TOKENS, _as_path, _check_vocab_size, _integer, _meta

_MEGATRON_HEADER = b"MMIDIDX\x00\x00"
_MEGATRON_DTYPES = {1: "u1", 2: "i1", 3: "<i2", 4: "<i4", 5: "<i8", 8: "<u2"}  # 6, 7: float64, float32
_MEGATRON_HEADER_BYTES = 34  # magic (9), version (8), dtype code (1), sequence and document counts (8 + 8)


def _nanogpt_arrays(
    path: str | os.PathLike, dtype: str | np.dtype, eos_token_id: int, vocab_size: int
) -> tuple[Path, np.dtype, np.ndarray, dict[str, Any], Path]:
    """The reader's ``(tokens file, dtype, offsets, meta, path)`` of nanoGPT's ``path``, every argument checked."""
    path = _as_path(path, "path")
    vocab_size = _check_vocab_size(vocab_size)
    eos_token_id = _integer(eos_token_id, "eos_token_id")
    if not 0 <= eos_token_id < vocab_size:
        raise ValueError(f"eos_token_id {eos_token_id} is outside [0, vocab_size={vocab_size})")
    dtype = _integer_dtype(dtype)
    offsets = _nanogpt_offsets(path, dtype, eos_token_id, vocab_size)
    meta = _meta(dtype, vocab_size, offsets, tokenizer="", add_bos=False, add_eos=True, text_column=None)
    meta |= {"source": "nanogpt", "eos_token_id": int(eos_token_id)}
    return path, dtype, offsets, meta, path


def _megatron_arrays(
    prefix: str | os.PathLike, vocab_size: int
) -> tuple[Path, np.dtype, np.ndarray, dict[str, Any], Path]:
    """The reader's ``(tokens file, dtype, offsets, meta, prefix)`` of Megatron's ``prefix.bin`` + ``prefix.idx``."""
    prefix = _as_path(prefix, "prefix")
    vocab_size = _check_vocab_size(vocab_size)
    if prefix.suffix in (".bin", ".idx"):
        prefix = prefix.with_suffix("")
    idx_path, bin_path = prefix.with_name(prefix.name + ".idx"), prefix.with_name(prefix.name + ".bin")
    for file in (idx_path, bin_path):
        if not file.is_file():
            raise ValueError(f"{file}: no such file (a Megatron dataset is prefix.bin + prefix.idx)")
    dtype, num_sequences, num_indices = _megatron_header(idx_path)
    offsets = _megatron_offsets(idx_path, bin_path, dtype, num_sequences, num_indices)
    meta = _meta(dtype, vocab_size, offsets, tokenizer="", add_bos=False, add_eos=False, text_column=None)
    meta |= {"source": "megatron", "megatron_documents": num_indices - 1}
    return bin_path, dtype, offsets, meta, prefix


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


def _megatron_offsets(
    idx_path: Path, bin_path: Path, dtype: np.dtype, num_sequences: int, num_indices: int
) -> np.ndarray:
    """A Megatron dataset's ``(D + 1,)`` offsets from its ``.idx`` lengths, pointers and document indices, checked."""
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
    pointers = np.frombuffer(raw, dtype="<i8", count=num_sequences, offset=_MEGATRON_HEADER_BYTES + 4 * num_sequences)
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
    documents = np.frombuffer(raw, dtype="<i8", count=num_indices, offset=_MEGATRON_HEADER_BYTES + 12 * num_sequences)
    if documents[0] != 0 or documents[-1] > num_sequences or bool(np.any(documents[1:] < documents[:-1])):
        raise ValueError(
            f"{idx_path}: document indices must run from 0 up to at most the {num_sequences} sequences, never "
            f"decreasing; got {documents[:3].tolist()} ... {documents[-3:].tolist()}"
        )
    return offsets


def _nanogpt_offsets(path: Path, dtype: np.dtype, eos_token_id: int, vocab_size: int) -> np.ndarray:
    """nanoGPT's flat token file's ``(D + 1,)`` offsets: runs ending with ``eos_token_id``, every id checked."""
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
    return np.concatenate([[0], ends]).astype(_OFFSET_DTYPE)
