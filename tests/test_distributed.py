"""tests/distributed.py: ranks forked from the test process join one gloo group, and every failure reaches the test."""

from __future__ import annotations

import os
import time

import pytest
import torch
import torch.distributed as dist

from tests.distributed import free_port, run_ranks


def _identity() -> dict:
    """What a rank sees: its environment, its group, its threads, accelerate's view of it."""
    from transformers import TrainingArguments

    args = TrainingArguments(output_dir="unused", use_cpu=True, report_to=[])  # joins the group as the Trainer does
    summed = torch.tensor([float(dist.get_rank())])
    dist.all_reduce(summed)
    return {
        "env": (os.environ["RANK"], os.environ["WORLD_SIZE"], os.environ["MASTER_ADDR"]),
        "group": (dist.get_rank(), dist.get_world_size(), dist.get_backend(), summed.item()),
        "threads": torch.get_num_threads(),
        "accelerate": (args.process_index, args.world_size, str(args.parallel_mode)),
    }


def test_each_rank_joins_one_gloo_group_on_one_thread_as_the_trainer_sees_it():
    from transformers import TrainingArguments

    TrainingArguments(output_dir="unused", use_cpu=True, report_to=[])  # a one-process state the ranks must drop
    ranks = run_ranks(_identity, 2)
    assert [r["env"] for r in ranks] == [("0", "2", "127.0.0.1"), ("1", "2", "127.0.0.1")]
    assert [r["group"] for r in ranks] == [(0, 2, "gloo", 1.0), (1, 2, "gloo", 1.0)]
    assert [r["threads"] for r in ranks] == [1, 1]
    assert [r["accelerate"] for r in ranks] == [(0, 2, "ParallelMode.DISTRIBUTED"), (1, 2, "ParallelMode.DISTRIBUTED")]
    assert not dist.is_initialized()  # the test process itself joined nothing


def _fail_on_rank_one(message: str) -> int:
    if int(os.environ["RANK"]) == 1:
        raise ValueError(message)
    dist.init_process_group("gloo")
    dist.barrier()  # waits for rank 1, which never comes: the helper kills this rank
    return 0


def test_a_raising_rank_fails_the_test_with_its_traceback():
    with pytest.raises(AssertionError, match=r"(?s)rank 1 failed.*ValueError: the message of rank 1"):
        run_ranks(_fail_on_rank_one, 2, "the message of rank 1", timeout=120)


def _sleep() -> None:
    time.sleep(60)


def test_ranks_not_done_by_the_deadline_are_killed_and_fail_the_test():
    started = time.monotonic()
    with pytest.raises(AssertionError, match="not done after 1 s"):
        run_ranks(_sleep, 2, timeout=1)
    assert time.monotonic() - started < 30


def test_a_process_group_in_the_test_process_is_refused_by_name(tmp_path):
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
    try:
        with pytest.raises(RuntimeError, match="holds a process group"):
            run_ranks(_identity, 2)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("world_size", [0, -1])
def test_a_world_of_no_rank_is_refused(world_size):
    with pytest.raises(ValueError, match="world_size must be >= 1"):
        run_ranks(_identity, world_size)
