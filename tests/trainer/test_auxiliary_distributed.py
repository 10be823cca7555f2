"""Two data-parallel processes (gloo on CPU, launched by torchrun) take the same MTP / ELECTRA step as one."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from auxiliary_step import KINDS, parameter_update

from tests.testing_utils import SCRIPTS

SCRIPT = SCRIPTS / "auxiliary_step.py"


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
def test_two_processes_take_the_same_auxiliary_step_as_one(tmp_path, one_torch_thread):
    """2 ranks x batch 2 x accumulation 2 == 1 process x batch 4 x accumulation 2 (per-term global counts)."""
    out = tmp_path / "updates.pt"
    _torchrun(2, out)
    two = torch.load(out)
    for kind in KINDS:
        one = parameter_update(kind, 4, 2, str(tmp_path))
        assert ((two[kind] - one).norm() / one.norm()).item() < 1e-5, kind
