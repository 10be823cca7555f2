"""ObjectiveTrainer and ``linear_cross_entropy`` under tensor parallelism (TP) and a 2-D (dp x tp) mesh, gloo CPU.

Run on N ranks forked by ``tests.distributed.run_ranks(main, N, OUT_DIR, MODE)`` (the tests) or as
``torchrun --nproc_per_node N tests/scripts/tp_trainer_step.py OUT_DIR MODE``, with

* ``causal`` (N = 2): a tiny Llama (tied and untied) loaded with transformers'
  ``from_pretrained(..., distributed_config=DistributedConfig(tp_plan="auto"))`` takes ONE SGD step through
  ``ObjectiveTrainer.train()`` (both TP ranks read the same 8 rows: they are one replica); the loss, the
  denominator ``num_items_in_batch`` and every parameter's update are compared with the unsharded model's
  one-process step (the stock loss, backward, ``p -= lr * grad``). If the Trainer refuses the TP model, the
  same step is driven through the Trainer's pieces (``compute_loss`` with ``_get_num_items_in_batch``,
  backward, ``torch.optim.SGD``) and the refusal is recorded.
* ``heads`` (N = 2): a masked head (``BertForMaskedLM``, decoder tied to the word embedding, bias tied) and a
  seq2seq head (T5 ``lm_head``) parallelized by hand with torch's ``parallelize_module``
  (``ColwiseParallel(output_layouts=Replicate())``); loss and gradients of ``ObjectiveTrainer.compute_loss``
  against the unsharded model's stock loss.
* ``mesh2d`` (N = 4): ``init_device_mesh("cpu", (2, 2), ("dp", "tp"))``, the Llama head ``ColwiseParallel`` over
  "tp", FSDP2 ``fully_shard`` over "dp"; each dp replica takes half of the batch, the head is captured and scored
  with ``linear_cross_entropy(num_items_in_batch=global count over dp)``, backward, an SGD step; the update is
  compared with the one-process full-batch step.

Each rank writes ``OUT_DIR/<mode>_rank{r}.json``: measured differences and, where a path raised, its error.
"""

from __future__ import annotations

import copy
import datetime
import json
import sys
import traceback
from pathlib import Path

import torch
import torch.distributed as dist
from distributed_step import exit_when_every_rank_is_done
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Replicate, Shard, distribute_tensor
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
from transformers import LlamaForCausalLM, TrainingArguments

from hf_lmobj.losses import linear_cross_entropy
from hf_lmobj.losses.targets import count_targets
from hf_lmobj.models.head import capture_head, linear_head
from hf_lmobj.models.sharding import ranks_per_replica
from hf_lmobj.trainer.objective_trainer import ObjectiveTrainer

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: the clone's root, for tests.testing_utils
from tests.testing_utils import (  # noqa: E402
    NUM_ROWS,
    TINY_IDS,
    VOCAB,
    build_model,
    build_rows,
    stack_rows,
    tiny_llama,
)

LR = 0.1


def full(t: torch.Tensor) -> torch.Tensor:
    return t.full_tensor() if isinstance(t, DTensor) else t


def maxdiff(a: torch.Tensor, b: torch.Tensor) -> float:
    return (full(a).detach().double() - full(b).detach().double()).abs().max().item()


def error(exc: BaseException) -> dict:
    return {"error": f"{type(exc).__name__}: {str(exc)[:400]}", "trace": traceback.format_exc()[-2500:]}


def build_llama(tied: bool) -> LlamaForCausalLM:
    return tiny_llama(vocab_size=VOCAB, positions=32, layers=1, tie_word_embeddings=tied, **TINY_IDS)


def sgd_args(out_dir: str, batch_size: int) -> TrainingArguments:
    return TrainingArguments(
        output_dir=out_dir, per_device_train_batch_size=batch_size, max_steps=1, learning_rate=LR, optim="sgd",
        lr_scheduler_type="constant", weight_decay=0.0, max_grad_norm=0.0, warmup_steps=0, report_to=[],
        save_strategy="no", logging_strategy="no", use_cpu=True, dataloader_num_workers=0, disable_tqdm=True,
        seed=0,
    )  # fmt: skip


def reference_step(model: torch.nn.Module, batch: dict) -> tuple[float, dict[str, torch.Tensor]]:
    """The unsharded one-process step: stock loss (sum / targets), backward, p -= lr * grad."""
    loss = model(**batch).loss
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(p.grad, alpha=-LR)
    return loss.item(), {n: p.detach().clone() for n, p in model.named_parameters()}


def update_diff(model: torch.nn.Module, want: dict[str, torch.Tensor]) -> tuple[float, list[str]]:
    got = {n: full(p.detach()) for n, p in model.named_parameters()}
    missing = sorted(set(want) - set(got))
    return max(maxdiff(got[n], want[n]) for n in got), missing


# ---- 1. ObjectiveTrainer under TP = 2 (transformers' tp_plan="auto") ----------------------------------
def causal_case(out_dir: str, tied: bool) -> dict:
    from transformers.distributed.configuration_utils import DistributedConfig

    path = Path(out_dir, f"llama_{'tied' if tied else 'untied'}")
    if dist.get_rank() == 0:
        build_llama(tied).save_pretrained(path)
    dist.barrier()
    rows = build_rows("causal")
    batch = stack_rows(rows)
    reference = LlamaForCausalLM.from_pretrained(path)
    before = {n: p.detach().clone() for n, p in reference.named_parameters()}
    ref_loss, want = reference_step(reference, batch)
    res: dict = {"ref_count": int(count_targets("causal", batch)), "ref_loss": ref_loss}
    model = LlamaForCausalLM.from_pretrained(path, distributed_config=DistributedConfig(tp_plan="auto"))
    head = model.lm_head.weight
    res["head_placements"] = str(getattr(head, "placements", None))
    res["tp_size"] = getattr(model, "tp_size", None)
    res["tied_after_tp"] = model.lm_head.weight is model.model.embed_tokens.weight
    seen: dict = {"counts": [], "losses": [], "ids": []}
    args = sgd_args(str(Path(out_dir, "run")), NUM_ROWS)
    try:
        trainer = ObjectiveTrainer(model=model, args=args, data_collator=stack_rows, train_dataset=rows)
    except Exception as exc:  # noqa: BLE001 - accelerate refuses a ParallelismConfig on MULTI_CPU
        res["trainer_init"] = error(exc)
        return pieces_case(res, path, args, rows, batch, want, ref_loss)
    res["parallelism_config"] = str(getattr(trainer.accelerator, "parallelism_config", None))
    res["data_parallel_size"] = trainer._data_parallel_size()
    stock_count, stock_loss = trainer._get_num_items_in_batch, trainer.compute_loss

    def count_hook(samples, device):
        count = stock_count(samples, device)
        seen["counts"].append(None if count is None else int(count))
        return count

    def loss_hook(m, inputs, *args, **kwargs):
        seen["ids"].append(int(inputs["input_ids"].sum()))
        loss = stock_loss(m, inputs, *args, **kwargs)
        seen["losses"].append(float(loss.detach()))
        return loss

    trainer._get_num_items_in_batch, trainer.compute_loss = count_hook, loss_hook
    try:
        trainer.train()
        res["path"] = "trainer.train"
        res["train_num_items"] = seen["counts"]
        res["batch_ids_sum"] = seen["ids"]
        res["full_batch_ids_sum"] = int(batch["input_ids"].sum())
        res["train_loss"] = seen["losses"]
        res["loss_diff"] = max(abs(v - ref_loss) for v in seen["losses"])
        res["update_diff"], res["missing"] = update_diff(model, want)
        res["moved"] = max(maxdiff(p, before[n]) for n, p in model.named_parameters())
        return res
    except Exception as exc:  # noqa: BLE001 - the refusal is part of the report
        res["trainer_train"] = error(exc)
        return pieces_case(res, path, args, rows, batch, want, ref_loss)


def pieces_case(res, path, args, rows, batch, want, ref_loss) -> dict:
    """The Trainer's own pieces on the TP model: its count, its compute_loss, backward, an SGD step.

    The trainer is built around an unsharded stand-in (accelerate then sets up plain MULTI_CPU data
    parallelism, as for any 2-process CPU run) and given the TP model afterwards, so the trainer's
    replica size comes from the model (``tp_size``), not from a ParallelismConfig.
    """
    from accelerate.state import AcceleratorState
    from transformers.distributed.configuration_utils import DistributedConfig

    AcceleratorState._reset_state(reset_partial_state=False)  # drop the refused attempt's parallelism_config
    args = sgd_args(args.output_dir, NUM_ROWS)
    trainer = ObjectiveTrainer(
        model=LlamaForCausalLM.from_pretrained(path), args=args, data_collator=stack_rows, train_dataset=rows
    )
    model = LlamaForCausalLM.from_pretrained(path, distributed_config=DistributedConfig(tp_plan="auto"))
    trainer.model = model
    before = {n: full(p.detach()).clone() for n, p in model.named_parameters()}
    res["head_captured"] = linear_head(model) is model.lm_head  # the chunked loss, not a logits fallback
    res["data_parallel_size"] = trainer._data_parallel_size()
    count = trainer._get_num_items_in_batch([batch], torch.device("cpu"))
    loss = trainer.compute_loss(model, dict(batch), num_items_in_batch=count)
    loss.backward()
    torch.optim.SGD(model.parameters(), lr=LR).step()
    res["path"] = "pieces"
    res["train_num_items"] = [int(count)]
    res["train_loss"] = [loss.item()]
    res["loss_diff"] = abs(loss.item() - ref_loss)
    res["update_diff"], res["missing"] = update_diff(model, want)
    res["moved"] = max(maxdiff(p, before[n]) for n, p in model.named_parameters())
    return res


# ---- 2. masked and seq2seq heads, parallelized by hand ----------------------------------------------
def head_case(mesh, objective: str, style: str) -> dict:
    rows = build_rows(objective)
    batch = stack_rows(rows)
    ref = build_model(objective)
    if objective == "span":  # an untied lm_head of its own (T5 v1.1 style)
        config = ref.config
        config.tie_word_embeddings = False
        torch.manual_seed(0)
        ref = type(ref)(config)
    model = copy.deepcopy(ref)
    ref_out = ref(**batch)
    ref_out.loss.backward()
    res: dict = {"ref_loss": ref_out.loss.item()}
    if objective == "masked":
        decoder = "cls.predictions.decoder"
        plan = {
            "bert.embeddings.word_embeddings": RowwiseParallel(input_layouts=Replicate()),
            decoder: ColwiseParallel(output_layouts=Replicate()),
        }
    else:
        decoder, plan = "lm_head", {"lm_head": ColwiseParallel(output_layouts=Replicate())}
    tied_before = objective == "masked" and (
        model.cls.predictions.decoder.weight is model.bert.embeddings.word_embeddings.weight
    )
    res["tied_before"] = tied_before
    head = model.get_submodule(decoder)
    if style == "parallelize_module":  # torch's TP style on the head: hooks around its forward
        parallelize_module(model, mesh, plan)
        if tied_before:  # parallelize_module unties: tie the two Shard(0) DTensors again
            head.weight = model.bert.embeddings.word_embeddings.weight
    else:  # the head's parameters as Shard(0) DTensors, no hooks on the head (the embedding keeps its own)
        plan.pop(decoder)
        if plan:
            parallelize_module(model, mesh, plan)
        shared_bias = objective == "masked" and model.cls.predictions.bias is head.bias
        if tied_before:
            head.weight = model.bert.embeddings.word_embeddings.weight
        else:
            head.weight = torch.nn.Parameter(distribute_tensor(head.weight.detach(), mesh, [Shard(0)]))
        if head.bias is not None:
            head.bias = torch.nn.Parameter(distribute_tensor(head.bias.detach(), mesh, [Shard(0)]))
            if shared_bias:
                model.cls.predictions.bias = head.bias
    res["head_placements"] = str(head.weight.placements)
    res["head_captured"] = linear_head(model) is head
    trainer = ObjectiveTrainer(
        model=model, args=sgd_args("/tmp/unused_tp_heads", NUM_ROWS), data_collator=stack_rows, objective=objective
    )
    res["data_parallel_size"] = trainer._data_parallel_size()  # hand-applied TP: read from the head's mesh
    res["trainer_num_items"] = int(trainer._get_num_items_in_batch([batch], torch.device("cpu")))
    res["ref_count"] = int(count_targets(objective, batch))
    try:
        # num_items_in_batch=None: sum / the local count (both TP ranks hold the whole batch: exact)
        loss = trainer.compute_loss(model, dict(batch))
        loss.backward()
    except Exception as exc:  # noqa: BLE001
        res.update(error(exc))
        return res
    res["loss_diff"] = abs(loss.item() - ref_out.loss.item())
    ref_params = dict(ref.named_parameters())
    grads = {
        n: maxdiff(p.grad, ref_params[n].grad)
        for n, p in model.named_parameters()
        if p.grad is not None and n in ref_params
    }
    res["unmatched"] = sorted(set(dict(model.named_parameters())) ^ set(ref_params))
    res["no_grad"] = sorted(  # used by the reference, yet without a gradient here
        n for n, p in model.named_parameters() if p.grad is None and ref_params.get(n) is not None
        and ref_params[n].grad is not None
    )  # fmt: skip
    res["grad_diff"] = max(grads.values())
    res["worst_grad"] = max(grads, key=grads.get)
    # with the trainer's own global count: compute_loss scales by its data-parallel size
    with torch.no_grad():
        scaled = trainer.compute_loss(model, dict(batch), num_items_in_batch=torch.tensor(res["ref_count"]))
    res["with_count_ratio"] = scaled.item() / ref_out.loss.item()
    return res


# ---- 3. a 2 x 2 mesh: FSDP2 over "dp", TP head over "tp" ----------------------------------------------
def mesh2d_case() -> dict:
    from torch.distributed.fsdp import fully_shard

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))
    dp_rank = mesh["dp"].get_local_rank()
    rows = build_rows("causal")
    batch = stack_rows(rows)
    half = NUM_ROWS // 2
    local = stack_rows(rows[dp_rank * half : (dp_rank + 1) * half])
    ref = build_llama(False)
    model = copy.deepcopy(ref)
    ref_loss, want = reference_step(ref, batch)
    res: dict = {"ref_loss": ref_loss}
    parallelize_module(model, mesh["tp"], {"lm_head": ColwiseParallel(output_layouts=Replicate())})
    for layer in model.model.layers:
        fully_shard(layer, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])
    w = model.lm_head.weight
    res["ranks_per_replica"] = ranks_per_replica(None, model)  # read from the ("dp", "tp") mesh: tp only
    res["head_sharded_placements"] = str(w.placements)
    res["head_mesh"] = str(w.device_mesh.mesh_dim_names)
    targets = torch.nn.functional.pad(local["labels"][:, 1:], (0, 1), value=-100)
    global_count = int(count_targets("causal", batch))
    count = torch.tensor(int(count_targets("causal", local)))
    dist.all_reduce(count, group=mesh["dp"].get_group())  # the count over dp only (tp ranks share tokens)
    res["count"], res["ref_count"] = int(count), global_count
    seen: dict = {}

    def fn(hidden):
        head = model.lm_head.weight  # unsharded over dp inside the root's forward
        seen["head_placements"] = str(getattr(head, "placements", None))
        seen["hidden_type"] = type(hidden).__name__
        return linear_cross_entropy(hidden, head, targets, num_items_in_batch=count)

    inputs = {k: v for k, v in local.items() if k != "labels"}
    try:  # the package's capture_head first: what the trainer itself would do
        with capture_head(model.lm_head, fn) as got:
            model(**inputs, use_cache=False)
    except Exception as exc:  # noqa: BLE001 - ColwiseParallel's output hook on capture_head's plain placeholder
        res["capture_head"] = error(exc)
    model.zero_grad(set_to_none=True)
    got = []

    def forward(hidden):  # capture_head's idea, with a DTensor placeholder that ColwiseParallel's hook accepts
        got.append(fn(hidden))
        anchor = got[-1].sum().to(hidden.dtype).expand(*hidden.shape[:-1], 0)
        return DTensor.from_local(anchor, mesh["tp"], [Replicate()]) if isinstance(hidden, DTensor) else anchor

    model.lm_head.forward = forward
    try:
        model(**inputs, use_cache=False)
        loss = got[0]
        (loss * mesh["dp"].size()).backward()  # FSDP2 averages gradients over the dp replicas
    except Exception as exc:  # noqa: BLE001 - what the TP path says of the FSDP2 x TP placement
        res.update(seen)
        res.update(error(exc))
        return res
    finally:
        del model.lm_head.forward
    res.update(seen)
    total = loss.detach().clone()
    dist.all_reduce(total, group=mesh["dp"].get_group())
    res["loss_diff"] = abs(total.item() - ref_loss)  # the replicas' partial sums add up to the full-batch loss
    torch.optim.SGD(model.parameters(), lr=LR).step()
    res["update_diff"], res["missing"] = update_diff(model, want)
    return res


def main(out_dir: str, mode: str) -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    torch.set_num_threads(1)
    result: dict = {}
    if mode == "causal":
        for tied in (False, True):
            result["tied" if tied else "untied"] = causal_case(out_dir, tied)
    elif mode == "heads":
        mesh = init_device_mesh("cpu", (dist.get_world_size(),))
        for objective in ("masked", "span"):
            for style in ("parallelize_module", "dtensor_weight"):
                result[f"{objective}/{style}"] = head_case(mesh, objective, style)
    elif mode == "mesh2d":
        result["mesh2d"] = mesh2d_case()
    Path(out_dir, f"{mode}_rank{dist.get_rank()}.json").write_text(json.dumps(result, indent=1, default=str))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
    exit_when_every_rank_is_done()
