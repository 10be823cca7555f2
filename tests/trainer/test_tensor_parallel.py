"""Tensor parallelism (TP = 2) and a 2 x 2 (dp x tp) mesh on gloo CPU processes, against one process.

The script (``tp_trainer_step.py``, run once per mode on ranks forked by ``tests.distributed.run_ranks``) proves:

* ``causal``: a tiny Llama (tied / untied) loaded with transformers' ``tp_plan="auto"`` takes one SGD step
  with ``ObjectiveTrainer``'s count and loss (both TP ranks hold the same 8 rows: one replica). The Trainer
  itself cannot be built around a TP model on CPU: transformers hands accelerate a ``ParallelismConfig``
  and accelerate refuses it for ``MULTI_CPU``. So the step drives the Trainer's pieces
  (``_get_num_items_in_batch`` -> ``compute_loss`` -> backward -> ``torch.optim.SGD``), the refusal is asserted,
  and a Trainer that later accepts the model is taken through ``train()`` instead.
* ``heads``: a masked head (BERT decoder, tied to the word embedding) and a seq2seq head (T5 ``lm_head``) as
  ``Shard(0)`` DTensors: ``ObjectiveTrainer.compute_loss`` loss and every gradient equal the unsharded model's.
  With torch's ``ColwiseParallel`` hooks on the head too (``capture_head`` answers a DTensor input with a
  DTensor placeholder, as their output hook expects).
* ``mesh2d`` (slow, 4 processes): FSDP2 over "dp" on top of a ``ColwiseParallel`` head over "tp"; each replica
  scores half the batch with ``linear_cross_entropy(num_items_in_batch=count over dp)``; the SGD update
  equals the one-process full-batch update.
"""

from __future__ import annotations

import json

import pytest
from tp_trainer_step import main

from tests.distributed import preload, run_ranks

preload(*(f"transformers.models.{name}.modeling_{name}" for name in ("llama", "bert", "t5")))
FP32 = 1e-5


def _run(tmp_path_factory, mode: str, nproc: int, timeout: int) -> list[dict]:
    out = tmp_path_factory.mktemp(f"tp_{mode}")
    run_ranks(main, nproc, str(out), mode, timeout=timeout)
    return [json.loads((out / f"{mode}_rank{r}.json").read_text()) for r in range(nproc)]


@pytest.fixture(scope="module")
def causal(tmp_path_factory):
    return _run(tmp_path_factory, "causal", 2, 300)


@pytest.fixture(scope="module")
def heads(tmp_path_factory):
    return _run(tmp_path_factory, "heads", 2, 300)


@pytest.fixture(scope="module")
def mesh2d(tmp_path_factory):
    return _run(tmp_path_factory, "mesh2d", 4, 300)


@pytest.mark.parametrize("tied", ["untied", "tied"])
def test_tp_plan_auto_llama_step_equals_the_unsharded_step(causal, tied):
    for res in causal:
        r = res[tied]
        assert r["head_placements"] == "(Shard(dim=0),)" and r["tp_size"] == 2
        assert r["tied_after_tp"] is (tied == "tied")
        if r["path"] == "pieces":  # the Trainer refused the TP model: accelerate's CPU ParallelismConfig check
            refusal = r.get("trainer_init") or r["trainer_train"]
            assert "ParallelismConfig" in refusal["error"], refusal
            assert r["head_captured"]  # the chunked vocab-parallel loss, not a logits fallback
        assert r["data_parallel_size"] == 1  # 2 ranks, one replica
        assert r["train_num_items"] == [r["ref_count"]]  # the one-process count, not 2x
        assert r["loss_diff"] < FP32, r
        assert r["update_diff"] < FP32 and not r["missing"], r
        assert r["moved"] > 1e-4  # the step did change the parameters


@pytest.mark.parametrize("objective", ["masked", "span"])
def test_dtensor_heads_compute_loss_and_gradients_equal_the_unsharded_model(heads, objective):
    for res in heads:
        r = res[f"{objective}/dtensor_weight"]
        assert "error" not in r, r.get("trace")
        assert r["head_captured"] and r["head_placements"] == "(Shard(dim=0),)"
        assert r["tied_before"] is (objective == "masked")
        assert not r["unmatched"] and not r["no_grad"]
        assert r["loss_diff"] < FP32, r
        assert r["grad_diff"] < FP32, r


@pytest.mark.parametrize("style", ["dtensor_weight", "parallelize_module"])
@pytest.mark.parametrize("objective", ["masked", "span"])
def test_hand_applied_tp_is_one_replica_for_counts_and_the_loss_scale(heads, objective, style):
    """No ParallelismConfig, no tp_size: the head's 1-D mesh says both ranks are one replica."""
    for res in heads:
        r = res[f"{objective}/{style}"]
        assert r["data_parallel_size"] == 1, r
        assert r["trainer_num_items"] == r["ref_count"], r  # not 2x
        assert r["with_count_ratio"] == pytest.approx(1.0, rel=FP32), r  # the loss is not scaled by 2


@pytest.mark.parametrize("objective", ["masked", "span"])
def test_colwise_parallel_heads_can_be_captured(heads, objective):
    for res in heads:
        r = res[f"{objective}/parallelize_module"]
        assert "error" not in r, r["error"]
        assert r["loss_diff"] < FP32 and r["grad_diff"] < FP32, r


@pytest.mark.slow
def test_fsdp2_over_dp_with_a_tp_head_step_equals_the_full_batch_step(mesh2d):
    for res in mesh2d:
        r = res["mesh2d"]
        assert "error" not in r, r.get("trace")
        assert r["head_mesh"] == "('dp', 'tp')" and "_StridedShard" in r["head_sharded_placements"]
        assert r["head_placements"] == "(Shard(dim=0),)"  # what linear_cross_entropy sees inside the forward
        assert r["count"] == r["ref_count"]  # summed over dp only
        assert r["ranks_per_replica"] == 2  # the ("dp", "tp") mesh's tp dimension
        assert r["loss_diff"] < FP32, r
        assert r["update_diff"] < FP32 and not r["missing"], r


@pytest.mark.slow
def test_fsdp2_tp_head_can_be_captured_by_capture_head(mesh2d):
    for res in mesh2d:
        assert "capture_head" not in res["mesh2d"], res["mesh2d"]["capture_head"]["error"]
