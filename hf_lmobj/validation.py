"""The checks of what users pass in: one function per kind of input, shared by every entry point.

Kinds of input and their checks:

* **token ids** (:func:`id_sequence` for one sequence, :func:`id_column` for a batch of them,
  :func:`check_id_range`, :func:`check_token_id`): ints of any Python / numpy / torch integer
  type; every element is checked, bools, floats, strings and ``None`` are refused;
* **label tensors** (:func:`check_labels`): integer class indices in ``[0, num_classes)`` or
  ``ignore_index``, of the expected shape;
* **counts** (:func:`check_count`, :func:`check_counts`, :func:`check_nll_sums`): whole numbers
  such as ``num_items_in_batch`` or a metric's ``num_tokens``, checked before anything casts them;
* **real parameters** (:func:`check_number`, :func:`check_per_row`): probabilities, temperatures,
  loss coefficients; finite, in their interval, scalars or one value per batch row;
* **lengths** (:func:`check_length`): ``max_length``, ``input_length``, ``stride``, ...: ints no
  smaller than what the objective needs, the minimum and its reason named in the error;
* **flags** (:func:`check_flag`): ``True`` / ``False``, never a truthy string.

Each check returns the value in its normal form or raises ``TypeError`` (the wrong kind of value)
or ``ValueError`` (the right kind, a wrong value), with a message that names the field, the value
and the fix. Entry points call them where the input enters, so that nothing malformed reaches
torch, numpy or ``evaluate``.

Standalone on purpose (the standard library, numpy and torch only): the metric folders, which
must run as Hub Spaces without this package, carry it as their sibling ``validation.py``.

Example:
    >>> check_length(512, "max_length", minimum=2)
    512
    >>> check_length(1, "max_length", minimum=2, why="a token and the next one")
    Traceback (most recent call last):
    ...
    ValueError: max_length must be an int >= 2 (a token and the next one), got 1
    >>> id_sequence([300, True], "input_ids", "feature 0")
    Traceback (most recent call last):
    ...
    TypeError: feature 0: input_ids must be a 1D list of ints, got a bool at position 1
"""

from __future__ import annotations

import array
import math
import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from hf_lmobj.constants import IGNORE_INDEX

__all__ = [
    "id_sequence",
    "id_column",
    "check_id_range",
    "check_column_range",
    "check_token_id",
    "check_labels",
    "check_count",
    "check_counts",
    "check_nll_sums",
    "check_num_items_in_batch",
    "check_number",
    "check_per_row",
    "check_length",
    "check_flag",
    "check_has_targets",
    "check_return_tensors",
]

_BOOLS = (bool, np.bool_)


def _prefix(where: str) -> str:
    return f"{where}: " if where else ""


def _is_bool(value: Any) -> bool:
    return isinstance(value, _BOOLS) or (isinstance(value, torch.Tensor) and value.dtype == torch.bool)


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
    prefix = _prefix(where)
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
            if _is_bool(value[position]):
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
            f"{_prefix(where)}{field} must lie in [0, len(tokenizer)={vocab_size}), got [{low}, {high}]; "
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
    if _is_bool(value) or not isinstance(value, numbers.Integral):
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
    if _is_bool(ignore_index) or not isinstance(ignore_index, numbers.Integral):
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


# --------------------------------------------------------------------------------------- counts
def check_count(value: Any, field: str, minimum: int = 0, fix: str = "") -> int:
    """A whole number ``>= minimum``: a Python / numpy int, an integral float or a one-element tensor.

    Bools, NaN, infinities and fractions are refused, so nothing is truncated by a later cast;
    ``fix`` is added to the error of a count below ``minimum``.

    Example:
        >>> check_count(torch.tensor(12), "num_items_in_batch"), check_count(3.0, "num_tokens[0]")
        (12, 3)
        >>> check_count(1.5, "num_tokens[0]")
        Traceback (most recent call last):
        ...
        ValueError: num_tokens[0] is 1.5; counts must be whole numbers >= 0
    """
    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or value.dtype == torch.bool or value.is_complex():
            raise TypeError(f"{field} must be a whole number (an int or a one-element tensor), got {value!r}")
        value = value.item()
    if _is_bool(value) or not isinstance(value, numbers.Real):
        raise TypeError(f"{field} must be a whole number, got {value!r}")
    if isinstance(value, numbers.Integral):
        count = int(value)
    elif math.isfinite(value) and float(value).is_integer():
        count = int(value)
    else:
        raise ValueError(f"{field} is {value}; counts must be whole numbers >= {minimum}")
    if count < minimum:
        problem = "counts cannot be negative" if count < 0 else f"it must be >= {minimum}"
        raise ValueError(f"{field} is {count}; {problem}{'; ' + fix if fix else ''}")
    return count


def check_counts(values: Any, field: str, minimum: int = 1, fix: str = "") -> list[int]:
    """Every entry of a sequence of counts, as :func:`check_count` (errors name ``field[i]``).

    Example:
        >>> check_counts([3, np.int64(4), 5.0], "num_tokens")
        [3, 4, 5]
        >>> check_counts([3, 0], "num_tokens")
        Traceback (most recent call last):
        ...
        ValueError: num_tokens[1] is 0; it must be >= 1
    """
    return [check_count(value, f"{field}[{i}]", minimum, fix) for i, value in enumerate(_as_list(values, field))]


def check_nll_sums(values: Any, field: str = "nll") -> list[float]:
    """Summed negative log-likelihoods (nats), each a real number ``>= 0`` (``inf`` allowed, NaN not).

    Example:
        >>> check_nll_sums([1.5, np.float32(2)])
        [1.5, 2.0]
    """
    out = []
    for i, value in enumerate(_as_list(values, field)):
        if isinstance(value, torch.Tensor) and value.numel() == 1:
            value = value.item()
        if _is_bool(value) or not isinstance(value, numbers.Real):
            raise TypeError(f"{field}[{i}] must be a number (a summed negative log-likelihood in nats), got {value!r}")
        if math.isnan(value) or value < 0:
            raise ValueError(f"{field}[{i}] is {value}; it must be a summed negative log-likelihood >= 0 (nats)")
        out.append(float(value))
    return out


def _as_list(values: Any, field: str) -> list:
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise TypeError(f"{field} must be a list with one entry per text, got {type(values).__name__}")
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu()
        if values.dim() != 1:
            raise ValueError(f"{field} must be 1-D (one entry per text), got shape {tuple(values.shape)}")
    elif isinstance(values, np.ndarray) and values.ndim != 1:
        raise ValueError(f"{field} must be 1-D (one entry per text), got shape {values.shape}")
    return list(values)


def check_num_items_in_batch(value: Any, local_count: int) -> float | None:
    """``num_items_in_batch``: None, or a finite number >= 0 (a one-element tensor included), 0 only without targets.

    It counts the targets of every micro-batch and process of the optimizer step. ``transformers``
    passes it as a float tensor (divided by the tensor / context / sequence-parallel sizes, or by
    the GPU count under ``DataParallel``), so it need not be whole nor above ``local_count``, the
    targets of the batch at hand; but 0 with targets in this batch would silently drop the division.

    Example:
        >>> check_num_items_in_batch(torch.tensor(8.0), local_count=3)
        8.0
        >>> check_num_items_in_batch(0, local_count=3)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: num_items_in_batch is 0 but this batch has 3 targets; it must count the targets of every ...
    """
    if value is None:
        return None
    count = check_number(value, "num_items_in_batch", 0.0, hint="the number of targets of the whole step, or None")
    if count == 0 and local_count > 0:
        raise ValueError(
            f"num_items_in_batch is 0 but this batch has {local_count} targets; it must count the targets of every "
            "micro-batch and process of the step (or be None)"
        )
    return count


# --------------------------------------------------------------------------------- real numbers
def _interval(low: float, high: float, low_open: bool, high_open: bool) -> str:
    upper = "inf)" if math.isinf(high) else f"{high:g}{')' if high_open else ']'}"
    return f"{'(' if low_open else '['}{low:g}, {upper}"


def check_number(
    value: Any,
    field: str,
    low: float = -math.inf,
    high: float = math.inf,
    *,
    low_open: bool = False,
    high_open: bool = False,
    optional: bool = False,
    hint: str = "",
) -> float | None:
    """A finite real number (Python / numpy int or float, a one-element tensor) in the interval.

    Bools are refused (``TypeError``), as are NaN and infinities (``ValueError``).

    Example:
        >>> check_number(np.float32(0.25), "mlm_probability", 0.0, 1.0)
        0.25
        >>> check_number(float("nan"), "z_loss", 0.0)
        Traceback (most recent call last):
        ...
        ValueError: z_loss must be a finite number in [0, inf), got nan
    """
    if value is None and optional:
        return None
    if isinstance(value, torch.Tensor) and value.numel() == 1 and value.dtype != torch.bool:
        value = value.item()
    if _is_bool(value) or not isinstance(value, numbers.Real):
        raise TypeError(f"{field} must be a number, got {value!r}{'; ' + hint if hint else ''}")
    number = float(value)
    inside = (number > low if low_open else number >= low) and (number < high if high_open else number <= high)
    if not math.isfinite(number) or not inside:
        raise ValueError(
            f"{field} must be a finite number in {_interval(low, high, low_open, high_open)}, got {value!r}"
            + (f"; {hint}" if hint else "")
        )
    return number


def check_per_row(
    value: Any,
    field: str,
    low: float,
    high: float,
    *,
    integer: bool,
    low_open: bool = False,
    hint: str = "",
) -> int | float | torch.Tensor | None:
    """A parameter given as a scalar or one value per batch row (a 1-D tensor / list); None stays None.

    Scalars come back as ``int`` (``integer``) or ``float``, sequences as a 1-D tensor. Every value
    must be finite and in ``[low, high]`` (``(low, high]`` with ``low_open``).

    Example:
        >>> check_per_row([0.5, 0.9], "top_p", 0.0, 1.0, integer=False, low_open=True)
        tensor([0.5000, 0.9000])
        >>> check_per_row(np.int64(3), "top_k", 0, math.inf, integer=True)
        3
        >>> check_per_row(2.5, "top_k", 0, math.inf, integer=True)
        Traceback (most recent call last):
        ...
        TypeError: top_k must be an int or a 1-D tensor with one value per row, got 2.5
    """
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        if any(_is_bool(v) or not isinstance(v, numbers.Real) for v in value):
            raise TypeError(f"{field} must be a number or a list of numbers (one per row), got {value!r}")
        value = torch.tensor(value)
    elif isinstance(value, np.ndarray):
        value = torch.from_numpy(value)
    if isinstance(value, torch.Tensor):
        if value.dim() != 1 or value.numel() == 0:
            raise ValueError(f"{field} tensor must be 1-D with one value per row, got {tuple(value.shape)}")
        if value.dtype == torch.bool or value.is_complex() or (integer and value.is_floating_point()):
            kind = "an integer" if integer else "a real"
            raise TypeError(f"{field} tensor must have {kind} dtype, got {value.dtype}")
        values = value.detach().double()
    elif _is_bool(value) or not isinstance(value, numbers.Integral if integer else numbers.Real):
        kind = "an int" if integer else "a number"
        raise TypeError(f"{field} must be {kind} or a 1-D tensor with one value per row, got {value!r}")
    else:
        values = torch.tensor([float(value)], dtype=torch.float64)
    low_ok = values > low if low_open else values >= low
    if not bool((values.isfinite() & low_ok & (values <= high)).all()):
        upper = "inf)" if math.isinf(high) else f"{high:g}]"
        raise ValueError(f"{field} must be in {'(' if low_open else '['}{low:g}, {upper}, got {value!r}; {hint}")
    if isinstance(value, torch.Tensor):
        return value.detach()
    return int(value) if integer else float(value)


# -------------------------------------------------------------------------------------- lengths
def check_length(value: Any, field: str, minimum: int = 1, why: str = "", optional: bool = False) -> int | None:
    """An int ``>= minimum`` (numpy ints accepted; bools and floats refused); None when ``optional``.

    ``why`` says what the minimum is for, and goes into the error.

    Example:
        >>> check_length(np.int64(8), "stride"), check_length(None, "max_length", optional=True)
        (8, None)
        >>> check_length(2.0, "input_length", minimum=3)
        Traceback (most recent call last):
        ...
        TypeError: input_length must be an int >= 3, got 2.0
    """
    if value is None and optional:
        return None
    reason = f" ({why})" if why else ""
    if _is_bool(value) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{field} must be an int >= {minimum}{reason}, got {value!r}")
    if value < minimum:
        raise ValueError(f"{field} must be an int >= {minimum}{reason}, got {value!r}")
    return int(value)


def check_flag(value: Any, field: str, optional: bool = False) -> bool | None:
    """``True`` or ``False`` (numpy bools too); a string such as ``"False"`` is refused, not read as true.

    Example:
        >>> check_flag(np.bool_(True), "packing")
        True
        >>> check_flag("False", "packing")
        Traceback (most recent call last):
        ...
        TypeError: packing must be True or False, got 'False'
    """
    if value is None and optional:
        return None
    if not isinstance(value, _BOOLS):
        raise TypeError(f"{field} must be True or False{' (or None)' if optional else ''}, got {value!r}")
    return bool(value)


# ------------------------------------------------------------------------------------- targets
def check_has_targets(num_targets: int, what: str, fix: str) -> None:
    """Refuse a batch / configuration whose targets count is 0: nothing would be trained or scored.

    Example:
        >>> check_has_targets(0, "this batch", "drop features without a completion")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: this batch has no target (every label is -100), so nothing would be trained or scored; drop ...
    """
    if num_targets == 0:
        raise ValueError(f"{what} has no target (every label is -100), so nothing would be trained or scored; {fix}")


def check_return_tensors(value: Any) -> str:
    """Every collator returns torch tensors: ``return_tensors`` must be ``"pt"``.

    >>> check_return_tensors("pt")
    'pt'
    """
    if value != "pt":
        raise ValueError(f"return_tensors must be 'pt' (the collators build torch tensors), got {value!r}")
    return value
