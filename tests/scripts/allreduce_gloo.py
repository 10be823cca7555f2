"""A tiny script for `accelerate launch`: every rank all-reduces (rank + 1) with gloo and prints it.

Used by tests/integration/test_accelerate_configs.py to check that an accelerate config really starts
several communicating processes on this machine:

    accelerate launch --config_file recipes/accelerate_configs/multi_process.yaml \
        tests/scripts/allreduce_gloo.py

Each rank prints one line ``rank=<r> world_size=<n> backend=gloo sum=<s>``; with n processes the
expected sum is ``n * (n + 1) / 2``. The process group is joined from the environment the
launcher sets (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT), exactly as accelerate does on CPU.

With ``--training-arguments`` the script instead builds ``TrainingArguments(use_cpu=True)`` (what
the recipes do on a machine without CUDA) and prints the distributed state transformers derives
from the launcher: ``rank=<r> world_size=<n> backend=gloo type=MULTI_CPU``.
"""

from __future__ import annotations

import os

import torch
import torch.distributed as dist


def allreduce_rank_sum() -> str:
    """All-reduce ``rank + 1`` over the launched processes and describe the result.

    Without a launcher (one plain process) no group is created and the sum is 1:

    >>> allreduce_rank_sum()
    'rank=0 world_size=1 backend=none sum=1'
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    value = torch.tensor([float(rank + 1)])  # (1,)
    if world_size == 1:
        return f"rank=0 world_size=1 backend=none sum={int(value.item())}"
    dist.init_process_group(backend="gloo", init_method="env://")
    try:
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
        backend = dist.get_backend()
        world_size = dist.get_world_size()
    finally:
        dist.destroy_process_group()
    return f"rank={rank} world_size={world_size} backend={backend} sum={int(value.item())}"


def training_arguments_state(output_dir: str) -> str:
    """Describe the distributed state of ``TrainingArguments(use_cpu=True)`` under the launcher.

    Without a launcher it is one plain CPU process (the shared accelerate state is reset after):

    >>> training_arguments_state("never-written")
    'rank=0 world_size=1 backend=None type=NO'
    """
    from accelerate.state import AcceleratorState
    from transformers import TrainingArguments

    args = TrainingArguments(output_dir=output_dir, use_cpu=True, report_to=[])
    state = args.distributed_state
    kind = str(state.distributed_type).rsplit(".", 1)[-1]
    line = f"rank={state.process_index} world_size={state.num_processes} backend={state.backend} type={kind}"
    state.destroy_process_group()
    AcceleratorState._reset_state(reset_partial_state=True)
    return line


if __name__ == "__main__":
    import sys
    import tempfile

    if "--training-arguments" in sys.argv:
        with tempfile.TemporaryDirectory() as tmp:
            line = training_arguments_state(tmp)
    else:
        line = allreduce_rank_sum()
    sys.stdout.write(line + "\n")  # one write, flushed at once: the ranks' lines never interleave
    sys.stdout.flush()
