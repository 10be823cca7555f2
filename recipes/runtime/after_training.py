"""Once a recipe has trained: save first, then measure, and lose nothing when a later step fails.

A run's evaluation, scoring, baselines, sample and card come after hours of training; a failure
there must not cost the model. :func:`save_trained_model` writes the model (every rank: a sharded
model is gathered), the tokenizer and ``trainer_state.json`` the moment training ends, before any of
them. :func:`nothing_lost` wraps the steps after it: when one fails, ``metrics.json`` receives what
was computed before the failure and an :class:`AfterTrainingError` says where the model is, which
step failed and why (the original error is its ``__cause__``).

Example:
    >>> import tempfile
    >>> out = tempfile.mkdtemp()
    >>> metrics = {"eval_loss": 2.5}
    >>> try:
    ...     with nothing_lost(out, metrics, main_process=True):
    ...         metrics["eval_perplexity"] = 12.2
    ...         raise ValueError("stride must be >= 1")
    ... except AfterTrainingError as error:
    ...     print(str(error).replace(out, "OUT"))
    training finished and the model was saved at OUT; a step after it failed: ValueError: stride must be >= 1. \
metrics.json holds what was computed before the failure: ['eval_loss', 'eval_perplexity']
    >>> sorted(json.loads((Path(out) / "metrics.json").read_text()))
    ['eval_loss', 'eval_perplexity']
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hf_lmobj.files import write_atomic

METRICS_NAME = "metrics.json"


class AfterTrainingError(RuntimeError):
    """A step after training failed; the model was saved at ``output_dir`` and ``metrics.json`` holds ``metrics``."""

    def __init__(self, message: str, output_dir: Path, phase: str | None, metrics: dict[str, Any]) -> None:
        super().__init__(message)
        self.output_dir, self.phase, self.metrics = output_dir, phase, metrics


def write_metrics(output_dir: str | Path, metrics: Mapping[str, Any]) -> Path:
    """``<output_dir>/metrics.json``: ``metrics`` as indented JSON, written atomically (the folder is created if missing).

    NaN and infinities, which JSON cannot hold, are written as ``null`` (a metric that could not be computed)
    and listed under ``non_finite_metrics``.
    """
    path = Path(output_dir) / METRICS_NAME
    plain = dict(metrics)
    odd = sorted(k for k, v in plain.items() if isinstance(v, float) and not math.isfinite(v))
    if odd:
        plain.update({key: None for key in odd}, non_finite_metrics={key: repr(metrics[key]) for key in odd})
    write_atomic(path, json.dumps(plain, indent=2, allow_nan=False) + "\n")
    return path


def save_trained_model(trainer: Any, tokenizer: Any, output_dir: str | Path) -> None:
    """The trained model into ``output_dir`` (on every rank: saving a sharded model is collective), then the
    tokenizer (None: none) and ``trainer_state.json`` (the step and the log history) from the main process."""
    trainer.save_model(str(output_dir))
    if trainer.is_world_process_zero():
        if tokenizer is not None:
            tokenizer.save_pretrained(str(output_dir))
        trainer.state.save_to_json(str(Path(output_dir) / "trainer_state.json"))


@contextmanager
def nothing_lost(
    output_dir: str | Path, metrics: dict[str, Any], main_process: bool, timer: Any = None, saved: str = ""
) -> Iterator[dict[str, Any]]:
    """Run the steps after training; if one fails, write ``metrics`` (what they computed so far) and raise
    :class:`AfterTrainingError` naming ``output_dir``, the failed phase (``timer.failed_phase`` of a
    :class:`~hf_lmobj.recipes.runtime.phase_timer.PhaseTimer`) and the cause.

    ``metrics`` is the dict the steps fill in place; ``saved`` adds what else :func:`save_trained_model`
    wrote (" with its tokenizer"). Only the main process (``main_process``) writes the file.
    """
    try:
        yield metrics
    except Exception as error:
        phase = getattr(timer, "failed_phase", None)
        if main_process:
            write_metrics(output_dir, metrics)
        step = f"the {phase} step" if phase else "a step after it"
        raise AfterTrainingError(
            f"training finished and the model was saved at {output_dir}{saved}; {step} failed: {type(error).__name__}: "
            f"{error}. {METRICS_NAME} holds what was computed before the failure: {sorted(metrics)}",
            Path(output_dir),
            phase,
            dict(metrics),
        ) from error
