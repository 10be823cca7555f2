"""``close_distributed`` frees the DDP wrapper (its reducer holds the gloo group) before it destroys the group."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch
import torch.distributed as dist
from transformers import Trainer, TrainingArguments

from hf_lmobj.trainer.teardown import close_distributed
from tests.testing_utils import tiny_gpt2


@pytest.fixture
def one_rank_group(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    if dist.is_initialized():
        dist.destroy_process_group()


def _trainer(tmp_path) -> Trainer:
    """A stock Trainer of a tiny GPT-2 (width 8, 1 layer) on the CPU."""
    model = tiny_gpt2(vocab_size=32, positions=16, width=8, layers=1)
    args = TrainingArguments(output_dir=str(tmp_path / "out"), use_cpu=True, report_to=[], max_steps=1)
    return Trainer(model=model, args=args)


def _trainer_with_ddp(tmp_path) -> Trainer:
    """A trainer whose wrapped model is a real DDP module on the group, as accelerate leaves it after train()."""
    trainer = _trainer(tmp_path)
    trainer.model_wrapped = torch.nn.parallel.DistributedDataParallel(trainer.model)
    trainer.accelerator._models.append(trainer.model_wrapped)
    return trainer


def test_the_wrapped_model_is_freed_before_the_group_is_destroyed(tmp_path, one_rank_group):
    trainer = _trainer_with_ddp(tmp_path)
    ddp = weakref.ref(trainer.model_wrapped)
    destroyed_with_ddp_alive = []
    real_destroy = dist.destroy_process_group

    def watching_destroy(*args, **kwargs):
        destroyed_with_ddp_alive.append(ddp() is not None)
        return real_destroy(*args, **kwargs)

    dist.destroy_process_group = watching_destroy
    try:
        close_distributed(trainer)
    finally:
        dist.destroy_process_group = real_destroy
    assert destroyed_with_ddp_alive == [False]
    assert not dist.is_initialized()
    assert trainer.model_wrapped is trainer.model and trainer.state is not None


def test_an_outside_reference_to_the_wrapped_model_is_refused_before_destroying(tmp_path, one_rank_group):
    trainer = _trainer_with_ddp(tmp_path)
    kept = trainer.model_wrapped
    with pytest.raises(RuntimeError, match="model_wrapped"):
        close_distributed(trainer)
    assert dist.is_initialized()  # not destroyed: the caller can drop its reference and call again
    del kept
    gc.collect()
    close_distributed(trainer)
    assert not dist.is_initialized()


def test_without_a_group_it_only_releases_the_trainer(tmp_path):
    trainer = _trainer(tmp_path)
    close_distributed(trainer)
    assert trainer.model_wrapped is trainer.model
