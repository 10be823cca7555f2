"""Scoring, the sampler and greedy generation with a tensor-parallel head (TP = 2, gloo CPU) equal one process.

``tests/scripts/tp_eval_step.py`` runs on 2 ranks forked by ``tests.distributed.run_ranks``; in-process cases cover the refusal of a
vocabulary shard and the gathering of a ``DTensor`` on a one-rank mesh.
"""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn
from tp_eval_step import main as tp_eval_main

from hf_lmobj.metrics.scoring import full_vocab_logits, model_vocab_size, score_texts
from hf_lmobj.metrics.token_statistics import target_token_accuracy
from tests.distributed import preload, run_ranks

preload("transformers.models.llama.modeling_llama")


@pytest.fixture(scope="module")
def ranks(tmp_path_factory):
    out = tmp_path_factory.mktemp("tp_eval")
    run_ranks(tp_eval_main, 2, str(out), timeout=300)
    return [json.loads((out / f"rank{r}.json").read_text()) for r in range(2)]


@pytest.mark.parametrize("style", ["replicated", "dtensor_logits"])
def test_score_texts_with_a_tp_head_equals_the_unsharded_model(ranks, style):
    for res in ranks:
        assert "error" not in res[style], res[style]
        assert res[style]["nll_diff"] < 1e-5


def test_a_head_that_returns_its_local_shard_is_refused_by_name(ranks):
    for res in ranks:
        assert "tensor-parallel head's local shard" in res["local_shard"]["error"]
        assert "over 200 of its 400" in res["local_shard"]["error"]


def test_the_sampler_gathers_vocabulary_sharded_scores_and_greedy_generation_matches(ranks):
    for res in ranks:
        assert res["sampler"] == {"sampler_equal": True, "sampler_type": "Tensor"}
        assert res["replicated"]["greedy_equal"] is True


class _HalfLogits(nn.Module):
    """A causal LM stand-in whose head has 8 rows but whose forward returns 4 columns (one TP rank's shard)."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(2, 8)
        self.config = type("Config", (), {"max_position_embeddings": 16, "vocab_size": 8})()

    @property
    def device(self) -> torch.device:
        return self.head.weight.device

    def get_output_embeddings(self) -> nn.Module:
        return self.head

    def forward(self, input_ids, attention_mask=None, use_cache=None, **kwargs):
        return type("Out", (), {"logits": torch.zeros(*input_ids.shape, 4)})()


class _ByteTokenizer:
    bos_token_id, eos_token_id, pad_token_id = 1, 2, 0

    def __call__(self, texts, add_special_tokens=False):
        return {"input_ids": [[3 + (ord(c) % 5) for c in t] for t in texts]}


def test_score_texts_refuses_logits_narrower_than_the_head():
    with pytest.raises(ValueError, match="local shard"):
        score_texts(_HalfLogits(), _ByteTokenizer(), ["abcd"], max_length=8, progress=False)


def test_target_token_accuracy_refuses_logits_narrower_than_the_head():
    import datasets

    rows = datasets.Dataset.from_dict({"input_ids": [[3, 4, 5]]})

    def collate(features):
        ids = torch.tensor([f["input_ids"] for f in features])
        return {"input_ids": ids, "labels": ids}

    with pytest.raises(ValueError, match="4 of its 8 vocabulary"):
        target_token_accuracy(_HalfLogits(), rows, collate)


def test_score_texts_refuses_windows_longer_than_the_models_context():
    with pytest.raises(ValueError, match="exceeds the model's context size 16"):
        score_texts(_HalfLogits(), _ByteTokenizer(), ["abcd"], max_length=32, progress=False)


def test_model_vocab_size_reads_the_head_then_the_config():
    assert model_vocab_size(_HalfLogits()) == 8
    assert model_vocab_size(nn.Linear(2, 2)) is None
    assert full_vocab_logits(torch.zeros(2, 5)).shape == (2, 5)  # nothing to check against
