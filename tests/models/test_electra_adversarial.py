"""Adversarial inputs to ELECTRA pre-training: its config, ``generator_config``, the pair and its forward.

Input classes: non-finite, negative, zero and wrongly typed loss weights, temperatures and
generator fractions; wrong model kinds and configs; generator and discriminator that disagree on
the shared embedding (vocabulary size, embedding width, position embeddings, resized tables);
batches with labels of the wrong dtype, shape or range, ids from another tokenizer, labels on
padding, empty and one-token rows, rows all -100; hostile sampling seeds and steps.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
from auxiliary_step import build_aux_model, build_rows
from transformers import BertConfig, ElectraConfig

from hf_lmobj.models.electra import ElectraPretrainingConfig, ElectraPretrainingModel, generator_config
from hf_lmobj.models.electra_loss import ElectraPretrainingOutput, electra_loss, sample_replacements
from tests.testing_utils import TINY_ENCODER, VOCAB, build_model, stack_rows


@pytest.fixture(scope="module")
def pair() -> ElectraPretrainingModel:
    return build_aux_model("electra")


def batch() -> dict[str, torch.Tensor]:
    return stack_rows(build_rows("electra")[:2])


# ---- the config and the generator's size ----------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs, error, word",
    [
        ({"rtd_weight": math.nan}, ValueError, "rtd_weight"),
        ({"rtd_weight": math.inf}, ValueError, "rtd_weight"),
        ({"rtd_weight": -1.0}, ValueError, "rtd_weight"),
        ({"rtd_weight": True}, TypeError, "rtd_weight"),
        ({"rtd_weight": "50"}, TypeError, "rtd_weight"),
        ({"sampling_temperature": 0.0}, ValueError, "sampling_temperature"),
        ({"sampling_temperature": -1.0}, ValueError, "sampling_temperature"),
        ({"sampling_temperature": math.nan}, ValueError, "sampling_temperature"),
        ({"sampling_temperature": math.inf}, ValueError, "sampling_temperature"),
        ({"sampling_temperature": None}, TypeError, "sampling_temperature"),
    ],
)
def test_config_refuses_hostile_values(kwargs, error, word):
    with pytest.raises(error, match=word):
        ElectraPretrainingConfig(**kwargs)


def test_config_keeps_a_zero_rtd_weight():
    assert ElectraPretrainingConfig(rtd_weight=0.0).rtd_weight == 0.0


@pytest.mark.parametrize(
    "fraction, error",
    [
        (0.0, ValueError),
        (-0.25, ValueError),
        (1.5, ValueError),
        (math.nan, ValueError),
        (True, TypeError),
        ("0.25", TypeError),
    ],  # fmt: skip
)
def test_generator_fraction_out_of_range_is_refused(fraction, error):
    with pytest.raises(error, match="generator_fraction"):
        generator_config(ElectraConfig(**TINY_ENCODER), fraction)


def test_generator_config_needs_an_electra_config():
    with pytest.raises(TypeError, match="ElectraConfig"):
        generator_config(BertConfig(**TINY_ENCODER), 0.25)


@pytest.mark.parametrize("fraction, hidden, heads", [(1.0, 32, 2), (0.01, 1, 1), (1 / 3, 11, 1)])
def test_generator_sizes_at_the_edges(fraction, hidden, heads):
    g = generator_config(ElectraConfig(**TINY_ENCODER), fraction)
    assert (g.hidden_size, g.num_attention_heads) == (hidden, heads)


# ---- the pair -------------------------------------------------------------------------------------
def _mismatch(field: str, value):
    def build(pair):
        generator, discriminator = copy.deepcopy(pair.generator), copy.deepcopy(pair.discriminator)
        setattr(generator.config, field, value)
        return generator, discriminator

    return build


def _resized(pair):
    generator, discriminator = copy.deepcopy(pair.generator), copy.deepcopy(pair.discriminator)
    generator.electra.embeddings = copy.deepcopy(generator.electra.embeddings)
    generator.get_output_embeddings().weight = torch.nn.Parameter(torch.zeros(VOCAB + 6, 32))
    return generator, discriminator


@pytest.mark.parametrize(
    "build, error, word",
    [
        (lambda p: (build_model("masked"), p.discriminator), TypeError, "BertForMaskedLM"),
        (lambda p: (p.discriminator, p.generator), TypeError, "ElectraForMaskedLM"),
        (_mismatch("vocab_size", VOCAB - 1), ValueError, "vocab_size"),
        (_mismatch("embedding_size", 16), ValueError, "embedding_size"),
        (_mismatch("max_position_embeddings", 64), ValueError, "max_position_embeddings"),
        (_mismatch("type_vocab_size", 3), ValueError, "type_vocab_size"),
        (_mismatch("position_embedding_type", "relative_key"), ValueError, "position_embedding_type"),
        (_resized, ValueError, "output head"),
    ],
    ids=["bert-generator", "swapped", "vocab", "embedding", "positions", "token-types", "position-type", "resized"],
)
def test_pairs_that_cannot_share_embeddings_are_refused(pair, build, error, word):
    generator, discriminator = build(pair)
    with pytest.raises(error, match=word):
        ElectraPretrainingModel(generator, discriminator)


def test_the_pair_refuses_a_foreign_config(pair):
    with pytest.raises(TypeError, match="ElectraPretrainingConfig"):
        ElectraPretrainingModel(pair.generator, pair.discriminator, {"rtd_weight": 50.0})


@pytest.mark.parametrize("seed, error", [(-1, ValueError), (0.5, TypeError), (None, TypeError)])
def test_from_config_refuses_hostile_seeds(seed, error):
    with pytest.raises(error, match="seed"):
        ElectraPretrainingModel.from_config(ElectraConfig(**TINY_ENCODER, embedding_size=32), seed=seed)


# ---- the forward ----------------------------------------------------------------------------------
def _with(**changes) -> dict:
    out = batch()
    out.update(changes)
    return out


def _labels_on_padding() -> dict:
    out = batch()
    padding = out["attention_mask"] == 0
    out["labels"][padding] = 5
    return out


@pytest.mark.parametrize(
    "inputs, error, word",
    [
        (_with(labels=None), ValueError, "needs 'labels'"),
        (_with(labels=torch.ones(2, 12)), TypeError, "labels must hold integer class indices"),
        (_with(labels=torch.ones(2, 11, dtype=torch.long)), ValueError, r"labels shape \(2, 11\)"),
        (_with(labels=torch.full((2, 12), VOCAB)), ValueError, f"must lie in \\[0, {VOCAB}\\)"),
        (_with(input_ids=torch.full((2, 12), VOCAB)), ValueError, "another tokenizer"),
        (_with(input_ids=torch.ones(2, 12)), TypeError, "input_ids must be an integer tensor"),
        (
            _with(
                input_ids=torch.ones(2, 0, dtype=torch.long),
                labels=torch.ones(2, 0, dtype=torch.long),
                attention_mask=None,
            ),
            ValueError,
            "at least one token",
        ),  # fmt: skip
        (_with(attention_mask=torch.ones(2, 11, dtype=torch.long)), ValueError, "attention_mask shape"),
        (_with(attention_mask=torch.ones(2, 1, 12, 12)), ValueError, "2D attention_mask"),
        (_labels_on_padding(), ValueError, "padding position"),
    ],
    ids=[
        "no-labels",
        "float-labels",
        "short-labels",
        "label-vocab",
        "id-vocab",
        "float-ids",
        "empty",
        "mask-shape",
        "4d-mask",
        "labels-on-padding",
    ],  # fmt: skip
)
def test_malformed_batches_are_refused_at_forward(pair, inputs, error, word):
    with pytest.raises(error, match=word):
        pair(**inputs, sampling_seed=0)


@pytest.mark.parametrize(
    "kwargs, error, word",
    [
        ({"sampling_seed": -1}, ValueError, "sampling_seed"),
        ({"sampling_seed": 1.0}, TypeError, "sampling_seed"),  # "1.0:0" would key other draws than 1
        ({"sampling_seed": True}, TypeError, "sampling_seed"),
        ({"sampling_seed": 0, "sampling_step": -2}, ValueError, "sampling_step"),
        ({"sampling_seed": 0, "sampling_step": 1.0}, TypeError, "sampling_step"),
    ],
)
def test_hostile_sampling_keys_are_refused(pair, kwargs, error, word):
    with pytest.raises(error, match=word):
        pair(**batch(), **kwargs)


def test_rows_all_ignored_train_the_discriminator_only(pair):
    inputs = _with(labels=torch.full((2, 12), -100))
    out = pair(**inputs, sampling_seed=0)
    total, mlm, rtd = electra_loss(out, rtd_weight=50.0)
    assert out.generator_logits.shape == (0, VOCAB) and mlm.item() == 0.0
    assert not out.replaced.any() and total.item() == pytest.approx(50.0 * rtd.item())


def test_one_token_rows_run(pair):
    inputs = {"input_ids": torch.tensor([[5], [6]]), "labels": torch.tensor([[7], [-100]])}
    out = pair(**inputs, sampling_seed=0)
    assert out.generator_logits.shape == (1, VOCAB) and out.discriminator_logits.shape == (2, 1)


def test_electra_loss_and_sampling_refuse_hostile_numbers():
    out = ElectraPretrainingOutput(generator_logits=torch.zeros(1, 4), mlm_targets=torch.tensor([2]),
                                   replaced=torch.tensor([[False]]), discriminator_logits=torch.zeros(1, 1),
                                   rtd_mask=torch.tensor([[True]]))  # fmt: skip
    with pytest.raises(ValueError, match="rtd_weight"):
        electra_loss(out, rtd_weight=math.nan)
    with pytest.raises(ValueError, match="sampling_temperature"):
        sample_replacements(torch.zeros(1, 4), torch.tensor([0]), [b"row"], seed=0, step=0, temperature=0.0)
