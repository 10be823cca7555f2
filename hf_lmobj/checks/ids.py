"""Checks of token ids (one sequence, a batch column, a single id) and of label tensors.

Example:
    >>> id_sequence([300, 7], "input_ids").tolist()
    [300, 7]
    >>> check_token_id(5000, "pad_token_id", vocab_size=4096)
    Traceback (most recent call last):
    ...
    ValueError: pad_token_id must be a token id in [0, len(tokenizer)=4096), got 5000
"""

from __future__ import annotations

import array
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from hf_lmobj.checks._common import is_bool, where_prefix
from hf_lmobj.constants import IGNORE_INDEX


# ------------------------------------------------------------------------------------ token ids
def id_sequence(value: Any, field: str = "input_ids", where: str = "", allow_bool: bool = False) -> np.ndarray:
    """One sequence of ids as a 1D int64 array; every element checked.

    Accepts a list / tuple of ints (numpy ints included), a numpy array or a tensor of an integer
    dtype. Raises ``TypeError`` for floats, bools (unless ``allow_bool``: masks), strings and
    ``None`` anywhere in it, ``ValueError`` for anything but one dimension. An empty sequence is
    returned as is (the caller decides whether it may be empty).

    Example:
        >>> id_sequence((5, np.int32(6))).tolist()
        [5, 6]
        >>> id_sequence([5, 6.5], where="feature 2")
        Traceback (most recent call last):
        ...
        TypeError: feature 2: input_ids must be a 1D list of ints, got dtype float64
    """
    prefix = where_prefix(where)
    if isinstance(value, torch.Tensor):
        if value.is_floating_point() or value.is_complex() or (value.dtype == torch.bool and not allow_bool):
            raise TypeError(f"{prefix}{field} must be a 1D list of ints, got dtype {value.dtype}")
        value = value.detach().cpu().numpy()
    if isinstance(value, (str, bytes)):
        raise TypeError(f"{prefix}{field} must be a 1D list of ints, got a {type(value).__name__}; tokenize first")
    try:
        ids = np.asarray(value)
    except (TypeError, ValueError) as error:  # ragged nesting
        raise TypeError(f"{prefix}{field} must be a 1D list of ints ({error})") from None
    if ids.ndim == 1 and ids.size == 0:
        return ids.astype(np.int64)  # [] has no element type to check
    if ids.dtype.kind not in ("iub" if allow_bool else "iu"):
        raise TypeError(f"{prefix}{field} must be a 1D list of ints, got dtype {ids.dtype}")
    if ids.ndim != 1:
        raise ValueError(f"{prefix}{field} must be 1D (one sequence per feature), got shape {ids.shape}")
    if not allow_bool and isinstance(value, (list, tuple)):
        # numpy reads [300, True] as ints: a bool can hide only where the value is 0 or 1
        for position in np.flatnonzero((ids == 0) | (ids == 1)).tolist():
            if is_bool(value[position]):
                raise TypeError(f"{prefix}{field} must be a 1D list of ints, got a bool at position {position}")
    return ids.astype(np.int64, copy=False)


def id_column(
    values: Sequence[Any], field: str = "input_ids", allow_bool: bool = False
) -> tuple[np.ndarray, np.ndarray]:
    """Sequences of ids (one per feature) back to back as one flat int64 array, and their lengths.

    Every element is checked as in :func:`id_sequence`. Lists of Python ints take one C-level pass
    (``array.array.fromlist`` refuses floats, strings and ``None``; bools, which it reads as 0 and
    1, are looked for only where the value is 0 or 1), so checking costs nothing measurable; any
    other input, or a list that fails, is read feature by feature and the error names the feature.

    Example:
        >>> flat, lengths = id_column([[1, 2], [3]])
        >>> flat.tolist(), lengths.tolist()
        ([1, 2, 3], [2, 1])
        >>> id_column([[1, 2], [3, False]])
        Traceback (most recent call last):
        ...
        TypeError: feature 1: input_ids must be a 1D list of ints, got a bool at position 1
    """
    if all(type(v) is list for v in values):
        buffer = array.array("q")
        try:
            for value in values:
                buffer.fromlist(value)
        except (TypeError, OverflowError):
            pass  # the per-feature read below names the culprit
        else:
            lengths = np.fromiter(map(len, values), np.int64, len(values))
            flat = np.frombuffer(buffer, dtype=np.int64) if len(buffer) else np.zeros(0, np.int64)
            if not allow_bool:
                _reject_bools_in_lists(values, flat, lengths, field)
            return flat, lengths
    arrays = [id_sequence(v, field, f"feature {i}", allow_bool) for i, v in enumerate(values)]
    lengths = np.fromiter((a.size for a in arrays), np.int64, len(arrays))
    return (np.concatenate(arrays) if arrays else np.zeros(0, np.int64)), lengths


def _reject_bools_in_lists(values: Sequence[list], flat: np.ndarray, lengths: np.ndarray, field: str) -> None:
    suspects = np.flatnonzero((flat & -2) == 0)  # (S,) positions holding 0 or 1
    if not suspects.size:
        return
    ends = np.cumsum(lengths)
    rows = np.searchsorted(ends, suspects, side="right")  # (S,)
    columns = suspects - (ends - lengths)[rows]  # (S,)
    for row, column in zip(rows.tolist(), columns.tolist()):
        if type(values[row][column]) is bool:
            raise TypeError(f"feature {row}: {field} must be a 1D list of ints, got a bool at position {column}")


def check_id_range(ids: np.ndarray, vocab_size: int, field: str = "input_ids", where: str = "") -> None:
    """Every id in ``[0, vocab_size)``, or a ``ValueError`` that suggests a tokenizer mix-up.

    Example:
        >>> check_id_range(np.array([3, 12]), 10, where="feature 1")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: feature 1: input_ids must lie in [0, len(tokenizer)=10), got [3, 12]; was it ...
    """
    if ids.size == 0:
        return
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= vocab_size:
        raise ValueError(
            f"{where_prefix(where)}{field} must lie in [0, len(tokenizer)={vocab_size}), got [{low}, {high}]; "
            "was it tokenized with another tokenizer?"
        )


def check_column_range(flat: np.ndarray, lengths: np.ndarray, vocab_size: int, field: str = "input_ids") -> None:
    """:func:`check_id_range` over a whole :func:`id_column` at once; the error names the first bad feature.

    Example:
        >>> check_column_range(np.array([1, 2, 30]), np.array([2, 1]), 10)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: feature 1: input_ids must lie in [0, len(tokenizer)=10), got [30, 30]; ...
    """
    if flat.size == 0 or (int(flat.min()) >= 0 and int(flat.max()) < vocab_size):
        return
    first_bad = int(np.flatnonzero((flat < 0) | (flat >= vocab_size))[0])
    ends = np.cumsum(lengths)
    index = int(np.searchsorted(ends, first_bad, side="right"))
    start = int(ends[index] - lengths[index])
    check_id_range(flat[start : int(ends[index])], vocab_size, field, f"feature {index}")


def check_token_id(value: Any, field: str, vocab_size: int | None = None, optional: bool = False) -> int | None:
    """One token id (an int, not a bool or float), in ``[0, vocab_size)`` when that is given.

    Example:
        >>> check_token_id(np.int64(3), "decoder_start_token_id", vocab_size=10)
        3
    """
    if value is None and optional:
        return None
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point():
        value = value.item()
    if is_bool(value) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{field} must be an int token id, got {value!r}")
    if value < 0 or (vocab_size is not None and value >= vocab_size):
        upper = f"len(tokenizer)={vocab_size}" if vocab_size is not None else "vocab size"
        raise ValueError(f"{field} must be a token id in [0, {upper}), got {value}")
    return int(value)


# --------------------------------------------------------------------------------------- labels
def check_labels(
    labels: Any,
    field: str,
    num_classes: int,
    ignore_index: int = IGNORE_INDEX,
    shape: Sequence[int] | None = None,
    shape_of: str = "the logits' leading shape",
) -> torch.Tensor:
    """Label tensor of integer class indices in ``[0, num_classes)`` or ``ignore_index``; returned as int64.

    ``TypeError`` for a non-tensor, a float, bool or complex dtype (a float label would be silently
    truncated by ``.long()``); ``ValueError`` for another shape than ``shape`` or a value out of range.

    Example:
        >>> check_labels(torch.tensor([[2, -100]]), "labels", num_classes=4).tolist()
        [[2, -100]]
        >>> check_labels(torch.tensor([1.5]), "labels", num_classes=4)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        TypeError: labels must hold integer class indices, got dtype torch.float32; pass a long tensor ...
    """
    if is_bool(ignore_index) or not isinstance(ignore_index, numbers.Integral):
        raise TypeError(f"ignore_index must be an int, got {ignore_index!r}")
    if not isinstance(labels, torch.Tensor):
        raise TypeError(f"{field} must be a torch.Tensor of class indices, got {type(labels).__name__}")
    if labels.dtype == torch.bool or labels.is_floating_point() or labels.is_complex():
        raise TypeError(
            f"{field} must hold integer class indices, got dtype {labels.dtype}; pass a long tensor (-100 = not scored)"
        )
    if shape is not None and tuple(labels.shape) != tuple(shape):
        raise ValueError(f"{field} shape {tuple(labels.shape)} must equal {shape_of} {tuple(shape)}")
    labels = labels.long()
    if labels.numel():
        bad = (labels != ignore_index) & ((labels < 0) | (labels >= num_classes))
        if bool(bad.any()):
            kept = labels[labels != ignore_index]
            raise ValueError(
                f"{field} must lie in [0, {num_classes}) or equal ignore_index={ignore_index}; "
                f"got values in [{int(kept.min())}, {int(kept.max())}]"
            )
    return labels
