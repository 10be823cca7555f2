"""Say, early in training, how long the run's steps will take on this machine.

A fixed step budget makes the figure a function of the commit alone; the time is what depends on the
machine, so it is predicted rather than enforced: :class:`TimeEstimateCallback` times a window of steps
after the first ones (allocations, thread pools) and prints the remaining steps' time once.

Example:
    >>> estimate_line(steps=4000, done=30, seconds_per_step=0.0625, window=(10, 30))
    'training: 4,000 steps, about 4 min 10 s on this machine (0.062 s/step over steps 10-30; 4 min 08 s to go)'
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from transformers import TrainerCallback

from hf_lmobj.checks import check_length


def minutes_and_seconds(seconds: float) -> str:
    """``4 min 08 s`` (or ``12.5 s`` under a minute).

    Example:
        >>> minutes_and_seconds(248.4), minutes_and_seconds(12.46)
        ('4 min 08 s', '12.5 s')
    """
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s"


def estimate_line(steps: int, done: int, seconds_per_step: float, window: tuple[int, int]) -> str:
    """The printed prediction: all ``steps`` at ``seconds_per_step``, and the time left after ``done`` steps."""
    total, left = steps * seconds_per_step, (steps - done) * seconds_per_step
    return (
        f"training: {steps:,} steps, about {minutes_and_seconds(total)} on this machine ({seconds_per_step:.3f} s/step "
        f"over steps {window[0]}-{window[1]}; {minutes_and_seconds(left)} to go)"
    )


@dataclass
class TimeEstimateCallback(TrainerCallback):
    """Time steps ``skip`` to ``skip + window`` of training and print the run's expected training time once.

    Runs shorter than ``skip + window`` steps (or resumed past the window) print nothing. Only the main
    process prints. ``seconds_per_step`` keeps the measurement (None until taken).

    Example:
        >>> TimeEstimateCallback(skip=10, window=20).seconds_per_step is None
        True
    """

    skip: int = 10
    window: int = 20
    seconds_per_step: float | None = field(default=None, init=False)
    _started: float | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.skip = check_length(self.skip, "skip", 0, "steps before the timed window")
        self.window = check_length(self.window, "window", 1, "steps timed")

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.skip:
            self._started = time.perf_counter()
        elif state.global_step == self.skip + self.window and self._started is not None:
            self.seconds_per_step = (time.perf_counter() - self._started) / self.window
            if state.is_world_process_zero:
                window = (self.skip, self.skip + self.window)
                print(estimate_line(state.max_steps, state.global_step, self.seconds_per_step, window), flush=True)
        return control
