"""Wall-clock time of each phase of a run (tokenizer, data, training, scoring, ...), for the report.

Example:
    >>> ticks = iter([0.0, 1.5, 2.0, 7.0])
    >>> timer = PhaseTimer(clock=lambda: next(ticks))
    >>> with timer.phase("tokenizer"):
    ...     pass
    >>> with timer.phase("training"):
    ...     pass
    >>> timer.seconds
    {'tokenizer': 1.5, 'training': 5.0}
    >>> print("\\n".join(timer.lines()))
    tokenizer        1.5 s
    training         5.0 s
    total            6.5 s
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field


@dataclass
class PhaseTimer:
    """Adds up the wall time spent inside ``with timer.phase(name):`` blocks, per name, in order."""

    clock: Callable[[], float] = time.perf_counter
    seconds: dict[str, float] = field(default_factory=dict)
    failed_phase: str | None = None  # the innermost phase an exception left, for the error that reports it

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = self.clock()
        try:
            yield
        except BaseException:
            self.failed_phase = self.failed_phase or name
            raise
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + self.clock() - start

    def lines(self, width: int = 12) -> list[str]:
        """One ``name  seconds`` line per phase, then the total (names padded to ``width`` or the longest)."""
        rows = [*self.seconds.items(), ("total", sum(self.seconds.values()))]
        width = max(width, *(len(name) + 1 for name, _ in rows))
        return [f"{name:{width}s} {_duration(value)}" for name, value in rows]


def _duration(seconds: float) -> str:
    """``7.0 s`` below a minute, ``2 min 05 s`` above.

    Example:
        >>> _duration(7.04), _duration(125.2)
        ('    7.0 s', '2 min 05 s')
    """
    if seconds < 60:
        return f"{seconds:7.1f} s"
    minutes, rest = divmod(round(seconds), 60)
    return f"{minutes} min {rest:02d} s"
