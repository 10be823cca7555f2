"""Model cards from a run's results: a loss-curve PNG and ``README.md`` rendered from ``model_cards/``.

A training script calls :func:`write_model_card` once, on the main process, after training (every
recipe does, after it has written ``metrics.json``). The card is a ``huggingface_hub.ModelCard`` rendered from a Jinja template (one
per objective) whose YAML front matter carries the library, license, datasets, tags and a
``model-index`` with the evaluation results, so the Hub shows them and ``ModelCard.load`` parses them. The
data is named from the run's provenance record (:mod:`.provenance`): the card's "Training data" section (the
sources with their weights and realized tokens, the validation text, the tokenizer's origin, the skipped
documents), the model-index's ``datasets`` (the training sources) and each result's dataset (the validation
source); a caller that knows only a dataset's name passes ``dataset_name`` instead.
Beside it, ``.eval_results/<task_id>.yaml`` holds the perplexity and bits per byte in the Hub's
newer results format (https://huggingface.co/docs/hub/eval-results), with the same values, merged into
what is there, and one entry per domain of ``metrics.json``'s per-domain figures (:mod:`.eval_results`). Every file is written atomically (:mod:`hf_lmobj.files`), and only once every input and
every results file already there has been checked, so a refusal leaves the folder as it was.

Example:
    >>> import tempfile
    >>> from huggingface_hub import ModelCard
    >>> out = tempfile.mkdtemp()
    >>> card = write_model_card(out, objective="causal", metrics={"eval_loss": 2.0, "eval_perplexity": 7.389},
    ...     hyperparameters={"learning_rate": 3e-4}, model_name="tiny-gpt2", dataset_name="stdlib",
    ...     log_history=[{"step": 1, "loss": 3.0}, {"step": 2, "loss": 2.5, "eval_loss": 2.0}])
    >>> loaded = ModelCard.load(f"{out}/README.md")
    >>> [(r.metric_type, r.metric_value) for r in loaded.data.eval_results]
    [('loss', 2.0), ('perplexity', 7.389)]
"""

from __future__ import annotations

import datetime
import math
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from huggingface_hub import ModelCard

from hf_lmobj.cards.data import (
    _as_number,
    _non_finite,
    _sort_metrics,
    build_card_data,
    format_value,
    framework_versions,
    merge_foreign_card_data,
)
from hf_lmobj.cards.eval_results import (
    _BOUNDS,
    EVAL_RESULTS_METRICS,
    EVAL_RESULTS_SOURCE_URL,
    _check_date,
    eval_results_entries,
)
from hf_lmobj.cards.provenance import Provenance, resolve_provenance
from hf_lmobj.files import atomic_output, write_atomic
from hf_lmobj.objectives import get_objective
from hf_lmobj.shipped import shipped_folder

LOSS_CURVE_NAME = "loss_curve.png"
EVAL_RESULTS_DIR = ".eval_results"
#: The "Additional information" line of a card that lists the results left out of its model-index.
LEFT_OUT_LINE = "not in the model-index"


def _curve(log_history: Sequence[Mapping[str, Any]], key: str) -> tuple[list[float], list[float]]:
    steps, values = [], []
    for index, entry in enumerate(log_history):
        if not isinstance(entry, Mapping):
            raise TypeError(f"log_history[{index}] must be a dict, got {type(entry).__name__}")
        if key not in entry:
            continue
        if "step" not in entry:
            raise ValueError(f"log_history[{index}] has {key!r} but no 'step'; pass trainer.state.log_history")
        steps.append(float(_as_number(entry["step"], f"log_history[{index}]['step']")))
        values.append(float(_as_number(entry[key], f"log_history[{index}][{key!r}]")))
    return steps, values


def plot_loss_curve(log_history: Sequence[Mapping[str, Any]], path: str | Path, *, title: str | None = None) -> Path:
    """Draw training loss (``loss``) and, if present, eval loss (``eval_loss``) against the step.

    ``log_history`` is ``trainer.state.log_history``. Drawn with the Agg canvas directly (no pyplot,
    no global backend switch); the PNG is written atomically.

    >>> import tempfile
    >>> png = plot_loss_curve([{"step": 1, "loss": 3.0}, {"step": 2, "loss": 2.0}], f"{tempfile.mkdtemp()}/c.png")
    >>> png.read_bytes()[:8] == b"\\x89PNG\\r\\n\\x1a\\n"
    True
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg  # imported here: keeps `import hf_lmobj` light
    from matplotlib.figure import Figure

    train = _curve(log_history, "loss")
    evaluation = _curve(log_history, "eval_loss")
    if not train[0] and not evaluation[0]:
        raise ValueError("log_history has no 'loss' or 'eval_loss' entry; nothing to plot")
    figure = Figure(figsize=(6.4, 4.0), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    if train[0]:
        axes.plot(*train, label="train loss", linewidth=1.2)
    if evaluation[0]:
        axes.plot(*evaluation, label="eval loss", marker="o", linewidth=1.2)
    axes.set_xlabel("optimizer step")
    axes.set_ylabel("cross-entropy loss (nats per target token)")
    axes.set_title(title or "Loss curve")
    axes.grid(True, alpha=0.3)
    axes.legend()
    figure.tight_layout()
    path = Path(path)
    with atomic_output(path) as tmp:
        figure.savefig(tmp, format="png")
    return path


def write_eval_results(
    output_dir: str | Path,
    results: Mapping[str, tuple],
    dataset_name: str | None = None,
    date: str | None = None,
    *,
    provenance: Mapping[str, Any] | Provenance | None = None,
    per_domain: Mapping[str, Any] | None = None,
) -> list[Path]:
    """Write ``<output_dir>/.eval_results/<task_id>.yaml`` for the perplexity and bits-per-byte results.

    ``results`` as :func:`.data.split_metrics` returns them (the model-index's own); the entries name the
    validation source of ``provenance`` (a run's record) or ``dataset_name`` (one of the two:
    :func:`.eval_results.eval_results_entries`); ``date`` defaults to today (UTC). ``per_domain`` (flat keys such
    as ``bits_per_byte/wiki`` with their ``_ci_low`` / ``_ci_high``) adds one entry per domain, its ``task_id``
    the key, to its metric's file. Every ``*.yaml`` file of
    the folder is merged, never overwritten: an entry is identified by its ``dataset`` (``id``, ``task_id``,
    ``revision``), i.e. dataset, metric and split. An entry hf_lmobj wrote (its ``source.url``) for an
    identity written now is replaced in place; one of ours for this dataset and a ``task_id`` not written now (a result left out this run:
    NaN) is dropped, so no file shows a stale figure; every other entry (by hand, by another tool, or
    ours for another dataset) is kept as it is, and a file left with no entry is removed. A file that is
    not UTF-8, not valid YAML or not a list of entries is refused by name (``ValueError``) before
    anything is written or removed. Returns the files written (not those removed).

    Example:
        >>> import tempfile
        >>> out = Path(tempfile.mkdtemp())
        >>> mine = {"eval_perplexity": ("perplexity", "Perplexity", "validation", 9.5)}
        >>> theirs = "- {dataset: {id: a/b, task_id: perplexity}, value: 3}"  # another tool's entry
        >>> write_atomic(out / ".eval_results" / "perplexity.yaml", theirs)
        >>> [p.name for p in write_eval_results(out, mine, "python-stdlib", date="2026-01-15")]
        ['perplexity.yaml']
        >>> [e["value"] for e in yaml.safe_load((out / ".eval_results" / "perplexity.yaml").read_text())]
        [3, 9.5]
    """
    planned = _plan_eval_results(output_dir, results, resolve_provenance(provenance, dataset_name), date, per_domain)
    _apply(planned)
    return [path for path, text in planned if text is not None]


def _plan_eval_results(
    output_dir: str | Path,
    results: Mapping[str, tuple],
    record: Provenance,
    date: str | None,
    per_domain: Mapping[str, Any] | None = None,
) -> list[tuple[Path, str | None]]:
    """The results files to change, ``(path, text)`` (None: remove it), merged with every ``*.yaml`` there.

    Every check is done and every file read here; nothing is written.
    """
    date = _check_date(date) if date is not None else datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    folder = Path(output_dir) / EVAL_RESULTS_DIR
    entries = eval_results_entries(results, date=date, provenance=record, per_domain=per_domain)
    fresh = {folder / f"{name}.yaml": file_entries for name, file_entries in entries.items()}
    there = sorted(path for path in folder.glob("*.yaml") if path.is_file()) if folder.is_dir() else []
    dataset_id = record.validation_id
    planned: list[tuple[Path, str | None]] = []
    for path in dict.fromkeys([*fresh, *there]):
        existing = _read_results_file(path)
        merged = _merge_entries(existing, fresh.get(path, []), dataset_id)
        if path not in fresh and merged == existing:
            continue  # nothing of ours to replace or drop: the file stays as it is, byte for byte
        text = yaml.safe_dump(merged, sort_keys=False, allow_unicode=True) if merged else None
        if text is not None:
            _check_encodable(text, path)
        planned.append((path, text))
    return planned


def _apply(planned: list[tuple[Path, str | None]]) -> None:
    """Write (atomically) or remove each planned results file."""
    for path, text in planned:
        if text is None:
            path.unlink()
        else:
            write_atomic(path, text)


def _read_results_file(path: Path) -> list:
    """The entries of a results file already there ([] for none or an empty file); refused by name when unreadable."""
    if not path.exists():
        return []
    fix = "fix it or move it away: it is never overwritten"
    try:
        entries = yaml.safe_load(path.read_text(encoding="utf-8"))
    except UnicodeDecodeError as error:
        raise ValueError(f"{path} is not UTF-8 text (byte {error.start}); {fix}") from None
    except yaml.YAMLError as error:
        raise ValueError(f"{path} is not valid YAML ({str(error).splitlines()[0]}); {fix}") from None
    if entries is None:
        return []
    if not isinstance(entries, list):
        raise ValueError(f"{path} holds a {type(entries).__name__}, not a list of results entries; {fix}")
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            raise ValueError(f"{path}: entry {i} is a {type(entry).__name__}, not a results entry (a mapping); {fix}")
    return entries


def _identity(entry: dict) -> tuple | None:
    """What one results entry measures: ``(dataset id, task_id, revision)``; None where it has no dataset."""
    dataset = entry.get("dataset")
    if not isinstance(dataset, dict) or "id" not in dataset or "task_id" not in dataset:
        return None
    return (str(dataset["id"]), str(dataset["task_id"]), str(dataset.get("revision", "")))


def _merge_entries(existing: list, new: list[dict], dataset_id: str) -> list:
    """``existing`` with our entries of the identities in ``new`` replaced in place (the first) or dropped (more),
    and our other entries of ``dataset_id`` (results not written this run) dropped."""
    fresh = {_identity(entry): entry for entry in new}
    merged = []
    for entry in existing:
        identity = _identity(entry)
        if _is_ours(entry) and identity in fresh:
            if fresh[identity] is not None:
                merged.append(fresh[identity])
                fresh[identity] = None  # placed; a second stale copy of ours is dropped
            continue
        if _is_ours(entry) and identity is not None and identity[0] == dataset_id:
            continue  # ours, for this dataset, of a result this run does not report: stale
        merged.append(entry)
    return merged + [entry for entry in fresh.values() if entry is not None]


def _is_ours(entry: Any) -> bool:
    source = entry.get("source") if isinstance(entry, dict) else None
    return isinstance(source, dict) and source.get("url") == EVAL_RESULTS_SOURCE_URL


def _check_encodable(text: str, path: Path) -> None:
    """Refuse (by file) a text UTF-8 cannot hold, before any file is written."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(f"{path}: the text cannot be written as UTF-8 (a lone surrogate at position {error.start}: "
                         f"{text[error.start : error.end]!r}); clean the names and values passed in") from None  # fmt: skip


def write_model_card(
    output_dir: str | Path,
    *,
    objective: str,
    metrics: Mapping[str, Any],
    hyperparameters: Mapping[str, Any],
    model_name: str,
    provenance: Mapping[str, Any] | Provenance | None = None,
    dataset_name: str | None = None,
    base_model: str | None = None,
    license: str = "apache-2.0",
    log_history: Sequence[Mapping[str, Any]] | None = None,
    extra: Mapping[str, Any] | None = None,
    template_dir: str | Path | None = None,
) -> ModelCard:
    """Render ``<output_dir>/README.md`` (and ``loss_curve.png`` when ``log_history`` has losses).

    Also writes ``.eval_results/<task_id>.yaml`` (:func:`write_eval_results`, merged) for its perplexity and
    bits per byte, the values of the card's ``model-index``. Results :func:`.data.split_metrics` keeps
    out of the model-index (NaN or None: nothing measured; a second figure of the same metric and split) are
    named with the reason under "Additional information" (the line :data:`LEFT_OUT_LINE`), and stay in
    the statistics table. Every input and every results file already there is checked first; then the
    PNG, ``README.md`` and the results files are each written atomically.

    Args:
        output_dir: the run's output folder (created if missing).
        objective: a word of :data:`hf_lmobj.objectives.OBJECTIVES`; its spec picks the template.
        metrics: the run's final metrics (e.g. ``trainer.evaluate()``'s, or ``metrics.json``'s as read: its
            ``null`` values are not measured, its ``non_finite_metrics`` says which were NaN / inf); real
            numbers or None (numpy scalars too; strings and bools are refused by key).
        hyperparameters: objective and training settings shown in the card (masking rates, noise
            density, span length, packing efficiency, learning rate, ...).
        model_name: the model's name (card title and model-index name).
        provenance: the run's data record (``run.provenance``: training sources, validation set, tokenizer,
            skipped documents; checked key by key, :func:`.provenance.check_provenance`). The card's "Training
            data" section names it all, the model-index's ``datasets`` the training sources and each result the
            validation source, as the ``.eval_results`` entries do. Its validation fingerprint must be the one
            ``metrics["validation_fingerprint"]`` names, when the metrics name one.
        dataset_name: instead of ``provenance``, for a caller that knows only a dataset's name (a Hub id, a local
            path or an embedded corpus such as ``python-stdlib``): that dataset is the data and the validation
            source. Give exactly one of the two.
        base_model: the model the run started from (a Hub id, written as ``base_model``, or a local
            folder, named in the text only), if any.
        license: an SPDX-like Hub license id.
        log_history: ``trainer.state.log_history``, for the loss curve.
        extra: more facts listed under "Additional information" (also ``extra`` in templates).
        template_dir: folder of ``<template>.md`` Jinja templates; defaults to the shipped ``model_cards/``
            (:func:`hf_lmobj.shipped.shipped_folder`).

    Returns:
        The rendered ``huggingface_hub.ModelCard`` (already saved).
    """
    spec = get_objective(objective)
    if not isinstance(model_name, str) or not model_name.strip():
        raise ValueError(f"model_name must be a non-empty string, got {model_name!r}")
    record = resolve_provenance(provenance, dataset_name)
    for field, value in (("metrics", metrics), ("hyperparameters", hyperparameters), ("extra", extra or {})):
        if not isinstance(value, Mapping):
            raise TypeError(f"{field} must be a dict, got {type(value).__name__}")
    template = Path(template_dir or shipped_folder("model_cards")) / f"{spec.template}.md"
    if not template.is_file():
        raise FileNotFoundError(f"model-card template {template} not found; pass template_dir=<folder with it>")
    results, stats, left_out = _sort_metrics(metrics)
    _check_same_text(record, stats)
    output_dir = Path(output_dir)
    has_curve = log_history is not None and any(_curve(log_history, key)[0] for key in ("loss", "eval_loss"))
    eval_files = _plan_eval_results(output_dir, results, record, None, _per_domain(metrics))  # files there checked
    card_data = build_card_data(spec, objective, results, model_name=model_name, provenance=record,
                                base_model=base_model, license=license)  # fmt: skip
    card_data = merge_foreign_card_data(card_data, output_dir / "README.md")
    extra = dict(extra or {})
    if left_out:
        notes = "; ".join(f"{key} = {format_value(stats[key])} ({why})" for key, why in left_out.items())
        extra[LEFT_OUT_LINE] = f"{extra[LEFT_OUT_LINE]}; {notes}" if LEFT_OUT_LINE in extra else notes
    card = ModelCard.from_template(
        card_data,
        template_path=str(template),
        model_name=model_name,
        dataset_name=", ".join(record.training_ids),
        data_summary=record.summary(),
        data_section=record.markdown(),
        provenance=record.as_dict(),
        objective=objective,
        spec=spec,
        started_from=base_model,
        results=[(name, split, format_value(value)) for _, name, split, value in results.values()],
        stats={key: format_value(value) for key, value in stats.items()},
        hyperparameters={key: format_value(value) for key, value in hyperparameters.items()},
        loss_curve=LOSS_CURVE_NAME if has_curve else None,
        versions=framework_versions(),
        extra={key: format_value(value) for key, value in extra.items()},
    )
    text = str(card)
    _check_encodable(text, output_dir / "README.md")
    if has_curve:
        plot_loss_curve(log_history, output_dir / LOSS_CURVE_NAME, title=model_name)
    write_atomic(output_dir / "README.md", text)  # what card.save writes (newline="": no translation)
    _apply(eval_files)
    return card


def _per_domain(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """``metrics``' per-domain perplexity and bits-per-byte keys (with bounds) for ``.eval_results``.

    ``metrics.json``'s nulls read as :func:`.data.split_metrics` reads them (``non_finite_metrics``); a figure
    not measured (None or NaN) is left out with its bounds, and a bound not measured leaves its figure without an
    interval, each with a ``RuntimeWarning`` naming the key, as an unmeasured whole-set result is.
    """
    non_finite = _non_finite(metrics)
    keys = {key: non_finite.get(key, value) for key, value in metrics.items()
            if isinstance(key, str) and "/" in key and key.split("/", 1)[0] in EVAL_RESULTS_METRICS}  # fmt: skip
    dropped = set()
    for key, value in keys.items():
        if value is None or (isinstance(value, float) and math.isnan(value)):
            figure = next((key.removesuffix(s) for s in _BOUNDS if key.endswith(s)), key)
            dropped |= {figure, *(figure + s for s in _BOUNDS)} if figure == key else {figure + s for s in _BOUNDS}
            warnings.warn(f"{key} is left out of .eval_results: not measured (None or NaN)", RuntimeWarning, 3)
    return {key: value for key, value in keys.items() if key not in dropped}


def _check_same_text(record: Provenance, stats: Mapping[str, Any]) -> None:
    """Refuse a record whose validation set is not the text the metrics were measured on (their fingerprints)."""
    measured = stats.get("validation_fingerprint")
    if record.validation is not None and measured is not None and measured != record.validation.fingerprint:
        raise ValueError(f"metrics['validation_fingerprint'] is {measured} but provenance['validation']['fingerprint'] "
                         f"is {record.validation.fingerprint}: the record describes another text than the one "
                         "scored; pass the record of this run's validation texts")  # fmt: skip
