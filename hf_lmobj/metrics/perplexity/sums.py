# Generated from hf_lmobj/metrics/sums.py by hf_lmobj.metrics.export_space: do not edit here.
# Edit the package file, then run `python -c "import hf_lmobj.metrics as m; m.sync_space_copies()"`.
"""Per-text sums to corpus figures: the input checks, the formulas and the metrics' way in, no model needed.

Contract. Every figure is corpus-level and weighted by its unit, computed from per-text sums: ``nll`` (summed
negative log-likelihood in nats, a real ``>= 0``, ``inf`` allowed, NaN not) and one count per text (tokens, UTF-8
bytes or lm-eval words, each a whole number ``>= 1``). ``perplexity = exp(sum nll / sum tokens)``, ``bits_per_byte =
sum nll / sum bytes / ln 2``; lm-eval's ``byte_perplexity = exp(sum nll / sum bytes)`` and ``word_perplexity =
exp(sum nll / sum words)``, its words being :func:`count_words` (``len(re.split(r"\\s+", text))``). Every entry is
checked before any cast (``TypeError`` for a value that is not a number, ``ValueError`` for a bad value or length),
and an overflowing ``exp`` is ``inf``; a total beyond the largest float is exact where the figure is finite
(:func:`nll_per_unit`) and ``inf`` where it is not (:func:`total_nll`), never an ``OverflowError``. Lists, tuples,
numpy arrays and 1-D tensors are accepted, yet torch is never imported here (a tensor is recognised once its caller
has imported torch). :class:`SumsMetric` gives an ``evaluate`` metric these checks on ``compute`` / ``add_batch`` /
``add``; with texts as ``predictions`` (and a model) :func:`sums_from_compute_args` gets the sums from the metric's
``score_texts`` (:func:`.scoring.score_texts`, given by the metric script: this file never imports it). Standard
library only: this file is copied beside ``.scoring`` into each Space folder.

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
from collections.abc import Callable, Mapping, Sequence
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


#: The ``compute`` / ``add_batch`` keywords that go to :func:`.scoring.score_texts` with ``predictions``.
MODEL_KWARGS = ("model_id", "model", "tokenizer", "max_length", "stride", "add_start_token", "batch_size",
                "device", "progress", "windows")  # fmt: skip


class SumsMetric:
    """Mixin for an ``evaluate.Metric`` fed ``nll=`` / ``<count_name>=`` sums, or texts and a model.

    ``compute``, ``add_batch`` and ``add`` check every entry here, before ``evaluate`` casts the counts to int64
    (which would truncate 1.5 to 1 and hide it). Set ``count_name`` in the subclass, and ``optional_counts`` for
    more count columns (e.g. ``num_words``): an entry given without them gets 0 there (not counted), so one feature
    set serves both kinds of input. Likewise ``labels`` are optional string columns (e.g. ``domains``), one
    non-empty string per entry checked by ``check_label`` (``""`` where not given), and ``options`` are keywords of
    ``compute`` alone (e.g. ``bootstrap_samples``), handed to ``_compute`` as they are.
    """

    count_name: str = ""
    optional_counts: tuple[str, ...] = ()
    labels: tuple[str, ...] = ()
    options: tuple[str, ...] = ()
    #: ``check(value, "<label>[i]") -> str`` for each given label (None: a non-empty string).
    check_label: Callable | None = None
    #: What scores texts for ``compute(predictions=texts, ...)``: ``.scoring``'s ``score_texts`` (None: sums only).
    score_texts: Callable | None = None

    def _checked(self, sums: dict) -> dict:
        if "nll" not in sums or self.count_name not in sums:
            raise ValueError(f"pass nll=[...] and {self.count_name}=[...] (one entry per text)")
        sums["nll"], sums[self.count_name] = check_sums(sums["nll"], sums[self.count_name], self.count_name)
        n, check = len(sums["nll"]), self.check_label or _check_label
        for name in self.optional_counts:  # 0: not counted
            sums[name] = _check_counts(sums[name], name, minimum=0) if name in sums else [0] * n
        for name in self.labels:  # "": not given
            given = None if sums.get(name) is None else enumerate(_as_list(sums[name], name))
            sums[name] = [""] * n if given is None else [check(_scalar(v), f"{name}[{i}]") for i, v in given]
        for name in (*self.optional_counts, *self.labels):
            if len(sums[name]) != n:
                raise ValueError(f"nll ({n}) and {name} ({len(sums[name])}) must have one entry per text each")
        for name in (self.count_name, *self.optional_counts):
            _check_int64(sums[name], name)
        return sums

    def _sums(self, predictions, references, kwargs: dict) -> dict:
        return sums_from_compute_args(predictions, references, kwargs, self.count_name, self.optional_counts,
                                      self.score_texts, self.labels)  # fmt: skip

    def compute(self, *, predictions=None, references=None, **kwargs):
        """``compute(nll=..., <count_name>=...)``, or ``compute(predictions=texts, model_id=...)``."""
        options = {name: kwargs.pop(name) for name in self.options if name in kwargs}
        sums = self._sums(predictions, references, kwargs)
        if any(name in sums for name in ("nll", self.count_name, *self.optional_counts, *self.labels)):
            super().add_batch(**self._checked(sums))  # evaluate's own: checked once, as compute(**inputs) adds them
        return super().compute(**options)

    def add_batch(self, *, predictions=None, references=None, **kwargs):
        """Add per-text sums (``nll=``, ``<count_name>=``), or texts scored with a model."""
        self._refuse_options(kwargs, "add_batch")
        return super().add_batch(**self._checked(self._sums(predictions, references, kwargs)))

    def add(self, *, prediction=None, reference=None, **kwargs):
        """Add one text's sums: ``add(nll=..., <count_name>=...)``."""
        self._refuse_options(kwargs, "add")
        if prediction is not None or reference is not None:
            raise ValueError(f"add takes nll= and {self.count_name}= (one text's sums); score texts with add_batch")
        if "nll" not in kwargs or self.count_name not in kwargs:
            raise ValueError(f"add needs nll= and {self.count_name}= (one text's sums)")
        names = ("nll", self.count_name, *(n for n in (*self.optional_counts, *self.labels) if n in kwargs))
        one = self._checked({name: [kwargs.pop(name)] for name in names})
        return super().add(**{name: values[0] for name, values in one.items()}, **kwargs)

    def _refuse_options(self, kwargs: dict, method: str) -> None:
        given = [name for name in self.options if name in kwargs]
        if given:
            raise TypeError(f"{method} takes entries only; pass {'=, '.join(given)}= to compute()")


def _check_label(value: Any, field: str) -> str:
    """A non-empty string (one entry's label, such as its domain)."""
    if not isinstance(value, str) or not value:
        kind = ValueError if isinstance(value, str) else TypeError
        raise kind(f"{field} must be a non-empty string (give every entry one, or none at all), got {value!r}")
    return value


def _check_int64(counts: Sequence[int], field: str) -> None:
    """Counts the metric's int64 features can hold (pyarrow would fail deep inside on a larger one)."""
    for i, count in enumerate(counts):
        if count > INT64_MAX:
            raise ValueError(f"{field}[{i}] is {count}, beyond the metric's int64 counts (at most {INT64_MAX}); "
                             "split the text, or use the *_from_sums functions, which take any count")  # fmt: skip


def sums_from_compute_args(
    predictions,
    references,
    kwargs: dict,
    count_name: str,
    optional_counts: Sequence[str] = (),
    score_texts: Callable | None = None,
    labels: Sequence[str] = (),
) -> dict:
    """The dispatch shared by the metrics' ``compute``: the ``nll=`` / ``<count_name>=`` sums to add.

    With ``predictions`` (texts) and a model, the texts are scored by ``score_texts`` (the signature of
    :func:`.scoring.score_texts`) and their sums returned in ``kwargs`` (with ``optional_counts`` taken from the
    scores too; ``labels`` such as ``domains=`` stay in ``kwargs`` either way); without, ``kwargs`` already hold the
    sums and are returned as they are. Checks that exactly one way in is used, and that every keyword is one of them
    (a misspelt ``num_token=`` is refused by name, not met by ``evaluate`` later).
    """
    sums = ("nll", count_name, *optional_counts, *labels)
    unknown = sorted(str(k) for k in kwargs if k not in (*sums, *MODEL_KWARGS))
    if unknown:
        raise TypeError(
            f"unknown keyword(s) {unknown}; this metric takes the sums {'=, '.join(sums)}=, or predictions=<texts> "
            f"with {'=, '.join(MODEL_KWARGS)}="
        )
    model_kwargs = {k: kwargs.pop(k) for k in MODEL_KWARGS if k in kwargs}
    if references is not None:
        raise ValueError(f"this metric takes no references; pass predictions=texts or nll=/{count_name}=")
    if predictions is None:
        if model_kwargs:
            raise ValueError(f"{sorted(model_kwargs)} need predictions=<list of texts> to score")
        return kwargs
    if "nll" in kwargs or count_name in kwargs or any(name in kwargs for name in optional_counts):
        raise ValueError(f"pass either predictions=texts (with a model) or nll=/{count_name}=, not both")
    model, model_id = model_kwargs.pop("model", None), model_kwargs.pop("model_id", None)
    if (model is None) == (model_id is None):
        raise ValueError("scoring texts needs exactly one of model_id=<path or Hub id> or model=<causal LM>")
    if score_texts is None:
        raise ValueError("this metric takes sums only (nll=, " + count_name + "=): it was given no score_texts")
    tokenizer = model_kwargs.pop("tokenizer", None)
    scores = score_texts(model if model is not None else model_id, tokenizer, predictions, **model_kwargs)
    counts = {name: [getattr(s, name) for s in scores] for name in (count_name, *optional_counts)}
    return {**kwargs, "nll": [s.nll for s in scores], **counts}
