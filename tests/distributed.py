"""Run a function on N gloo ranks forked from the test process (OLMo-core's ``run_distributed_test`` pattern).

A ``torchrun`` launch starts 1 + N fresh interpreters, each paying the import of torch and transformers (5-8 s
apiece on the 2-core machine) before any work. ``run_ranks(fn, N, *args)`` forks N ranks from the test process
instead: each starts from the test process's memory (nothing re-imported), gets the environment torchrun gives a
rank (``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``LOCAL_WORLD_SIZE``, ``MASTER_ADDR=127.0.0.1`` and
``MASTER_PORT``, a free port of a bound loopback socket), so that ``init_process_group("gloo")`` and accelerate
join one group over loopback, runs on one torch thread, and sends back what ``fn`` returns. A rank that raises
fails the test with its traceback; the other ranks are then killed (they would wait on a collective).

Rules (why forking is safe here): the test process must hold no process group (checked); each rank pins
``torch.set_num_threads(1)`` before any work (OpenMP's thread pool does not survive a fork, a one-thread region
never enters it) and drops accelerate's process-wide state inherited from the test process; DataLoader workers
of a rank are forked from that rank, as under torchrun. What a rank imports lazily (a model class, the Trainer)
it imports on its own at every launch: a test module ``preload``s it. A rank ends with ``os._exit`` after a
barrier, skipping the interpreter's teardown, where a gloo group freed late can hang (see ``distributed_step.py``).

Example:
    >>> def rank_sum(offset):
    ...     import torch.distributed as dist
    ...
    ...     dist.init_process_group("gloo")
    ...     value = torch.tensor([dist.get_rank() + offset])
    ...     dist.all_reduce(value)
    ...     return value.item(), torch.get_num_threads()
    >>> run_ranks(rank_sum, 2, 1.0)
    [(3.0, 1), (3.0, 1)]
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib
import multiprocessing
import multiprocessing.connection
import os
import posix
import signal
import socket
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch


def preload(*modules: str) -> None:
    """Import ``modules`` in the test process (a test module calls this at import): every rank forked later finds
    them loaded, where a rank that imports a model class or the Trainer itself pays for it at every launch."""
    for name in modules:
        importlib.import_module(name)


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago (bound to port 0, read back, released)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _rank_environment(rank: int, world_size: int, port: int) -> dict[str, str]:
    """What ``torchrun --standalone --nproc_per_node world_size`` sets for ``rank`` (one machine)."""
    return {
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "GROUP_RANK": "0",
        "WORLD_SIZE": str(world_size),
        "LOCAL_WORLD_SIZE": str(world_size),
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "OMP_NUM_THREADS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "HF_HUB_OFFLINE": "1",
    }


def _forget_accelerate_state() -> None:
    """Drop accelerate's process-wide state that the rank inherited from the test process (a one-process
    ``PartialState`` would be reused as is and the rank would never join the group)."""
    if "accelerate.state" in sys.modules:
        from accelerate.state import AcceleratorState, GradientState

        AcceleratorState._reset_state(reset_partial_state=True)
        GradientState._reset_state()


def _save_coverage() -> None:
    """When coverage.py measures the test process with a data file per process (``data_suffix=True`` or ``parallel``,
    as pytest-cov does), save what this rank ran, which ``os._exit`` would skip: coverage names the forked copy's
    file by this rank's pid, and its combine step merges it. With one shared data file nothing is saved (the rank
    would erase the test process's file)."""
    coverage = sys.modules.get("coverage")
    cov = coverage.Coverage.current() if coverage is not None else None
    if cov is None:
        return
    suffix = getattr(cov, "_data_suffix_specified", None)
    if suffix is True or (suffix is None and cov.config.parallel):
        with contextlib.suppress(Exception):  # measurement only: never fail a rank for it
            cov.stop()
            cov.save()


def _die_with_parent() -> None:
    """Linux: SIGKILL this rank when the test process dies (``prctl(PR_SET_PDEATHSIG)``), and exit now if it already
    has; elsewhere nothing (the deadline still ends the rank)."""
    parent_process = multiprocessing.parent_process()
    parent = parent_process.pid if parent_process is not None else os.getppid()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)


def _rank_main(rank: int, world_size: int, port: int, out: Path, fn: Callable, args: tuple, kwargs: dict) -> None:
    """The body of a forked rank: environment, one thread, ``fn``, its result (or traceback) to ``out``."""
    os.setpgid(0, 0)  # its own process group: a kill reaches the rank's DataLoader workers too
    _die_with_parent()  # out of pytest's group, so a killed test process must take its ranks with it
    gc.freeze()  # the test process's objects: never collected here (each gc pass skips them, no copied pages)
    code = 1
    try:
        os.environ.update(_rank_environment(rank, world_size, port))
        torch.set_num_threads(1)
        _forget_accelerate_state()
        result = fn(*args, **kwargs)
        torch.save(result, out / f"rank{rank}.pt")
        if torch.distributed.is_available() and torch.distributed.is_initialized():
            torch.distributed.barrier()  # no rank leaves while another still needs the group
        code = 0
    except BaseException:  # noqa: BLE001 - every failure goes back to the test, with its traceback
        (out / f"rank{rank}.err").write_text(traceback.format_exc())
    finally:
        _save_coverage()
        sys.stdout.flush()
        sys.stderr.flush()
        posix._exit(code)  # not os._exit, which coverage's ``patch = _exit`` may wrap: saved above, or not at all


def _kill(process: multiprocessing.Process) -> None:
    """SIGKILL a rank and its own process group (its DataLoader workers), then reap it."""
    for kill in (lambda: os.killpg(process.pid, signal.SIGKILL), process.kill):
        try:
            kill()
        except (ProcessLookupError, PermissionError):
            pass
    process.join()


def _failure(out: Path, processes: list[multiprocessing.Process], why: str) -> AssertionError:
    """An AssertionError naming ``why``, each rank's exit code and the traceback of every rank that raised."""
    lines = [why]
    for rank, process in enumerate(processes):
        err = out / f"rank{rank}.err"
        lines.append(f"--- rank {rank}: exit code {process.exitcode}")
        if err.exists():
            lines.append(err.read_text())
    return AssertionError("\n".join(lines))


def run_ranks(fn: Callable, world_size: int, *args: Any, timeout: float = 300, **kwargs: Any) -> list[Any]:
    """``[fn(*args, **kwargs) on rank r for r in range(world_size)]``, each rank a process forked from this one.

    ``fn`` runs with the torchrun environment of its rank (see the module docstring): it may call
    ``init_process_group("gloo")`` (env://) or let accelerate / the Trainer do it. The test fails with every
    raising rank's traceback, or when the ranks are not done after ``timeout`` seconds (they are killed).
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        raise RuntimeError(
            "run_ranks: the test process holds a process group, which every forked rank would inherit; "
            "destroy it (torch.distributed.destroy_process_group()) in the test that created it"
        )
    context = multiprocessing.get_context("fork")
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="ranks-") as folder:
        out = Path(folder)
        processes = [
            context.Process(target=_rank_main, args=(rank, world_size, port, out, fn, args, kwargs), daemon=False)
            for rank in range(world_size)
        ]
        for process in processes:
            process.start()
        try:
            _wait(processes, out, timeout)
        finally:
            for process in processes:
                if process.exitcode is None:
                    _kill(process)
        return [torch.load(out / f"rank{rank}.pt", weights_only=False) for rank in range(world_size)]


def _wait(processes: list[multiprocessing.Process], out: Path, timeout: float) -> None:
    """Until every rank exits 0; raise at the first failed rank or at the deadline."""
    deadline = time.monotonic() + timeout
    running = list(processes)
    while running:
        left = deadline - time.monotonic()
        if left <= 0:
            raise _failure(out, processes, f"the ranks were not done after {timeout:.0f} s")
        multiprocessing.connection.wait([p.sentinel for p in running], timeout=left)
        for process in [p for p in running if p.exitcode is not None]:
            running.remove(process)
            if process.exitcode != 0:
                raise _failure(out, processes, f"rank {processes.index(process)} failed")
