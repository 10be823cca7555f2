# Generated from hf_lmobj/metrics/domain_metric.py by hf_lmobj.metrics.export_space: do not edit here.
# Edit the package file, then run `python -c "import hf_lmobj.metrics as m; m.sync_space_copies()"`.
"""The per-domain part of the two ``evaluate`` metrics: ``domains=`` and the bootstrap options in, sliced figures out.

Contract. ``compute`` (and ``add_batch`` / ``add``) take ``domains``, one tag path per entry (``code/python``:
checked where it enters, as :class:`.slices.DocumentSums` checks a domain), with sums or with texts and a model;
``compute`` alone takes ``bootstrap_samples`` (an int >= 0; 0, the default, gives no interval), ``confidence`` (in
``(0, 1)``, default 0.95) and ``seed`` (an int in ``[0, 2**32)``, default 0). Every key of the unsliced result stays
as it was; with domains, the metric's own figures of :func:`.slices.domain_figures` are added (``perplexity/<domain>``,
each tag level and its ``.../macro``, ``perplexity/micro``, ``perplexity/macro``); with ``bootstrap_samples > 0``,
``<key>_ci_low`` / ``<key>_ci_high`` (:func:`.uncertainty.bootstrap_intervals`: stratified document bootstrap,
percentile method, seeded) for each of them and for the whole-set figure (``perplexity_ci_low`` is the interval of
``perplexity/micro``: resampled within each domain when domains are given, over all entries when not). Entries are
documents in the order they were added (``doc_id`` 0, 1, ...), so one ``compute`` and the same entries added in
batches give the same figures and intervals.

Why a metric's table holds a borrowed count: a metric knows only its own counts (``num_tokens`` and ``num_words``, or
``num_bytes``), and each figure depends on the NLL and its own count alone, so the missing count is set to the known
one and only the metric's own figures are kept: they are exactly :func:`.slices.domain_figures`' values.

Example:
    >>> table = domain_table([2.0, 4.0], ["wiki", "code"], tokens=[1, 2], words=[0, 0])
    >>> from .slices import domain_figures
    >>> sorted(domain_results(domain_figures(table), {}, ("perplexity",), sliced=True))
    ['perplexity/code', 'perplexity/macro', 'perplexity/micro', 'perplexity/wiki']

Standard library, numpy and the siblings only: this file ships in each Space folder.
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

from .domain_tags import _check_tag_path
from .slices import DocumentSums
from .sums import _as_list, _is_bool, _scalar
from .sums_metric import SumsMetric
from .uncertainty import _check_probability, _check_seed, interval_keys

#: The keywords of ``compute`` alone that set the intervals.
BOOTSTRAP_OPTIONS = ("bootstrap_samples", "confidence", "seed")
#: The one domain of a table built for whole-set intervals when no domain was given (its keys are not returned).
WHOLE_SET = "all"


def check_bootstrap_options(
    bootstrap_samples: Any = 0, confidence: Any = 0.95, seed: Any = 0
) -> tuple[int, float, int]:
    """``(bootstrap_samples, confidence, seed)`` checked: an int >= 0 (0: no interval), a number in (0, 1), a seed.

    Example:
        >>> check_bootstrap_options(-1)
        Traceback (most recent call last):
        ...
        ValueError: bootstrap_samples must be an int >= 0 (resamples; 0: no interval), got -1
    """
    why = "resamples; 0: no interval"
    if _is_bool(bootstrap_samples) or not isinstance(bootstrap_samples, numbers.Integral):
        raise TypeError(f"bootstrap_samples must be an int >= 0 ({why}), got {bootstrap_samples!r}")
    if bootstrap_samples < 0:
        raise ValueError(f"bootstrap_samples must be an int >= 0 ({why}), got {bootstrap_samples!r}")
    return int(bootstrap_samples), _check_probability(confidence, "confidence"), _check_seed(seed)


def domain_table(
    nll: Sequence[float],
    domains: Sequence[str],
    bootstrap_samples: int = 0,
    *,
    tokens: Sequence[int] | None = None,
    nbytes: Sequence[int] | None = None,
    words: Sequence[int] | None = None,
) -> DocumentSums | None:
    """The documents' table for the per-domain figures, or None when neither domains nor intervals are asked.

    ``domains`` hold ``""`` where none was given (the metric's feature); all or none must be given. ``tokens`` or
    ``nbytes`` (at least one) stands for the other when missing; ``words`` count only when every entry has some.
    Without domains (and ``bootstrap_samples > 0``) every document is in :data:`WHOLE_SET`.
    """
    given = [domain != "" for domain in domains]
    if any(given) and not all(given):
        raise ValueError(
            f"domains: entry {given.index(True)} has a domain and entry {given.index(False)} has none; give a "
            "domain to every entry (in every add / add_batch call too) or to none"
        )
    if not any(given) and not bootstrap_samples:
        return None
    if tokens is None and nbytes is None:
        raise ValueError("domain_table needs tokens= or nbytes= (the metric's own count)")
    counted = words is not None and all(count > 0 for count in words)
    return DocumentSums(
        nll=nll,
        tokens=tokens if tokens is not None else nbytes,
        bytes=nbytes if nbytes is not None else tokens,
        words=words if counted else [0] * len(nll),
        doc_id=list(range(len(nll))),
        domain=domains if any(given) else [WHOLE_SET] * len(nll),
    )


def domain_results(
    figures: dict[str, float], intervals: dict[str, tuple[float, float]], names: Sequence[str], *, sliced: bool
) -> dict[str, float]:
    """The keys a metric adds: its ``names``' figures (when ``sliced``) with their intervals, and whole-set intervals.

    ``figures`` and ``intervals`` are :func:`.slices.domain_figures` and :func:`.uncertainty.bootstrap_intervals`
    of one table (``{}``: no intervals). ``<name>_ci_low`` / ``<name>_ci_high`` come from ``<name>/micro``.
    """
    keep = [key for key in figures if key.split("/", 1)[0] in names] if sliced else []
    out = {key: figures[key] for key in keep}
    out.update(interval_keys({key: intervals[key] for key in keep if key in intervals}))
    for name in names:
        if f"{name}/micro" in intervals:
            out[f"{name}_ci_low"], out[f"{name}_ci_high"] = intervals[f"{name}/micro"]
    return out


class DomainMetric(SumsMetric):
    """A :class:`.sums.SumsMetric` with the ``domains`` label and the bootstrap options (listed before the scorer).

    Use as ``class Perplexity(DomainMetric, TextScoringMetric, evaluate.Metric)``. Its ``compute`` refuses a bad
    option, and ``compute`` / ``add_batch`` refuse bad domains for texts, before any text is scored.
    """

    labels = ("domains",)
    options = BOOTSTRAP_OPTIONS
    check_label = staticmethod(_check_tag_path)

    def compute(self, **kwargs):
        """``compute`` of :class:`.sums.SumsMetric`, the bootstrap options and the texts' domains checked first."""
        check_bootstrap_options(**{name: kwargs[name] for name in BOOTSTRAP_OPTIONS if name in kwargs})
        _check_text_domains(kwargs.get("predictions"), kwargs.get("domains"))
        return super().compute(**kwargs)

    def add_batch(self, **kwargs):
        """``add_batch`` of :class:`.sums.SumsMetric`, the texts' domains checked first."""
        _check_text_domains(kwargs.get("predictions"), kwargs.get("domains"))
        return super().add_batch(**kwargs)


def _check_text_domains(texts: Any, domains: Any) -> None:
    """Domains given with texts: each a tag path, one per text (checked before the model scores them)."""
    if texts is None or domains is None:
        return
    checked = [
        _check_tag_path(_scalar(domain), f"domains[{i}]") for i, domain in enumerate(_as_list(domains, "domains"))
    ]
    if hasattr(texts, "__len__") and len(checked) != len(texts):
        raise ValueError(f"predictions ({len(texts)}) and domains ({len(checked)}) must have one entry per text each")
