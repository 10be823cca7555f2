"""Token counts and gradient scaling follow the data-parallel replicas, never the TP / CP ranks that share tokens."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from hf_lmobj.models.sharding import ranks_per_replica


class _TensorParallelModel(nn.Linear):
    tp_size = 2  # what transformers reports for a model loaded with tp_plan="auto" on 2 ranks


def test_ranks_per_replica_reads_accelerates_parallelism_config_first():
    config = SimpleNamespace(non_data_parallel_size=4)  # tp 2 x cp 2
    assert ranks_per_replica(SimpleNamespace(parallelism_config=config), nn.Linear(2, 2)) == 4


def test_ranks_per_replica_reads_a_tp_plan_models_degree_and_looks_through_ddp():
    accelerator = SimpleNamespace(parallelism_config=None)
    model = _TensorParallelModel(2, 2)
    assert ranks_per_replica(accelerator, model) == 2
    assert ranks_per_replica(accelerator, SimpleNamespace(module=model)) == 2
    assert ranks_per_replica(accelerator, nn.Linear(2, 2)) == 1


def test_the_trainer_divides_gathered_counts_by_the_tp_degree(monkeypatch):
    """4 ranks = 2 replicas x TP 2: the gathered count (every TP rank counted its replica's tokens) halves."""
    from hf_lmobj.trainer.objective_trainer import ObjectiveTrainer

    trainer = ObjectiveTrainer.__new__(ObjectiveTrainer)
    trainer.objective = "causal"
    trainer.args = SimpleNamespace(average_tokens_across_devices=True, world_size=4)
    trainer.model = _TensorParallelModel(2, 2)
    gathered = torch.tensor([3, 3, 5, 5])  # replica 0 (ranks 0, 1) has 3 targets, replica 1 has 5
    trainer.accelerator = SimpleNamespace(parallelism_config=None, num_processes=4, gather=lambda _: gathered)
    batch = {"shift_labels": torch.tensor([[1, 2, 3, -100]])}
    assert int(trainer._get_num_items_in_batch([batch], torch.device("cpu"))) == 8
    assert trainer._data_parallel_size() == 2


@pytest.fixture
def one_rank_group(tmp_path):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def _on_mesh(shape: tuple[int, ...], names: tuple[str, ...] | None) -> nn.Module:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, distribute_tensor

    mesh = init_device_mesh("cpu", shape, mesh_dim_names=names)
    model = nn.Linear(2, 2)
    model.weight = nn.Parameter(distribute_tensor(model.weight.detach(), mesh, [Replicate()] * len(shape)))
    return model


@pytest.mark.parametrize(("shape", "names"), [((1,), None), ((1,), ("tp",)), ((1, 1), ("dp", "tp"))])
def test_a_readable_mesh_gives_its_model_parallel_degree(one_rank_group, shape, names):
    assert ranks_per_replica(SimpleNamespace(parallelism_config=None), _on_mesh(shape, names)) == 1


@pytest.mark.parametrize(
    ("shape", "names", "word"), [((1, 1), None, "unnamed 2-D"), ((1,), ("model",), "neither data-parallel")]
)
def test_a_mesh_it_cannot_read_is_refused_by_name(one_rank_group, shape, names, word):
    with pytest.raises(ValueError, match=word):
        ranks_per_replica(SimpleNamespace(parallelism_config=None), _on_mesh(shape, names))
