"""Adversarial inputs to every collator: a clear TypeError / ValueError naming the field, or the exact batch.

Written from the public API and its docstrings: ``DataCollatorForCausalLM``, ``DataCollatorForMaskedLM``,
``DataCollatorForSpanCorruption``, ``DataCollatorForFillInTheMiddle`` and
``compute_input_and_target_lengths`` from ``hf_lmobj``;
``DataCollatorForUL2`` / ``Denoiser`` and ``DataCollatorForTextInfilling`` from their modules.
Input classes: token-id sequences (floats, bools, strings, None, nesting, out of range, numpy /
torch dtypes), labels, lengths, probabilities, flags, seeds / epochs, and batches or
configurations that cannot produce a single target.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hf_lmobj import (
    DataCollatorForCausalLM,
    DataCollatorForFillInTheMiddle,
    DataCollatorForMaskedLM,
    DataCollatorForSpanCorruption,
    compute_input_and_target_lengths,
)
from hf_lmobj.collators.text_infilling import DataCollatorForTextInfilling
from hf_lmobj.collators.ul2 import DataCollatorForUL2, Denoiser

IDS = [300, 301, 302, 303]  # ordinary (non-special) ids of the 1024-token test tokenizer
FIXTURE_OK = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# --------------------------------------------------------------------------- token-id sequences
BAD_ID_SEQUENCES = [
    pytest.param([300, 301.7, 302], TypeError, "list of ints", id="float-in-the-middle"),
    pytest.param([300, 301.0], TypeError, "list of ints", id="integral-float"),
    pytest.param([300, True], TypeError, "bool", id="bool-after-int"),
    pytest.param([True, 300], TypeError, "bool", id="bool-first"),
    pytest.param([300, False, 301], TypeError, "bool", id="false-in-the-middle"),
    pytest.param([300, np.bool_(True)], TypeError, "bool", id="numpy-bool"),
    pytest.param([300, "301"], TypeError, "list of ints", id="numeric-string"),
    pytest.param("300 301", TypeError, "list of ints", id="a-string"),
    pytest.param([300, None], TypeError, "list of ints", id="none"),
    pytest.param([[300, 301], [302]], TypeError, "list of ints", id="ragged"),
    pytest.param([[300, 301], [302, 303]], ValueError, "1D", id="2d"),
    pytest.param(np.array([300.5, 301.0]), TypeError, "float64", id="numpy-float"),
    pytest.param(torch.tensor([300.0, 301.0]), TypeError, "float32", id="torch-float"),
    pytest.param(torch.tensor([True, False]), TypeError, "bool", id="torch-bool"),
    pytest.param([300, 1024], ValueError, "len(tokenizer)", id="past-vocab"),
    pytest.param([-1, 300], ValueError, "len(tokenizer)", id="negative"),
    pytest.param([2**64, 300], TypeError, "list of ints", id="huge-int"),
]

COLLATORS = {
    "causal": lambda tok: DataCollatorForCausalLM(tok),
    "causal-packing": lambda tok: DataCollatorForCausalLM(tok, max_length=8, packing=True),
    "masked": lambda tok: DataCollatorForMaskedLM(tok, seed=0),
    "span": lambda tok: DataCollatorForSpanCorruption(tok, seed=0),
    "ul2": lambda tok: DataCollatorForUL2(tok, seed=0),
    "bart": lambda tok: DataCollatorForTextInfilling(tok, seed=0),
    "fim": lambda tok: DataCollatorForFillInTheMiddle(tok, fim_rate=1.0, fim_level="token", seed=0),
}


@pytest.mark.parametrize("name", sorted(COLLATORS))
@pytest.mark.parametrize("bad, error, word", BAD_ID_SEQUENCES)
def test_every_collator_refuses_bad_ids_at_entry(tokenizer, name, bad, error, word):
    collator = COLLATORS[name](tokenizer)
    with pytest.raises(error, match=word.replace("(", r"\(").replace(")", r"\)")) as caught:
        collator([{"input_ids": list(IDS)}, {"input_ids": bad}])
    assert "input_ids" in str(caught.value)  # the field is named


@pytest.mark.parametrize("name", sorted(COLLATORS))
def test_every_collator_names_the_feature_of_a_bool(tokenizer, name):
    with pytest.raises(TypeError, match="feature 1: input_ids .*bool at position 2"):
        COLLATORS[name](tokenizer)([{"input_ids": list(IDS)}, {"input_ids": [300, 301, True, 302]}])


@pytest.mark.parametrize("name", sorted(COLLATORS))
@pytest.mark.parametrize(
    "as_ids",
    [
        pytest.param(lambda ids: np.array(ids, dtype=np.int32), id="numpy-int32"),
        pytest.param(lambda ids: np.array(ids, dtype=np.uint16), id="numpy-uint16"),
        pytest.param(lambda ids: torch.tensor(ids, dtype=torch.int16), id="torch-int16"),
        pytest.param(lambda ids: [np.int64(i) for i in ids], id="list-of-numpy-ints"),
        pytest.param(tuple, id="tuple"),
    ],
)
def test_integer_dtypes_of_numpy_and_torch_give_the_same_batch_as_lists(tokenizer, name, as_ids):
    expected = COLLATORS[name](tokenizer)([{"input_ids": list(IDS), "idx": 0}, {"input_ids": IDS[:3], "idx": 1}])
    got = COLLATORS[name](tokenizer)([{"input_ids": as_ids(IDS), "idx": 0}, {"input_ids": as_ids(IDS[:3]), "idx": 1}])
    assert sorted(got) == sorted(expected)
    for key, value in expected.items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(got[key], value), key


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    docs=st.lists(st.lists(st.integers(200, 1023), min_size=2, max_size=12), min_size=1, max_size=4),
    data=st.data(),
)
def test_a_non_int_anywhere_is_named_by_feature(tokenizer, docs, data):
    feature = data.draw(st.integers(0, len(docs) - 1))
    position = data.draw(st.integers(0, len(docs[feature]) - 1))
    bad = data.draw(st.sampled_from([True, False, 0.5, float(docs[feature][position]), "7", None]))
    docs[feature][position] = bad
    collator = data.draw(st.sampled_from(["causal", "masked", "span"]))
    with pytest.raises(TypeError, match=f"feature {feature}: input_ids"):
        COLLATORS[collator](tokenizer)([{"input_ids": d} for d in docs])


# --------------------------------------------------------------------------- causal collator
@pytest.mark.parametrize(
    "kwargs, error, word",
    [
        ({"max_length": 1}, ValueError, ">= 2"),
        ({"max_length": 0}, ValueError, ">= 2"),
        ({"max_length": -8}, ValueError, ">= 2"),
        ({"max_length": 8.0}, TypeError, "max_length"),
        ({"max_length": "8"}, TypeError, "max_length"),
        ({"max_length": True}, TypeError, "max_length"),
        ({"packing": True}, ValueError, "needs max_length"),
        ({"packing": "False", "max_length": 8}, TypeError, "packing"),
        ({"packing": 1, "max_length": 8}, TypeError, "packing"),
        ({"pad_to_multiple_of": 0}, ValueError, "pad_to_multiple_of"),
        ({"pad_to_multiple_of": 2.5}, TypeError, "pad_to_multiple_of"),
        ({"add_bos": "yes"}, TypeError, "add_bos"),
        ({"add_eos": 1}, TypeError, "add_eos"),
        ({"return_shift_labels": None}, TypeError, "return_shift_labels"),
        ({"attn_implementation": "flash"}, ValueError, "attn_implementation"),
        ({"return_tensors": "np"}, ValueError, "return_tensors"),
    ],
)
def test_causal_arguments(tokenizer, kwargs, error, word):
    with pytest.raises(error, match=word):
        DataCollatorForCausalLM(tokenizer, **kwargs)


@pytest.mark.parametrize(
    "features, error, word",
    [
        ([], ValueError, "empty batch"),
        ([IDS], TypeError, "must be a dict"),
        ([{"labels": IDS}], ValueError, "no 'input_ids'"),
        ([{"input_ids": []}], ValueError, "empty"),
        ([{"input_ids": IDS, "labels": [300, 301.5, 302, 303]}], TypeError, "labels"),
        ([{"input_ids": IDS, "labels": [300, True, 302, 303]}], TypeError, "labels .*bool"),
        ([{"input_ids": IDS, "labels": [300, 301]}], ValueError, "labels has length 2"),
        ([{"input_ids": IDS, "labels": [300, 301, 302, 5000]}], ValueError, "labels must be -100 or in"),
        ([{"input_ids": IDS, "labels": [-100, -7, 302, 303]}], ValueError, "labels must be -100 or in"),
        ([{"input_ids": IDS, "attention_mask": [1, 1]}], ValueError, "attention_mask has length 2"),
        ([{"input_ids": IDS, "attention_mask": [1.0, 1.0, 1.0, 1.0]}], TypeError, "attention_mask"),
        ([{"input_ids": IDS, "position_ids": [0, 1, 5, 6]}], ValueError, "restart at 0"),
        ([{"input_ids": IDS, "seq_lengths": [2, 1]}], ValueError, "seq_lengths sum"),
        ([{"input_ids": IDS, "seq_lengths": [2.0, 2.0]}], TypeError, "seq_lengths"),
    ],
)
def test_causal_features(tokenizer, features, error, word):
    with pytest.raises(error, match=word):
        DataCollatorForCausalLM(tokenizer, max_length=8)(features)


@pytest.mark.parametrize("packing", [False, True])
@pytest.mark.parametrize(
    "features",
    [
        pytest.param([{"input_ids": [300]}, {"input_ids": [301]}], id="single-token-documents"),
        pytest.param([{"input_ids": IDS, "labels": [-100] * 4}], id="every-label-ignored"),
        pytest.param([{"input_ids": IDS, "labels": [300, -100, -100, -100]}], id="only-the-unpredictable-first"),
    ],
)
def test_causal_batch_without_a_target_is_refused(tokenizer, features, packing):
    collator = DataCollatorForCausalLM(tokenizer, max_length=8 if packing else None, packing=packing)
    with pytest.raises(ValueError, match="no target"):
        collator(features)


def test_causal_smallest_rows_train_every_pair(tokenizer):
    batch = DataCollatorForCausalLM(tokenizer, max_length=2, packing=True)([{"input_ids": IDS}])
    assert batch["input_ids"].tolist() == [[300, 301], [302, 303]]
    assert batch["labels"].tolist() == [[-100, 301], [-100, 303]]
    assert batch["shift_labels"].tolist() == [[301, -100], [303, -100]]


def test_causal_bool_attention_mask_is_a_mask(tokenizer):
    plain = DataCollatorForCausalLM(tokenizer)([{"input_ids": IDS}])
    masked = DataCollatorForCausalLM(tokenizer)([{"input_ids": IDS, "attention_mask": [True] * 4}])
    assert all(torch.equal(plain[k], masked[k]) for k in plain)


def test_causal_numpy_max_length_is_an_int(tokenizer):
    assert DataCollatorForCausalLM(tokenizer, max_length=np.int64(8)).max_length == 8


# --------------------------------------------------------------------------- masked collator
@pytest.mark.parametrize(
    "kwargs, error, word",
    [
        ({"mlm_probability": 0.0}, ValueError, "mlm_probability"),
        ({"mlm_probability": 0}, ValueError, "mlm_probability"),
        ({"mlm_probability": -0.1}, ValueError, "mlm_probability"),
        ({"mlm_probability": 1.5}, ValueError, "mlm_probability"),
        ({"mlm_probability": math.nan}, ValueError, "mlm_probability"),
        ({"mlm_probability": "0.15"}, TypeError, "mlm_probability"),
        ({"mlm_probability": True}, TypeError, "mlm_probability"),
        ({"mask_replace_prob": 1.1}, ValueError, "mask_replace_prob"),
        ({"random_replace_prob": math.inf}, ValueError, "random_replace_prob"),
        ({"mask_replace_prob": 0.8, "random_replace_prob": 0.3}, ValueError, "must not exceed 1"),
        ({"whole_word_mask": "yes"}, TypeError, "whole_word_mask"),
        ({"max_length": 0}, ValueError, "max_length"),
        ({"max_length": 64.0}, TypeError, "max_length"),
        ({"pad_to_multiple_of": -8}, ValueError, "pad_to_multiple_of"),
        ({"seed": -1}, ValueError, "seed"),
        ({"seed": 1.5}, ValueError, "seed"),
        ({"seed": "0"}, TypeError, "seed"),
        ({"epoch": -1}, ValueError, "epoch"),
        ({"position_ids_start": -1}, ValueError, "position_ids_start"),
        ({"mask_dtype": "int8"}, ValueError, "mask_dtype"),
    ],
)
def test_masked_arguments(tokenizer, kwargs, error, word):
    with pytest.raises(error, match=word):
        DataCollatorForMaskedLM(tokenizer, **kwargs)


@pytest.mark.parametrize("epoch, error", [(-1, ValueError), (1.5, ValueError), (True, TypeError), ("2", TypeError)])
def test_masked_set_epoch(tokenizer, epoch, error):
    with pytest.raises(error, match="epoch"):
        DataCollatorForMaskedLM(tokenizer, seed=0).set_epoch(epoch)


def test_masked_batch_of_special_tokens_only_is_refused(tokenizer):
    with pytest.raises(ValueError, match="no token of this batch can be selected"):
        DataCollatorForMaskedLM(tokenizer, seed=0)([[tokenizer.bos_token_id, tokenizer.eos_token_id]])


def test_masked_special_tokens_mask_marking_everything_is_refused(tokenizer):
    with pytest.raises(ValueError, match="no token"):
        DataCollatorForMaskedLM(tokenizer, seed=0)([{"input_ids": IDS, "special_tokens_mask": [True] * 4}])


@pytest.mark.parametrize(
    "extra, error, word",
    [
        ({"token_type_ids": [0, 0, 1.0, 1]}, TypeError, "token_type_ids"),
        ({"token_type_ids": [0, 1]}, ValueError, "token_type_ids"),
        ({"special_tokens_mask": ["0", "0", "0", "0"]}, TypeError, "special_tokens_mask"),
        ({"attention_mask": [1, 1, 1, 0]}, ValueError, "padded"),
        ({"labels": IDS}, ValueError, "labels"),
    ],
)
def test_masked_per_token_extras(tokenizer, extra, error, word):
    with pytest.raises(error, match=word):
        DataCollatorForMaskedLM(tokenizer, seed=0)([{"input_ids": IDS, **extra}])


def test_masked_select_everything_keeps_the_ids_as_labels(tokenizer):
    collator = DataCollatorForMaskedLM(
        tokenizer, mlm_probability=np.float32(1.0), mask_replace_prob=0.0, random_replace_prob=0.0, seed=0
    )
    batch = collator([[tokenizer.bos_token_id, *IDS]])
    assert batch["input_ids"].tolist() == [[tokenizer.bos_token_id, *IDS]]
    assert batch["labels"].tolist() == [[-100, *IDS]]


# --------------------------------------------------------------------------- span corruption
@pytest.mark.parametrize("packing", [False, True])
@pytest.mark.parametrize("input_length, error", [(2, ValueError), (1, ValueError), (0, ValueError), (2.0, TypeError)])
def test_span_input_length_below_what_a_noise_span_needs(tokenizer, input_length, error, packing):
    with pytest.raises(error, match=r"input_length must be an int >= 3"):
        DataCollatorForSpanCorruption(tokenizer, input_length=input_length, packing=packing)


def test_span_shortest_input_length_trains(tokenizer):
    batch = DataCollatorForSpanCorruption(tokenizer, input_length=3, packing=True, seed=0)([{"input_ids": IDS}])
    assert batch["input_ids"].shape[1] == 3
    assert ((batch["labels"] != -100).sum(1) > 0).all()  # every row has a target


@pytest.mark.parametrize(
    "kwargs, error, word",
    [
        ({"noise_density": 0.0}, ValueError, "noise_density"),
        ({"noise_density": 1.0}, ValueError, "noise_density"),
        ({"noise_density": math.nan}, ValueError, "noise_density"),
        ({"noise_density": "0.15"}, TypeError, "noise_density"),
        ({"mean_noise_span_length": 0.5}, ValueError, "mean_noise_span_length"),
        ({"mean_noise_span_length": math.nan}, ValueError, "mean_noise_span_length"),
        ({"mean_noise_span_length": math.inf}, ValueError, "mean_noise_span_length"),
        ({"decoder_start_token_id": 0.5}, TypeError, "decoder_start_token_id"),
        ({"decoder_start_token_id": -1}, ValueError, "decoder_start_token_id"),
        ({"decoder_start_token_id": 1024}, ValueError, "decoder_start_token_id"),
        ({"packing": "yes", "input_length": 16}, TypeError, "packing"),
        ({"packing": True}, ValueError, "needs input_length"),
        ({"pad_to_multiple_of": 0}, ValueError, "pad_to_multiple_of"),
        ({"seed": -3}, ValueError, "seed"),
    ],
)
def test_span_arguments(tokenizer, kwargs, error, word):
    with pytest.raises(error, match=word):
        DataCollatorForSpanCorruption(tokenizer, **kwargs)


def test_span_packed_batch_of_single_tokens_is_refused(tokenizer):
    collator = DataCollatorForSpanCorruption(tokenizer, input_length=16, packing=True, seed=0)
    with pytest.raises(ValueError, match="no target"):
        collator([{"input_ids": [300]}, {"input_ids": [301]}])


@pytest.mark.parametrize("epoch, error", [(-1, ValueError), (0.5, ValueError), (False, TypeError)])
def test_span_set_epoch(tokenizer, epoch, error):
    with pytest.raises(error, match="epoch"):
        DataCollatorForSpanCorruption(tokenizer, seed=0).set_epoch(epoch)


@pytest.mark.parametrize(
    "args, error",
    [
        ((1, 0.15, 3.0), ValueError),
        ((512.0, 0.15, 3.0), TypeError),
        ((True, 0.15, 3.0), TypeError),
        ((512, 1.5, 3.0), ValueError),
        ((512, 0.15, 0.0), ValueError),
    ],
)
def test_compute_input_and_target_lengths_refuses(args, error):
    with pytest.raises(error):
        compute_input_and_target_lengths(*args)


def test_compute_input_and_target_lengths_is_t5s():
    assert compute_input_and_target_lengths(512, 0.15, 3.0) == (568, 114)
    assert compute_input_and_target_lengths(np.int64(512), np.float32(0.5), 3) == compute_input_and_target_lengths(
        512, 0.5, 3.0
    )


# --------------------------------------------------------------------------- UL2 and BART
@pytest.mark.parametrize(
    "make, error, word",
    [
        (lambda tok: DataCollatorForUL2(tok, input_length=3), ValueError, "input_length"),
        (lambda tok: DataCollatorForUL2(tok, input_length=64.0), TypeError, "input_length"),
        (lambda tok: DataCollatorForUL2(tok, decoder_only="yes"), TypeError, "decoder_only"),
        (lambda tok: DataCollatorForUL2(tok, denoisers=[]), TypeError, "denoisers"),
        (lambda tok: Denoiser("[R]", 3.0, 1.0), ValueError, "noise_density"),
        (lambda tok: Denoiser("[S]", None, 0.0), ValueError, "noise_density"),
        (lambda tok: Denoiser("[R]", 3.0, 0.15, weight=-1.0), ValueError, "weight"),
        (lambda tok: Denoiser("[R]", 3.0, 0.15, weight=math.nan), ValueError, "weight"),
        (lambda tok: DataCollatorForTextInfilling(tok, mask_ratio=0.0), ValueError, "mask_ratio"),
        (lambda tok: DataCollatorForTextInfilling(tok, mask_ratio=math.nan), ValueError, "mask_ratio"),
        (lambda tok: DataCollatorForTextInfilling(tok, mask_ratio="0.3"), TypeError, "mask_ratio"),
        (lambda tok: DataCollatorForTextInfilling(tok, poisson_rate=0.0), ValueError, "poisson_rate"),
        (lambda tok: DataCollatorForTextInfilling(tok, poisson_rate=math.inf), ValueError, "poisson_rate"),
        (
            lambda tok: DataCollatorForTextInfilling(tok, permute_sentences=True, sentence_end_token_ids=[13.0]),
            TypeError,
            "sentence_end_token_ids",
        ),
        (
            lambda tok: DataCollatorForTextInfilling(tok, permute_sentences=True, sentence_end_token_ids=[4096]),
            ValueError,
            "sentence_end_token_ids",
        ),
        (lambda tok: DataCollatorForTextInfilling(tok, permute_sentences="no"), TypeError, "permute_sentences"),
    ],
)
def test_ul2_and_bart_arguments(tokenizer, make, error, word):
    with pytest.raises(error, match=word):
        make(tokenizer)


@pytest.mark.parametrize("cls", [DataCollatorForUL2, DataCollatorForTextInfilling])
@pytest.mark.parametrize("epoch, error", [(-2, ValueError), (2.5, ValueError)])
def test_ul2_and_bart_set_epoch(tokenizer, cls, epoch, error):
    with pytest.raises(error, match="epoch"):
        cls(tokenizer, seed=0).set_epoch(epoch)


@pytest.mark.parametrize("index, error", [(2.7, ValueError), ("3", TypeError), (True, TypeError)])
def test_example_index_must_be_an_int(tokenizer, index, error):
    with pytest.raises(error, match="idx"):
        DataCollatorForSpanCorruption(tokenizer, seed=0)([{"input_ids": IDS, "idx": index}])


@FIXTURE_OK
@given(seed=st.integers(0, 2**32), n=st.integers(2, 40))
def test_span_reconstructs_any_valid_document(tokenizer, seed, n):
    doc = [200 + (7 * i) % 800 for i in range(n)]
    batch = DataCollatorForSpanCorruption(tokenizer, seed=seed)([{"input_ids": np.array(doc, dtype=np.int32)}])
    sentinels = {tokenizer.convert_tokens_to_ids(f"<extra_id_{i}>"): i for i in range(100)}
    labels = [t for t in batch["labels"][0].tolist() if t != -100][:-1]  # drop EOS
    spans, current = {}, None
    for token in labels:
        if token in sentinels:
            current = sentinels[token]
            spans[current] = []
        else:
            spans[current].append(token)
    rebuilt = []
    for token in batch["input_ids"][0][batch["attention_mask"][0].bool()].tolist()[:-1]:
        rebuilt.extend(spans[sentinels[token]] if token in sentinels else [token])
    assert rebuilt == doc
