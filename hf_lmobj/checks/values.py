"""Checks of counts, real-valued parameters, lengths, flags and ``return_tensors``.

Example:
    >>> check_count(3, "num_items_in_batch")
    3
    >>> check_flag("yes", "packing")
    Traceback (most recent call last):
    ...
    TypeError: packing must be True or False, got 'yes'
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import numpy as np
import torch

from hf_lmobj.checks._common import BOOLS, is_bool

#: Seeds are ints in [0, SEED_LIMIT): numpy's range (``transformers.set_seed`` seeds numpy too).
SEED_LIMIT = 2**32


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
    if is_bool(value) or not isinstance(value, numbers.Real):
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
        if is_bool(value) or not isinstance(value, numbers.Real):
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
    if is_bool(value) or not isinstance(value, numbers.Real):
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
        if any(is_bool(v) or not isinstance(v, numbers.Real) for v in value):
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
    elif is_bool(value) or not isinstance(value, numbers.Integral if integer else numbers.Real):
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
    if is_bool(value) or not isinstance(value, numbers.Integral):
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
    if not isinstance(value, BOOLS):
        raise TypeError(f"{field} must be True or False{' (or None)' if optional else ''}, got {value!r}")
    return bool(value)


def check_name(value: Any, field: str, optional: bool = False) -> str | None:
    """A string with a visible character: a path, a dataset / column / model name; None when ``optional``.

    An empty or blank string is refused rather than read as "not given".

    Example:
        >>> check_name("text", "text_column"), check_name(None, "dataset_name", optional=True)
        ('text', None)
        >>> check_name(" ", "text_column")
        Traceback (most recent call last):
        ...
        ValueError: text_column must be a non-empty string, got ' '
    """
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise TypeError(f"{field} must be a string{' (or None)' if optional else ''}, got {value!r}")
    if not value.strip():
        hint = "; leave it out (None) for the default" if optional else ""
        raise ValueError(f"{field} must be a non-empty string, got {value!r}{hint}")
    return value


def check_seed(value: Any, field: str = "seed", optional: bool = False) -> int | None:
    """A whole-number seed in ``[0, SEED_LIMIT)`` (numpy's range); None when ``optional``.

    Floats (even ``1.0``), bools and strings are refused, so ``1.7`` never becomes ``1``.

    Example:
        >>> check_seed(np.int64(7))
        7
        >>> check_seed(-1)
        Traceback (most recent call last):
        ...
        ValueError: seed must be an int in [0, 2**32), got -1
    """
    if value is None and optional:
        return None
    if is_bool(value) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{field} must be an int in [0, 2**32){' (or None)' if optional else ''}, got {value!r}")
    if not 0 <= value < SEED_LIMIT:
        raise ValueError(f"{field} must be an int in [0, 2**32), got {value!r}")
    return int(value)


def check_weights(values: Any, field: str = "weights", count: int | None = None) -> list[float]:
    """Mixture weights: finite numbers ``>= 0`` with a positive sum, returned normalised to sum 1.

    Each weight is divided by the largest before summing, so ``[1e308, 1e308]`` gives
    ``[0.5, 0.5]`` instead of overflowing to ``inf``; ``count`` is the number of sources.

    Example:
        >>> check_weights([1e308, 1e308])
        [0.5, 0.5]
        >>> check_weights([0, 0], "weights")
        Traceback (most recent call last):
        ...
        ValueError: weights are all 0; give at least one source a weight > 0
    """
    items = _as_list(values, field)
    if count is not None and len(items) != count:
        raise ValueError(f"{field} has {len(items)} entries for {count} source(s); give one weight per source")
    if not items:
        raise ValueError(f"{field} is empty; give one weight per source")
    weights = [check_number(w, f"{field}[{i}]", 0.0, math.inf, high_open=True) for i, w in enumerate(items)]
    largest = max(weights)
    if largest == 0:
        raise ValueError(f"{field} are all 0; give at least one source a weight > 0")
    scaled = [w / largest for w in weights]
    total = math.fsum(scaled)
    return [w / total for w in scaled]


def check_unique_names(values: Any, field: str) -> list[str]:
    """A list of non-empty strings with no name twice (each is a key: of counts, of sources).

    Example:
        >>> check_unique_names(["web", "code"], "names")
        ['web', 'code']
        >>> check_unique_names(["web", "web"], "names")
        Traceback (most recent call last):
        ...
        ValueError: names has 'web' twice (at 0 and 1); give every source its own name
    """
    names = [check_name(v, f"{field}[{i}]") for i, v in enumerate(_as_list(values, field))]
    first: dict[str, int] = {}
    for i, name in enumerate(names):
        if name in first:
            raise ValueError(f"{field} has {name!r} twice (at {first[name]} and {i}); give every source its own name")
        first[name] = i
    return names  # type: ignore[return-value]


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
