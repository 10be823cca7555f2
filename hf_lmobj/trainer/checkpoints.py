"""Checkpoints a preempted run can trust: a completion marker, the latest complete one, what each needs.

A ``Trainer`` checkpoint folder is written file by file; a job killed half way leaves a folder that
looks like a checkpoint. :class:`~hf_lmobj.ObjectiveTrainer` writes :data:`COMPLETE_NAME` last, after
every rank has written its part, and rotates old checkpoints only after that, so a folder holding the
marker is whole and a killed save never costs the previous checkpoint. The marker lists what the
checkpoint holds; :func:`check_checkpoint` refuses a resume from one that lacks the optimizer, the
scheduler or the data state, naming the file.

It also opens every state file the resume will read, before training starts, the way the Trainer
will: the JSON files (``trainer_state.json``, ``data_state.json``, the marker) are read and their keys
and types checked (:func:`read_trainer_state`, :func:`read_data_state`, :func:`read_complete_marker`),
the torch files (``optimizer.pt``, ``scheduler.pt``, ``rng_state*.pth``) are loaded as transformers
does, memory-mapped (:func:`check_torch_state`), and the safetensors headers are read. A file cut
short, corrupt or of the wrong shape is a ``ValueError`` naming it and the fix (:data:`RESUME_FIX`),
never a ``JSONDecodeError`` or ``KeyError`` inside ``train()``, nor a silent restart from step 0.

Example:
    >>> import tempfile, pathlib
    >>> out = pathlib.Path(tempfile.mkdtemp())
    >>> (out / "checkpoint-10").mkdir(); (out / "checkpoint-20").mkdir()
    >>> write_complete_marker(out / "checkpoint-10", global_step=10, files=[])
    >>> latest_complete_checkpoint(out).name  # checkpoint-20 has no marker: a save that was cut short
    'checkpoint-10'
    >>> _ = (out / "checkpoint-10" / "trainer_state.json").write_text('{"global_step": "10", "max_steps": 20')
    >>> read_trainer_state(out / "checkpoint-10")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: .../trainer_state.json (the trainer state) is not valid JSON (cut short or corrupt: ...); resume from an earlier checkpoint (--resume_from_checkpoint PATH), or delete this one

Why: a resume that cannot work must fail in seconds with the file to blame, not after the data is
prepared, and never train on from a state it half read.
"""

from __future__ import annotations

import ast
import dataclasses
import json
import math
import os
import pickle
import re
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import transformers
from safetensors import safe_open
from safetensors.torch import load_file
from torch import nn
from transformers.trainer_callback import TrainerState
from transformers.trainer_pt_utils import safe_globals
from transformers.trainer_utils import load_sharded_checkpoint

from hf_lmobj.files import read_json, write_atomic

__all__ = [
    "COMPLETE_NAME",
    "DATA_STATE_NAME",
    "TRAINER_STATE_NAME",
    "REQUIRED_FILES",
    "TORCH_STATE_FILES",
    "RESUME_FIX",
    "checkpoint_folders",
    "latest_complete_checkpoint",
    "write_complete_marker",
    "read_complete_marker",
    "check_checkpoint",
    "write_data_state",
    "read_data_state",
    "read_trainer_state",
    "check_torch_state",
    "check_fingerprint",
    "WEIGHT_FILES",
    "trained_max_steps",
    "load_checkpoint_weights",
]

COMPLETE_NAME = "checkpoint_complete.json"
#: The data pipeline's position, written by ObjectiveTrainer when it trains on a PretrainingStream.
DATA_STATE_NAME = "data_state.json"
#: The Trainer's step, schedule length, logs and callbacks' state (``TrainerState``).
TRAINER_STATE_NAME = "trainer_state.json"
#: What a resume that continues the run exactly needs, besides the model (what each file restores).
REQUIRED_FILES = {
    "optimizer.pt": "the optimizer state (moments; without it the update after resuming differs)",
    "scheduler.pt": "the learning-rate schedule (without it warmup restarts)",
    TRAINER_STATE_NAME: "the step, the logs and the callbacks' state",
}
#: The torch files a resume loads (when present): what each holds, and the keys its dict must have.
TORCH_STATE_FILES = {
    "optimizer.pt": ("the optimizer state", ("state", "param_groups")),
    "scheduler.pt": ("the learning-rate schedule", ()),
    "scaler.pt": ("the fp16 gradient scaler", ()),
}
_RNG_STATE = ("the random generators' state", ("python", "numpy", "cpu"))  # rng_state.pth, rng_state_<rank>.pth
#: What the error about a corrupt checkpoint file tells the user to do.
RESUME_FIX = "resume from an earlier checkpoint (--resume_from_checkpoint PATH), or delete this one"
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
    _check_safetensors(folder)
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
    _check_state_files(folder, needs_data_state)
    return folder


def _check_state_files(folder: Path, needs_data_state: bool) -> None:
    """Open every state file of ``folder`` as the resume will (JSON keys and types, torch archives)."""
    state = read_trainer_state(folder)
    if (folder / COMPLETE_NAME).is_file():
        marker = read_complete_marker(folder)
        if marker["global_step"] != state["global_step"]:
            raise _corrupt(
                folder / COMPLETE_NAME, "the completion marker", f"it marks step {marker['global_step']} but "
                f"{TRAINER_STATE_NAME} holds step {state['global_step']} (files of two saves mixed)",
            )  # fmt: skip
    if needs_data_state:
        read_data_state(folder)
    for name, (what, keys) in TORCH_STATE_FILES.items():
        if (folder / name).is_file():
            check_torch_state(folder / name, what, keys)
    for path in sorted(folder.glob("rng_state*.pth")):
        check_torch_state(path, *_RNG_STATE)


# ---- the JSON state files: keys and types ----------------------------------------------------
_Check = tuple[Callable[[Any], bool], str]  # (test of a value, what the value must be)


def _whole(minimum: int = 0, optional: bool = False) -> _Check:
    """An int (never a bool or a float) ``>= minimum``; JSON ``null`` too when ``optional``."""

    def test(value: Any) -> bool:
        return (value is None and optional) or (type(value) is int and value >= minimum)

    return test, f"an int >= {minimum}" + (" or null" if optional else "")


def _real(minimum: float | None = 0.0, optional: bool = False) -> _Check:
    """A finite number ``>= minimum`` (any number, NaN and infinities too, when ``minimum`` is None)."""

    def test(value: Any) -> bool:
        if value is None and optional:
            return True
        if type(value) not in (int, float):
            return False
        return minimum is None or (math.isfinite(value) and value >= minimum)

    kind = "a number" if minimum is None else f"a finite number >= {minimum:g}"
    return test, kind + (" or null" if optional else "")


def _kind(kind: type, name: str, optional: bool = False) -> _Check:
    """A value of the JSON type ``kind`` (``str``, ``bool``, ``dict``); JSON ``null`` too when ``optional``."""

    def test(value: Any) -> bool:
        return (value is None and optional) or isinstance(value, kind)

    return test, name + (" or null" if optional else "")


def _list_of(test: Callable[[Any], bool], name: str) -> _Check:
    return (lambda value: isinstance(value, list) and all(test(item) for item in value)), name


def _callback_states(value: Any) -> bool:
    """``stateful_callbacks``: callback name -> its state (an object) or a list of states."""
    if value is None:
        return True
    one = lambda state: isinstance(state, dict)  # noqa: E731
    return isinstance(value, dict) and all(one(v) or (isinstance(v, list) and all(map(one, v))) for v in value.values())


_TRAINER_STATE_REQUIRED = ("global_step", "max_steps", "epoch", "log_history")
_TRAINER_STATE_FIELDS: dict[str, _Check] = {
    "epoch": _real(),
    "global_step": _whole(),
    "max_steps": _whole(1),
    "logging_steps": _real(),
    "eval_steps": _real(),
    "save_steps": _real(),
    "train_batch_size": _whole(1, optional=True),
    "num_train_epochs": _real(),
    "num_input_tokens_seen": _real(),
    "total_flos": _real(),
    "log_history": _list_of(lambda entry: isinstance(entry, dict), "a list of objects (one per log)"),
    "best_metric": _real(None, optional=True),
    "best_global_step": _whole(optional=True),
    "best_model_checkpoint": _kind(str, "a string", optional=True),
    "is_local_process_zero": _kind(bool, "true or false"),
    "is_world_process_zero": _kind(bool, "true or false"),
    "is_hyper_param_search": _kind(bool, "true or false"),
    "trial_name": _kind(str, "a string", optional=True),
    "trial_params": _kind(dict, "an object", optional=True),
    "stateful_callbacks": (_callback_states, "an object of callback states (objects or lists of objects)"),
}
_MARKER_FIELDS: dict[str, _Check] = {
    "global_step": _whole(),
    "files": _list_of(lambda name: isinstance(name, str), "a list of file names"),
}
_RANK_FIELDS: dict[str, _Check] = {
    "regime": (lambda value: value in ("planned", "streamed"), "'planned' or 'streamed'"),
    "epoch": _whole(),
    "batches_in_epoch": _whole(),
    "batch_size": _whole(1),
    "world_size": _whole(1),
    "rank": _whole(),
    "workers": _whole(),
    "tokens_by_source": _list_of(lambda count: type(count) is int and count >= 0, "a list of ints >= 0"),
}
_STREAMED_FIELDS: dict[str, _Check] = {
    "units": (
        lambda value: isinstance(value, dict) and all(k.isdecimal() and isinstance(v, dict) for k, v in value.items()),
        "an object from unit number to that unit's position (an object)",
    ),
    "next_unit": _whole(optional=True),
    "exhausted": _list_of(lambda unit: type(unit) is int and unit >= 0, "a list of unit numbers"),
}
#: What two ranks of one save share (a data state mixing saves differs in them).
_SHARED_BY_RANKS = ("regime", "world_size", "batch_size", "workers")


def _corrupt(path: Path, what: str, problem: str) -> ValueError:
    return ValueError(f"{path} ({what}): {problem}; {RESUME_FIX}")


def _check_fields(path: Path, what: str, value: dict, fields: dict[str, _Check], where: str = "") -> None:
    """Each key of ``fields`` that ``value`` holds passes its test, else a ``ValueError`` naming file and key."""
    for key, (test, kind) in fields.items():
        if key in value and not test(value[key]):
            raise _corrupt(path, what, f"{where}{key} must be {kind}, got {_short(value[key])}")


def read_trainer_state(folder: str | os.PathLike) -> dict:
    """``trainer_state.json`` of a checkpoint, its keys and types checked as ``TrainerState`` will read them.

    A missing ``global_step`` would restart the run at step 0 and ``"5"`` fails deep in the Trainer:
    both, and a file cut short, are a ``ValueError`` naming the file; so is a key this transformers
    version does not know (a state written by another version).
    """
    path, what = Path(folder) / TRAINER_STATE_NAME, "the trainer state"
    state = read_json(path, what, _TRAINER_STATE_REQUIRED, RESUME_FIX)
    _check_fields(path, what, state, _TRAINER_STATE_FIELDS)
    unknown = sorted(set(state) - {f.name for f in dataclasses.fields(TrainerState)})
    if unknown:
        raise ValueError(
            f"{path} ({what}) holds keys transformers {transformers.__version__} does not know "
            f"({', '.join(map(repr, unknown))}): written by another version? resume with the transformers "
            "version that wrote it"
        )
    return state


def read_complete_marker(folder: str | os.PathLike) -> dict:
    """The completion marker, checked: a step, and the files it lists all still in the folder."""
    folder = Path(folder)
    path, what = folder / COMPLETE_NAME, "the completion marker"
    marker = read_json(path, what, ("global_step", "files"), RESUME_FIX)
    _check_fields(path, what, marker, _MARKER_FIELDS)
    gone = [name for name in marker["files"] if not (folder / name).exists()]
    if gone:
        raise _corrupt(
            path, what, f"it lists {', '.join(gone)}, which the folder no longer holds (not a whole checkpoint)"
        )
    return marker


def write_data_state(folder: str | os.PathLike, states: Sequence[dict], fingerprint: dict) -> None:
    """Every rank's data position and the data's fingerprint, as one JSON file written atomically (main process only)."""
    text = json.dumps({"fingerprint": fingerprint, "ranks": list(states)}, indent=1, default=_plain)
    write_atomic(Path(folder) / DATA_STATE_NAME, text)


def read_data_state(folder: str | os.PathLike) -> dict:
    """``data_state.json``: the data fingerprint (an object) and one position per rank of the saving run.

    Each rank's position has the keys and types ``PipelineLoader.state_dict`` writes; there is one per
    process of the saved world size, in rank order, and the ranks agree on the regime, world size, batch
    size, workers and sources. Anything else is a ``ValueError`` naming the file and the key.

    Example:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> write_data_state(folder, [], {"seed": 0})
        >>> read_data_state(folder)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: .../data_state.json (the data position): ranks must be a non-empty list of objects (one per rank), got []; ...
    """
    path, what = Path(folder) / DATA_STATE_NAME, "the data position"
    state = read_json(path, what, ("fingerprint", "ranks"), RESUME_FIX)
    ranks = state["ranks"]
    if not isinstance(state["fingerprint"], dict):
        raise _corrupt(path, what, f"fingerprint must be an object, got {_short(state['fingerprint'])}")
    if not (isinstance(ranks, list) and ranks and all(isinstance(rank, dict) for rank in ranks)):
        raise _corrupt(path, what, f"ranks must be a non-empty list of objects (one per rank), got {_short(ranks)}")
    for index, rank in enumerate(ranks):
        _check_rank(path, what, rank, index)
    _check_ranks_agree(path, what, ranks)
    return state


def _check_ranks_agree(path: Path, what: str, ranks: list[dict]) -> None:
    """One position per process of the saved world size, in rank order, all of one save (same regime, sizes)."""
    first = ranks[0]
    if len(ranks) != first["world_size"]:
        raise _corrupt(path, what, f"ranks holds {len(ranks)} positions for a world_size of {first['world_size']}")
    for index, rank in enumerate(ranks):
        if rank["rank"] != index:
            raise _corrupt(path, what, f"ranks[{index}].rank is {rank['rank']}: the positions are not in rank order")
        differ = [key for key in _SHARED_BY_RANKS if rank[key] != first[key]]
        if len(rank["tokens_by_source"]) != len(first["tokens_by_source"]):
            differ.append("len(tokens_by_source)")
        if differ:
            raise _corrupt(path, what, f"ranks[{index}] and ranks[0] differ in {', '.join(differ)} (two saves mixed)")


def _check_rank(path: Path, what: str, rank: dict, index: int) -> None:
    """One rank's saved position: every key ``PipelineLoader.state_dict`` writes, of its type."""
    where = f"ranks[{index}]."
    required = list(_RANK_FIELDS) + (list(_STREAMED_FIELDS) if rank.get("regime") == "streamed" else [])
    missing = [key for key in required if key not in rank]
    if missing:
        raise _corrupt(path, what, f"{where[:-1]} has no {', '.join(map(repr, missing))}")
    _check_fields(path, what, rank, _RANK_FIELDS, where)
    if rank["regime"] == "streamed":
        _check_fields(path, what, rank, _STREAMED_FIELDS, where)


# ---- the torch and safetensors files ---------------------------------------------------------
def check_torch_state(path: str | os.PathLike, what: str, keys: Sequence[str] = ()) -> None:
    """Load ``path`` as the Trainer will (``weights_only=True``, CPU), memory-mapped: no tensor data is read.

    A file that is not a torch zip archive (empty, cut short, garbage) and does not load as a legacy
    torch file either is *corrupt or truncated*, not a ``weights_only`` question: the error says so and
    names the file. A valid archive that ``weights_only`` refuses keeps torch's own message. A loaded
    value that is not a dict with ``keys`` is not ``what``.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "optimizer.pt"
        >>> _ = path.write_bytes(b"garbage")
        >>> check_torch_state(path, "the optimizer state")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: .../optimizer.pt (the optimizer state) is corrupt or truncated: not a torch zip archive (7 bytes); ...
    """
    path = Path(path)
    archive = zipfile.is_zipfile(path)
    try:
        value = _torch_load(path, archive)
    except pickle.UnpicklingError as error:
        if not archive:
            raise _unreadable(path, what, archive, error) from None
        raise ValueError(
            f"{path} ({what}) is a torch archive that torch.load(weights_only=True) refuses: {error}\n"
            f"If the file is damaged rather than holding objects you trust, {RESUME_FIX}"
        ) from error
    except Exception as error:  # noqa: BLE001  (whatever a damaged file raises, it is damaged)
        raise _unreadable(path, what, archive, error) from None
    if not isinstance(value, dict) or any(key not in value for key in keys):
        has = (
            f"a dict with keys {sorted(map(str, value))[:6]}"
            if isinstance(value, dict)
            else f"a {type(value).__name__}"
        )
        need = f"a dict with {', '.join(map(repr, keys))}" if keys else "a dict"
        raise _corrupt(path, what, f"it holds {has}, not {need}")


def _torch_load(path: Path, archive: bool) -> Any:
    """``torch.load`` as the Trainer calls it; an archive memory-mapped (read whole where mapping fails)."""
    with safe_globals():  # the numpy types transformers' own loads allow
        try:
            return torch.load(path, map_location="cpu", weights_only=True, mmap=archive)
        except RuntimeError:
            if not archive:
                raise
            return torch.load(path, map_location="cpu", weights_only=True)  # a file system without mmap


def _unreadable(path: Path, what: str, archive: bool, error: Exception) -> ValueError:
    size = path.stat().st_size
    if archive:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return ValueError(
            f"{path} ({what}) is corrupt: a zip archive that is not torch's ({_short(first)}); {RESUME_FIX}"
        )
    return ValueError(
        f"{path} ({what}) is corrupt or truncated: not a torch zip archive ({'empty' if size == 0 else f'{size} bytes'}); "
        f"{RESUME_FIX}"
    )


def _check_safetensors(folder: Path) -> None:
    """Every ``*.safetensors`` file of ``folder`` has a whole header covering the whole file (nothing read but it)."""
    for path in sorted(folder.glob("*.safetensors")):
        try:
            with safe_open(path, framework="pt"):
                pass
        except Exception as error:  # noqa: BLE001  (safetensors raises its own SafetensorError)
            raise _corrupt(path, "model weights", f"the file is corrupt or cut short ({error})") from None


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


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _plain(value: object) -> object:
    """numpy scalars and arrays in the states as plain JSON values."""
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"cannot write {type(value).__name__} into {DATA_STATE_NAME}")


def trained_max_steps(folder: Path) -> int:
    """The ``max_steps`` the checkpoint's run built its schedule for (its ``trainer_state.json``, checked)."""
    return read_trainer_state(folder)["max_steps"]


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
