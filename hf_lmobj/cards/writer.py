"""Model cards from a run's results: a loss-curve PNG and ``README.md`` rendered from ``model_cards/``.

A training script calls :func:`write_model_card` once, on the main process, after training (every
recipe does, after it has written ``metrics.json``). The card is a ``huggingface_hub.ModelCard`` rendered from a Jinja template (one
per objective) whose YAML front matter carries the library, license, datasets, tags and a
``model-index`` with the evaluation results, so the Hub shows them and ``ModelCard.load`` parses them.
Beside it, ``.eval_results/<task_id>.yaml`` holds the perplexity and bits per byte in the Hub's
newer results format (https://huggingface.co/docs/hub/eval-results), with the same values.

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
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from huggingface_hub import ModelCard

from hf_lmobj.cards.data import (
    EVAL_RESULTS_SOURCE_URL,
    build_card_data,
    eval_results_entries,
    format_value,
    framework_versions,
    merge_foreign_card_data,
    split_metrics,
)
from hf_lmobj.objectives import get_objective
from hf_lmobj.shipped import shipped_folder

__all__ = [
    "EVAL_RESULTS_DIR",
    "LOSS_CURVE_NAME",
    "plot_loss_curve",
    "write_eval_results",
    "write_model_card",
]

LOSS_CURVE_NAME = "loss_curve.png"
EVAL_RESULTS_DIR = ".eval_results"


def _curve(log_history: Sequence[Mapping[str, Any]], key: str) -> tuple[list[float], list[float]]:
    steps, values = [], []
    for index, entry in enumerate(log_history):
        if not isinstance(entry, Mapping):
            raise TypeError(f"log_history[{index}] must be a dict, got {type(entry).__name__}")
        if key not in entry:
            continue
        if "step" not in entry:
            raise ValueError(f"log_history[{index}] has {key!r} but no 'step'; pass trainer.state.log_history")
        steps.append(float(entry["step"]))
        values.append(float(entry[key]))
    return steps, values


def plot_loss_curve(log_history: Sequence[Mapping[str, Any]], path: str | Path, *, title: str | None = None) -> Path:
    """Draw training loss (``loss``) and, if present, eval loss (``eval_loss``) against the step.

    ``log_history`` is ``trainer.state.log_history``. Drawn with the Agg canvas directly (no pyplot,
    no global backend switch).

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
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png")
    return path


def write_eval_results(
    output_dir: str | Path, results: Mapping[str, tuple], dataset_name: str, date: str | None = None
) -> list[Path]:
    """Write ``<output_dir>/.eval_results/<task_id>.yaml`` for the perplexity and bits-per-byte results.

    ``results`` as :func:`.data.split_metrics` returns them (the model-index's own);
    ``date`` defaults to today (UTC). Files an earlier hf_lmobj run wrote there are replaced (or
    removed); other files (results added by hand or by another tool) are kept.
    """
    date = date or datetime.datetime.now(datetime.timezone.utc).date().isoformat()
    folder = Path(output_dir) / EVAL_RESULTS_DIR
    for old in sorted(folder.glob("*.yaml")) if folder.is_dir() else ():
        entries = yaml.safe_load(old.read_text(encoding="utf-8"))
        if isinstance(entries, list) and entries and all(_is_ours(entry) for entry in entries):
            old.unlink()
    written = []
    for task_id, entries in eval_results_entries(results, dataset_name, date=date).items():
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{task_id}.yaml"
        path.write_text(yaml.safe_dump(entries, sort_keys=False, allow_unicode=True), encoding="utf-8")
        written.append(path)
    return written


def _is_ours(entry: Any) -> bool:
    source = entry.get("source") if isinstance(entry, dict) else None
    return isinstance(source, dict) and source.get("url") == EVAL_RESULTS_SOURCE_URL


def write_model_card(
    output_dir: str | Path,
    *,
    objective: str,
    metrics: Mapping[str, Any],
    hyperparameters: Mapping[str, Any],
    model_name: str,
    dataset_name: str,
    base_model: str | None = None,
    license: str = "apache-2.0",
    log_history: Sequence[Mapping[str, Any]] | None = None,
    extra: Mapping[str, Any] | None = None,
    template_dir: str | Path | None = None,
) -> ModelCard:
    """Render ``<output_dir>/README.md`` (and ``loss_curve.png`` when ``log_history`` has losses).

    Also writes ``.eval_results/<task_id>.yaml`` (:func:`write_eval_results`) for its perplexity and
    bits per byte, the values of the card's ``model-index``.

    Args:
        output_dir: the run's output folder (created if missing).
        objective: a word of :data:`hf_lmobj.objectives.OBJECTIVES`; its spec picks the template.
        metrics: the run's final metrics (e.g. ``trainer.evaluate()``'s, or ``metrics.json``'s); numbers only.
        hyperparameters: objective and training settings shown in the card (masking rates, noise
            density, span length, packing efficiency, learning rate, ...).
        model_name: the model's name (card title and model-index name).
        dataset_name: the training data (a Hub id or a local name such as ``python-stdlib``).
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
    for field, value in (("model_name", model_name), ("dataset_name", dataset_name)):
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"{field} must be a non-empty string, got {value!r}")
    for field, value in (("metrics", metrics), ("hyperparameters", hyperparameters), ("extra", extra or {})):
        if not isinstance(value, Mapping):
            raise TypeError(f"{field} must be a dict, got {type(value).__name__}")
    template = Path(template_dir or shipped_folder("model_cards")) / f"{spec.template}.md"
    if not template.is_file():
        raise FileNotFoundError(f"model-card template {template} not found; pass template_dir=<folder with it>")
    results, stats = split_metrics(metrics)
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    loss_curve = None
    if log_history is not None and any(_curve(log_history, key)[0] for key in ("loss", "eval_loss")):
        loss_curve = plot_loss_curve(log_history, output_dir / LOSS_CURVE_NAME, title=model_name).name
    card_data = build_card_data(spec, objective, results, model_name=model_name, dataset_name=dataset_name,
                                base_model=base_model, license=license)  # fmt: skip
    card_data = merge_foreign_card_data(card_data, output_dir / "README.md")
    card = ModelCard.from_template(
        card_data,
        template_path=str(template),
        model_name=model_name,
        dataset_name=dataset_name,
        objective=objective,
        spec=spec,
        started_from=base_model,
        results=[(name, split, format_value(value)) for _, name, split, value in results.values()],
        stats={key: format_value(value) for key, value in stats.items()},
        hyperparameters={key: format_value(value) for key, value in hyperparameters.items()},
        loss_curve=loss_curve,
        versions=framework_versions(),
        extra={key: format_value(value) for key, value in (extra or {}).items()},
    )
    card.save(output_dir / "README.md")
    write_eval_results(output_dir, results, dataset_name)
    return card
