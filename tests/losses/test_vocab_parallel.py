"""Vocab-parallel (tensor-parallel) ``linear_cross_entropy``: 2 gloo CPU ranks against one process.

The script (``vocab_parallel_step.py``, run once per module on 2 ranks forked by ``tests.distributed.run_ranks``) shards a random
head ``[V, H]`` (V = 16 and the uneven V = 15) with ``distribute_tensor(..., [Shard(0)])`` and as a plain
local shard with ``process_group=`` / ``vocab_start=``, and compares the loss and the gradients of the
hidden states, the weight shard and the bias shard with the single-process loss on the full head, with
label smoothing, z-loss, logit softcap, ignored targets and ``num_items_in_batch``; then a tiny Llama whose
``lm_head`` is ``ColwiseParallel`` (tied and untied), and one loaded with transformers'
``tp_plan="auto"``. Each rank writes its own differences.
"""

from __future__ import annotations

import json

import pytest
import torch
from vocab_parallel_step import main

from hf_lmobj.losses import linear_cross_entropy, linear_token_losses
from tests.distributed import preload, run_ranks

preload("transformers.models.llama.modeling_llama")
FP32 = 1e-5


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("vocab_parallel")
    run_ranks(main, 2, str(out), timeout=300)
    return [json.loads((out / f"result_rank{r}.json").read_text()) for r in range(2)]


def _diffs(ranks, prefix):
    found = {f"rank{r}:{k}": v for r, res in enumerate(ranks) for k, v in res["diffs"].items() if k.startswith(prefix)}
    assert found, prefix
    return found


@pytest.mark.parametrize("vocab", ["V16", "V15"])
def test_sharded_head_matches_the_full_head(ranks, vocab):
    """Loss, hidden / weight-shard / bias-shard gradients and per-token losses, every option set, both APIs."""
    diffs = _diffs(ranks, vocab + "/")
    assert len(diffs) == 2 * 6 * 2 * 2
    bad = {k: v for k, v in diffs.items() if not v < FP32}
    assert not bad, bad


@pytest.mark.parametrize("head", ["untied", "tied"])
def test_colwise_parallel_llama_head_matches_the_unsharded_model(ranks, head):
    diffs = _diffs(ranks, f"llama/{head}/")
    bad = {k: v for k, v in diffs.items() if not v < FP32}
    assert not bad, bad


def test_transformers_tp_plan_auto_head(ranks):
    for res in ranks:
        info = res["tp_plan_auto"]
        assert "error" not in info, info
        assert info["weight_type"] == "DTensor" and "Shard(dim=0)" in info["placements"], info
        for key in ("loss", "head_grad_full", "layer_grad_full", "embed_grad_full", "captured_loss"):
            assert info[key] < FP32, (key, info)


def test_sequence_parallel_hidden_replicated_head_dtypes_and_errors(ranks):
    for res in ranks:
        d = res["diffs"]
        for key in ("seqpar/loss", "seqpar/hidden_grad", "seqpar/weight_grad"):
            assert d[key] < FP32, key
        for key in ("empty_shard/loss", "empty_shard/hidden_grad", "empty_shard/weight_grad"):
            assert d[key] < FP32, key
        for key in ("replicate/loss", "replicate/hidden_grad", "replicate/weight_grad"):
            assert d[key] < FP32, key
        assert d["float64/loss"] < 1e-12 and d["float64/hidden_grad"] < 1e-12
        assert d["bf16_autocast/loss"] < 1e-5  # same bf16 logits, float32 softmax
        assert d["bf16_autocast/hidden_grad_rel"] < 1e-2  # per-shard bf16 products, summed in float32
        assert d["shard1_raises"] == 0.0


def test_vocab_start_and_process_group_go_together():
    h, w, t = torch.zeros(2, 3), torch.zeros(4, 3), torch.tensor([0, 1])
    with pytest.raises(ValueError, match="needs process_group"):
        linear_cross_entropy(h, w, t, vocab_start=0)
    with pytest.raises(ValueError, match="needs vocab_start"):
        linear_token_losses(h, w, t, process_group=object())
