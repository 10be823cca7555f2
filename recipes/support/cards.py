"""Model cards from a run's results: a loss-curve PNG and ``README.md`` rendered from ``model_cards/``.

A recipe calls :func:`write_model_card` once, on the main process, after it has written
``metrics.json``. The card is a ``huggingface_hub.ModelCard`` rendered from a Jinja template (one
per objective) whose YAML front matter carries the library, license, datasets, tags and a
``model-index`` with the evaluation results, so the Hub shows them and ``ModelCard.load`` parses them.

Example:
    >>> import tempfile
    >>> from huggingface_hub import ModelCard
    >>> out = tempfile.mkdtemp()
    >>> card = write_model_card(out, objective="clm", metrics={"eval_loss": 2.0, "eval_perplexity": 7.389},
    ...     hyperparameters={"learning_rate": 3e-4}, model_name="tiny-gpt2", dataset_name="stdlib",
    ...     log_history=[{"step": 1, "loss": 3.0}, {"step": 2, "loss": 2.5, "eval_loss": 2.0}])
    >>> loaded = ModelCard.load(f"{out}/README.md")
    >>> [(r.metric_type, r.metric_value) for r in loaded.data.eval_results]
    [('loss', 2.0), ('perplexity', 7.389)]
"""

from __future__ import annotations

import importlib.metadata
import importlib.resources
import math
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from huggingface_hub import EvalResult, ModelCard, ModelCardData

__all__ = [
    "DEFAULT_TEMPLATE_DIR",
    "LOSS_CURVE_NAME",
    "FRAMEWORKS",
    "ObjectiveSpec",
    "OBJECTIVES",
    "resolve_objective",
    "split_metrics",
    "plot_loss_curve",
    "framework_versions",
    "format_value",
    "hub_base_model",
    "build_card_data",
    "merge_foreign_card_data",
    "write_model_card",
]

DEFAULT_TEMPLATE_DIR = Path(str(importlib.resources.files("hf_lmobj.model_cards")))
LOSS_CURVE_NAME = "loss_curve.png"
FRAMEWORKS = ("hf_lmobj", "torch", "transformers", "accelerate", "datasets", "peft", "huggingface_hub")


@dataclass(frozen=True)
class ObjectiveSpec:
    """How one objective is described, evaluated and used; `template` names ``model_cards/<template>.md``."""

    template: str
    title: str
    summary: str
    task: str  # Hub task id of the model-index results
    auto_class: str  # the transformers Auto class that loads the model
    pipeline_tag: str | None = None  # a transformers pipeline that runs the model (None: transformers has none)


_CAUSAL = "the model reads the true prefix under a causal mask and predicts each next token"
OBJECTIVES: dict[str, ObjectiveSpec] = {
    "clm": ObjectiveSpec("clm", "Causal language modeling (CLM, GPT)", f"Decoder-only; {_CAUSAL}.",
                         "text-generation", "AutoModelForCausalLM", "text-generation"),
    "prefix_lm": ObjectiveSpec("clm", "Prefix language modeling (prefix-LM)",
                               "Decoder-only; the prefix is attended bidirectionally and the model predicts "
                               "each token of the continuation.", "text-generation", "AutoModelForCausalLM",
                               "text-generation"),
    "mlm": ObjectiveSpec("mlm", "Masked language modeling (MLM, BERT)",
                         "Encoder-only; a fraction of the tokens is selected, most replaced by the mask token, "
                         "some by a random token, some kept, and the model predicts the originals.",
                         "fill-mask", "AutoModelForMaskedLM", "fill-mask"),
    "span": ObjectiveSpec("span", "Span corruption (T5)",
                          "Encoder-decoder; noise spans of the input are each replaced by one sentinel and the "
                          "decoder emits every sentinel followed by the span it replaced.",
                          "text2text-generation", "AutoModelForSeq2SeqLM"),
    "ul2": ObjectiveSpec("span", "Mixture of denoisers (UL2)",
                         "Encoder-decoder; a mixture of regular span corruption [R], sequential prefix-LM [S] "
                         "and extreme corruption [X], each example tagged with its mode token.",
                         "text2text-generation", "AutoModelForSeq2SeqLM"),
    "bart": ObjectiveSpec("span", "Denoising autoencoder (BART)",
                          "Encoder-decoder; the input is corrupted (text infilling with the mask token, "
                          "sentence permutation) and the decoder reconstructs the original text.",
                          "text2text-generation", "AutoModelForSeq2SeqLM"),
    "sequence_classification": ObjectiveSpec(
        "classifier", "Sequence classification (fine-tuned encoder)",
        "A classification head on a pre-trained encoder, fine-tuned on labelled examples.",
        "text-classification", "AutoModelForSequenceClassification", "text-classification"),
}  # fmt: skip

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


def resolve_objective(objective: str) -> ObjectiveSpec:
    """The spec of an objective name (``clm``, ``prefix_lm``, ``mlm``, ``span``, ``ul2``, ``bart``).

    >>> resolve_objective("ul2").template, resolve_objective("mlm").task
    ('span', 'fill-mask')
    """
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {sorted(OBJECTIVES)}, got {objective!r}")
    return OBJECTIVES[objective]


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

    Args:
        output_dir: the run's output folder (created if missing).
        objective: ``clm``, ``prefix_lm``, ``mlm``, ``span``, ``ul2`` or ``bart``; picks the template.
        metrics: the run's final metrics (what the recipe wrote to ``metrics.json``); numbers only.
        hyperparameters: objective and training settings shown in the card (masking rates, noise
            density, span length, packing efficiency, learning rate, ...).
        model_name: the model's name (card title and model-index name).
        dataset_name: the training data (a Hub id or a local name such as ``python-stdlib``).
        base_model: the model the run started from (a Hub id, written as ``base_model``, or a local
            folder, named in the text only), if any.
        license: an SPDX-like Hub license id.
        log_history: ``trainer.state.log_history``, for the loss curve.
        extra: more facts listed under "Additional information" (also ``extra`` in templates).
        template_dir: folder of ``<template>.md`` Jinja templates; defaults to the repo's ``model_cards/``.

    Returns:
        The rendered ``huggingface_hub.ModelCard`` (already saved).
    """
    spec = resolve_objective(objective)
    for field, value in (("model_name", model_name), ("dataset_name", dataset_name)):
        if not isinstance(value, str) or not value.strip():
            raise ValueError(f"{field} must be a non-empty string, got {value!r}")
    for field, value in (("metrics", metrics), ("hyperparameters", hyperparameters), ("extra", extra or {})):
        if not isinstance(value, Mapping):
            raise TypeError(f"{field} must be a dict, got {type(value).__name__}")
    template = Path(template_dir or DEFAULT_TEMPLATE_DIR) / f"{spec.template}.md"
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
    return card
