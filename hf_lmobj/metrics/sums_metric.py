"""The metrics' way in: an ``evaluate`` metric's ``compute`` / ``add_batch`` / ``add`` inputs, checked, as sums.

Contract. :class:`SumsMetric` gives an ``evaluate`` metric the checks of :mod:`.sums` on ``compute`` / ``add_batch``
/ ``add``, before ``evaluate`` casts the counts to int64; with texts as ``predictions`` (and a model)
:func:`sums_from_compute_args` gets the sums from the metric's ``score_texts`` (:func:`.scoring.score_texts`, given
by the metric script: this file never imports it). A misspelt keyword, two ways in at once or a count beyond int64 is
refused by name. Standard library and the sibling :mod:`.sums` only: this file ships in each Space folder.

Example:
    >>> sums_from_compute_args(None, None, {"nll": [1.0], "num_bytes": [2]}, "num_bytes")
    {'nll': [1.0], 'num_bytes': [2]}

Why apart from :mod:`.sums`: the figures from sums need no metric; this is how an ``evaluate`` metric takes them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from .sums import INT64_MAX, _as_list, _check_counts, _scalar, check_sums

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
