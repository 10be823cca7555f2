"""MuonAdamW: Newton-Schulz orthogonalization, param groups, and both update rules against references."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from transformers import LlamaForCausalLM

from hf_lmobj.optim.muon import MuonAdamW, muon_param_groups, orthogonalize
from tests.testing_utils import tiny_llama


def llama(tie: bool = False) -> LlamaForCausalLM:
    """A tiny Llama (width 16, 2 layers, MLP 40, vocabulary 48), the same weights on every call."""
    return tiny_llama(vocab_size=48, positions=2048, width=16, ffn=40, tie_word_embeddings=tie)


def set_gradients(model: torch.nn.Module, seed: int) -> None:
    generator = torch.Generator().manual_seed(seed)
    for param in model.parameters():
        param.grad = torch.randn(param.shape, generator=generator)


@pytest.mark.parametrize("shape", [(8, 8), (12, 5), (5, 12), (3, 6, 4)])
def test_orthogonalize_brings_singular_values_near_one(shape):
    matrix = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    out = orthogonalize(matrix)
    assert out.shape == matrix.shape and out.dtype == matrix.dtype
    singular = torch.linalg.svdvals(out)
    # Jordan's coefficients trade exact convergence for speed: singular values land in ~[0.7, 1.2]
    assert singular.min() > 0.6 and singular.max() < 1.3


def test_orthogonalize_points_along_u_vt():
    matrix = torch.randn(10, 6, generator=torch.Generator().manual_seed(2))
    u, _, vh = torch.linalg.svd(matrix, full_matrices=False)
    cosine = torch.nn.functional.cosine_similarity((u @ vh).flatten(), orthogonalize(matrix).flatten(), dim=0)
    assert cosine > 0.95


def test_orthogonalize_of_a_batch_is_per_matrix():
    batch = torch.randn(4, 7, 5, generator=torch.Generator().manual_seed(3))
    torch.testing.assert_close(orthogonalize(batch), torch.stack([orthogonalize(m) for m in batch]))


@pytest.mark.parametrize("tie", [False, True])
def test_param_groups_put_only_block_matrices_on_muon(tie):
    model = llama(tie)
    groups = muon_param_groups(model, weight_decay=0.1)
    names = {id(p): n for n, p in model.named_parameters()}
    muon = {names[id(p)] for p in groups[0]["params"]}
    assert groups[0]["use_muon"] and all(".layers." in n and n.endswith(".weight") for n in muon)
    assert len(muon) == 2 * 7  # q, k, v, o, gate, up, down per layer
    decayed = {names[id(p)] for p in groups[1]["params"]}
    assert decayed == ({"model.embed_tokens.weight"} if tie else {"model.embed_tokens.weight", "lm_head.weight"})
    assert groups[1]["weight_decay"] == 0.1 and groups[2]["weight_decay"] == 0.0
    assert all(p.ndim == 1 for p in groups[2]["params"])
    counted = sum(len(g["params"]) for g in groups)
    assert counted == len(list(model.parameters()))  # every trainable parameter, each once


def test_param_groups_leave_frozen_parameters_out():
    model = llama()
    model.model.layers[0].requires_grad_(False)
    groups = muon_param_groups(model)
    assert sum(len(g["params"]) for g in groups) == sum(p.requires_grad for p in model.parameters())


def test_adamw_groups_match_torch_adamw():
    ours, reference = llama(), llama()
    params = [p for p in ours.parameters() if p.ndim != 2 or p is ours.lm_head.weight]
    ref_params = [p for p in reference.parameters() if p.ndim != 2 or p is reference.lm_head.weight]
    optimizer = MuonAdamW([{"params": params}], lr=1e-2, weight_decay=0.1, betas=(0.9, 0.95), eps=1e-8)
    torch_adamw = torch.optim.AdamW(ref_params, lr=1e-2, weight_decay=0.1, betas=(0.9, 0.95), eps=1e-8)
    for step in range(4):
        set_gradients(ours, step)
        set_gradients(reference, step)
        optimizer.step()
        torch_adamw.step()
    for mine, theirs in zip(params, ref_params, strict=True):
        torch.testing.assert_close(mine, theirs)


def reference_muon(param: torch.Tensor, grads: list[torch.Tensor], lr: float, wd: float) -> torch.Tensor:
    """Jordan's Muon written out for one matrix (Nesterov, momentum 0.95, RMS matched to AdamW)."""
    param, buffer = param.clone(), torch.zeros_like(param)
    for grad in grads:
        buffer = 0.95 * buffer + 0.05 * grad
        update = orthogonalize(0.05 * grad + 0.95 * buffer)
        param = param * (1 - lr * wd) - lr * 0.2 * math.sqrt(max(param.shape)) * update
    return param


def test_muon_group_matches_the_written_out_rule():
    model = llama()
    before = copy.deepcopy(model)
    optimizer = MuonAdamW(muon_param_groups(model, weight_decay=0.1), lr=1e-2)
    gradients = []
    for step in range(3):
        set_gradients(model, step)
        gradients.append({n: p.grad.clone() for n, p in model.named_parameters()})
        optimizer.step()
    for name, param in model.named_parameters():
        if ".layers." in name and param.ndim == 2:
            expected = reference_muon(dict(before.named_parameters())[name].detach(),
                                      [g[name] for g in gradients], lr=1e-2, wd=0.1)  # fmt: skip
            torch.testing.assert_close(param.detach(), expected, atol=1e-6, rtol=1e-5)


def test_muon_group_agrees_with_torch_muon():
    """torch.optim.Muon orthogonalizes in bf16: same update up to bf16 rounding."""
    weight = torch.randn(12, 20, generator=torch.Generator().manual_seed(4))
    ours, theirs = weight.clone().requires_grad_(), weight.clone().requires_grad_()
    mine = MuonAdamW([{"params": [ours], "use_muon": True}], lr=1e-2, weight_decay=0.1)
    torch_muon = torch.optim.Muon([theirs], lr=1e-2, weight_decay=0.1, adjust_lr_fn="match_rms_adamw")
    for seed in range(3):
        grad = torch.randn(12, 20, generator=torch.Generator().manual_seed(10 + seed))
        ours.grad, theirs.grad = grad.clone(), grad.clone()
        mine.step()
        torch_muon.step()
    moved_ours, moved_theirs = ours.detach() - weight, theirs.detach() - weight
    assert torch.nn.functional.cosine_similarity(moved_ours.flatten(), moved_theirs.flatten(), dim=0) > 0.999
    torch.testing.assert_close(moved_ours, moved_theirs, atol=2e-3, rtol=0.05)


def test_parameters_without_gradient_are_left_alone():
    model = llama()
    before = copy.deepcopy(model)
    optimizer = MuonAdamW(muon_param_groups(model), lr=1e-2)
    set_gradients(model, 0)
    model.model.layers[1].self_attn.q_proj.weight.grad = None
    model.lm_head.weight.grad = None
    optimizer.step()
    torch.testing.assert_close(
        model.model.layers[1].self_attn.q_proj.weight, before.model.layers[1].self_attn.q_proj.weight
    )
    torch.testing.assert_close(model.lm_head.weight, before.lm_head.weight)
    assert not torch.equal(
        model.model.layers[0].self_attn.q_proj.weight, before.model.layers[0].self_attn.q_proj.weight
    )


def test_state_dict_round_trip_continues_identically():
    model = llama()
    optimizer = MuonAdamW(muon_param_groups(model, 0.1), lr=1e-2)
    set_gradients(model, 0)
    optimizer.step()
    twin = copy.deepcopy(model)
    twin_optimizer = MuonAdamW(muon_param_groups(twin, 0.1), lr=1e-2)
    twin_optimizer.load_state_dict(copy.deepcopy(optimizer.state_dict()))  # state_dict() holds references
    for m, o in ((model, optimizer), (twin, twin_optimizer)):
        set_gradients(m, 1)
        o.step()
    for a, b in zip(model.parameters(), twin.parameters(), strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"lr": -1.0}, "lr must be"),
        ({"momentum": 1.0}, "momentum must be"),
        ({"betas": (0.9, 1.5)}, r"betas\[1\] must be"),
        ({"ns_steps": 0}, "ns_steps"),
    ],
)
def test_bad_hyperparameters_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        MuonAdamW(muon_param_groups(llama()), **kwargs)


def test_a_vector_in_a_muon_group_is_refused_by_name():
    model = llama()
    with pytest.raises(ValueError, match="use_muon=True.*not 2-D.*AdamW group"):
        MuonAdamW([{"params": list(model.parameters()), "use_muon": True}])


def test_trainer_factory_hook_builds_muon_and_its_scheduler_drives_every_group(tmp_path):
    from datasets import Dataset
    from transformers import TrainingArguments

    from hf_lmobj.optim.muon import MuonAdamWFactory
    from hf_lmobj.trainer.objective_trainer import ObjectiveTrainer

    model = llama()
    rows = Dataset.from_dict({"input_ids": [[1, 2, 3, 4, 5, 6]] * 4, "labels": [[1, 2, 3, 4, 5, 6]] * 4})
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=3, per_device_train_batch_size=2, learning_rate=1e-2,
                             lr_scheduler_type="linear", report_to="none", use_cpu=True, save_strategy="no")  # fmt: skip
    trainer = ObjectiveTrainer(model=model, args=args, train_dataset=rows,
                               optimizer_cls_and_kwargs=(MuonAdamWFactory, {"lr": 1e-2, "weight_decay": 0.1}))  # fmt: skip
    before = model.model.layers[0].mlp.down_proj.weight.detach().clone()
    trainer.train()
    assert isinstance(trainer.optimizer.optimizer, MuonAdamW)  # under accelerate's wrapper
    assert [g["use_muon"] for g in trainer.optimizer.param_groups] == [True, False, False]
    assert all(g["lr"] == 0.0 for g in trainer.optimizer.param_groups)  # linear decay reached 0 in every group
    assert not torch.equal(model.model.layers[0].mlp.down_proj.weight, before)


def _sharded_and_whole_updates() -> tuple[float, float]:
    """Three MuonAdamW steps on a 6 x 4 matrix as a ``Shard(0)`` DTensor over a one-rank gloo mesh and as a plain
    tensor: (max difference of the results, how far the plain one moved). Run on a forked rank."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Shard, distribute_tensor

    dist.init_process_group("gloo")
    mesh = init_device_mesh("cpu", (1,))
    start = torch.randn(6, 4, generator=torch.Generator().manual_seed(0))
    sharded = torch.nn.Parameter(distribute_tensor(start.clone(), mesh, [Shard(0)]))
    whole = torch.nn.Parameter(start.clone())
    optimizers = [MuonAdamW([{"params": [p], "use_muon": True}], lr=1e-2, weight_decay=0.1) for p in (sharded, whole)]
    for seed in range(3):
        grad = torch.randn(6, 4, generator=torch.Generator().manual_seed(seed + 1))
        sharded.grad = distribute_tensor(grad.clone(), mesh, [Shard(0)])
        whole.grad = grad.clone()
        for optimizer in optimizers:
            optimizer.step()
    return float((sharded.full_tensor() - whole).abs().max()), float((whole - start).abs().max())


def test_a_sharded_matrix_gets_the_update_of_the_whole_matrix():
    from tests.distributed import run_ranks

    ((diff, moved),) = run_ranks(_sharded_and_whole_updates, 1)
    assert diff < 1e-6 and moved > 1e-3
