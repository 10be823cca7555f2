"""Resuming a pre-training run: which checkpoint, whether it can continue the run, what the first start chose.

:func:`plan_resume` runs right after the arguments are parsed, before any text is read or any
tokenizer trained, so a resume that cannot work fails in seconds:

- ``--resume_from_checkpoint true`` (or ``last``) continues from the latest *complete* checkpoint of
  ``output_dir`` (:func:`~hf_lmobj.trainer.checkpoints.latest_complete_checkpoint`), a path from that
  folder; either is refused, by file name, if it lacks the optimizer, the scheduler, the trainer state
  or (streamed / token store / mixture data) the data state.
- A run without a resume in an ``output_dir`` holding ``checkpoint-*`` folders (a requeued job) is
  refused rather than trained from step 1 over them; ``--overwrite_output_dir true`` starts over (the
  old checkpoints are deleted before training, so ``last`` never picks an earlier run's).
- ``--weights_only_restart true`` with a checkpoint starts a *new* run from its model weights alone:
  step 0, a fresh optimizer and schedule, the data from its start.

What the first start decided and the schedule depends on, ``max_steps`` (a ``max_train_minutes``
budget lowers it once), is the ``max_steps`` of the checkpoint's ``trainer_state.json``; a resumed
run trains to it without timing again. A run whose latest complete checkpoint already reached the
``max_steps`` it would train to is *complete* (:meth:`ResumePlan.complete`): the recipe says so and
trains nothing (:func:`complete_run_line`). A new run also records it in
``<output_dir>/run_decisions.json`` (:data:`RUN_DECISIONS_NAME`) before training; a continuation reads
that file back (:func:`read_run_decisions`), so one cut short or corrupt is refused by name before any
data is read, as is every state file of the checkpoint (``hf_lmobj.trainer.state_files``).

Example:
    >>> import tempfile
    >>> from transformers import TrainingArguments
    >>> out = tempfile.mkdtemp()
    >>> args = TrainingArguments(output_dir=out, resume_from_checkpoint="last", report_to="none")
    >>> plan_resume(args, ResumeArguments(), needs_data_state=False)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: --resume_from_checkpoint last: ... holds no complete checkpoint...
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from transformers.utils import logging

from hf_lmobj.checks import check_count, check_flag, check_number
from hf_lmobj.files import read_json, write_atomic
from hf_lmobj.trainer.checkpoints import (
    WEIGHT_FILES,
    check_checkpoint,
    checkpoint_folders,
    latest_complete_checkpoint,
)
from hf_lmobj.trainer.state_files import COMPLETE_NAME, TRAINER_STATE_NAME, read_trainer_state
from hf_lmobj.trainer.time_budget import StepBudget, fit_max_steps_to_budget

if TYPE_CHECKING:
    from transformers import TrainingArguments

logger = logging.get_logger(__name__)

#: What a new run decided before training (``max_steps`` and the budget), written once in ``output_dir``.
RUN_DECISIONS_NAME = "run_decisions.json"
_DECISIONS = "what the run's first start decided"
_DECISIONS_FIX = f"restore it, or delete it (a resumed run takes max_steps from its checkpoint's {TRAINER_STATE_NAME})"
_LATEST = ("true", "last")
_NONE = ("", "false", "none", "null")


@dataclass
class ResumeArguments:
    """How a run treats the checkpoints it finds (``--resume_from_checkpoint`` is the Trainer's own field)."""

    #: The YAML config section of these fields (hf_lmobj.config): ``resume: {...}``.
    SECTION: ClassVar[str] = "resume"

    overwrite_output_dir: bool = field(
        default=False,
        metadata={
            "help": "Start a new run in an output_dir that holds checkpoint-* folders: they are deleted before "
            "training. Without it such a rerun is refused (--resume_from_checkpoint last continues it)."
        },
    )
    weights_only_restart: bool = field(
        default=False,
        metadata={
            "help": "With --resume_from_checkpoint PATH|last: a new run from the checkpoint's model weights only "
            "(step 0, fresh optimizer and schedule, data from its start); optimizer, scheduler and data state "
            "may be missing."
        },
    )

    def __post_init__(self) -> None:
        for name in ("overwrite_output_dir", "weights_only_restart"):
            setattr(self, name, check_flag(getattr(self, name), name))


@dataclass(frozen=True)
class ResumePlan:
    """What :func:`plan_resume` resolved: continue from ``checkpoint``, or a new run (from ``weights_from``)."""

    checkpoint: Path | None = None  # continue here: weights, optimizer, schedule, step, data position
    weights_from: Path | None = None  # a new run starting from these model weights
    max_steps: int | None = None  # the max_steps the checkpoint's run trained to (continuations only)
    clear: tuple[Path, ...] = ()  # an earlier run's checkpoints, deleted before training (overwrite)
    decisions: dict[str, Any] | None = None  # output_dir's run_decisions.json, checked (continuations; None: none)
    step: int | None = None  # the checkpoint's global_step (continuations only)

    @property
    def continues(self) -> bool:
        """Whether the run continues a checkpoint's run (False: a new run, step 0)."""
        return self.checkpoint is not None

    def target_steps(self, max_steps: int, minutes: float | None) -> int | None:
        """The ``max_steps`` a continuation trains to (None: not known before the data, or a new run).

        Under a ``max_train_minutes`` budget, the first start's (:func:`keep_first_start_steps`); else the
        command's ``max_steps``; ``-1`` (train by epochs) needs the data's length, so it is not known here.

        Example:
            >>> plan = ResumePlan(checkpoint=Path("out/checkpoint-4"), max_steps=4, step=4)
            >>> plan.target_steps(50, minutes=0.5), plan.target_steps(6, minutes=None), plan.target_steps(-1, None)
            (4, 6, None)
        """
        if not self.continues:
            return None
        if minutes is not None:
            return self.max_steps
        return max_steps if max_steps > 0 else None

    def complete(self, max_steps: int, minutes: float | None) -> bool:
        """Whether the checkpoint already reached the steps the continuation would train to: nothing to train.

        Example:
            >>> plan = ResumePlan(checkpoint=Path("out/checkpoint-4"), max_steps=4, step=4)
            >>> plan.complete(4, None), plan.complete(50, minutes=0.5), plan.complete(6, None)
            (True, True, False)
        """
        target = self.target_steps(max_steps, minutes)
        return target is not None and self.step is not None and self.step >= target


def plan_resume(train_args: TrainingArguments, resume_args: ResumeArguments, needs_data_state: bool) -> ResumePlan:
    """Resolve and check ``train_args.resume_from_checkpoint`` against ``output_dir``; refuse what cannot work.

    Sets ``train_args.resume_from_checkpoint`` to the resolved folder (None for a new run), so the
    Trainer never sees ``true`` / ``last``. ``needs_data_state``: the run trains on a
    ``PretrainingStream``, whose position the checkpoint must hold.

    Raises:
        ValueError: ``true`` / ``last`` and no complete checkpoint in ``output_dir``; a checkpoint
            without ``optimizer.pt``, ``scheduler.pt``, ``trainer_state.json`` (or the data state),
            named; any state file of the checkpoint (or ``output_dir``'s ``run_decisions.json``) cut short,
            corrupt or of the wrong shape, named; a new run over ``checkpoint-*`` folders without
            ``--overwrite_output_dir``;
            ``--weights_only_restart`` without a checkpoint or with one that holds no weights;
            ``--overwrite_output_dir`` together with a continuation.
    """
    output_dir = train_args.output_dir
    requested = _requested_checkpoint(train_args.resume_from_checkpoint, output_dir)
    train_args.resume_from_checkpoint = None
    if resume_args.weights_only_restart:
        if requested is None:
            raise ValueError(
                "--weights_only_restart true needs --resume_from_checkpoint PATH (or last): the weights to start from"
            )
        folder = _with_weights(check_checkpoint(requested, needs_data_state, weights_only=True))
        return ResumePlan(weights_from=folder, clear=_earlier_checkpoints(output_dir, resume_args.overwrite_output_dir))
    if requested is None:
        return ResumePlan(clear=_earlier_checkpoints(output_dir, resume_args.overwrite_output_dir))
    if resume_args.overwrite_output_dir:
        raise ValueError(
            "--overwrite_output_dir true starts over and --resume_from_checkpoint continues: give one "
            "(--weights_only_restart true starts over from the checkpoint's weights)"
        )
    folder = check_checkpoint(requested, needs_data_state)
    if not (folder / COMPLETE_NAME).is_file():
        logger.warning(f"{folder} has no {COMPLETE_NAME}: its save may have been cut short")
    decisions = read_run_decisions(output_dir)
    train_args.resume_from_checkpoint = str(folder)
    state = read_trainer_state(folder)
    return ResumePlan(checkpoint=folder, max_steps=state["max_steps"], decisions=decisions, step=state["global_step"])


def complete_run_line(output_dir: str | os.PathLike, plan: ResumePlan, max_steps: int, minutes: float | None) -> str:
    """The line a continuation prints when its checkpoint already reached the steps it would train to.

    Example:
        >>> plan = ResumePlan(checkpoint=Path("out/run/checkpoint-4"), max_steps=4, step=4)
        >>> complete_run_line("out/run", plan, 4, minutes=None)
        'the run in out/run is complete (step 4 of 4); nothing to train (a larger --max_steps trains further)'
    """
    further = "a larger --max_steps" + (" with --max_train_minutes null" if minutes is not None else "")
    target = plan.target_steps(max_steps, minutes)
    done = f"the run in {output_dir} is complete (step {plan.step} of {target})"
    return f"{done}; nothing to train ({further} trains further)"


def _requested_checkpoint(value: str | bool | None, output_dir: str) -> Path | None:
    """The folder ``--resume_from_checkpoint`` names: ``true`` / ``last`` -> the latest complete one."""
    if value is None or value is False or (isinstance(value, str) and value.strip().lower() in _NONE):
        return None
    if value is True or value.strip().lower() in _LATEST:
        latest = latest_complete_checkpoint(output_dir)
        if latest is not None:
            return latest
        cut = [p.name for p in checkpoint_folders(output_dir)]
        why = f" ({', '.join(cut)} lack {COMPLETE_NAME}: saves cut short)" if cut else ""
        raise ValueError(
            f"--resume_from_checkpoint {value}: {output_dir} holds no complete checkpoint{why}; pass a "
            "checkpoint folder, or drop --resume_from_checkpoint to start a new run"
        )
    return Path(value)


def _earlier_checkpoints(output_dir: str, overwrite: bool) -> tuple[Path, ...]:
    """``output_dir``'s checkpoints a new run would train over: refused, or (overwrite) to be deleted."""
    found = checkpoint_folders(output_dir)
    if found and not overwrite:
        names = ", ".join(p.name for p in found)
        raise ValueError(
            f"{output_dir} holds checkpoints of an earlier run ({names}); a new run would overwrite them from "
            "step 1. Pass --resume_from_checkpoint last to continue it, or --overwrite_output_dir true (deletes "
            "them) or another --output_dir to start over"
        )
    return tuple(found)


def _with_weights(folder: Path) -> Path:
    if not any((folder / name).is_file() for name in WEIGHT_FILES):
        raise ValueError(f"--weights_only_restart: {folder} holds no model weights (one of {', '.join(WEIGHT_FILES)})")
    return folder


def keep_first_start_steps(
    train_args: TrainingArguments, plan: ResumePlan, minutes: float | None, main_process: bool
) -> StepBudget | None:
    """A continuation trains to the ``max_steps`` its checkpoint's run chose; a budget is not timed again.

    With ``max_train_minutes`` the first start's budget (``plan.max_steps``) replaces the command's
    ``max_steps`` (the most a budget may keep), so the schedule is the one the checkpoint was trained
    on; without one, a changed ``max_steps`` is kept and warned about (the schedule is rebuilt).
    """
    if minutes is None:
        if train_args.max_steps != plan.max_steps:
            logger.warning(
                f"{plan.checkpoint} was trained toward max_steps {plan.max_steps}; this run trains to "
                f"{train_args.max_steps}, with its schedule rebuilt for that"
            )
        return None
    budget = StepBudget(minutes, None, train_args.max_steps, plan.max_steps)
    train_args.max_steps = plan.max_steps
    if main_process:
        print(f"max_train_minutes: resuming with max_steps {plan.max_steps} from {plan.checkpoint}, not timed again")
    return budget


def begin_new_run(output_dir: str | os.PathLike, plan: ResumePlan, max_steps: int, budget: StepBudget | None) -> None:
    """Main process, before a new run trains: delete the earlier run's checkpoints and record the decisions.

    ``<output_dir>/run_decisions.json`` holds ``max_steps``, the budget that chose it (None without
    one) and the checkpoint whose weights the run starts from (None), written atomically
    (:func:`hf_lmobj.files.write_atomic`).
    """
    for folder in plan.clear:
        shutil.rmtree(folder)
    root = Path(output_dir)
    root.mkdir(parents=True, exist_ok=True)
    decisions = {
        "max_steps": int(max_steps),
        "budget": asdict(budget) if budget is not None else None,
        "weights_from": str(plan.weights_from) if plan.weights_from is not None else None,
    }
    write_atomic(root / RUN_DECISIONS_NAME, json.dumps(decisions, indent=1))


def read_run_decisions(output_dir: str | os.PathLike) -> dict[str, Any] | None:
    """``<output_dir>/run_decisions.json`` as :func:`begin_new_run` wrote it, checked; None when there is none.

    A file cut short, a missing key or a value of the wrong type is a ``ValueError`` naming the file.

    Example:
        >>> import tempfile
        >>> out = Path(tempfile.mkdtemp())
        >>> write_atomic(out / RUN_DECISIONS_NAME, '{"max_steps": "4", "budget": null, "weights_from": null}')
        >>> read_run_decisions(out)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: .../run_decisions.json (what the run's first start decided): max_steps must be a whole number, got '4'; ...
    """
    path = Path(output_dir) / RUN_DECISIONS_NAME
    if not path.exists():
        return None
    decisions = read_json(path, _DECISIONS, ("max_steps", "budget", "weights_from"), _DECISIONS_FIX)
    budget = decisions["budget"]
    with _naming(path):
        check_count(decisions["max_steps"], "max_steps", minimum=1)
        if decisions["weights_from"] is not None and not isinstance(decisions["weights_from"], str):
            raise TypeError(f"weights_from must be a path or null, got {decisions['weights_from']!r}")
        if budget is not None:
            _check_budget(budget)
    return decisions


def _check_budget(budget: Any) -> None:
    """A recorded ``StepBudget``: minutes and seconds per step (or null) > 0, the steps requested and kept >= 1."""
    fields = ("minutes", "seconds_per_step", "requested", "steps")
    if not isinstance(budget, dict) or sorted(budget) != sorted(fields):
        raise TypeError(f"budget must be null or an object with {', '.join(fields)}, got {budget!r:.120}")
    check_number(budget["minutes"], "budget.minutes", 0.0, low_open=True)
    check_number(budget["seconds_per_step"], "budget.seconds_per_step", 0.0, low_open=True, optional=True)
    check_count(budget["requested"], "budget.requested", minimum=1)
    check_count(budget["steps"], "budget.steps", minimum=1)


@contextlib.contextmanager
def _naming(path: Path) -> Iterator[None]:
    """A check's ``TypeError`` / ``ValueError`` inside as a ``ValueError`` naming ``path`` and the fix."""
    try:
        yield
    except (TypeError, ValueError) as error:
        raise ValueError(f"{path} ({_DECISIONS}): {error}; {_DECISIONS_FIX}") from None


def step_budget(trainer, runtime_args, threads, plan: ResumePlan) -> StepBudget | None:
    """``max_train_minutes``: lower ``max_steps`` to the steps that fit, timed at the thread count training starts
    with; a resumed run is not timed again and keeps the ``max_steps`` its first start chose (the checkpoint's)."""
    if plan.continues:
        main_process = trainer.is_world_process_zero()
        return keep_first_start_steps(trainer.args, plan, runtime_args.max_train_minutes, main_process)
    if runtime_args.max_train_minutes is None:
        return None
    if threads:
        threads.adapt()
    return fit_max_steps_to_budget(trainer, runtime_args.max_train_minutes)
