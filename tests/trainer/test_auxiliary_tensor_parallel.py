"""Multi-token prediction and ELECTRA under tensor parallelism (TP = 2 on gloo CPU), against one process.

The script (``auxiliary_tp_step.py``, run once on 2 ranks forked by ``tests.distributed.run_ranks``) proves that MTP works
with a vocabulary-sharded head: a tiny Llama with ``lm_head.weight`` a ``Shard(0)`` DTensor (torch's
``ColwiseParallel``, transformers' ``tp_plan="auto"`` tied and untied), wrapped with 2 depths of
either architecture, gives ``AuxiliaryObjectiveTrainer``'s counts, loss, per-depth losses and every
gradient of the unsharded wrapper (within 1e-5, fp32). Before the wrapper turned the replicated DTensor
head input of ``ColwiseParallel`` into a plain tensor, that style failed with "mixed torch.Tensor and
DTensor". ELECTRA is refused, at construction and at the first forward, naming tensor parallelism.
"""

from __future__ import annotations

import json

import pytest
from auxiliary_tp_step import main

from tests.distributed import preload, run_ranks

preload(*(f"transformers.models.{name}.modeling_{name}" for name in ("llama", "electra")))
FP32 = 1e-5
STYLES = ["colwise", "tp_plan/untied", "tp_plan/tied"]


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> list[dict]:
    out = tmp_path_factory.mktemp("auxiliary_tp")
    run_ranks(main, 2, str(out), timeout=300)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.slow
@pytest.mark.parametrize("architecture", ["sequential", "parallel"])
@pytest.mark.parametrize("style", STYLES)
def test_mtp_with_a_vocab_sharded_head_equals_the_unsharded_model(results, style, architecture):
    for rank in results:
        r = rank[f"mtp/{style}/{architecture}"]
        assert "error" not in r, r.get("trace")
        assert r["head_placements"] == "(Shard(dim=0),)"
        assert r["ranks_per_replica"] == 2 and r["data_parallel_size"] == 1  # both TP ranks: one replica
        assert r["counts"] == r["ref_counts"]  # per depth, not doubled by the TP degree
        assert r["loss_diff"] < FP32 and r["term_diff"] < FP32, r
        assert not r["unmatched"] and not r["no_grad"], r
        assert r["grad_diff"] < FP32, r
        assert r["mtp_grad_norm"] > 1e-3  # the depths were trained, not skipped


@pytest.mark.slow
@pytest.mark.parametrize("style", STYLES[1:])
def test_the_trainer_reads_the_tp_degree_through_the_wrapper(results, style):
    """transformers hands accelerate a ParallelismConfig for the wrapper as for the stock model (refused on CPU)."""
    for rank in results:
        r = rank[f"mtp/{style}/sequential"]
        assert r["wrapper_tp_size"] == 2
        assert "ParallelismConfig" in r["trainer_with_tp_model"], r["trainer_with_tp_model"]


@pytest.mark.slow
@pytest.mark.parametrize("where", ["construction", "forward"])
def test_electra_refuses_tensor_parallelism(results, where):
    for rank in results:
        message = rank["electra"][where]
        assert message.startswith("ValueError") and "tensor parallelism" in message and "DDP" in message, message
