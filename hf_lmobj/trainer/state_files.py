"""A checkpoint's state files read back and checked, the way the resume will read them, before training starts.

The JSON files (``trainer_state.json``, ``data_state.json``, the completion marker) are read and their
keys and types checked (:func:`read_trainer_state`, :func:`read_data_state`, :func:`read_complete_marker`);
the torch files (``optimizer.pt``, ``scheduler.pt``, ``scaler.pt``, ``rng_state*.pth``) are loaded as
transformers does, memory-mapped (:func:`check_torch_state`); the safetensors headers are read
(:func:`check_safetensors`). :func:`check_state_files` opens all of a folder's. A file cut short,
corrupt or of the wrong shape is a ``ValueError`` naming it and the fix (:data:`RESUME_FIX`), never a
``JSONDecodeError`` or ``KeyError`` inside ``train()``, nor a silent restart from step 0. What a
checkpoint holds, and which of these files a resume needs, is :mod:`hf_lmobj.trainer.checkpoints`.

Example:
    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> _ = (folder / TRAINER_STATE_NAME).write_text('{"global_step": "10", "max_steps": 20')
    >>> read_trainer_state(folder)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: .../trainer_state.json (the trainer state) is not valid JSON (cut short or corrupt: ...); resume from an earlier checkpoint (--resume_from_checkpoint PATH), or delete this one

Why: a resume that cannot work must fail in seconds with the file to blame, not after the data is
prepared, and never train on from a state it half read.
"""

from __future__ import annotations

import dataclasses
import math
import os
import pickle
import zipfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import transformers
from safetensors import safe_open
from transformers.trainer_callback import TrainerState
from transformers.trainer_pt_utils import safe_globals

from hf_lmobj.files import read_json

#: The completion marker, written last by ObjectiveTrainer: the step and the files of a whole checkpoint.
COMPLETE_NAME = "checkpoint_complete.json"
#: The data pipeline's position, written by ObjectiveTrainer when it trains on a PretrainingStream.
DATA_STATE_NAME = "data_state.json"
#: The Trainer's step, schedule length, logs and callbacks' state (``TrainerState``).
TRAINER_STATE_NAME = "trainer_state.json"
#: The torch files a resume loads (when present): what each holds, and the keys its dict must have.
TORCH_STATE_FILES = {
    "optimizer.pt": ("the optimizer state", ("state", "param_groups")),
    "scheduler.pt": ("the learning-rate schedule", ()),
    "scaler.pt": ("the fp16 gradient scaler", ()),
}
_RNG_STATE = ("the random generators' state", ("python", "numpy", "cpu"))  # rng_state.pth, rng_state_<rank>.pth
#: What the error about a corrupt checkpoint file tells the user to do.
RESUME_FIX = "resume from an earlier checkpoint (--resume_from_checkpoint PATH), or delete this one"


def check_state_files(folder: str | os.PathLike, needs_data_state: bool) -> None:
    """Open every state file of ``folder`` as the resume will (JSON keys and types, torch archives).

    The trainer state always, the marker when present (and its step must be the trainer state's), the
    data state when ``needs_data_state``, and each torch file present; the first bad one is a
    ``ValueError`` naming it.
    """
    folder = Path(folder)
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


def read_data_state(folder: str | os.PathLike) -> dict:
    """``data_state.json``: the data fingerprint (an object) and one position per rank of the saving run.

    Each rank's position has the keys and types ``PipelineLoader.state_dict`` writes; there is one per
    process of the saved world size, in rank order, and the ranks agree on the regime, world size, batch
    size, workers and sources. Anything else is a ``ValueError`` naming the file and the key.

    Example:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> _ = (folder / DATA_STATE_NAME).write_text('{"fingerprint": {"seed": 0}, "ranks": []}')
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


def check_safetensors(folder: str | os.PathLike) -> None:
    """Every ``*.safetensors`` file of ``folder`` has a whole header covering the whole file (nothing read but it)."""
    for path in sorted(Path(folder).glob("*.safetensors")):
        try:
            with safe_open(path, framework="pt"):
                pass
        except Exception as error:  # noqa: BLE001  (safetensors raises its own SafetensorError)
            raise _corrupt(path, "model weights", f"the file is corrupt or cut short ({error})") from None


def _short(value: object) -> str:
    """``repr(value)``, cut to 80 characters (for an error message)."""
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."
