"""recipes/accelerate_configs/multi_node.yaml under a real ``accelerate launch``: two "machines" of one CPU
process each, on loopback, training one clm demo model together; and a 2-process DDP run of the clm demo no longer
warns that find_unused_parameters=True was useless (tests/recipes/test_multi_node.py parses and resolves the config
without launching)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.distributed import free_port
from tests.testing_utils import CONFIG_DIR, QUICK, REPO

MULTI_NODE = CONFIG_DIR / "multi_node.yaml"
DEMO = REPO / "recipes" / "configs" / "causal" / "demo.yaml"
PRETRAIN = REPO / "recipes" / "pretrain.py"
STEPS, ROWS, LENGTH = 3, 4, 64  # --max_steps, --per_device_train_batch_size and --max_length of the run below
TINY = ["--config", str(DEMO), *QUICK, "--max_steps", str(STEPS), "--max_train_minutes", "null", "--torch_threads", "1"]
assert QUICK[QUICK.index("--per_device_train_batch_size") + 1] == str(ROWS)
assert QUICK[QUICK.index("--max_length") + 1] == str(LENGTH)
UNUSED_WARNING = "find_unused_parameters=True"  # torch's reducer warns when the flag found nothing unused
ENV = {
    **os.environ,
    "OMP_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "HF_HUB_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
}
TIMEOUT = 300  # seconds for one run (it takes ~20 s on 2 cores)


def _stop(process: subprocess.Popen) -> None:
    """Kill what the test started (the launcher's own process group) if it still runs."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def _read(path: Path) -> str:
    return path.read_text(encoding="utf-8", errors="replace")


@pytest.mark.slow
@pytest.mark.timeout(2 * TIMEOUT)
def test_two_machines_on_loopback_train_one_model(tmp_path):
    output_dir, port = tmp_path / "run", free_port()
    machines, logs = [], []
    try:
        for rank in (0, 1):
            out, err = tmp_path / f"machine{rank}.out", tmp_path / f"machine{rank}.err"
            command = [
                sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(MULTI_NODE),
                "--num_processes", "2", "--machine_rank", str(rank), "--main_process_ip", "127.0.0.1",
                "--main_process_port", str(port), str(PRETRAIN), *TINY, "--output_dir", str(output_dir),
            ]  # fmt: skip
            with out.open("w") as stdout, err.open("w") as stderr:
                machines.append(
                    subprocess.Popen(command, cwd=REPO, env=ENV, stdout=stdout, stderr=stderr, start_new_session=True)
                )
            logs.append((out, err))
        codes = [machine.wait(timeout=TIMEOUT) for machine in machines]
    finally:
        for machine in machines:
            _stop(machine)
    outs = [_read(out) for out, _ in logs]
    errs = [_read(err) for _, err in logs]
    assert codes == [0, 0], "\n".join(
        f"--- machine {r}\n{o[-1500:]}\n{e[-3000:]}" for r, (o, e) in enumerate(zip(outs, errs))
    )

    # One model and one card, written by global rank 0 (on machine 0) only.
    assert [outs[0].count("== causal run written to"), outs[1].count("== causal run written to")] == [1, 0]
    assert sorted(p.relative_to(output_dir).as_posix() for p in output_dir.rglob("*.safetensors")) == [
        "model.safetensors"
    ]
    assert [p.relative_to(output_dir).as_posix() for p in output_dir.rglob("README.md")] == ["README.md"]

    # The two machines formed one world of 2: the Trainer saw it, and the tokens counted are both ranks'.
    args = torch.load(output_dir / "training_args.bin", weights_only=False)
    assert (args.world_size, args.process_index) == (2, 0)
    metrics = json.loads((output_dir / "metrics.json").read_text(encoding="utf-8"))
    assert metrics["train_tokens_seen"] == 2 * STEPS * ROWS * LENGTH
    assert UNUSED_WARNING not in errs[0] + errs[1]


@pytest.mark.slow
@pytest.mark.timeout(TIMEOUT + 60)
def test_two_process_clm_demo_does_not_warn_about_find_unused_parameters(tmp_path):
    command = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--config_file", str(CONFIG_DIR / "multi_process.yaml"),
        str(PRETRAIN), *TINY, "--output_dir", str(tmp_path),
    ]  # fmt: skip
    done = subprocess.run(command, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stdout[-1500:] + done.stderr[-3000:]
    args = torch.load(tmp_path / "training_args.bin", weights_only=False)
    assert args.world_size == 2 and args.ddp_find_unused_parameters is False
    assert UNUSED_WARNING not in done.stderr + done.stdout
