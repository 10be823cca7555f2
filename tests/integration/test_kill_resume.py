"""A real ``accelerate launch`` of pretrain.py (2 gloo processes, streamed JSONL) killed with SIGKILL and resumed.

Run A trains 30 steps uninterrupted (checkpoints every 10). Run B is the same command, killed -- the launcher
and both workers, with SIGKILL, no chance to clean up -- as soon as ``checkpoint-20`` is complete, then rerun
with ``--resume_from_checkpoint last``: the latest complete checkpoint is taken, the stream continues from its
``data_state.json`` and the result is bit-equal to A (final weights, every loss and grad norm).

Killing "the whole launch" is more than ``os.killpg`` of the launcher: torchrun starts each worker with
``start_new_session=True`` (``torch.distributed.elastic``'s ``SubprocessHandler``), so the workers are in
process groups of their own, and a SIGKILL to the launcher's group alone leaves them training to the end
(orphans that write checkpoint-30 and the final model). The test kills every process group of the launch's
process tree, as a scheduler's preemption (the job's cgroup) does.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from hf_lmobj.trainer.checkpoints import latest_complete_checkpoint
from hf_lmobj.trainer.state_files import COMPLETE_NAME
from tests.testing_utils import CONFIG_DIR, QUICK, REPO, launch_env, write_stdlib_jsonl

STEPS = 30
ENV = launch_env()
TIMEOUT = 300  # seconds, for any one launch (each takes ~20 s on 2 cores)


@pytest.fixture(scope="module")
def jsonl_folder(tmp_path_factory) -> Path:
    return write_stdlib_jsonl(tmp_path_factory.mktemp("jsonl"), documents=150)


def _command(data: Path, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable, "-m", "accelerate.commands.launch",
        "--config_file", str(CONFIG_DIR / "multi_process.yaml"), "--num_processes", "2",
        str(REPO / "recipes" / "pretrain.py"), "--config", str(REPO / "recipes/configs/causal/demo.yaml"), *QUICK,
        "--dataset_name", str(data), "--streaming", "true", "--max_train_minutes", "null",
        "--max_steps", str(STEPS), "--save_strategy", "steps", "--save_steps", "10", "--logging_steps", "1",
        "--torch_threads", "1", "--max_validation_documents", "4", "--validation_fraction", "0.1", "--ngram_orders", "3",
        "--sample_max_new_tokens", "4", "--output_dir", str(out), *extra,
    ]  # fmt: skip


def _run(data: Path, out: Path, *extra: str) -> str:
    done = subprocess.run(
        _command(data, out, *extra), cwd=REPO, env=ENV, capture_output=True, text=True, timeout=TIMEOUT
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout


def _children() -> dict[int, list[int]]:
    """parent pid -> child pids, from /proc."""
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])  # field 4, after the "(comm)" that may hold spaces
        tree.setdefault(parent, []).append(int(entry))
    return tree


def _process_tree(root: int) -> list[int]:
    tree, found, todo = _children(), [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(tree.get(pid, []))
    return found


def _kill_launch(launch: subprocess.Popen) -> None:
    """SIGKILL every process group of the launch's tree (launcher, torchrun's workers), then wait until all are gone."""
    pids = _process_tree(launch.pid)
    groups = set()
    for pid in pids:
        try:
            groups.add(os.getpgid(pid))
        except ProcessLookupError:
            pass
    for group in groups:  # the workers are each in their own group; the launcher's is launch.pid's
        try:
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            pass
    launch.wait(timeout=30)
    deadline = time.monotonic() + 30
    for pid in pids:  # orphaned workers are reaped by init: wait until none is left
        while Path(f"/proc/{pid}").exists() and "zombie" not in _state(pid):
            assert time.monotonic() < deadline, f"process {pid} of the killed launch is still running"
            time.sleep(0.01)


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/status").read_text().split("State:", 1)[1].split("\n", 1)[0].lower()
    except (OSError, IndexError):
        return "gone zombie"


def _killed_run(data: Path, out: Path, at_step: int) -> None:
    """Launch B and SIGKILL all of it as soon as ``checkpoint-<at_step>`` is complete."""
    marker = out / f"checkpoint-{at_step}" / COMPLETE_NAME
    with open(out.parent / f"{out.name}.log", "w") as log:
        launch = subprocess.Popen(
            _command(data, out), cwd=REPO, env=ENV, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            deadline = time.monotonic() + TIMEOUT
            while not marker.exists():
                if launch.poll() is not None:
                    pytest.fail(f"run B ended (rc {launch.returncode}) before {marker} appeared; see {log.name}")
                if time.monotonic() > deadline:
                    pytest.fail(f"{marker} did not appear within {TIMEOUT} s; see {log.name}")
                time.sleep(0.005)
        finally:
            _kill_launch(launch)


def _history(folder: Path) -> dict[int, dict]:
    state = json.loads((folder / "trainer_state.json").read_text())
    return {entry["step"]: entry for entry in state["log_history"] if "loss" in entry and "grad_norm" in entry}


@pytest.mark.slow
def test_a_sigkilled_launch_resumes_to_the_uninterrupted_runs_result_bit_for_bit(tmp_path, jsonl_folder):
    started = time.monotonic()
    whole = tmp_path / "A"
    _run(jsonl_folder, whole)
    for at_step in (20, 10):  # 10: the kill at 20 landed after training had finished (a slow poll); earlier
        killed = tmp_path / f"B{at_step}"
        _killed_run(jsonl_folder, killed, at_step)
        if (
            not (killed / f"checkpoint-{STEPS}" / COMPLETE_NAME).exists()
            and not (killed / "model.safetensors").exists()
        ):
            break
    else:
        pytest.fail("both kills (after checkpoint-20 and checkpoint-10) landed after training had finished")
    resumed_from = latest_complete_checkpoint(killed)
    step = int(resumed_from.name.split("-")[1])
    assert at_step <= step < STEPS, f"resumed from {resumed_from}"
    assert not (killed / "model.safetensors").exists()  # the killed run never got to the end

    report = _run(jsonl_folder, killed, "--resume_from_checkpoint", "last")
    assert f"== causal run written to {killed}" in report

    final_a, final_b = load_file(whole / "model.safetensors"), load_file(killed / "model.safetensors")
    assert sorted(final_a) == sorted(final_b)
    unequal = [name for name in final_a if not torch.equal(final_a[name], final_b[name])]
    assert not unequal, f"resumed from {resumed_from.name}: weights differ from the uninterrupted run's: {unequal}"

    logged_a, logged_b = _history(whole / f"checkpoint-{STEPS}"), _history(killed / f"checkpoint-{STEPS}")
    assert sorted(logged_a) == sorted(logged_b) == list(range(1, STEPS + 1))
    for s in range(step + 1, STEPS + 1):  # the steps trained after the resume
        assert (logged_b[s]["loss"], logged_b[s]["grad_norm"]) == (logged_a[s]["loss"], logged_a[s]["grad_norm"]), s
        assert logged_b[s]["learning_rate"] == logged_a[s]["learning_rate"], s

    metrics_a = json.loads((whole / "metrics.json").read_text())
    metrics_b = json.loads((killed / "metrics.json").read_text())
    tokens = f"train_tokens_{jsonl_folder.name}"
    assert metrics_b[tokens] == metrics_a[tokens]  # the token count continued from the checkpoint, none replayed
    assert metrics_b["eval_loss"] == metrics_a["eval_loss"]
    assert time.monotonic() - started < 600
