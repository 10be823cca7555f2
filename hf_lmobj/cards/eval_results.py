"""The Hub's ``.eval_results`` entries: perplexity and bits per byte of a run, whole and per domain.

:func:`eval_results_entries` turns :func:`~hf_lmobj.cards.data.split_metrics`' results, and the per-domain
figures of ``metrics.json`` (``bits_per_byte/<domain>``, ``.../micro``, ``.../macro`` and their
``_ci_low`` / ``_ci_high``), into the entries of ``.eval_results/<metric>.yaml``
(https://huggingface.co/docs/hub/eval-results); writing the files is :mod:`.writer`'s part.

Per domain, the field that tells entries apart is ``dataset.task_id``: the Hub's format has no config or split
field, and an entry's identity (what the writer merges by) is ``dataset`` ``(id, task_id, revision)``, so a
domain in ``notes`` alone would make every domain the same result. The ``task_id`` of a per-domain entry is its
``metrics.json`` key (``bits_per_byte/code/python``, ``bits_per_byte/code/macro``, ``bits_per_byte/micro``), in the
file of its metric (``bits_per_byte.yaml``) beside the whole-set entry (``task_id: bits_per_byte``), which stays as
it was; the interval, which the format has no field for, goes into ``notes``.
"""

from __future__ import annotations

import datetime
import math
import sys
from collections.abc import Mapping
from typing import Any

from hf_lmobj.cards.data import _RESULT_METRICS, _as_number, check_results
from hf_lmobj.cards.provenance import Provenance, resolve_provenance

#: Results that also go into the Hub's ``.eval_results/<task_id>.yaml`` files (metric types).
EVAL_RESULTS_METRICS = ("perplexity", "bits_per_byte")
#: ``source.url`` of the results files: the project that computed them.
EVAL_RESULTS_SOURCE_URL = "https://github.com/hf-lmobj/hf_lmobj"
#: The key suffixes of an interval's bounds (``bits_per_byte/wiki_ci_low``), as :mod:`hf_lmobj.metrics.uncertainty`.
_BOUNDS = ("_ci_low", "_ci_high")


def eval_results_entries(
    results: Mapping[str, tuple],
    dataset_name: str | None = None,
    *,
    date: str,
    provenance: Any = None,
    per_domain: Mapping[str, Any] | None = None,
) -> dict[str, list[dict]]:
    """The Hub's ``.eval_results`` entries, by file name (the whole-set ``task_id``): perplexity and bits per byte.

    Same values as the model-index (``results`` from :func:`split_metrics`). ``task_id`` is the
    metric type, with ``_<split>`` appended for a split other than validation. ``per_domain`` (flat keys as
    :func:`hf_lmobj.metrics.slices.domain_figures` and :func:`hf_lmobj.metrics.uncertainty.interval_keys` give
    them, or ``metrics.json`` whole) adds one entry per ``perplexity/<node>`` and ``bits_per_byte/<node>`` key
    (each domain, tag level, ``micro``, ``macro``) to its metric's file, its ``task_id`` that key and its
    interval, when both bounds are there, in ``notes``; other keys are not Hub results here and are passed over
    (as results of other metrics are). Each entry follows
    https://huggingface.co/docs/hub/eval-results: ``dataset`` (``id``, ``task_id``), ``value``,
    ``date`` (ISO-8601), ``source`` (``url``, ``name``) and ``notes``. The dataset is the run's validation
    source (``provenance``: a run's record, :func:`~hf_lmobj.cards.provenance.check_provenance`; its
    documents, bytes, selection and text fingerprint go into ``notes``), or ``dataset_name`` for a caller
    that knows only that (one of the two). Per-domain figures are of the validation text.

    >>> entries = eval_results_entries({"eval_perplexity": ("perplexity", "Perplexity", "validation", 9.5)},
    ...                                "python-stdlib", date="2026-01-15")
    >>> entries["perplexity"][0]["dataset"], entries["perplexity"][0]["value"]
    ({'id': 'hf-lmobj/python-stdlib', 'task_id': 'perplexity'}, 9.5)

    >>> domains = {"bits_per_byte/wiki": 1.25, "bits_per_byte/wiki_ci_low": 1.1, "bits_per_byte/wiki_ci_high": 1.4}
    >>> entry = eval_results_entries({}, "python-stdlib", date="2026-01-15", per_domain=domains)["bits_per_byte"][0]
    >>> entry["dataset"]["task_id"], entry["value"], entry["notes"].split("; ")[1]
    ('bits_per_byte/wiki', 1.25, 'bootstrap interval [1.1, 1.4] (bits_per_byte/wiki_ci_low, _ci_high)')

    ``results`` are checked (:func:`check_results`: a NaN value, a split that is no name, two results
    of one ``task_id`` are refused), ``dataset_name`` must be a non-empty string and ``date`` an
    ISO-8601 date (``2026-01-15``) or date-time; ``per_domain`` (:func:`check_per_domain`): a NaN or impossible
    value, a key without a domain, a bound without its figure or its other bound, a low bound above the high one.
    """
    results = check_results(results)
    domains = check_per_domain(per_domain)
    record = resolve_provenance(provenance, dataset_name)
    _check_date(date)
    files: dict[str, list[dict]] = {}
    sources: dict[str, str] = {}  # task_id -> the key it came from
    dataset_id = record.validation_id
    for key, (metric_type, name, split, value) in results.items():
        if metric_type not in EVAL_RESULTS_METRICS:
            continue
        task_id = metric_type if split == "validation" else f"{metric_type}_{split}"
        if task_id in sources:
            raise ValueError(f"results[{key!r}] and results[{sources[task_id]!r}] are both {task_id!r} on "
                             f"{dataset_id}; keep one (split_metrics keeps one per metric and split)")  # fmt: skip
        sources[task_id] = key
        files.setdefault(task_id, []).append(
            {
                "dataset": {"id": dataset_id, "task_id": task_id},
                "value": value,
                "date": date,
                "source": {"url": EVAL_RESULTS_SOURCE_URL, "name": "hf_lmobj"},
                "notes": _notes(record, key, name, split),
            }
        )
    for key, (value, interval) in domains.items():
        metric_type = key.split("/", 1)[0]
        files.setdefault(metric_type, []).append(
            {
                "dataset": {"id": dataset_id, "task_id": key},
                "value": value,
                "date": date,
                "source": {"url": EVAL_RESULTS_SOURCE_URL, "name": "hf_lmobj"},
                "notes": _domain_notes(record, key, interval),
            }
        )
    return files


def check_per_domain(per_domain: Any) -> dict[str, tuple[int | float, tuple[float, float] | None]]:
    """``{key: (value, (low, high) or None)}`` of the perplexity and bits-per-byte keys of ``per_domain``, checked.

    Keys ``<metric>/<node>`` (``metric`` in :data:`EVAL_RESULTS_METRICS`) are figures, ``<figure key>_ci_low`` /
    ``_ci_high`` their bounds; other keys are passed over. None gives ``{}``.

    Example:
        >>> check_per_domain({"perplexity/wiki": 3.0, "perplexity/wiki_ci_low": 2.5, "loss": 1.0})
        Traceback (most recent call last):
        ...
        ValueError: per_domain['perplexity/wiki_ci_low'] has no per_domain['perplexity/wiki_ci_high']: pass both bounds
    """
    if per_domain is None:
        return {}
    if not isinstance(per_domain, Mapping):
        raise TypeError(f"per_domain must be a dict of flat keys such as 'bits_per_byte/wiki', got {per_domain!r}")
    figures: dict[str, int | float] = {}
    bounds: dict[str, dict[str, float]] = {}
    for key, value in per_domain.items():
        if not isinstance(key, str):
            raise TypeError(f"per_domain keys must be strings such as 'bits_per_byte/wiki', got {key!r}")
        metric = key.split("/", 1)[0]
        if metric not in EVAL_RESULTS_METRICS or "/" not in key:
            continue
        suffix = next((s for s in _BOUNDS if key.endswith(s)), "")
        figure = key.removesuffix(suffix) if suffix else key
        if not figure.split("/", 1)[1]:
            raise ValueError(f"per_domain[{key!r}] names no domain after '{metric}/' (e.g. '{metric}/wiki')")
        number = _check_figure(metric, key, value)
        if suffix:
            bounds.setdefault(figure, {})[suffix] = number
        else:
            figures[key] = number
    for figure, pair in bounds.items():
        given = next(iter(pair))
        if figure not in figures:
            raise ValueError(f"per_domain[{figure + given!r}] bounds {figure!r}, which per_domain lacks; pass it too")
        if len(pair) == 1:
            other = figure + next(s for s in _BOUNDS if s != given)
            raise ValueError(f"per_domain[{figure + given!r}] has no per_domain[{other!r}]: pass both bounds")
        if pair["_ci_low"] > pair["_ci_high"]:
            raise ValueError(f"per_domain[{figure + '_ci_low'!r}] = {pair['_ci_low']} is above its _ci_high "
                             f"{pair['_ci_high']}: pass the bounds in order")  # fmt: skip
    return {key: (value, (bounds[key]["_ci_low"], bounds[key]["_ci_high"]) if key in bounds else None)
            for key, value in figures.items()}  # fmt: skip


def _check_figure(metric: str, key: str, value: Any) -> int | float:
    """A perplexity (>= 1) or bits per byte (>= 0) of ``per_domain[key]``: a real number, not NaN (+inf allowed)."""
    number = _as_number(value, f"per_domain[{key!r}]")
    if math.isnan(number):
        raise ValueError(f"per_domain[{key!r}] is nan: leave an unmeasured figure out")
    if number < (1 if metric == "perplexity" else 0):
        what = "a perplexity is exp(mean NLL) >= 1" if metric == "perplexity" else "bits per byte cannot be negative"
        raise ValueError(f"per_domain[{key!r}] is {number}; {what}")
    return number


def _domain_notes(record: Provenance, key: str, interval: tuple[float, float] | None) -> str:
    """What a per-domain entry measured: which documents, its key, its interval, the validation text."""
    metric, node = key.split("/", 1)
    if node == "micro":
        what = "every domain together (micro: sum over sum)"
    elif node == "macro":
        what = "the mean over the top-level domains (macro)"
    elif node.endswith("/macro"):
        what = f"the mean over the sub-domains of {node.removesuffix('/macro')} (macro)"
    else:
        what = f"the domain {node}"
    notes = _notes(record, key, f"{_RESULT_METRICS[metric][1]} of {what}", "validation")
    if interval is None:
        return notes
    head, _, tail = notes.partition("; ")
    bound = f"bootstrap interval [{interval[0]:.6g}, {interval[1]:.6g}] ({key}_ci_low, _ci_high)"
    return "; ".join(part for part in (head, bound, tail) if part)


def _notes(record: Provenance, key: str, name: str, split: str) -> str:
    """What an entry measured: the figure, its key, the validation text (size, selection, fingerprint)."""
    notes = f"{name} on the {split} split ({key} in metrics.json)"
    if record.validation is not None and split == "validation":
        notes += f"; validation text: {record.validation.sentence()}"
    if record.validation_kind == "embedded corpus":
        notes += f"; embedded corpus: the Python {sys.version_info.major}.{sys.version_info.minor} standard library"
    return notes


def _check_date(date: Any) -> str:
    if not isinstance(date, str):
        raise TypeError(f"date must be an ISO-8601 string such as '2026-01-15', got {type(date).__name__}")
    try:
        datetime.datetime.fromisoformat(date.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"date must be an ISO-8601 date or date-time such as '2026-01-15', got {date!r}") from None
    return date
