"""Train for a wall-clock budget: time a few steps of the real model and data, then fix ``max_steps``.

A run that must end within minutes on machines whose speed differs several-fold cannot fix its
step count in advance. :func:`fit_max_steps_to_budget` times forward + backward passes of the trainer's
own model on its first training batch, and an update of the optimizer the Trainer will build (on a
twin model), before ``train()`` and lowers ``args.max_steps`` to the steps
that fit, so the learning-rate schedule (warmup, cosine decay to the end) is built for the steps
that will really run. ``max_steps`` stays an upper bound: a budget never adds steps. The timing
runs under ``torch.random.fork_rng`` and leaves no gradient behind, so the run that follows is the
same run as with that ``max_steps`` given directly.

Example:
    >>> steps_within(420.0, seconds_per_step=1.3, max_steps=650)  # 420 / (1.3 * 1.05 + 0.025)
    302
    >>> steps_within(420.0, seconds_per_step=0.5, max_steps=650)  # the budget does not bind
    650
"""

from __future__ import annotations

import copy
import math
import time
from dataclasses import dataclass

import torch

from hf_lmobj.checks import check_length, check_number

#: What a training-loop step costs on top of the fastest timed forward + backward + optimizer update: a
#: share (clipping, evaluation) and a fixed part (data loading, callbacks, Python), as measured on the
#: causal demo (``benchmarks/demo_experiments.md``).
STEP_OVERHEAD = 1.05
STEP_FIXED_SECONDS = 0.025


@dataclass(frozen=True)
class StepBudget:
    """What a budget decided: the measured seconds per step and the steps kept out of ``requested``.

    ``seconds_per_step`` is None when nothing was timed: a resumed run keeps the steps its first
    start chose (``hf_lmobj/trainer/resume.py``), so its schedule is the one the checkpoint was trained on.
    """

    minutes: float
    seconds_per_step: float | None
    requested: int
    steps: int

    def summary(self) -> str:
        """One report line, e.g. ``7 min at 1.30 s/step: 302 of 650 steps``.

        Example:
            >>> StepBudget(7.0, None, 650, 302).summary()
            '7 min: 302 of 650 steps, chosen at the first start (not timed again on resume)'
        """
        if self.seconds_per_step is None:
            return (
                f"{self.minutes:g} min: {self.steps} of {self.requested} steps, chosen at the first start "
                "(not timed again on resume)"
            )
        return f"{self.minutes:g} min at {self.seconds_per_step:.2f} s/step: {self.steps} of {self.requested} steps"


def steps_within(
    seconds: float,
    seconds_per_step: float,
    max_steps: int,
    overhead: float = STEP_OVERHEAD,
    fixed: float = STEP_FIXED_SECONDS,
) -> int:
    """Loop steps (``seconds_per_step * overhead + fixed``) that fit in ``seconds``, at least 1, at most ``max_steps``.

    Every argument is checked first: finite numbers >= 0 (``overhead`` >= 1), ``max_steps`` an int >= 1.

    Example:
        >>> steps_within(float("nan"), seconds_per_step=1.0, max_steps=10)
        Traceback (most recent call last):
        ...
        ValueError: seconds must be a finite number in [0, inf), got nan; the training budget in seconds
    """
    seconds = check_number(seconds, "seconds", 0.0, hint="the training budget in seconds")
    seconds_per_step = check_number(seconds_per_step, "seconds_per_step", 0.0, hint="a timed step")
    max_steps = check_length(max_steps, "max_steps", 1, "the most steps the budget may keep")
    overhead = check_number(overhead, "overhead", 1.0, hint="a share on top of the timed step")
    fixed = check_number(fixed, "fixed", 0.0, hint="seconds on top of the timed step")
    per_step = seconds_per_step * overhead + fixed
    if per_step <= 0:
        return max_steps
    return max(1, min(max_steps, math.floor(seconds / per_step)))


def time_training_steps(trainer, repeats: int) -> list[float]:
    """Seconds of ``repeats`` forward + backward passes of ``trainer.model`` on its first training batch.

    The RNG state (data order, collator draws, dropout) and the gradients are left as they were.
    """
    model = trainer.model
    was_training = model.training
    model.train()
    times = []
    devices = [model.device] if model.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        batch = next(iter(trainer.get_train_dataloader()))  # on the device already (accelerate)
        for _ in range(repeats):
            started = time.perf_counter()
            with trainer.accelerator.autocast():  # the run's mixed precision
                loss = trainer.compute_loss(model, batch)
            loss.backward()
            times.append(time.perf_counter() - started)
            model.zero_grad(set_to_none=True)
    model.train(was_training)
    return times


def time_optimizer_step(trainer, repeats: int = 3) -> float:
    """Seconds of the fastest of ``repeats`` updates by the optimizer the Trainer will build, on a twin model.

    The twin (a deep copy with zero gradients) takes the updates; ``trainer.model`` and
    ``trainer.optimizer`` are left as they were. A Muon update (Newton-Schulz on every matrix) costs
    several times an AdamW one, so the budget times the run's own.
    """
    saved = trainer.optimizer
    twin = copy.deepcopy(trainer.model)
    for param in twin.parameters():
        param.grad = torch.zeros_like(param) if param.requires_grad else None
    try:
        optimizer = trainer.create_optimizer(twin)
        times = []
        for _ in range(repeats):
            started = time.perf_counter()
            optimizer.step()
            times.append(time.perf_counter() - started)
    finally:
        trainer.optimizer = saved
    return min(times)


def fit_max_steps_to_budget(trainer, minutes: float, repeats: int = 4) -> StepBudget:
    """Lower ``trainer.args.max_steps`` to the steps that fit in ``minutes`` of training.

    One pass is timed first (it includes first-call costs, so it over-estimates); when
    ``max_steps`` passes of that length fit, nothing more is timed. Otherwise ``repeats`` more
    passes are timed and the fastest sets the step count (the first few passes after the first are
    still slower than the loop settles to; ``benchmarks/demo_experiments.md``). In a distributed run every rank adopts the
    smallest count, so all of them stop at the same step.
    """
    requested = trainer.args.max_steps
    if requested <= 0:
        raise ValueError("max_train_minutes needs max_steps > 0 (the most steps the budget may keep)")
    minutes = check_number(minutes, "max_train_minutes", 0.0, low_open=True, hint="the training budget in minutes")
    seconds = check_number(minutes * 60.0, "max_train_minutes * 60", 0.0, hint="a finite number of seconds")
    repeats = check_length(repeats, "repeats", 1, "timed passes")
    update = time_optimizer_step(trainer)
    first = time_training_steps(trainer, 1)[0] + update
    per_step = first
    if steps_within(seconds, first, requested) < requested:
        per_step = min(time_training_steps(trainer, repeats)) + update
    steps = steps_within(seconds, per_step, requested)
    if trainer.args.world_size > 1:
        local = torch.tensor([steps], device=trainer.args.device)
        steps = int(trainer.accelerator.gather(local).min().item())
    trainer.args.max_steps = steps
    return StepBudget(minutes, per_step, requested, steps)
