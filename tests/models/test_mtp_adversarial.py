"""Adversarial inputs to multi-token prediction: ``MTPConfig``, ``MultiTokenPredictionModel`` and its targets.

Input classes: hostile and degenerate values of every config field (non-finite, negative, bools,
floats for ints, huge depths), models that are not decoder-only causal LMs, sizes that do not fit
the model, rows shorter than the depths, empty and one-token rows, rows all -100, packed rows whose
labels leave document starts unmasked (every boundary signal: position_ids, cu_seq_lens_q,
padding), labels / input_ids of the wrong dtype, shape or range, and wrong denominators.
"""

from __future__ import annotations

import math

import pytest
import torch
from distributed_step import sgd_args
from transformers import (
    BartForCausalLM,
    BertForMaskedLM,
    BertLMHeadModel,
    BertModel,
    GPT2LMHeadModel,
    XLMConfig,
    XLMWithLMHeadModel,
)

from hf_lmobj.models.mtp import MTPConfig, MultiTokenPredictionModel
from hf_lmobj.models.mtp_targets import count_multi_token_targets, multi_token_targets, shifted_targets
from hf_lmobj.trainer.auxiliary import AuxiliaryObjectiveTrainer
from tests.testing_utils import tiny_bart, tiny_bert, tiny_gpt2, tiny_llama, tiny_t5

V = 32


#: The tiny models of these tests: width 16, 1 layer, MLP 16 (the encoders, BART, T5) or 32 (Llama), vocabulary V.
TINY = {"vocab_size": V, "width": 16, "layers": 1}


def gpt2(positions: int = 16) -> GPT2LMHeadModel:
    return tiny_gpt2(positions=positions, dropout=0.0, bos_token_id=1, eos_token_id=1, **TINY)


def bert(cls=BertForMaskedLM, **overrides):
    return tiny_bert(ffn=16, cls=cls, **TINY, **overrides)


@pytest.fixture(scope="module")
def trainer(tmp_path_factory):
    model = MultiTokenPredictionModel(gpt2(), MTPConfig(num_depths=2, num_attention_heads=2))
    return AuxiliaryObjectiveTrainer(model=model, args=sgd_args(str(tmp_path_factory.mktemp("mtp_adv")), 2, 1))


def packed() -> dict[str, torch.Tensor]:
    """Two rows of 8: documents 3 + 5 and 2 + 4 + 2 (position_ids restart), labels = input_ids (starts unmasked)."""
    position_ids = torch.tensor([[0, 1, 2, 0, 1, 2, 3, 4], [0, 1, 0, 1, 2, 3, 0, 1]])
    input_ids = torch.arange(2, 18).view(2, 8)
    return {"input_ids": input_ids, "position_ids": position_ids, "labels": input_ids.clone()}


def naive(input_ids: torch.Tensor, documents: list[list[int]], depth: int, real=None) -> list[list[int]]:
    """Token t + depth + 1 when it is in t's document (and both are real tokens), else -100."""
    out = []
    for b, row in enumerate(input_ids.tolist()):
        targets = []
        for t in range(len(row)):
            j = t + depth + 1
            ok = j < len(row) and documents[b][j] == documents[b][t]
            ok = ok and (real is None or (real[b][t] and real[b][j]))
            targets.append(row[j] if ok else -100)
        out.append(targets)
    return out


# ---- MTPConfig ------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, error, word",
    [
        ({"num_depths": 0}, ValueError, "num_depths must be an int >= 1"),
        ({"num_depths": -3}, ValueError, "num_depths"),
        ({"num_depths": True}, TypeError, "num_depths"),
        ({"num_depths": 2.0}, TypeError, "num_depths"),
        ({"num_depths": "2"}, TypeError, "num_depths"),
        ({"num_depths": None}, TypeError, "num_depths"),
        ({"architecture": "tree"}, ValueError, "architecture"),
        ({"architecture": ["sequential"]}, ValueError, "architecture"),
        ({"loss_weight": math.nan}, ValueError, "loss_weight"),
        ({"loss_weight": math.inf}, ValueError, "loss_weight"),
        ({"loss_weight": -0.1}, ValueError, "loss_weight"),
        ({"loss_weight": True}, TypeError, "loss_weight"),
        ({"loss_weight": "0.3"}, TypeError, "loss_weight"),
        ({"hidden_size": 0}, ValueError, "hidden_size"),
        ({"hidden_size": 16.0}, TypeError, "hidden_size"),
        ({"embedding_size": -16}, ValueError, "embedding_size"),
        ({"num_attention_heads": True}, TypeError, "num_attention_heads"),
        ({"intermediate_size": 0}, ValueError, "intermediate_size"),
        ({"hidden_size": 16, "num_attention_heads": 3}, ValueError, "even width"),
        ({"hidden_size": 18, "num_attention_heads": 2}, ValueError, "even width"),  # head width 9: odd
        ({"rms_norm_eps": 0.0}, ValueError, "rms_norm_eps"),
        ({"rms_norm_eps": math.nan}, ValueError, "rms_norm_eps"),
        ({"rope_theta": -1.0}, ValueError, "rope_theta"),
        ({"rope_theta": math.inf}, ValueError, "rope_theta"),
        ({"initializer_range": 0.0}, ValueError, "initializer_range"),
        ({"initializer_range": math.nan}, ValueError, "initializer_range"),
    ],
)
def test_config_refuses_hostile_values(kwargs, error, word):
    with pytest.raises(error, match=word):
        MTPConfig(**kwargs)


def test_config_keeps_valid_edge_values():
    config = MTPConfig(num_depths=1, loss_weight=0.0, initializer_range=None)
    assert (config.num_depths, config.loss_weight, config.initializer_range) == (1, 0.0, None)


# ---- the model ------------------------------------------------------------------------------------
def _t5():
    return tiny_t5(ffn=16, **TINY)


@pytest.mark.parametrize(
    "build, error, word",
    [
        (bert, TypeError, "decoder-only causal LM.*BertForMaskedLM"),
        (_t5, TypeError, "encoder-decoder"),
        (lambda: bert(BertLMHeadModel), ValueError, "is_decoder=True"),
        (
            lambda: XLMWithLMHeadModel(XLMConfig(vocab_size=V, emb_dim=16, n_layers=1, n_heads=2)),
            ValueError,
            "causal=True",
        ),  # fmt: skip
        (lambda: bert(BertModel), TypeError, "causal LM"),
        (lambda: torch.nn.Linear(2, 2), TypeError, "PreTrainedModel"),
    ],
)
def test_models_that_are_not_causal_lms_are_refused(build, error, word):
    with pytest.raises(error, match=word):
        MultiTokenPredictionModel(build(), MTPConfig(num_attention_heads=2))


class MyGPT2(GPT2LMHeadModel):
    """A user's subclass: still a causal LM by its lineage."""


@pytest.mark.parametrize(
    "build",
    [
        lambda: bert(BertLMHeadModel, is_decoder=True),
        lambda: tiny_bart(ffn=16, cls=BartForCausalLM, **TINY),
        lambda: tiny_llama(**TINY),
        lambda: MyGPT2(gpt2().config),
    ],
    ids=["bert-decoder", "bart-causal", "llama", "subclass"],
)
def test_causal_lms_are_accepted_whatever_their_is_decoder(build):
    model = MultiTokenPredictionModel(build(), MTPConfig(num_depths=1, num_attention_heads=2))
    assert len(model.mtp) == 1 and model.vocab_size == V


@pytest.mark.parametrize(
    "config, word",
    [
        (MTPConfig(hidden_size=32, num_attention_heads=2), "head's input width 16"),
        (MTPConfig(embedding_size=8, num_attention_heads=2), "input embedding width 16"),
        (MTPConfig(num_depths=15, num_attention_heads=2), "max_position_embeddings=16"),
        (MTPConfig(num_depths=10**9, num_attention_heads=2), "num_depths <= 14"),
    ],
)
def test_sizes_that_do_not_fit_the_model_are_refused_before_building(config, word):
    with pytest.raises(ValueError, match=word):
        MultiTokenPredictionModel(gpt2(), config)


def test_the_deepest_depth_a_row_can_hold_is_accepted():
    assert len(MultiTokenPredictionModel(gpt2(positions=8), MTPConfig(num_depths=6, num_attention_heads=2)).mtp) == 6


@pytest.mark.parametrize(
    "kwargs, error, word",
    [
        ({"seed": -1}, ValueError, "seed"),
        ({"seed": 1.5}, TypeError, "seed"),
        ({"seed": True}, TypeError, "seed"),
        ({"config": {"num_depths": 2}}, TypeError, "MTPConfig"),
    ],
)
def test_wrapper_arguments(kwargs, error, word):
    with pytest.raises(error, match=word):
        MultiTokenPredictionModel(gpt2(), **kwargs)


# ---- rows shorter than the depths (issue 26: "Sizes of tensors must match") -----------------------
@pytest.mark.parametrize("architecture", ["sequential", "parallel"])
@pytest.mark.parametrize("length", [1, 2, 4])
def test_depths_beyond_the_row_contribute_nothing_and_count_zero(architecture, length, tmp_path, one_torch_thread):
    depths = 6
    model = MultiTokenPredictionModel(gpt2(), MTPConfig(depths, architecture, loss_weight=0.6, num_attention_heads=2))
    trainer = AuxiliaryObjectiveTrainer(model=model, args=sgd_args(str(tmp_path), 1, 1))
    batch = {"input_ids": torch.arange(3, 3 + length)[None], "labels": torch.arange(3, 3 + length)[None]}
    counts = trainer._get_num_items_in_batch([batch], torch.device("cpu"))
    assert counts.tolist() == [max(length - 1 - k, 0) for k in range(depths + 1)]
    loss = trainer.compute_loss(model, dict(batch), num_items_in_batch=counts)
    loss.backward()
    terms = {k: v.item() for k, v in trainer._term_sums.items()}
    assert all(terms[f"mtp_depth_{k}_loss"] == 0.0 for k in range(max(length - 1, 1), depths + 1))
    depth0 = model.base(**batch).loss.item() if length > 1 else 0.0
    expected = depth0 + 0.6 / depths * sum(terms.values())
    assert loss.item() == pytest.approx(expected, abs=1e-5)


# ---- documents: targets never cross, whether or not the labels mask document starts ----------------
@pytest.mark.parametrize("depth", [1, 2, 3, 7])
def test_packed_targets_stay_in_their_document_with_unmasked_starts(depth):
    batch = packed()
    documents = [[0, 0, 0, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1, 2, 2]]
    assert multi_token_targets(batch, depth, V)[depth].tolist() == naive(batch["input_ids"], documents, depth)


def test_depth_zero_follows_the_labels_as_given():
    """Depth 0 is the stock objective: it scores what the labels say (the collators mask document starts)."""
    batch = packed()
    assert multi_token_targets(batch, 1, V)[0].tolist() == [r[1:] + [-100] for r in batch["input_ids"].tolist()]


def test_cu_seq_lens_mark_documents_like_position_ids():
    batch = packed()
    flat = {"input_ids": batch["input_ids"], "labels": batch["labels"],
            "cu_seq_lens_q": torch.tensor([0, 3, 8, 10, 14, 16])}  # fmt: skip
    assert torch.equal(multi_token_targets(flat, 3, V), multi_token_targets(batch, 3, V))


def test_padding_is_never_a_depth_target_even_when_labelled():
    ids = torch.tensor([[4, 5, 6, 0, 0], [7, 8, 9, 10, 11]])
    mask = torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]])
    batch = {"input_ids": ids, "attention_mask": mask, "labels": ids.clone(),  # padding left unmasked
             "position_ids": torch.arange(5).expand(2, 5)}  # fmt: skip
    targets = multi_token_targets(batch, 2, V)
    assert targets[1].tolist() == naive(ids, [[0] * 5, [0] * 5], 1, real=mask.bool().tolist())
    assert targets[2].tolist() == [[-100] * 5, [10, 11, -100, -100, -100]]  # row 0: token t + 3 is padding


def test_the_docstring_example_of_shifted_targets_no_longer_crosses():
    # next-token targets [1, 2, 3, -100] over documents [0, 0, 0, 1]: token 3 is document 1's
    assert shifted_targets(torch.tensor([[1, 2, 3, -100]]), torch.tensor([[0, 0, 0, 1]]), 1).tolist() == [
        [2, -100, -100, -100]
    ]


@pytest.mark.parametrize(
    "extra, word",
    [
        ({"seq_lengths": [[3, 5], [2, 4, 2]]}, "seq_lengths but has no position_ids"),
        ({"attention_mask": torch.zeros(2, 1, 8, 8)}, "4-D attention_mask but has no position_ids"),
        ({"cu_seq_lens_q": torch.tensor([0, 3, 9])}, "cu_seq_lens_q must rise strictly from 0 to B . T = 16"),
        ({"cu_seq_lens_q": torch.tensor([0, 5, 5, 16])}, "cu_seq_lens_q"),
    ],
)
def test_document_signals_that_cannot_be_read_are_refused(extra, word):
    batch = {k: v for k, v in packed().items() if k != "position_ids"}
    with pytest.raises(ValueError, match=word):
        multi_token_targets({**batch, **extra}, 1, V)


# ---- malformed batches ----------------------------------------------------------------------------
def _bad(key: str, value) -> dict:
    batch = packed()
    batch[key] = value
    return batch


@pytest.mark.parametrize(
    "batch, error, word",
    [
        (_bad("labels", torch.ones(2, 8)), TypeError, "labels must hold integer class indices"),
        (_bad("labels", torch.ones(2, 8, dtype=torch.bool)), TypeError, "labels"),
        (_bad("labels", torch.ones(2, 9, dtype=torch.long)), ValueError, r"labels shape \(2, 9\) must equal"),
        (_bad("labels", torch.full((2, 8), V)), ValueError, f"must lie in \\[0, {V}\\)"),
        (_bad("labels", torch.full((2, 8), -5)), ValueError, "ignore_index=-100"),
        (_bad("shift_labels", torch.ones(1, 8, dtype=torch.long)), ValueError, "shift_labels shape"),
        (_bad("input_ids", torch.ones(2, 8)), TypeError, "input_ids must be an integer tensor"),
        (_bad("input_ids", torch.full((2, 8), V)), ValueError, "another tokenizer"),
        (_bad("input_ids", torch.ones(16, dtype=torch.long)), ValueError, r"\(B, T\)"),
        (_bad("input_ids", [[1, 2, 3]]), TypeError, "input_ids must be an integer tensor"),
        (_bad("position_ids", torch.zeros(2, 7, dtype=torch.long)), ValueError, "position_ids must be"),
        (_bad("position_ids", torch.zeros(3, 8, dtype=torch.long)), ValueError, "position_ids must be"),
        (_bad("logits_to_keep", 1), ValueError, "logits_to_keep"),
        ({"input_ids": torch.ones(2, 8, dtype=torch.long)}, ValueError, "needs 'labels'"),
        ({"labels": torch.ones(2, 8, dtype=torch.long)}, ValueError, "needs input_ids"),
        (
            {"input_ids": torch.ones(1, 0, dtype=torch.long), "labels": torch.ones(1, 0, dtype=torch.long)},
            ValueError,
            "at least one row of one token",
        ),  # fmt: skip
        (
            {"input_ids": torch.ones(0, 4, dtype=torch.long), "labels": torch.ones(0, 4, dtype=torch.long)},
            ValueError,
            "at least one row",
        ),  # fmt: skip
    ],
)
def test_malformed_batches_are_refused_by_name(batch, error, word):
    with pytest.raises(error, match=word):
        count_multi_token_targets(batch, 2, V)


@pytest.mark.parametrize(
    "batch",
    [
        {"input_ids": torch.tensor([[5]]), "labels": torch.tensor([[5]])},  # one token: nothing to predict
        {"input_ids": torch.tensor([[5, 6, 7]]), "labels": torch.full((1, 3), -100)},  # every label -100
    ],
    ids=["one-token", "all-ignored"],
)
def test_batches_without_targets_count_zero_and_train_nothing(trainer, batch, one_torch_thread):
    model = trainer.model
    counts = trainer._get_num_items_in_batch([batch], torch.device("cpu"))
    assert counts.tolist() == [0, 0, 0]
    loss = trainer.compute_loss(model, dict(batch), num_items_in_batch=counts)
    assert loss.item() == 0.0


@pytest.mark.parametrize("counts", [5, torch.tensor(5), torch.tensor([5, 4])], ids=["int", "0-d", "too-few"])
def test_a_denominator_without_one_count_per_depth_is_refused(trainer, counts):
    with pytest.raises(ValueError, match="one per depth"):
        trainer.compute_loss(trainer.model, packed(), num_items_in_batch=counts)
