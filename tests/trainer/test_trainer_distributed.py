"""Two data-parallel processes (gloo on CPU, ranks forked by ``tests.distributed.run_ranks``) take the same step as one."""

from __future__ import annotations

import pytest
import torch
from distributed_step import parameter_update, save_updates

from tests.distributed import preload, run_ranks
from tests.testing_utils import OBJECTIVES, reference_update

preload(*(f"transformers.models.{name}.modeling_{name}" for name in ("gpt2", "bert", "t5")))


@pytest.mark.slow
def test_two_processes_take_the_same_step_as_one(tmp_path):
    """2 ranks x batch 2 x accumulation 2 == 1 process x batch 4 x accumulation 2 == the full-batch gradient."""
    out = tmp_path / "updates.pt"
    run_ranks(save_updates, 2, str(out), OBJECTIVES, parameter_update)
    two = torch.load(out)
    for objective in OBJECTIVES:
        one = parameter_update(objective, 4, 2, str(tmp_path))
        reference = reference_update(objective)
        assert ((two[objective] - one).norm() / one.norm()).item() < 1e-5, objective
        assert ((two[objective] - reference).norm() / reference.norm()).item() < 1e-5, objective
