"""Per-text sums to corpus figures: the input checks and the formulas, no model needed.

Contract. Every figure is corpus-level and weighted by its unit, computed from per-text sums: ``nll`` (summed
negative log-likelihood in nats, a real ``>= 0``, ``inf`` allowed, NaN not) and one count per text (tokens, UTF-8
bytes or lm-eval words, each a whole number ``>= 1``). ``perplexity = exp(sum nll / sum tokens)``, ``bits_per_byte =
sum nll / sum bytes / ln 2``; lm-eval's ``byte_perplexity = exp(sum nll / sum bytes)`` and ``word_perplexity =
exp(sum nll / sum words)``, its words being :func:`count_words` (``len(re.split(r"\\s+", text))``). Every entry is
checked before any cast (``TypeError`` for a value that is not a number, ``ValueError`` for a bad value or length),
and an overflowing ``exp`` is ``inf``; a total beyond the largest float is exact where the figure is finite
(:func:`nll_per_unit`) and ``inf`` where it is not (:func:`total_nll`), never an ``OverflowError``. Lists, tuples,
numpy arrays and 1-D tensors are accepted, yet torch is never imported here (a tensor is recognised once its caller
has imported torch). :mod:`.sums_metric` gives an ``evaluate`` metric these checks on ``compute`` / ``add_batch`` /
``add``. Standard library only: this file is copied beside ``.scoring`` into each Space folder.

Example:
    >>> round(perplexity_from_sums([3.912], [3]), 3), round(bits_per_byte_from_sums([math.log(4)], [2]), 3)
    (3.684, 1.0)

Why apart from :mod:`.scoring`: a figure from sums needs no model, so its definition loads without one.
"""

from __future__ import annotations

import math
import numbers
import re
import sys
from collections.abc import Mapping, Sequence
from collections.abc import Set as AbstractSet
from fractions import Fraction
from typing import Any

#: What to do about an entry that scored nothing (it has no perplexity).
EMPTY_ENTRY_FIX = "every entry needs at least one scored token/byte (drop empty texts)"
#: The largest count a metric's int64 feature holds.
INT64_MAX = 2**63 - 1


def count_words(text: str) -> int:
    """lm-evaluation-harness's word count, ``len(re.split(r"\\s+", text))`` (so never 0).

    Example:
        >>> count_words("def f(x):\\n    return x"), count_words(" a b "), count_words("")
        (4, 4, 1)
    """
    return len(re.split(r"\s+", text))


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool) or type(value).__name__ == "bool_"  # numpy bools too


def _torch() -> Any:
    """The torch module if something has imported it, else None (no tensor can exist without it)."""
    return sys.modules.get("torch")


def _check_int(value: Any, field: str, minimum: int = 1, why: str = "") -> int:
    """An int ``>= minimum`` (numpy ints accepted; bools and floats refused), as an int."""
    reason = f" ({why})" if why else ""
    if _is_bool(value) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{field} must be an int >= {minimum}{reason}, got {value!r}")
    if value < minimum:
        raise ValueError(f"{field} must be an int >= {minimum}{reason}, got {value!r}")
    return int(value)


def _check_flag(value: Any, field: str) -> bool:
    """``True`` or ``False`` (numpy bools too); a string such as ``"False"`` is refused."""
    if not _is_bool(value):
        raise TypeError(f"{field} must be True or False, got {value!r}")
    return bool(value)


def _as_list(values: Any, field: str) -> list:
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise TypeError(f"{field} must be a list with one entry per text, got {type(values).__name__}")
    if isinstance(values, (AbstractSet, Mapping)):  # no order (a set also merges equal entries)
        raise TypeError(f"{field} must be a list with one entry per text, in order; got a {type(values).__name__}")
    shape = tuple(values.shape) if hasattr(values, "shape") else (len(values),)
    if len(shape) != 1:
        raise ValueError(f"{field} must be 1-D (one entry per text), got shape {shape}")
    torch = _torch()
    if torch is not None and isinstance(values, torch.Tensor):
        values = values.detach().cpu()
    return list(values)


def _scalar(value: Any) -> Any:
    torch = _torch()
    if torch is not None and isinstance(value, torch.Tensor) and value.numel() == 1 and value.dtype != torch.bool:
        return value.item()
    return value


def _check_counts(values: Any, field: str, minimum: int = 1, fix: str = "") -> list[int]:
    """Whole numbers ``>= minimum``, one per text (integral floats accepted; bools, NaN, 1.5 refused)."""
    out = []
    for i, value in enumerate(_as_list(values, field)):
        value, name = _scalar(value), f"{field}[{i}]"
        if _is_bool(value) or not isinstance(value, numbers.Real):
            raise TypeError(f"{name} must be a whole number, got {value!r}")
        if not isinstance(value, numbers.Integral) and not (math.isfinite(value) and float(value).is_integer()):
            raise ValueError(f"{name} is {value}; counts must be whole numbers >= {minimum}")
        count = int(value)
        if count < minimum:
            problem = "counts cannot be negative" if count < 0 else f"it must be >= {minimum}"
            raise ValueError(f"{name} is {count}; {problem}{'; ' + fix if fix else ''}")
        out.append(count)
    return out


def _check_nll_sums(values: Any, field: str = "nll") -> list[float]:
    """Summed negative log-likelihoods (nats), each a real number ``>= 0`` (``inf`` allowed, NaN not)."""
    out = []
    for i, value in enumerate(_as_list(values, field)):
        value = _scalar(value)
        if _is_bool(value) or not isinstance(value, numbers.Real):
            raise TypeError(f"{field}[{i}] must be a number (a summed negative log-likelihood in nats), got {value!r}")
        try:
            number = float(value) + 0.0  # + 0.0: -0.0 becomes 0.0
        except OverflowError:  # an int or Fraction beyond the largest float
            raise ValueError(
                f"{field}[{i}] is beyond the largest float ({sys.float_info.max:.4g}); pass float('inf') for a text "
                "the model cannot produce"
            ) from None
        if math.isnan(number) or number < 0:
            raise ValueError(f"{field}[{i}] is {value}; it must be a summed negative log-likelihood >= 0 (nats)")
        out.append(number)
    return out


def check_window_lengths(max_length: int, stride: int) -> tuple[int, int]:
    """``max_length`` (>= 1) and ``stride`` (in ``[1, max_length]``) of the sliding windows, as ints.

    Example:
        >>> check_window_lengths(8, 9)
        Traceback (most recent call last):
        ...
        ValueError: stride must be an int in [1, max_length=8] (new tokens scored per window), got 9
    """
    max_length = _check_int(max_length, "max_length", 1, "tokens per forward pass")
    stride = _check_int(stride, "stride", 1, "new tokens scored per window after the first")
    if stride > max_length:
        raise ValueError(
            f"stride must be an int in [1, max_length={max_length}] (new tokens scored per window), got {stride}"
        )
    return max_length, stride


def check_sums(nll: Sequence[float], counts: Sequence[int], count_name: str) -> tuple[list[float], list[int]]:
    """Validate per-entry NLL sums and their counts (tokens or bytes) before any cast; return plain lists.

    Every entry is checked: ``TypeError`` for a value that is not a number (a string, a bool);
    ``ValueError`` for a length mismatch, an empty input, a NaN or negative NLL, or a count that is
    not a whole number >= 1 (1.5 is refused, not truncated; an entry that scored nothing has no
    perplexity: leave it out).

    Example:
        >>> check_sums([1.5], [0], "num_tokens")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: num_tokens[0] is 0; it must be >= 1; every entry needs at least one scored token/byte ...
        >>> check_sums([1.0], [1.5], "num_tokens")
        Traceback (most recent call last):
        ...
        ValueError: num_tokens[0] is 1.5; counts must be whole numbers >= 1
    """
    nll, counts = _check_nll_sums(nll, "nll"), _check_counts(counts, count_name, 1, EMPTY_ENTRY_FIX)
    if len(nll) != len(counts):
        raise ValueError(f"nll ({len(nll)}) and {count_name} ({len(counts)}) must have one entry per text each")
    if not nll:
        raise ValueError(f"nll and {count_name} are empty; pass at least one entry")
    return nll, counts


def exp_or_inf(x: float) -> float:
    """``exp(x)``, and ``inf`` where that overflows a float: the perplexity of a hopeless model, everywhere.

    Example:
        >>> exp_or_inf(0.0), exp_or_inf(1e6)
        (1.0, inf)
    """
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def total_nll(nll: Sequence[float]) -> float:
    """The corpus NLL ``sum nll`` of checked sums (:func:`_check_nll_sums`), correctly rounded; ``inf`` beyond a float.

    ``math.fsum`` raises ``OverflowError`` once a partial sum passes the largest float, even with an
    ``inf`` among the entries; the total of such a corpus is ``inf`` here.

    Example:
        >>> total_nll([0.1, 0.2]), total_nll([1e308, 1e308]), total_nll([math.inf, 1e308, 1e308])
        (0.30000000000000004, inf, inf)
    """
    if any(math.isinf(value) for value in nll):
        return math.inf
    try:
        return math.fsum(nll)
    except OverflowError:
        return math.inf


def nll_per_unit(nll: Sequence[float], counts: Sequence[int], scale: float = 1.0) -> float:
    """``sum nll / scale / sum counts`` of checked sums (``counts`` >= 1 each): exact where a float total overflows.

    ``scale`` is a positive unit change (``ln 2`` for bits). A total NLL beyond the largest float, or a
    total count beyond it, is divided exactly (as fractions), so the ratio is right whenever it is
    itself a float; ``inf`` where it is not, or where an entry is ``inf``.

    Example:
        >>> nll_per_unit([1e308, 1e308], [10**10, 10**10]), nll_per_unit([1e308, 1e308], [1, 1])
        (1e+298, 1e+308)
        >>> nll_per_unit([1.5e308, 1.5e308], [1, 1], scale=math.log(2)), nll_per_unit([math.inf], [1])
        (inf, inf)
        >>> nll_per_unit([3.0], [10**400])
        0.0
    """
    if any(math.isinf(value) for value in nll):
        return math.inf
    count = sum(counts)
    try:
        return math.fsum(nll) / scale / count
    except OverflowError:  # fsum's intermediate overflow, or a count too large to convert to a float
        exact = sum((Fraction(value) for value in nll), Fraction(0)) / Fraction(scale) / count
        try:
            return float(exact)
        except OverflowError:
            return math.inf


def perplexity_from_sums(nll: Sequence[float], num_tokens: Sequence[int]) -> float:
    """Corpus perplexity ``exp(sum nll / sum num_tokens)`` (token-weighted, not a mean of ratios); inf on overflow.

    Example:
        >>> perplexity_from_sums([1e308, 1e308], [1, 1]), perplexity_from_sums([math.inf, 1.0], [2, 2])
        (inf, inf)
    """
    nll, num_tokens = check_sums(nll, num_tokens, "num_tokens")
    return exp_or_inf(nll_per_unit(nll, num_tokens))


def bits_per_byte_from_sums(nll: Sequence[float], num_bytes: Sequence[int]) -> float:
    """Corpus bits per byte ``sum nll / ln 2 / sum num_bytes`` (bytes of the original UTF-8 text); inf beyond a float."""
    nll, num_bytes = check_sums(nll, num_bytes, "num_bytes")
    return nll_per_unit(nll, num_bytes, math.log(2))


def byte_perplexity_from_sums(nll: Sequence[float], num_bytes: Sequence[int]) -> float:
    """lm-eval's ``byte_perplexity``, ``exp(sum nll / sum num_bytes)`` (``2 ** bits_per_byte``); inf on overflow."""
    nll, num_bytes = check_sums(nll, num_bytes, "num_bytes")
    return exp_or_inf(nll_per_unit(nll, num_bytes))


def word_perplexity_from_sums(nll: Sequence[float], num_words: Sequence[int]) -> float:
    """lm-eval's ``word_perplexity``, ``exp(sum nll / sum num_words)`` (words: :func:`count_words`)."""
    nll, num_words = check_sums(nll, num_words, "num_words")
    return exp_or_inf(nll_per_unit(nll, num_words))
