"""Vocab-parallel ``linear_cross_entropy`` on 2 gloo ranks against the single-process loss on the full head.

Run on 2 ranks forked by ``tests.distributed.run_ranks(main, 2, OUT_DIR)`` (the tests) or as
``torchrun --nproc_per_node 2 tests/scripts/vocab_parallel_step.py OUT_DIR``. Every rank builds the
same seeded inputs, computes the plain loss and gradients on the full weight (the reference), then the
vocab-parallel ones (weight / bias as ``distribute_tensor(..., [Shard(0)])``, and as a plain local shard
with ``process_group=`` / ``vocab_start=``), and a tiny Llama whose ``lm_head`` is parallelized with
``ColwiseParallel``. Each rank writes ``OUT_DIR/result_rank{r}.json``: ``{case: max abs difference}`` and transformers'
``tp_plan="auto"`` check.
"""

from __future__ import annotations

import datetime
import json
import sys
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
from distributed_step import exit_when_every_rank_is_done
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import Replicate, Shard, distribute_tensor

from hf_lmobj.losses import linear_cross_entropy, linear_token_losses

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: the clone's root, for tests.testing_utils
from tests.testing_utils import TINY_IDS, tiny_llama  # noqa: E402

H, N = 8, 13
OPTION_SETS = {
    "plain": {},
    "smoothing": {"label_smoothing": 0.1},
    "z_loss": {"z_loss": 1e-2},
    "softcap": {"logit_softcap": 2.0},
    "all": {"label_smoothing": 0.2, "z_loss": 1e-2, "logit_softcap": 3.0, "num_items_in_batch": 20},
    "num_items": {"num_items_in_batch": 17},
}


def maxdiff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.detach().double() - b.detach().double()).abs().max().item() if a.numel() else 0.0


def inputs(vocab: int, seed: int):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(N, H, generator=g)
    weight = torch.randn(vocab, H, generator=g)
    bias = torch.randn(vocab, generator=g)
    targets = torch.randint(0, vocab, (N,), generator=g)
    targets[[1, 5, 6]] = -100
    targets[0], targets[2] = vocab - 1, 0  # both ends of the vocabulary: targets owned by each rank
    return hidden, weight, bias, targets


def reference(hidden, weight, bias, targets, use_bias, kwargs):
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    b = bias.clone().requires_grad_() if use_bias else None
    loss = linear_cross_entropy(h, w, targets, bias=b, chunk_size=4, **kwargs)
    loss.backward()
    return loss.detach(), h.grad, w.grad, None if b is None else b.grad


def sharded_case(mesh, vocab, use_bias, kwargs, explicit: bool, seed: int) -> float:
    hidden, weight, bias, targets = inputs(vocab, seed)
    ref_loss, ref_h, ref_w, ref_b = reference(hidden, weight, bias, targets, use_bias, kwargs)
    h = hidden.clone().requires_grad_()
    w_dt = distribute_tensor(weight, mesh, [Shard(0)])
    b_dt = distribute_tensor(bias, mesh, [Shard(0)]) if use_bias else None
    local_rows = w_dt.to_local().shape[0]
    sizes = [torch.zeros((), dtype=torch.int64) for _ in range(mesh.size())]
    dist.all_gather(sizes, torch.tensor(local_rows), group=mesh.get_group())
    start = sum(int(s) for s in sizes[: mesh.get_local_rank()])
    if explicit:
        w = w_dt.to_local().clone().requires_grad_()
        b = b_dt.to_local().clone().requires_grad_() if use_bias else None
        loss = linear_cross_entropy(
            h, w, targets, bias=b, chunk_size=4, process_group=mesh.get_group(), vocab_start=start, **kwargs
        )
    else:
        w = torch.nn.Parameter(w_dt)
        b = torch.nn.Parameter(b_dt) if use_bias else None
        loss = linear_cross_entropy(h, w, targets, bias=b, chunk_size=4, **kwargs)
    loss.backward()
    gw = w.grad if explicit else w.grad.to_local()
    diffs = [maxdiff(loss, ref_loss), maxdiff(h.grad, ref_h), maxdiff(gw, ref_w[start : start + local_rows])]
    if not explicit:
        assert w.grad.placements == (Shard(0),), w.grad.placements
    if use_bias:
        gb = b.grad if explicit else b.grad.to_local()
        diffs.append(maxdiff(gb, ref_b[start : start + local_rows]))
    # the no-grad per-token path
    if not {"label_smoothing", "z_loss", "num_items_in_batch"} & set(kwargs):
        ref_tok = linear_token_losses(hidden, weight, targets, bias=bias if use_bias else None, chunk_size=4, **kwargs)
        if explicit:
            tok = linear_token_losses(
                hidden, w.detach(), targets, bias=None if b is None else b.detach(), chunk_size=4,
                process_group=mesh.get_group(), vocab_start=start, **kwargs,
            )  # fmt: skip
        else:
            tok = linear_token_losses(hidden, w_dt, targets, bias=b_dt, chunk_size=4, **kwargs)
        diffs.append(maxdiff(tok, ref_tok))
    return max(diffs)


def build_llama(tied: bool):
    return tiny_llama(vocab_size=50, positions=32, layers=1, tie_word_embeddings=tied, **TINY_IDS)


def reference_step(ref, row: int, unset: int):
    """Seeded ids (2 x 9), their labels with the first ``unset`` of ``row`` at -100, and the output of ``ref``
    on them, its stock loss backpropagated."""
    ids = torch.randint(3, 50, (2, 9), generator=torch.Generator().manual_seed(1))
    labels = ids.clone()
    labels[row, :unset] = -100
    out = ref(input_ids=ids, labels=labels)
    out.loss.backward()
    return ids, labels, out


def llama_case(mesh, tied: bool) -> dict[str, float]:
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    ref, model = build_llama(tied), build_llama(tied)
    ids, labels, out = reference_step(ref, 0, 3)
    plan = {"lm_head": ColwiseParallel(output_layouts=Replicate())}
    if tied:
        plan["model.embed_tokens"] = RowwiseParallel(input_layouts=Replicate())
    parallelize_module(model, mesh, plan)
    if tied:
        model.lm_head.weight = model.model.embed_tokens.weight  # parallelize_module unties: tie the DTensor again
    hidden = model.model(input_ids=ids).last_hidden_state
    targets = torch.nn.functional.pad(labels[:, 1:], (0, 1), value=-100)
    loss = linear_cross_entropy(hidden, model.lm_head.weight, targets, chunk_size=5)
    loss.backward()
    head_ref = ref.lm_head.weight.grad
    head = model.lm_head.weight.grad
    rows = model.lm_head.weight.to_local().shape[0]
    start = mesh.get_local_rank() * (-(-50 // mesh.size()))
    layer = "model.layers.0.mlp.down_proj.weight"
    return {
        "loss": maxdiff(loss, out.loss),
        "head_grad": maxdiff(head.to_local(), head_ref[start : start + rows]),
        "head_grad_full": maxdiff(head.full_tensor(), head_ref),
        "layer_grad": maxdiff(model.get_parameter(layer).grad, ref.get_parameter(layer).grad),
        "norm_grad": maxdiff(model.model.norm.weight.grad, ref.model.norm.weight.grad),
    }


def tp_plan_case(mesh, out_dir: str) -> dict:
    """transformers' own ``tp_plan="auto"``; reported, not required (it may not support CPU / gloo)."""
    from transformers import AutoModelForCausalLM

    ref = build_llama(False)
    path = Path(out_dir, "llama")
    if dist.get_rank() == 0:
        ref.save_pretrained(path)
    dist.barrier()
    try:
        from transformers.distributed.configuration_utils import DistributedConfig

        model = AutoModelForCausalLM.from_pretrained(path, distributed_config=DistributedConfig(tp_plan="auto"))
    except Exception as exc:  # noqa: BLE001 - a report of what the library does
        return {"error": f"{type(exc).__name__}: {str(exc)[:300]}", "trace": traceback.format_exc()[-1500:]}
    head = model.lm_head.weight
    info = {"weight_type": type(head).__name__, "placements": str(getattr(head, "placements", None))}
    ids, labels, out = reference_step(ref, 1, 4)
    hidden = model.model(input_ids=ids).last_hidden_state
    info["hidden_type"] = type(hidden).__name__
    targets = torch.nn.functional.pad(labels[:, 1:], (0, 1), value=-100)
    loss = linear_cross_entropy(hidden, head, targets, chunk_size=5)
    loss.backward()
    layer = "model.layers.0.mlp.down_proj.weight"
    full = lambda t: t.full_tensor() if hasattr(t, "full_tensor") else t  # noqa: E731
    info["loss"] = maxdiff(loss, out.loss)
    info["head_grad_full"] = maxdiff(full(head.grad), ref.lm_head.weight.grad)
    info["layer_grad_full"] = maxdiff(full(model.get_parameter(layer).grad), ref.get_parameter(layer).grad)
    info["embed_grad_full"] = maxdiff(full(model.model.embed_tokens.weight.grad), ref.model.embed_tokens.weight.grad)
    # the trainer's captured-head path (``ObjectiveTrainer.compute_loss``) on the same model
    from hf_lmobj.models.head import capture_head

    with torch.no_grad(), capture_head(model.lm_head, lambda h: linear_cross_entropy(h, head, targets)) as got:
        model(input_ids=ids)
    info["captured_loss"] = maxdiff(got[0], out.loss)
    return info


def extra_cases(mesh) -> dict[str, float]:
    """Sequence-parallel hidden, a replicated (FSDP2-gathered) head, bf16 autocast, a float64 head."""
    hidden, weight, bias, targets = inputs(16, 99)
    res = {}
    ref_loss, ref_h, ref_w, _ = reference(hidden, weight, bias, targets, False, {"label_smoothing": 0.1})
    h = distribute_tensor(hidden.clone(), mesh, [Shard(0)]).requires_grad_()  # rows split over the ranks
    w = torch.nn.Parameter(distribute_tensor(weight, mesh, [Shard(0)]))
    loss = linear_cross_entropy(h, w, targets, chunk_size=4, label_smoothing=0.1)
    loss.backward()
    rows = w.to_local().shape[0]
    start = mesh.get_local_rank() * rows
    res["seqpar/loss"] = maxdiff(loss, ref_loss)
    res["seqpar/hidden_grad"] = maxdiff(h.grad.full_tensor(), ref_h)
    res["seqpar/weight_grad"] = maxdiff(w.grad.to_local(), ref_w[start : start + rows])
    w = torch.nn.Parameter(distribute_tensor(weight, mesh, [Replicate()]))
    h = hidden.clone().requires_grad_()
    loss = linear_cross_entropy(h, w, targets, chunk_size=4, label_smoothing=0.1)
    loss.backward()
    res["replicate/loss"] = maxdiff(loss, ref_loss)
    res["replicate/hidden_grad"] = maxdiff(h.grad, ref_h)
    res["replicate/weight_grad"] = maxdiff(w.grad.to_local(), ref_w)
    for dtype in (torch.float64,):
        ref64 = reference(hidden.to(dtype), weight.to(dtype), bias, targets, False, {"z_loss": 1e-2})
        h = hidden.to(dtype).requires_grad_()
        w = torch.nn.Parameter(distribute_tensor(weight.to(dtype), mesh, [Shard(0)]))
        loss = linear_cross_entropy(h, w, targets, chunk_size=4, z_loss=1e-2)
        loss.backward()
        res["float64/loss"] = maxdiff(loss, ref64[0])
        res["float64/hidden_grad"] = maxdiff(h.grad, ref64[1])
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref_bf = reference(hidden, weight, bias, targets, False, {})
        h = hidden.clone().requires_grad_()
        w = torch.nn.Parameter(distribute_tensor(weight, mesh, [Shard(0)]))
        loss = linear_cross_entropy(h, w, targets, chunk_size=4)
    loss.backward()
    res["bf16_autocast/loss"] = maxdiff(loss, ref_bf[0])
    res["bf16_autocast/hidden_grad_rel"] = maxdiff(h.grad, ref_bf[1]) / ref_bf[1].abs().max().item()
    # a vocabulary smaller than the group: rank 1's shard is empty
    tiny_w = torch.randn(1, H, generator=torch.Generator().manual_seed(5))
    tiny_t = torch.zeros(N, dtype=torch.long)
    ref_tiny = reference(hidden, tiny_w, tiny_w[:, 0], tiny_t, True, {"label_smoothing": 0.1})
    h = hidden.clone().requires_grad_()
    w = torch.nn.Parameter(distribute_tensor(tiny_w, mesh, [Shard(0)]))
    b = torch.nn.Parameter(distribute_tensor(tiny_w[:, 0].contiguous(), mesh, [Shard(0)]))
    loss = linear_cross_entropy(h, w, tiny_t, bias=b, chunk_size=4, label_smoothing=0.1)
    loss.backward()
    res["empty_shard/loss"] = maxdiff(loss, ref_tiny[0])
    res["empty_shard/hidden_grad"] = maxdiff(h.grad, ref_tiny[1])
    res["empty_shard/weight_grad"] = maxdiff(w.grad.full_tensor(), ref_tiny[2])
    try:
        linear_cross_entropy(hidden, distribute_tensor(weight, mesh, [Shard(1)]), targets)
        res["shard1_raises"] = 1.0
    except NotImplementedError:
        res["shard1_raises"] = 0.0
    return res


def main(out_dir: str, quick: bool = False) -> None:
    """Every case on this rank; ``quick``: the Llama and extra cases only (no V16 / V15 option grid)."""
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    torch.set_num_threads(1)
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    result: dict = {}
    seed = 0
    for vocab in (16, 15)[: 0 if quick else 2]:
        for name, kwargs in OPTION_SETS.items():
            for use_bias in (False, True):
                for explicit in (False, True):
                    seed += 1
                    key = f"V{vocab}/{name}/{'bias' if use_bias else 'nobias'}/{'group' if explicit else 'dtensor'}"
                    result[key] = sharded_case(mesh, vocab, use_bias, kwargs, explicit, seed)
    for tied in (False, True):
        for k, v in llama_case(mesh, tied).items():
            result[f"llama/{'tied' if tied else 'untied'}/{k}"] = v
    result.update(extra_cases(mesh))
    notes = {"tp_plan_auto": tp_plan_case(mesh, out_dir)}
    # each rank reports its own differences (each rank's loss and shard gradients are checked)
    Path(out_dir, f"result_rank{dist.get_rank()}.json").write_text(json.dumps({"diffs": result, **notes}, indent=1))


if __name__ == "__main__":
    main(sys.argv[1], quick="--quick" in sys.argv)
    exit_when_every_rank_is_done()
