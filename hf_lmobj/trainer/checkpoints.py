"""Checkpoints a preempted run can trust: a completion marker, the latest complete one, what each needs.

A ``Trainer`` checkpoint folder is written file by file; a job killed half way leaves a folder that
looks like a checkpoint. :class:`~hf_lmobj.ObjectiveTrainer` writes :data:`COMPLETE_NAME` last, after
every rank has written its part, and rotates old checkpoints only after that, so a folder holding the
marker is whole and a killed save never costs the previous checkpoint. The marker lists what the
checkpoint holds; :func:`check_checkpoint` refuses a resume from one that lacks the optimizer, the
scheduler or the data state, naming the file, and opens every state file the resume will read
(:mod:`hf_lmobj.trainer.state_files`). The data state is written here (:func:`write_data_state`), and
:func:`check_fingerprint` refuses a resume whose data differs from the checkpoint's, naming the key.

Example:
    >>> import tempfile, pathlib
    >>> out = pathlib.Path(tempfile.mkdtemp())
    >>> (out / "checkpoint-10").mkdir(); (out / "checkpoint-20").mkdir()
    >>> write_complete_marker(out / "checkpoint-10", global_step=10, files=[])
    >>> latest_complete_checkpoint(out).name  # checkpoint-20 has no marker: a save that was cut short
    'checkpoint-10'
    >>> check_checkpoint(out / "checkpoint-10", needs_data_state=False)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: checkpoint .../checkpoint-10 has no optimizer.pt: the optimizer state (...); resume from a complete checkpoint, or pass --weights_only_restart true to start a new run from its weights

Why: a resume must start from a whole checkpoint of the same data, never from a save that was cut
short or from another run's.
"""

from __future__ import annotations

import ast
import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file
from torch import nn
from transformers.trainer_utils import load_sharded_checkpoint

from hf_lmobj.files import write_atomic
from hf_lmobj.trainer.state_files import (
    COMPLETE_NAME,
    DATA_STATE_NAME,
    TRAINER_STATE_NAME,
    _short,
    check_safetensors,
    check_state_files,
)

#: What a resume that continues the run exactly needs, besides the model (what each file restores).
REQUIRED_FILES = {
    "optimizer.pt": "the optimizer state (moments; without it the update after resuming differs)",
    "scheduler.pt": "the learning-rate schedule (without it warmup restarts)",
    TRAINER_STATE_NAME: "the step, the logs and the callbacks' state",
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
    """Write the marker last, atomically (:func:`hf_lmobj.files.write_atomic`)."""
    write_atomic(
        Path(folder) / COMPLETE_NAME, json.dumps({"global_step": int(global_step), "files": sorted(files)}, indent=1)
    )


def check_checkpoint(folder: str | os.PathLike, needs_data_state: bool, weights_only: bool = False) -> Path:
    """``folder`` if a resume from it can continue the run exactly, else a ``ValueError`` naming what is wrong.

    Every file the resume will read is opened now: a missing optimizer, scheduler, trainer state (or,
    with ``needs_data_state``, data state) is refused by name, and so is any of them (or the marker,
    an RNG state, a safetensors file) cut short, corrupt or of the wrong shape. ``weights_only=True``
    accepts a checkpoint without optimizer, scheduler or data state (a fresh start from its weights,
    not a continuation); only its weight files are checked.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"resume_from_checkpoint: {folder} is not a folder")
    check_safetensors(folder)
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
    check_state_files(folder, needs_data_state)
    return folder


def write_data_state(folder: str | os.PathLike, states: Sequence[dict], fingerprint: dict) -> None:
    """Every rank's data position and the data's fingerprint, as one JSON file written atomically (main process only)."""
    text = json.dumps({"fingerprint": fingerprint, "ranks": list(states)}, indent=1, default=_plain)
    write_atomic(Path(folder) / DATA_STATE_NAME, text)


# ---- the data fingerprint ----------------------------------------------------------------
def check_fingerprint(saved: dict, current: dict, ignore: bool = False) -> None:
    """Refuse a resume whose data differs from the checkpoint's, naming each key that changed.

    Keys are named down to the leaf that differs (``rows[1]``, ``sources[0]``), and a collator's
    description field by field (``collator.tokenizer``, the tokenizer's content fingerprint).

    Example:
        >>> check_fingerprint({"seed": 0, "rows": ["packed", 256]}, {"seed": 1, "rows": ["packed", 256]})
        Traceback (most recent call last):
        ...
        ValueError: the data differs from the checkpoint's: seed (0 -> 1); resume with the same data, or pass ignore_data_fingerprint=True (--ignore_data_fingerprint true) to continue anyway
        >>> check_fingerprint({"collator": "C([('max_length', '32'), ('tokenizer', \\"'ab12'\\")])"},
        ...                   {"collator": "C([('max_length', '32'), ('tokenizer', \\"'cd34'\\")])"})
        Traceback (most recent call last):
        ...
        ValueError: the data differs from the checkpoint's: collator.tokenizer ('ab12' -> 'cd34'); ...
    """
    changed = _differences(saved, current)
    if changed and not ignore:
        what = ", ".join(f"{key} ({before} -> {after})" for key, before, after in changed)
        raise ValueError(
            f"the data differs from the checkpoint's: {what}; resume with the same data, or pass "
            "ignore_data_fingerprint=True (--ignore_data_fingerprint true) to continue anyway"
        )


class _Shown(str):
    """A value already written as text (a collator field's ``repr``): shown as it is, not quoted again."""

    def __repr__(self) -> str:
        return str(self)


class _Absent:
    def __repr__(self) -> str:
        return "absent"


_ABSENT = _Absent()
_DESCRIBED = re.compile(r"^(\w+)\((\[.*\])\)$", re.DOTALL)  # a collator: Class([(field, repr), ...])


def _differences(saved: Any, current: Any, where: str = "") -> list[tuple[str, str, str]]:
    """``(key path, saved, current)`` for each leaf of two fingerprints that differs, in key order."""
    if isinstance(saved, dict) and isinstance(current, dict):
        keys = sorted(set(saved) | set(current), key=str)
        nested = (
            _differences(saved.get(k, _ABSENT), current.get(k, _ABSENT), f"{where}.{k}" if where else str(k))
            for k in keys
        )
        return [found for part in nested for found in part]
    if isinstance(saved, list) and isinstance(current, list) and len(saved) == len(current):
        nested = (_differences(a, b, f"{where}[{i}]") for i, (a, b) in enumerate(zip(saved, current)))
        return [found for part in nested for found in part]
    before, after = _described(saved), _described(current)
    if before is not None and after is not None and before[0] == after[0]:
        return _differences(before[1], after[1], where)
    return [] if saved == current else [(where, _short(saved), _short(current))]


def _described(value: Any) -> tuple[str, dict[str, Any]] | None:
    """A collator's description ``Class([(field, repr), ...])`` as ``(Class, {field: repr})``, else None."""
    match = _DESCRIBED.match(value) if isinstance(value, str) else None
    if match is None:
        return None
    try:
        pairs = ast.literal_eval(match.group(2))
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None
    if not all(isinstance(pair, tuple) and len(pair) == 2 and isinstance(pair[0], str) for pair in pairs):
        return None
    return match.group(1), {key: _Shown(text) if isinstance(text, str) else text for key, text in pairs}


def _plain(value: object) -> object:
    """numpy scalars and arrays in the states as plain JSON values."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"cannot write {type(value).__name__} into {DATA_STATE_NAME}")


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
