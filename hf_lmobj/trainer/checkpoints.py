"""Checkpoints a preempted run can trust: a completion marker, the latest complete one, what each needs.

A ``Trainer`` checkpoint folder is written file by file; a job killed half way leaves a folder that
looks like a checkpoint. :class:`~hf_lmobj.ObjectiveTrainer` writes :data:`COMPLETE_NAME` last, after
every rank has written its part, and rotates old checkpoints only after that, so a folder holding the
marker is whole and a killed save never costs the previous checkpoint. The marker lists what the
checkpoint holds; :func:`check_checkpoint` refuses a resume from one that lacks the optimizer, the
scheduler or the data state, naming the file.

Example:
    >>> import tempfile, pathlib
    >>> out = pathlib.Path(tempfile.mkdtemp())
    >>> (out / "checkpoint-10").mkdir(); (out / "checkpoint-20").mkdir()
    >>> write_complete_marker(out / "checkpoint-10", global_step=10, files=[])
    >>> latest_complete_checkpoint(out).name  # checkpoint-20 has no marker: a save that was cut short
    'checkpoint-10'
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import nn
from transformers.trainer_utils import load_sharded_checkpoint

__all__ = [
    "COMPLETE_NAME",
    "DATA_STATE_NAME",
    "REQUIRED_FILES",
    "checkpoint_folders",
    "latest_complete_checkpoint",
    "write_complete_marker",
    "check_checkpoint",
    "write_data_state",
    "read_data_state",
    "check_fingerprint",
    "WEIGHT_FILES",
    "trained_max_steps",
    "load_checkpoint_weights",
]

COMPLETE_NAME = "checkpoint_complete.json"
#: The data pipeline's position, written by ObjectiveTrainer when it trains on a PretrainingStream.
DATA_STATE_NAME = "data_state.json"
#: What a resume that continues the run exactly needs, besides the model (what each file restores).
REQUIRED_FILES = {
    "optimizer.pt": "the optimizer state (moments; without it the update after resuming differs)",
    "scheduler.pt": "the learning-rate schedule (without it warmup restarts)",
    "trainer_state.json": "the step, the logs and the callbacks' state",
}
#: The model-weight files a weights-only restart reads (one file, or the index of a sharded one).
WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
)
_STEP = re.compile(r"^checkpoint-(\d+)$")


def checkpoint_folders(output_dir: str | os.PathLike) -> list[Path]:
    """``checkpoint-N`` folders of ``output_dir``, oldest step first (none when it does not exist)."""
    root = Path(output_dir)
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := _STEP.match(p.name))]
    return [p for _, p in sorted(found)]


def latest_complete_checkpoint(output_dir: str | os.PathLike) -> Path | None:
    """The highest-step checkpoint holding the completion marker, or None."""
    complete = [p for p in checkpoint_folders(output_dir) if (p / COMPLETE_NAME).is_file()]
    return complete[-1] if complete else None


def write_complete_marker(folder: str | os.PathLike, global_step: int, files: Sequence[str]) -> None:
    """Write the marker last, atomically (a temporary file renamed into place)."""
    folder = Path(folder)
    tmp = folder / (COMPLETE_NAME + ".tmp")
    tmp.write_text(json.dumps({"global_step": int(global_step), "files": sorted(files)}, indent=1))
    os.replace(tmp, folder / COMPLETE_NAME)


def check_checkpoint(folder: str | os.PathLike, needs_data_state: bool, weights_only: bool = False) -> Path:
    """``folder`` if a resume from it can continue the run exactly, else a ``ValueError`` naming what is missing.

    ``weights_only=True`` accepts a checkpoint without optimizer, scheduler or data state (a fresh
    start from its weights, not a continuation).
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"resume_from_checkpoint: {folder} is not a folder")
    if weights_only:
        return folder
    needed = dict(REQUIRED_FILES)
    if needs_data_state:
        needed[DATA_STATE_NAME] = "the data pipeline's position (without it the data would restart or be replayed)"
    for name, why in needed.items():
        if not (folder / name).is_file():
            raise ValueError(
                f"checkpoint {folder} has no {name}: {why}; resume from a complete checkpoint, or pass "
                "--weights_only_restart true to start a new run from its weights"
            )
    return folder


def write_data_state(folder: str | os.PathLike, states: Sequence[dict], fingerprint: dict) -> None:
    """Every rank's data position and the data's fingerprint, as one JSON file (main process only)."""
    folder = Path(folder)
    tmp = folder / (DATA_STATE_NAME + ".tmp")
    tmp.write_text(json.dumps({"fingerprint": fingerprint, "ranks": list(states)}, indent=1, default=_plain))
    os.replace(tmp, folder / DATA_STATE_NAME)


def read_data_state(folder: str | os.PathLike) -> dict:
    return json.loads((Path(folder) / DATA_STATE_NAME).read_text())


def check_fingerprint(saved: dict, current: dict, ignore: bool = False) -> None:
    """Refuse a resume whose data differs from the checkpoint's, naming each field that changed.

    Example:
        >>> check_fingerprint({"seed": 0, "rows": ["packed", 256]}, {"seed": 1, "rows": ["packed", 256]})
        Traceback (most recent call last):
        ...
        ValueError: the data differs from the checkpoint's: seed (0 -> 1); resume with the same data, or pass ignore_data_fingerprint=True (--ignore_data_fingerprint true) to continue anyway
    """
    changed = [key for key in sorted(set(saved) | set(current)) if saved.get(key) != current.get(key)]
    if changed and not ignore:
        what = ", ".join(f"{key} ({_short(saved.get(key))} -> {_short(current.get(key))})" for key in changed)
        raise ValueError(
            f"the data differs from the checkpoint's: {what}; resume with the same data, or pass "
            "ignore_data_fingerprint=True (--ignore_data_fingerprint true) to continue anyway"
        )


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _plain(value: object) -> object:
    """numpy scalars and arrays in the states as plain JSON values."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"cannot write {type(value).__name__} into {DATA_STATE_NAME}")


def trained_max_steps(folder: Path) -> int:
    """The ``max_steps`` the checkpoint's run built its schedule for (its ``trainer_state.json``)."""
    return int(json.loads((folder / "trainer_state.json").read_text())["max_steps"])


def load_checkpoint_weights(model: nn.Module, folder: str | os.PathLike) -> None:
    """Load a checkpoint's model weights into ``model`` in place (one file, or a sharded one's index).

    Every weight of ``model`` must come from the checkpoint except those tied to one that does (a
    tied output head is saved once); any other missing or unexpected name is a ``ValueError``.
    """
    folder = Path(folder)
    if (folder / "model.safetensors").is_file():
        loaded = model.load_state_dict(load_file(folder / "model.safetensors"), strict=False)
    elif (folder / "pytorch_model.bin").is_file():
        state = torch.load(folder / "pytorch_model.bin", map_location="cpu", weights_only=True)
        loaded = model.load_state_dict(state, strict=False)
    else:
        loaded = load_sharded_checkpoint(model, folder, strict=False)
    missing = _untied(model, loaded.missing_keys)
    if missing or loaded.unexpected_keys:
        raise ValueError(
            f"{folder} does not hold this model's weights: missing {missing[:5]}, unexpected "
            f"{list(loaded.unexpected_keys)[:5]} (a checkpoint of another model or configuration?)"
        )


def _untied(model: torch.nn.Module, missing: list[str]) -> list[str]:
    """The names of ``missing`` that share no storage with a weight that was loaded."""
    state, absent = model.state_dict(), set(missing)
    loaded = {tensor.data_ptr() for name, tensor in state.items() if name not in absent}
    return [name for name in missing if state[name].data_ptr() not in loaded]
