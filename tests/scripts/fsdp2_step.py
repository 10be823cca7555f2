"""One ObjectiveTrainer step on a tiny Llama sharded by torch's FSDP2 (``fully_shard``), 2 gloo ranks.

Run on 2 ranks forked by ``tests.distributed.run_ranks(main, 2, OUT_DIR, tied)`` (the tests) or as
``torchrun --nproc_per_node 2 tests/scripts/fsdp2_step.py OUT_DIR tied|untied``. Every rank builds the
same seeded Llama, keeps an unsharded copy as the reference, shards the copy it trains
(each decoder layer, the untied head on its own, then the root), and then, through the package's
own paths:

1. computes its half of the batch's loss with ``ObjectiveTrainer.compute_loss`` (head captured,
   ``linear_cross_entropy`` on the gathered head weight, global ``num_items_in_batch``) in float32
   and under CPU bf16 autocast, and compares the gathered gradients with the stock model's
   full-batch gradients;
2. takes one SGD step on the shards and on the reference;
3. evaluates with ``ObjectiveTrainer.evaluate`` (token-weighted, gathered across ranks) and saves with
   ``ObjectiveTrainer.save_model`` on every rank, as the recipes do.

Rank 0 then reloads the checkpoint with ``from_pretrained`` and writes ``OUT_DIR/result.json``
with the measured differences (the test asserts on them). A rank that waits on a collective the
other never joins fails after the process group's 120 s timeout instead of hanging.
"""

from __future__ import annotations

import copy
import datetime
import json
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from distributed_step import exit_when_every_rank_is_done
from torch.distributed.fsdp import fully_shard
from transformers import LlamaForCausalLM, TrainingArguments

from hf_lmobj.losses.targets import count_targets
from hf_lmobj.models.head import linear_head
from hf_lmobj.trainer.objective_trainer import ObjectiveTrainer

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: the clone's root, for tests.testing_utils
from tests.testing_utils import NUM_ROWS, TINY_IDS, VOCAB, build_rows, stack_rows, tiny_llama  # noqa: E402

LR = 0.5


def build_llama(tied: bool) -> LlamaForCausalLM:
    return tiny_llama(vocab_size=VOCAB, positions=32, tie_word_embeddings=tied, **TINY_IDS)


def shard(model: LlamaForCausalLM, tied: bool) -> None:
    for layer in model.model.layers:
        fully_shard(layer)
    if not tied:
        fully_shard(model.lm_head)  # a head sharded on its own: the trainer must still capture it
    fully_shard(model)


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm().clamp_min(1e-30)).item()


def gathered_grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Full gradients of a sharded model (a collective), keyed by parameter name."""
    return {name: p.grad.full_tensor() for name, p in model.named_parameters()}


def sharded_grads(trainer: ObjectiveTrainer, model, local, count, autocast: bool) -> dict[str, torch.Tensor]:
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        loss = trainer.compute_loss(model, dict(local), num_items_in_batch=count)
    loss.backward()
    return gathered_grads(model)


def main(out_dir: str, tied: bool) -> None:
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=120))
    rank, world = dist.get_rank(), dist.get_world_size()
    model = build_llama(tied)
    reference = copy.deepcopy(model)
    shard(model, tied)
    rows = build_rows("causal")
    args = TrainingArguments(
        output_dir=out_dir,
        use_cpu=True,
        report_to=[],
        per_device_eval_batch_size=2,
        disable_tqdm=True,
    )
    trainer = ObjectiveTrainer(model=model, args=args, data_collator=stack_rows, eval_dataset=rows)
    per_rank = NUM_ROWS // world
    local = stack_rows(rows[rank * per_rank : (rank + 1) * per_rank])
    count = count_targets("causal", stack_rows(rows))  # the global denominator, as the trainer counts it

    fp32 = sharded_grads(trainer, model, local, count, autocast=False)
    bf16 = sharded_grads(trainer, model, local, count, autocast=True)
    reference(**stack_rows(rows)).loss.backward()
    ref = dict(reference.named_parameters())
    result = {
        "head_captured": linear_head(model) is not None,
        "fp32_grad_rel": max(rel(g, ref[n].grad) for n, g in fp32.items()),
        "bf16_grad_rel": max(rel(g, ref[n].grad) for n, g in bf16.items()),
        "grads_finite": all(bool(torch.isfinite(g).all()) for g in bf16.values()),
    }
    model.zero_grad(set_to_none=True)
    sharded_grads(trainer, model, local, count, autocast=False)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(p.grad, alpha=-LR)
        for p in reference.parameters():
            p.add_(p.grad, alpha=-LR)

    metrics = trainer.evaluate()  # each rank scores its rows; sums gathered across ranks
    reference.eval()
    with torch.no_grad():
        result["eval_loss_diff"] = abs(metrics["eval_loss"] - reference(**stack_rows(rows)).loss.item())
    trainer.save_model(out_dir)  # every rank: the full state dict is gathered collectively
    dist.barrier()
    if rank == 0:
        loaded = LlamaForCausalLM.from_pretrained(out_dir)
        want = reference.state_dict()
        result["saved_max_abs_diff"] = max((t - want[k]).abs().max().item() for k, t in loaded.state_dict().items())
        result["saved_keys_match"] = sorted(loaded.state_dict()) == sorted(want)
        result["tied_after_load"] = loaded.lm_head.weight.data_ptr() == loaded.model.embed_tokens.weight.data_ptr()
        Path(out_dir, "result.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] == "tied")
    exit_when_every_rank_is_done()
