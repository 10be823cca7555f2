"""The loss by position of scored texts as ``metrics.json`` figures, and its plot read back from them.

:func:`position_figures` gives the mean NLL (nats per target) and the target count of each log-spaced position
bucket (:func:`hf_lmobj.metrics.positions.loss_by_position`) as ``loss_by_position/<start>-<stop>`` and
``loss_by_position/<start>-<stop>_targets``; :func:`write_position_plot` draws ``loss_by_position.png`` from
those keys alone, so the plot and the file always agree.

Example:
    >>> write_position_plot({"validation_bits_per_byte": 1.0}, None) is None  # no position figures, no plot
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hf_lmobj.metrics.position_plot import plot_loss_by_position
from hf_lmobj.metrics.positions import loss_by_position, position_buckets


def position_figures(scores: Sequence[Any]) -> dict[str, float]:
    """Mean NLL (nats per target) per log-spaced position bucket: ``loss_by_position/<start>-<stop>``."""
    longest = max(len(score.token_nll) for score in scores)
    result = loss_by_position(scores, position_buckets(longest + 1))
    figures = {}
    for b in (b for b in result["buckets"] if b["count"]):
        figures[f"loss_by_position/{b['start']}-{b['stop']}"] = b["mean"]
        figures[f"loss_by_position/{b['start']}-{b['stop']}_targets"] = b["count"]
    return figures


def write_position_plot(metrics: dict[str, float], output: Path) -> str | None:
    """``loss_by_position.png`` in ``output`` from the ``loss_by_position/<start>-<stop>`` figures; its name."""
    buckets = []
    for key, mean in metrics.items():
        if key.startswith("loss_by_position/") and not key.endswith("_targets"):
            start, stop = (int(edge) for edge in key.split("/", 1)[1].split("-"))
            buckets.append({"start": start, "stop": stop, "mean": mean, "count": metrics[f"{key}_targets"]})
    if not buckets:
        return None
    plot_loss_by_position({"buckets": buckets}, output / "loss_by_position.png", title="validation loss by position")
    return "loss_by_position.png"
