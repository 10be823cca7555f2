"""Torch CPU threads that follow the cores other processes leave free, so a busy machine slows a run gently.

torch's intra-op threads meet at a barrier after every operator; when another process holds one of
the cores, every operator waits for the descheduled thread, so a small model slows down more than
its share (figures: ``benchmarks/demo_experiments.md``).
:class:`AdaptiveThreadsCallback` samples how much CPU time the rest of the machine used since its
last check (system-wide busy time from ``/proc/stat`` minus this process's own) and sets
``torch.set_num_threads`` to the cores left free, at least one.

Example:
    >>> before = CpuSample(wall=0.0, busy=0.0, own=0.0)
    >>> after = CpuSample(wall=10.0, busy=19.0, own=9.5)  # 2 cores busy; this process used 0.95 of one
    >>> round(other_load(before, after), 2), free_threads(other_load(before, after), cpus=2)
    (0.95, 1)
    >>> free_threads(0.2, cpus=2), free_threads(5.0, cpus=2)
    (2, 1)
"""

from __future__ import annotations

import math
import os
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import torch
from transformers import TrainerCallback

from hf_lmobj.checks import check_length, check_number

PROC_STAT = Path("/proc/stat")


@dataclass
class RuntimeArguments:
    """How many CPU threads torch uses, and how long training may run."""

    #: The YAML config section of these fields (hf_lmobj.config): ``runtime: {...}``.
    SECTION: ClassVar[str] = "runtime"

    torch_threads: int | None = field(
        default=None,
        metadata={"help": "Fixed torch CPU threads; None = adaptive: the cores other processes leave free."},
    )
    thread_check_steps: int = field(default=10, metadata={"help": "Adaptive threads: re-check every N steps."})
    max_train_minutes: float | None = field(
        default=None,
        metadata={
            "help": "Wall-clock budget of training: a few steps are timed first and max_steps is lowered to what "
            "fits (never raised). None = exactly max_steps."
        },
    )

    def __post_init__(self) -> None:
        cores = max(os.cpu_count() or 1, available_cpus())
        self.torch_threads = check_length(self.torch_threads, "torch_threads", 1, "None = adaptive", optional=True)
        if self.torch_threads is not None and self.torch_threads > cores:
            raise ValueError(
                f"torch_threads {self.torch_threads} exceeds the {cores} cores of this machine; use at most {cores} "
                "(or None: the cores other processes leave free)"
            )
        self.thread_check_steps = check_length(
            self.thread_check_steps, "thread_check_steps", 1, "re-check every N steps"
        )
        minutes = self.max_train_minutes
        if minutes is not None:
            hint = "the wall-clock budget of training; None = no budget, exactly max_steps"
            if isinstance(minutes, (int, float)) and not isinstance(minutes, bool) and not minutes > 0:
                raise ValueError(
                    f"max_train_minutes must be positive or None (no budget: exactly max_steps), got {minutes}"
                )
            minutes = check_number(minutes, "max_train_minutes", 0.0, low_open=True, hint=hint)
            if not math.isfinite(minutes * 60.0):
                raise ValueError(f"max_train_minutes must be a finite number of minutes, got {minutes!r}; {hint}")
            self.max_train_minutes = minutes


@dataclass(frozen=True)
class CpuSample:
    """Wall time, busy CPU seconds of the whole machine (all cores) and CPU seconds of this process."""

    wall: float
    busy: float
    own: float


def available_cpus() -> int:
    """Cores this process may run on (its affinity mask where the OS has one)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def read_sample(stat: Path = PROC_STAT) -> CpuSample | None:
    """The current :class:`CpuSample`, or None where ``/proc/stat`` is missing (not Linux).

    Busy time is user + nice + system + irq + softirq + steal (time the hypervisor gave to others).
    """
    try:
        fields = stat.read_text().split("\n", 1)[0].split()
    except OSError:
        return None
    if not fields or fields[0] != "cpu" or len(fields) < 9:
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[1:9])
    busy = (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")
    return CpuSample(time.monotonic(), busy, time.process_time())


def other_load(before: CpuSample, after: CpuSample) -> float:
    """Cores the other processes kept busy, on average, between two samples (>= 0)."""
    wall = after.wall - before.wall
    if wall <= 0:
        return 0.0
    return max(((after.busy - before.busy) - (after.own - before.own)) / wall, 0.0)


def free_threads(load: float, cpus: int) -> int:
    """The cores left when ``load`` cores are busy elsewhere (rounded to the nearest core), at least 1."""
    return max(1, min(cpus, cpus - int(load + 0.5)))


class AdaptiveThreadsCallback(TrainerCallback):
    """Every ``check_steps`` optimizer steps, set torch's CPU threads to the cores left free.

    ``steps_per_threads`` counts the steps run at each thread count, for the report. On machines
    without ``/proc/stat`` it leaves torch's setting alone.
    """

    def __init__(
        self, check_steps: int = 10, cpus: int | None = None, sampler: Callable[[], CpuSample | None] = read_sample
    ) -> None:
        self.check_steps = check_steps
        self.cpus = cpus or available_cpus()
        self.sampler = sampler
        self.steps_per_threads: Counter[int] = Counter()
        self._last: CpuSample | None = None

    def adapt(self) -> int:
        """Re-check now (against the previous sample) and return torch's thread count."""
        sample = self.sampler()
        if sample is not None and self._last is not None:
            threads = free_threads(other_load(self._last, sample), self.cpus)
            if threads != torch.get_num_threads():
                torch.set_num_threads(threads)
        self._last = sample
        return torch.get_num_threads()

    def on_train_begin(self, args, state, control, **kwargs):
        self._last = self.sampler()

    def on_step_end(self, args, state, control, **kwargs):
        self.steps_per_threads[torch.get_num_threads()] += 1
        if state.global_step % self.check_steps == 0:
            self.adapt()

    def summary(self) -> str:
        """``"adaptive: 2 for 580 steps, 1 for 70 steps"``, most steps first."""
        parts = [f"{threads} for {count} steps" for threads, count in self.steps_per_threads.most_common()]
        return "adaptive: " + (", ".join(parts) or "no steps")


def thread_control(runtime_args: RuntimeArguments) -> AdaptiveThreadsCallback | None:
    """Fixed torch threads when asked for (``torch_threads``), else a callback that follows the cores left free."""
    if runtime_args.torch_threads is not None:
        torch.set_num_threads(runtime_args.torch_threads)
        return None
    return AdaptiveThreadsCallback(runtime_args.thread_check_steps)
