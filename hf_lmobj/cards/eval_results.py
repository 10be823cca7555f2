"""The Hub's ``.eval_results`` entries: perplexity and bits per byte of a run, by ``task_id``.

:func:`eval_results_entries` turns :func:`~hf_lmobj.cards.data.split_metrics`' results into the
entries of ``.eval_results/<task_id>.yaml`` (https://huggingface.co/docs/hub/eval-results);
writing the files is :mod:`.writer`'s part.
"""

from __future__ import annotations

import datetime
import sys
from collections.abc import Mapping
from typing import Any

from hf_lmobj.cards.data import check_results
from hf_lmobj.cards.provenance import Provenance, resolve_provenance

#: Results that also go into the Hub's ``.eval_results/<task_id>.yaml`` files (metric types).
EVAL_RESULTS_METRICS = ("perplexity", "bits_per_byte")
#: ``source.url`` of the results files: the project that computed them.
EVAL_RESULTS_SOURCE_URL = "https://github.com/hf-lmobj/hf_lmobj"


def eval_results_entries(
    results: Mapping[str, tuple], dataset_name: str | None = None, *, date: str, provenance: Any = None
) -> dict[str, list[dict]]:
    """The Hub's ``.eval_results`` entries, by ``task_id`` (the file name): perplexity and bits per byte.

    Same values as the model-index (``results`` from :func:`split_metrics`). ``task_id`` is the
    metric type, with ``_<split>`` appended for a split other than validation. Each entry follows
    https://huggingface.co/docs/hub/eval-results: ``dataset`` (``id``, ``task_id``), ``value``,
    ``date`` (ISO-8601), ``source`` (``url``, ``name``) and ``notes``. The dataset is the run's validation
    source (``provenance``: a run's record, :func:`~hf_lmobj.cards.provenance.check_provenance`; its
    documents, bytes, selection and text fingerprint go into ``notes``), or ``dataset_name`` for a caller
    that knows only that (one of the two).

    >>> entries = eval_results_entries({"eval_perplexity": ("perplexity", "Perplexity", "validation", 9.5)},
    ...                                "python-stdlib", date="2026-01-15")
    >>> entries["perplexity"][0]["dataset"], entries["perplexity"][0]["value"]
    ({'id': 'hf-lmobj/python-stdlib', 'task_id': 'perplexity'}, 9.5)

    ``results`` are checked (:func:`check_results`: a NaN value, a split that is no name, two results
    of one ``task_id`` are refused), ``dataset_name`` must be a non-empty string and ``date`` an
    ISO-8601 date (``2026-01-15``) or date-time.
    """
    results = check_results(results)
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
    return files


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
