"""FSDP2 (torch ``fully_shard``) on 2 gloo CPU processes: the loss path, evaluation and saving.

The script (``fsdp2_step.py``) shards a tiny Llama with its head tied to the input embedding or
sharded on its own, trains one step through ``ObjectiveTrainer``'s captured-head loss in float32
and under bf16 autocast, evaluates, saves on every rank and reloads on rank 0. A collective that
only one rank joins (the rank-0-only save this guards against) fails on the process group's
timeout, and the forked ranks (``tests.distributed.run_ranks``) have their own, so the test cannot hang.
"""

from __future__ import annotations

import json

import pytest
from fsdp2_step import main

from tests.distributed import preload, run_ranks

preload("transformers.models.llama.modeling_llama")


@pytest.mark.slow
@pytest.mark.parametrize("head", ["tied", "untied"])
def test_fully_sharded_llama_trains_evaluates_and_saves_a_loadable_model(tmp_path, head, monkeypatch):
    monkeypatch.chdir(tmp_path)  # anything the ranks write to their working folder lands here
    run_ranks(main, 2, str(tmp_path), head == "tied", timeout=400)
    result = json.loads((tmp_path / "result.json").read_text())
    assert result["head_captured"]  # the chunked loss ran on the sharded / tied head, not a logits fallback
    assert result["fp32_grad_rel"] < 1e-5  # 2 ranks x 4 rows == the stock full-batch gradient
    assert result["bf16_grad_rel"] < 3e-2 and result["grads_finite"]
    assert result["eval_loss_diff"] < 1e-5  # token-weighted, gathered across ranks
    assert result["saved_keys_match"] and result["saved_max_abs_diff"] < 1e-6
    assert result["tied_after_load"] == (head == "tied")
