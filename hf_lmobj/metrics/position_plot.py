"""The loss-by-position plot: a PNG of :func:`.positions.loss_by_position`'s mean NLL per bucket, written atomically.

Apart from :mod:`.positions` because that module stays free of hf_lmobj's own imports (it can ship beside
``.scoring``), while a file the package writes goes through :func:`hf_lmobj.files.atomic_output`; matplotlib (the
``[recipes]`` extra) is imported on call, so neither module needs it to load.

Example:
    >>> import tempfile
    >>> from hf_lmobj.metrics.positions import loss_by_position
    >>> png = plot_loss_by_position(loss_by_position([[1.0, 0.5, 0.25]], [1, 2, 4]), f"{tempfile.mkdtemp()}/p.png")
    >>> png.read_bytes()[:4] == b"\\x89PNG"
    True
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from hf_lmobj.files import atomic_output

_PLOT_FIX = "pip install hf_lmobj[recipes]"


def plot_loss_by_position(result: dict, path: str | os.PathLike, title: str | None = None) -> Path:
    """Write a PNG of the mean NLL per position bucket (log-scaled positions) to ``path``; return it.

    ``result`` is a :func:`.positions.loss_by_position` (or :func:`.positions.merge_buckets`) result. Empty
    buckets (and infinite means) get no point; each point is labelled with its target count. Drawn with the Agg
    canvas directly (no pyplot, no global backend switch); the parent folder is created; a failed write leaves
    nothing at ``path``.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError(f"plot_loss_by_position needs matplotlib: {_PLOT_FIX}") from None
    if not isinstance(result, dict) or "buckets" not in result:
        raise TypeError("result must be a loss_by_position (or merge_buckets) result")
    shown = [b for b in result["buckets"] if b["count"] and math.isfinite(b["mean"])]
    if not shown:
        raise ValueError("result has no bucket with a finite mean NLL: nothing to plot")
    figure = Figure(figsize=(6, 3.5), dpi=100)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    starts = [b["start"] for b in shown]
    axes.plot(starts, [b["mean"] for b in shown], marker="o", drawstyle="steps-post")
    for b in shown:
        axes.annotate(f"{b['count']}", (b["start"], b["mean"]), fontsize=7, textcoords="offset points", xytext=(0, 4))
    axes.set_xscale("log", base=2)
    axes.set_xlabel("target position (bucket start; labels: targets)")
    axes.set_ylabel("mean NLL (nats)")
    axes.set_title(title or "loss by position")
    path = Path(path)
    with atomic_output(path) as tmp:
        figure.savefig(tmp, format="png", bbox_inches="tight")
    return path
