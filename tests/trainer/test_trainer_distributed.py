"""Two data-parallel processes (gloo on CPU, launched by torchrun) take the same step as one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from distributed_step import parameter_update

from tests.testing_utils import OBJECTIVES, SCRIPTS, reference_update

SCRIPT = SCRIPTS / "distributed_step.py"


def _torchrun(nproc: int, out: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        str(SCRIPT),
        str(out),
    ]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.mark.slow
def test_two_processes_take_the_same_step_as_one(tmp_path):
    """2 ranks x batch 2 x accumulation 2 == 1 process x batch 4 x accumulation 2 == the full-batch gradient."""
    out = tmp_path / "updates.pt"
    _torchrun(2, out)
    two = torch.load(out)
    for objective in OBJECTIVES:
        one = parameter_update(objective, 4, 2, str(tmp_path))
        reference = reference_update(objective)
        assert ((two[objective] - one).norm() / one.norm()).item() < 1e-5, objective
        assert ((two[objective] - reference).norm() / reference.norm()).item() < 1e-5, objective
