"""Two data-parallel processes (gloo on CPU, launched by torchrun) take the same step as one."""

from __future__ import annotations

import pytest
import torch
from distributed_step import parameter_update

from tests.testing_utils import OBJECTIVES, SCRIPTS, reference_update, torchrun

SCRIPT = SCRIPTS / "distributed_step.py"


@pytest.mark.slow
def test_two_processes_take_the_same_step_as_one(tmp_path):
    """2 ranks x batch 2 x accumulation 2 == 1 process x batch 4 x accumulation 2 == the full-batch gradient."""
    out = tmp_path / "updates.pt"
    torchrun(SCRIPT, 2, str(out))
    two = torch.load(out)
    for objective in OBJECTIVES:
        one = parameter_update(objective, 4, 2, str(tmp_path))
        reference = reference_update(objective)
        assert ((two[objective] - one).norm() / one.norm()).item() < 1e-5, objective
        assert ((two[objective] - reference).norm() / reference.norm()).item() < 1e-5, objective
