"""What a model card says, as data: the model-index results, tags, versions (the objective's own facts: the registry).

:func:`split_metrics` separates a run's evaluation results (loss, perplexity, bits per byte,
accuracy, per split) from its run statistics, one result per metric and split (the rest, and what was
not measured, stay statistics: :func:`left_out_results` says which and why); :func:`build_card_data` turns the results into the
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
import re
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from huggingface_hub import EvalResult, ModelCard, ModelCardData

from hf_lmobj.cards.provenance import Provenance, check_content_fingerprint, resolve_provenance
from hf_lmobj.objectives import ObjectiveSpec

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
                "preparation_time", "flos", "words", "texts", "documents", "scored", "skipped")  # fmt: skip


# Which of two results of one metric and split the model-index keeps (the higher rank), and what each is.
_PREFIX_RANK = {"validation_": 2, "eval_": 1, "test_": 1, "": 0}
_PREFIX_SOURCE = {
    "validation_": "the post-training scoring of the whole held-out text (every token once, with its context)",
    "eval_": "Trainer.evaluate over the evaluation rows (each row scored without the text before it)",
    "test_": "the test split",
    "": "a figure without a split prefix",
}
# Statistics that count something (the last word of the key): never negative, never NaN.
_COUNT_WORDS = frozenset({"tokens", "bytes", "samples", "steps", "seen", "words", "texts", "documents", "scored",
                          "skipped", "flos"})  # fmt: skip


class _Sorted(NamedTuple):
    results: dict[str, tuple[str, str, str, int | float]]
    stats: dict[str, Any]
    left_out: dict[str, str]  # key -> why it is not in the model-index


def _as_number(value: Any, field: str) -> int | float:
    """``value`` as a Python int / float (numpy scalars too); None, strings and bools are refused naming ``field``.

    The one check of a number for the cards (metrics, results, the loss curve's log history).
    """
    if isinstance(value, bool) or type(value).__name__ == "bool_" or not isinstance(value, numbers.Real):
        raise TypeError(f"{field} must be a real number, got {type(value).__name__}: {value!r}")
    return int(value) if isinstance(value, numbers.Integral) else float(value)


#: The key of ``metrics.json`` (``write_metrics``) that says which ``null`` values were NaN or infinite.
NON_FINITE_KEY = "non_finite_metrics"
_NOT_MEASURED = "None: not measured (null in metrics.json)"


def _non_finite(metrics: Mapping[str, Any]) -> dict[str, float]:
    """``metrics.json``'s ``non_finite_metrics`` (``{key: "nan"}``) as ``{key: nan}``; each key must be ``null``."""
    named = metrics.get(NON_FINITE_KEY, {})
    if not isinstance(named, Mapping):
        raise TypeError(f"metrics[{NON_FINITE_KEY!r}] must be a dict {{key: 'nan' | 'inf' | '-inf'}} (what "
                        f"write_metrics writes), got {type(named).__name__}")  # fmt: skip
    out = {}
    for key, text in named.items():
        if key not in metrics or metrics[key] is not None:
            raise ValueError(f"metrics[{NON_FINITE_KEY!r}] names {key!r}, which is not null in metrics; "
                             "pass metrics.json as write_metrics wrote it")  # fmt: skip
        word = re.search(r"-?inf|nan", str(text).lower())  # repr(): 'nan', '-inf', 'np.float64(nan)'
        if word is None:
            raise ValueError(f"metrics[{NON_FINITE_KEY!r}][{key!r}] is {text!r}, not 'nan', 'inf' or '-inf'")
        out[key] = float(word.group())
    return out


def _check_count_statistic(key: str, value: int | float) -> None:
    if key.rsplit("_", 1)[-1] in _COUNT_WORDS and not (math.isfinite(value) and value >= 0):
        raise ValueError(f"metrics[{key!r}] is {value}; a count cannot be negative, NaN or infinite")


def _unreportable(base: str, value: int | float) -> str | None:
    """Why ``value`` cannot stand in the model-index (None: it can); an impossible value is a ``ValueError``."""
    if math.isnan(value):
        return "NaN: nothing was measured (an eval set without any target?)"
    unbounded = base.endswith(("loss", "perplexity", "bits_per_byte"))  # NLL figures: +inf is a real result
    if math.isinf(value) and not (unbounded and value > 0):
        return f"{value} is not a possible {base.replace('_', ' ')}"
    return None


def _check_range(key: str, base: str, metric_type: str, value: int | float) -> None:
    if base.endswith("perplexity") and value < 1:
        raise ValueError(f"metrics[{key!r}] is {value}; a perplexity is exp(mean NLL) >= 1")
    if base.endswith("bits_per_byte") and value < 0:
        raise ValueError(f"metrics[{key!r}] is {value}; bits per byte cannot be negative")
    if (metric_type == "accuracy" or base.endswith("accuracy")) and not 0 <= value <= 1:
        raise ValueError(f"metrics[{key!r}] is {value}; an accuracy is a fraction in [0, 1]")


def _prefix(key: str) -> str:
    return next((p for p in _SPLITS if key.startswith(p)), "")


def _sort_metrics(metrics: Mapping[str, Any]) -> _Sorted:
    """Results, statistics and the results left out of the model-index (with a warning for each unmeasured one)."""
    if not isinstance(metrics, Mapping):
        raise TypeError(f"metrics must be a dict, got {type(metrics).__name__}")
    results: dict[str, tuple[str, str, str, int | float]] = {}
    stats: dict[str, Any] = {}
    left_out: dict[str, str] = {}
    kept: dict[tuple[str, str, str], str] = {}  # (metric type, name, split) -> the key in results
    non_finite = _non_finite(metrics)
    for key, value in metrics.items():
        if not isinstance(key, str):
            raise TypeError(f"metrics keys must be str, got {key!r}")
        if key == NON_FINITE_KEY:
            continue  # metrics.json's note of which nulls were NaN / inf: read above
        if key.endswith("fingerprint"):  # validation_fingerprint: which text the figures are on (16 hex digits)
            stats[key] = check_content_fingerprint(value, f"metrics[{key!r}]")
            continue
        value = non_finite.get(key, value)
        value = None if value is None else _as_number(value, f"metrics[{key!r}]")
        prefix = _prefix(key)
        base = key[len(prefix) :]
        known = base in _RESULT_METRICS and (prefix or base != "loss")
        generic = prefix and not base.endswith(_NOT_RESULTS)
        if not (known or generic):
            if value is not None:
                _check_count_statistic(key, value)
            stats[key] = value
            continue
        metric_type, name = _RESULT_METRICS.get(base, (base, base.replace("_", " ").capitalize()))
        why = _NOT_MEASURED if value is None else _unreportable(base, value)
        if why is not None:
            left_out[key], stats[key] = why, value
            warnings.warn(f"{key} is left out of the model-index and .eval_results: {why}", RuntimeWarning, 2)
            continue
        _check_range(key, base, metric_type, value)
        identity = (metric_type, name, _SPLITS.get(prefix, "validation"))
        other = kept.get(identity)
        if other is not None and _PREFIX_RANK[_prefix(other)] >= _PREFIX_RANK[prefix]:
            left_out[key], stats[key] = _superseded(key, other), value
            continue
        if other is not None:
            left_out[other], stats[other] = _superseded(other, key), results.pop(other)[3]
        kept[identity] = key
        results[key] = (*identity, value)
    return _Sorted(results, stats, left_out)


def _superseded(loser: str, winner: str) -> str:
    return (f"the same {winner.removeprefix(_prefix(winner)).replace('_', ' ')} as {winner}, which the model-index "
            f"keeps: {winner} is {_PREFIX_SOURCE[_prefix(winner)]}; {loser} is {_PREFIX_SOURCE[_prefix(loser)]} "
            "(kept in metrics.json)")  # fmt: skip


def split_metrics(metrics: Mapping[str, Any]) -> tuple[dict[str, tuple[str, str, str, float]], dict[str, Any]]:
    """Separate evaluation results (for the model-index) from run statistics; every key lands in one of the two.

    A key is an evaluation result when, after an optional ``eval_`` / ``validation_`` / ``test_``
    prefix (the split), it is a known metric (loss, perplexity, bits_per_byte, accuracy,
    masked_accuracy), or when it has that prefix and is not a throughput / counter figure; ``loss``
    only counts with a prefix (bare or ``train_`` losses are training statistics). Results map to
    ``(metric type, display name, split, value)``, and stay statistics instead (see
    :func:`left_out_results`) when:

    * the value is NaN (nothing measured: an eval set without a target), None (not measured: the
      ``null`` that ``metrics.json`` holds for NaN / inf), or infinite where that is not a possible
      value (``+inf`` is a real loss, perplexity or bits per byte; ``-inf`` never is): a
      ``RuntimeWarning`` names the key;
    * another key holds the same metric of the same split: ``validation_<m>`` (the post-training
      scoring of the whole held-out text, the figure the report quotes and compares with the baselines)
      wins over ``eval_<m>`` (``Trainer.evaluate`` over the evaluation rows, whose first tokens have
      no context), which wins over a bare ``<m>``. So the model-index holds one perplexity per split.

    ``metrics.json`` as ``write_metrics`` writes it is read as it is: its ``non_finite_metrics``
    (``{key: "nan"}``, which ``null`` values were NaN or infinite) is no metric, and gives those keys
    back their NaN / inf. A key ending in ``fingerprint`` (``validation_fingerprint``: which text the figures
    are on) is a statistic of 16 hex digits. Other values must be real numbers (numpy scalars become Python numbers):
    ``TypeError`` for a string or a bool; ``ValueError`` for an impossible value (a perplexity below
    1, negative bits per byte, an accuracy outside [0, 1], a negative or NaN count).

    >>> results, stats = split_metrics({"eval_perplexity": 9.5, "train_loss": 2.5, "eval_runtime": 1.0})
    >>> results, stats
    ({'eval_perplexity': ('perplexity', 'Perplexity', 'validation', 9.5)}, {'train_loss': 2.5, 'eval_runtime': 1.0})
    >>> sorted(split_metrics({"eval_perplexity": 513.47, "validation_perplexity": 513.41})[0])
    ['validation_perplexity']
    >>> left_out_results({"eval_loss": None, "eval_perplexity": 3.0, "non_finite_metrics": {"eval_loss": "inf"}})
    {}
    >>> left_out_results({"eval_loss": None, "non_finite_metrics": {"eval_loss": "-inf"}})
    {'eval_loss': '-inf is not a possible loss'}
    """
    results, stats, _ = _sort_metrics(metrics)
    return results, stats


def left_out_results(metrics: Mapping[str, Any]) -> dict[str, str]:
    """The results :func:`split_metrics` keeps out of the model-index, each with the reason (the card says it).

    >>> left_out_results({"eval_loss": float("nan"), "eval_accuracy": 0.5})
    {'eval_loss': 'NaN: nothing was measured (an eval set without any target?)'}
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return _sort_metrics(metrics).left_out


_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")  # a metric type or split: safe in a file name


def check_results(results: Any) -> dict[str, tuple[str, str, str, int | float]]:
    """Results as :func:`split_metrics` returns them, checked: ``{key: (metric type, name, split, value)}``.

    Metric types and splits are names (letters, digits, ``_.-``: they become file names), values real
    numbers other than NaN (numpy scalars become Python numbers); one result per metric, name and split.

    >>> check_results({"eval_loss": ("loss", "Loss", "validation", float("nan"))})
    Traceback (most recent call last):
    ...
    ValueError: results['eval_loss'] is nan: leave an unmeasured result out (split_metrics does)
    """
    if not isinstance(results, Mapping):
        raise TypeError(f"results must be a dict (split_metrics' first value), got {type(results).__name__}")
    out: dict[str, tuple[str, str, str, int | float]] = {}
    seen: dict[tuple[str, str, str], str] = {}
    for key, result in results.items():
        if not isinstance(result, tuple) or len(result) != 4:
            raise TypeError(f"results[{key!r}] must be a (metric type, name, split, value) tuple, got {result!r}")
        metric_type, name, split, value = result
        for field, text in (("metric type", metric_type), ("split", split)):
            if not isinstance(text, str) or not _NAME.fullmatch(text):
                raise ValueError(f"results[{key!r}]: the {field} must be a name (letters, digits, _.-), got {text!r}")
        if not isinstance(name, str) or not name.strip():
            raise ValueError(f"results[{key!r}]: the display name must be a non-empty string, got {name!r}")
        value = _as_number(value, f"results[{key!r}]'s value")
        if math.isnan(value):
            raise ValueError(f"results[{key!r}] is nan: leave an unmeasured result out (split_metrics does)")
        identity = (metric_type, name, split)
        if identity in seen:
            raise ValueError(f"results[{key!r}] and results[{seen[identity]!r}] are both the {split} {name}; keep one "
                             "(split_metrics keeps one per metric and split)")  # fmt: skip
        seen[identity] = key
        out[key] = (metric_type, name, split, value)
    return out


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


def build_card_data(
    spec: ObjectiveSpec,
    objective: str,
    results: Mapping[str, tuple],
    *,
    model_name: str,
    provenance: Provenance | Mapping[str, Any],
    base_model: str | None,
    license: str,
) -> ModelCardData:
    """The YAML metadata: library, license, datasets, tags, base model and the model-index.

    ``datasets`` lists the training sources' ids and every result names the validation source
    (:mod:`.provenance`: a Hub id as it is, a local path by its name, the embedded corpus as
    ``hf-lmobj/<name>``); ``provenance`` is a run's record or a :class:`~hf_lmobj.cards.provenance.Provenance`.
    ``pipeline_tag`` is set only where a transformers pipeline runs the model (transformers 5 has no
    text2text-generation pipeline), and ``base_model`` only for a Hub id (:func:`hub_base_model`).
    """
    record = resolve_provenance(provenance)
    eval_results = [
        EvalResult(task_type=spec.task, dataset_type=record.validation_id, dataset_name=record.validation_name,
                   dataset_split=split, metric_type=metric_type, metric_name=name, metric_value=value)
        for metric_type, name, split, value in check_results(results).values()
    ]  # fmt: skip
    return ModelCardData(
        library_name="transformers",
        license=license,
        datasets=record.training_ids,
        tags=["hf_lmobj", objective, spec.task],
        base_model=hub_base_model(base_model),
        pipeline_tag=spec.pipeline_tag,
        model_name=model_name,
        eval_results=eval_results or None,
    )


def merge_foreign_card_data(card_data: ModelCardData, readme: Path) -> ModelCardData:
    """Keep what another library wrote into ``readme``'s metadata (PEFT's adapter card), beside ours.

    Its ``library_name`` (``peft``) and tags stay, minus tags that name a local folder as base model;
    its ``base_model`` is used when ours is unknown and it is a Hub id. A card written by an earlier
    hf_lmobj run in the same folder is replaced, not merged.
    """
    if not readme.is_file():
        return card_data
    try:
        existing = ModelCard.load(readme).data
    except Exception as error:  # yaml / UnicodeDecodeError / huggingface_hub's own: the file is not a card
        raise ValueError(f"{readme} exists but is not a model card that can be read ({type(error).__name__}: "
                         f"{error}); fix its metadata or move it away, it is not overwritten") from None  # fmt: skip
    tags = [existing.tags] if isinstance(existing.tags, str) else [str(t) for t in existing.tags or []]
    if "hf_lmobj" in tags:
        return card_data
    if existing.library_name:
        card_data.library_name = existing.library_name
    kept = [t for t in tags if not t.startswith("base_model:") or hub_base_model(t.split(":", 2)[-1])]
    card_data.tags = list(dict.fromkeys([*kept, *(card_data.tags or [])]))
    theirs = existing.base_model if isinstance(existing.base_model, str) else None  # a list: several bases
    card_data.base_model = card_data.base_model or hub_base_model(theirs)
    return card_data
