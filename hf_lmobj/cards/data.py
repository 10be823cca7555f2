"""What a model card says, as data: the model-index results, tags, versions (the objective's own facts: the registry).

:func:`split_metrics` separates a run's evaluation results (loss, perplexity, bits per byte,
accuracy, per split) from its run statistics; :func:`build_card_data` turns the results into the
``huggingface_hub.ModelCardData`` whose YAML the Hub reads (library, license, datasets, tags, base
model, ``model-index``). Rendering the README from the ``model_cards/`` templates and plotting the
loss curve are :mod:`.writer`'s part; everything here needs only
``huggingface_hub``.

Example:
    >>> results, stats = split_metrics({"eval_loss": 2.0, "eval_runtime": 1.5})
    >>> results, stats
    ({'eval_loss': ('loss', 'Loss (nats per target token)', 'validation', 2.0)}, {'eval_runtime': 1.5})
"""

from __future__ import annotations

import importlib.metadata
import math
import numbers
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from hf_lmobj.objectives import ObjectiveSpec

__all__ = [
    "FRAMEWORKS",
    "split_metrics",
    "framework_versions",
    "format_value",
    "hub_base_model",
    "build_card_data",
    "merge_foreign_card_data",
    "EVAL_RESULTS_METRICS",
    "EMBEDDED_CORPUS_NAMESPACE",
    "EVAL_RESULTS_SOURCE_URL",
    "hub_dataset_id",
    "eval_results_entries",
]


FRAMEWORKS = ("hf_lmobj", "torch", "transformers", "accelerate", "datasets", "peft", "huggingface_hub")


# Evaluation results that go into the model-index: base name -> (Hub metric type, display name).
_RESULT_METRICS = {
    "loss": ("loss", "Loss (nats per target token)"),
    "perplexity": ("perplexity", "Perplexity"),
    "bits_per_byte": ("bits_per_byte", "Bits per byte"),
    "masked_accuracy": ("accuracy", "Masked-token accuracy"),
    "accuracy": ("accuracy", "Accuracy"),
}


_SPLITS = {"eval_": "validation", "validation_": "validation", "test_": "test"}  # key prefix -> split


# Suffixes of prefixed keys that are run statistics, not results (eval_runtime, eval_num_tokens, ...).
_NOT_RESULTS = ("runtime", "per_second", "samples", "steps", "tokens", "bytes", "seen", "epoch",
                "preparation_time", "flos")  # fmt: skip


def _as_number(key: str, value: Any) -> int | float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"metrics[{key!r}] must be a real number, got {type(value).__name__}: {value!r}")
    return int(value) if isinstance(value, numbers.Integral) else float(value)


def split_metrics(metrics: Mapping[str, Any]) -> tuple[dict[str, tuple[str, str, str, float]], dict[str, Any]]:
    """Separate evaluation results (for the model-index) from run statistics.

    A key is an evaluation result when, after an optional ``eval_`` / ``validation_`` / ``test_``
    prefix (the split), it is a known metric (loss, perplexity, bits_per_byte, accuracy,
    masked_accuracy), or when it has that prefix and is not a throughput / counter figure; ``loss``
    only counts with a prefix (bare or ``train_`` losses are training statistics). Results map to
    ``(metric type, display name, split, value)``.

    >>> results, stats = split_metrics({"eval_perplexity": 9.5, "train_loss": 2.5, "eval_runtime": 1.0})
    >>> results, stats
    ({'eval_perplexity': ('perplexity', 'Perplexity', 'validation', 9.5)}, {'train_loss': 2.5, 'eval_runtime': 1.0})
    """
    results: dict[str, tuple[str, str, str, float]] = {}
    stats: dict[str, Any] = {}
    for key, value in metrics.items():
        if not isinstance(key, str):
            raise TypeError(f"metrics keys must be str, got {key!r}")
        value = _as_number(key, value)
        prefix = next((p for p in _SPLITS if key.startswith(p)), "")
        base = key[len(prefix) :]
        known = base in _RESULT_METRICS and (prefix or base != "loss")
        generic = prefix and not base.endswith(_NOT_RESULTS)
        if known or generic:
            metric_type, name = _RESULT_METRICS.get(base, (base, base.replace("_", " ").capitalize()))
            results[key] = (metric_type, name, _SPLITS.get(prefix, "validation"), value)
        else:
            stats[key] = value
    return results, stats


def framework_versions(names: Sequence[str] = FRAMEWORKS) -> dict[str, str]:
    """Installed versions of the libraries a run used (``"not installed"`` when absent).

    >>> framework_versions(["hf_lmobj", "surely-not-a-package"])["surely-not-a-package"]
    'not installed'
    """
    versions = {}
    for name in names:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def format_value(value: Any) -> str:
    """A table-cell rendering: 6 significant digits for floats, thousands separators for ints.

    >>> format_value(12.345678), format_value(3.0), format_value(1234567), format_value([1, 2])
    ('12.3457', '3.0', '1,234,567', '[1, 2]')
    """
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, numbers.Integral):
        return f"{int(value):,}"
    if isinstance(value, numbers.Real):
        text = f"{float(value):.6g}"
        return text if not math.isfinite(value) or any(c in text for c in ".en") else f"{text}.0"
    return str(value).replace("|", "\\|").replace("\n", " ")


def hub_base_model(name_or_path: str | None) -> str | None:
    """``name_or_path`` when it names a Hub model; None for None or a local folder (not a Hub reference).

    >>> hub_base_model("google-t5/t5-small"), hub_base_model("."), hub_base_model(None)
    ('google-t5/t5-small', None, None)
    """
    if name_or_path is None or Path(name_or_path).exists():
        return None
    return str(name_or_path)


def build_card_data(spec: ObjectiveSpec, objective: str, results: Mapping[str, tuple], *, model_name: str,
                    dataset_name: str, base_model: str | None, license: str) -> ModelCardData:  # fmt: skip
    """The YAML metadata: library, license, datasets, tags, base model and the model-index.

    ``pipeline_tag`` is set only where a transformers pipeline runs the model (transformers 5 has no
    text2text-generation pipeline), and ``base_model`` only for a Hub id (:func:`hub_base_model`).
    """
    eval_results = [
        EvalResult(task_type=spec.task, dataset_type=dataset_name, dataset_name=dataset_name,
                   dataset_split=split, metric_type=metric_type, metric_name=name, metric_value=value)
        for metric_type, name, split, value in results.values()
    ]  # fmt: skip
    return ModelCardData(
        library_name="transformers",
        license=license,
        datasets=[dataset_name],
        tags=["hf_lmobj", objective, spec.task],
        base_model=hub_base_model(base_model),
        pipeline_tag=spec.pipeline_tag,
        model_name=model_name,
        eval_results=eval_results or None,
    )


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
    """
    files: dict[str, list[dict]] = {}
    dataset_id = hub_dataset_id(dataset_name)
    for key, (metric_type, name, split, value) in results.items():
        if metric_type not in EVAL_RESULTS_METRICS:
            continue
        task_id = metric_type if split == "validation" else f"{metric_type}_{split}"
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


def merge_foreign_card_data(card_data: ModelCardData, readme: Path) -> ModelCardData:
    """Keep what another library wrote into ``readme``'s metadata (PEFT's adapter card), beside ours.

    Its ``library_name`` (``peft``) and tags stay, minus tags that name a local folder as base model;
    its ``base_model`` is used when ours is unknown and it is a Hub id. A card written by an earlier
    hf_lmobj run in the same folder is replaced, not merged.
    """
    if not readme.is_file():
        return card_data
    existing = ModelCard.load(readme).data
    if "hf_lmobj" in (existing.tags or []):
        return card_data
    if existing.library_name:
        card_data.library_name = existing.library_name
    kept = [t for t in existing.tags or [] if not t.startswith("base_model:") or hub_base_model(t.split(":", 2)[-1])]
    card_data.tags = list(dict.fromkeys([*kept, *(card_data.tags or [])]))
    card_data.base_model = card_data.base_model or hub_base_model(existing.base_model)
    return card_data
