"""Two data-parallel processes (gloo on CPU, ranks forked by ``tests.distributed.run_ranks``) take the same MTP /
ELECTRA step as one."""

from __future__ import annotations

import pytest
import torch
from auxiliary_step import KINDS, parameter_update
from distributed_step import save_updates

from tests.distributed import preload, run_ranks

preload(*(f"transformers.models.{name}.modeling_{name}" for name in ("gpt2", "electra")))


@pytest.mark.slow
def test_two_processes_take_the_same_auxiliary_step_as_one(tmp_path, one_torch_thread):
    """2 ranks x batch 2 x accumulation 2 == 1 process x batch 4 x accumulation 2 (per-term global counts)."""
    out = tmp_path / "updates.pt"
    run_ranks(save_updates, 2, str(out), KINDS, parameter_update)
    two = torch.load(out)
    for kind in KINDS:
        one = parameter_update(kind, 4, 2, str(tmp_path))
        assert ((two[kind] - one).norm() / one.norm()).item() < 1e-5, kind
