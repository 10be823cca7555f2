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

#: Results that also go into the Hub's ``.eval_results/<task_id>.yaml`` files (metric types).
EVAL_RESULTS_METRICS = ("perplexity", "bits_per_byte")
#: The embedded corpora (``python-stdlib``, ``python-stdlib-functions``, ...) get ids in this namespace.
EMBEDDED_CORPUS_NAMESPACE = "hf-lmobj"
#: ``source.url`` of the results files: the project that computed them.
EVAL_RESULTS_SOURCE_URL = "https://github.com/hf-lmobj/hf_lmobj"


def hub_dataset_id(dataset_name: str) -> str:
    """The dataset id of a results file: a Hub id as it is, an embedded corpus as ``hf-lmobj/<name>``.

    The embedded corpus is the standard library's source of the running Python, so its id is stable
    (``hf-lmobj/python-stdlib``) and the Python version goes into the entry's ``notes``.

    >>> hub_dataset_id("python-stdlib"), hub_dataset_id("Salesforce/wikitext")
    ('hf-lmobj/python-stdlib', 'Salesforce/wikitext')
    """
    return f"{EMBEDDED_CORPUS_NAMESPACE}/{dataset_name}" if dataset_name.startswith("python-stdlib") else dataset_name


def eval_results_entries(results: Mapping[str, tuple], dataset_name: str, *, date: str) -> dict[str, list[dict]]:
    """The Hub's ``.eval_results`` entries, by ``task_id`` (the file name): perplexity and bits per byte.

    Same values as the model-index (``results`` from :func:`split_metrics`). ``task_id`` is the
    metric type, with ``_<split>`` appended for a split other than validation. Each entry follows
    https://huggingface.co/docs/hub/eval-results: ``dataset`` (``id``, ``task_id``), ``value``,
    ``date`` (ISO-8601), ``source`` (``url``, ``name``) and ``notes``.

    >>> entries = eval_results_entries({"eval_perplexity": ("perplexity", "Perplexity", "validation", 9.5)},
    ...                                "python-stdlib", date="2026-01-15")
    >>> entries["perplexity"][0]["dataset"], entries["perplexity"][0]["value"]
    ({'id': 'hf-lmobj/python-stdlib', 'task_id': 'perplexity'}, 9.5)

    ``results`` are checked (:func:`check_results`: a NaN value, a split that is no name, two results
    of one ``task_id`` are refused), ``dataset_name`` must be a non-empty string and ``date`` an
    ISO-8601 date (``2026-01-15``) or date-time.
    """
    results = check_results(results)
    if not isinstance(dataset_name, str) or not dataset_name.strip():
        raise ValueError(f"dataset_name must be a non-empty string, got {dataset_name!r}")
    try:
        dataset_name.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(f"dataset_name holds a lone surrogate at position {error.start} ({dataset_name!r}); "
                         "pass the dataset's real name") from None  # fmt: skip
    _check_date(date)
    files: dict[str, list[dict]] = {}
    sources: dict[str, str] = {}  # task_id -> the key it came from
    dataset_id = hub_dataset_id(dataset_name)
    for key, (metric_type, name, split, value) in results.items():
        if metric_type not in EVAL_RESULTS_METRICS:
            continue
        task_id = metric_type if split == "validation" else f"{metric_type}_{split}"
        if task_id in sources:
            raise ValueError(f"results[{key!r}] and results[{sources[task_id]!r}] are both {task_id!r} on "
                             f"{dataset_id}; keep one (split_metrics keeps one per metric and split)")  # fmt: skip
        sources[task_id] = key
        notes = f"{name} on the {split} split ({key} in metrics.json)"
        if dataset_id != dataset_name:
            notes += f"; embedded corpus: the Python {sys.version_info.major}.{sys.version_info.minor} standard library"
        files.setdefault(task_id, []).append(
            {
                "dataset": {"id": dataset_id, "task_id": task_id},
                "value": value,
                "date": date,
                "source": {"url": EVAL_RESULTS_SOURCE_URL, "name": "hf_lmobj"},
                "notes": notes,
            }
        )
    return files


def _check_date(date: Any) -> str:
    if not isinstance(date, str):
        raise TypeError(f"date must be an ISO-8601 string such as '2026-01-15', got {type(date).__name__}")
    try:
        datetime.datetime.fromisoformat(date.replace("Z", "+00:00"))
    except ValueError:
        raise ValueError(f"date must be an ISO-8601 date or date-time such as '2026-01-15', got {date!r}") from None
    return date
