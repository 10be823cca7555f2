"""Hostile inputs to ``DataCollatorForMaskedLM`` and its first consumers (stock encoders, ELECTRA).

Issue 34's examples: a whole document collated for a model of fewer positions is refused at the
collator (it failed deep in BERT's embeddings), and ELECTRA takes the collator's sparse
``masked_positions`` (it failed with an unexpected keyword argument). Then what
``tests/collators/test_collators_inputs.py`` and ``test_masked.py`` do not cover: the model's limits
(positions, RoBERTa's offset, vocabulary, token types), the feature container, malformed per-token
extras, packing-only arguments without packing, tokenizers without a mask token, and the sparse
indices with padding, chunking and packing.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from datasets import Dataset
from transformers import (
    ElectraConfig,
    PreTrainedTokenizerFast,
    RobertaForMaskedLM,
    TrainingArguments,
)

from hf_lmobj.collators.masked import DataCollatorForMaskedLM
from hf_lmobj.models.electra import ElectraPretrainingModel
from hf_lmobj.packing import pack_dataset
from hf_lmobj.trainer.auxiliary import AuxiliaryObjectiveTrainer
from tests.testing_utils import tiny_bert

IDS = [300, 301, 302, 303]  # ordinary ids of the 1024-token test tokenizer


@pytest.fixture(scope="module")
def bert128(tokenizer):
    return tiny_bert(tokenizer, positions=128, layers=1).eval()


@pytest.fixture(scope="module")
def roberta66(tokenizer):
    """A RoBERTa of 66 positions numbered from pad_token_id + 1 = 1 (65 usable), one token type (as roberta-base)."""
    assert tokenizer.pad_token_id == 0
    return tiny_bert(tokenizer, positions=66, layers=1, cls=RobertaForMaskedLM, type_vocab_size=1).eval()


@pytest.fixture(scope="module")
def electra(tokenizer):
    config = ElectraConfig(vocab_size=len(tokenizer), embedding_size=32, hidden_size=32, num_hidden_layers=1,
                           num_attention_heads=2, intermediate_size=32, max_position_embeddings=64,
                           pad_token_id=tokenizer.pad_token_id)  # fmt: skip
    return ElectraPretrainingModel.from_config(config, generator_fraction=0.25)


def _wrapped(tokenizer, **kwargs) -> PreTrainedTokenizerFast:
    """The test tokenizer's vocabulary under another wrapper (mask / pad tokens, model_max_length as given)."""
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer.backend_tokenizer, **kwargs)


def _forward(model, batch: dict) -> torch.Tensor:
    with torch.no_grad():
        return model(**{k: v for k, v in batch.items() if k != "masked_positions"}).logits


# --------------------------------------------------------------------------- the model's position limit
def test_issue_whole_document_past_the_model_positions_is_refused_at_the_collator(tokenizer, bert128):
    collator = DataCollatorForMaskedLM(tokenizer, model=bert128, seed=0)
    with pytest.raises(ValueError, match=r"feature 1 has 500 tokens but BertForMaskedLM reads at most 128") as caught:
        collator([IDS, [300 + i % 500 for i in range(500)]])
    assert "max_length=128" in str(caught.value) and "packing=True" in str(caught.value)
    assert "pack_dataset" not in str(caught.value)  # causal rows: this collator refuses them


@pytest.mark.parametrize("packing", [False, True])
def test_pack_dataset_rows_are_refused_with_the_collators_own_fix(tokenizer, packing):
    documents = Dataset.from_dict({"input_ids": [[300 + i for i in range(n)] for n in (5, 4, 3)]})
    rows = pack_dataset(documents, max_length=12)  # one row, documents numbered in attention_mask
    collator = DataCollatorForMaskedLM(tokenizer, max_length=12, packing=packing, seed=0)
    feature = {"input_ids": rows[0]["input_ids"], "attention_mask": rows[0]["attention_mask"]}
    with pytest.raises(ValueError, match=r"attention_mask must hold 0 / 1, got \[2, 3, 4\].*pack_dataset") as caught:
        collator([feature])
    assert "max_length=N" in str(caught.value) and "packing=True" in str(caught.value)
    assert collator([{"input_ids": ids} for ids in documents["input_ids"]])["input_ids"].shape == (
        (1, 12) if packing else (3, 5)
    )  # the advice works: the documents themselves, split / packed by this collator


def test_max_length_at_the_limit_splits_the_document_and_the_model_runs(tokenizer, bert128):
    doc = [300 + i % 500 for i in range(500)]
    batch = DataCollatorForMaskedLM(tokenizer, model=bert128, max_length=128, seed=0)([doc])
    assert batch["input_ids"].shape == (4, 128)
    assert batch["attention_mask"].sum().item() == 500  # nothing truncated
    assert _forward(bert128, batch).shape == (4, 128, len(tokenizer))


def test_a_feature_exactly_at_the_limit_runs(tokenizer, bert128):
    batch = DataCollatorForMaskedLM(tokenizer, model=bert128, seed=0)([[300] * 128, IDS])
    assert batch["input_ids"].shape == (2, 128) and _forward(bert128, batch).shape[1] == 128


def test_roberta_loses_its_padding_offset(tokenizer, roberta66):
    collator = DataCollatorForMaskedLM(tokenizer, model=roberta66, seed=0)
    assert _forward(roberta66, collator([[300] * 65])).shape[1] == 65
    with pytest.raises(ValueError, match="feature 0 has 66 tokens but RobertaForMaskedLM reads at most 65"):
        collator([[300] * 66])


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"max_length": 129}, r"max_length=129 exceeds the 128 positions BertForMaskedLM reads"),
        ({"max_length": 100, "pad_to_multiple_of": 64}, r"max_length=100 rounded up to 128 by pad_to_multiple_of=64"),
    ],
)
def test_row_lengths_past_the_model_are_refused_at_construction(tokenizer, kwargs, message):
    model = tiny_bert(tokenizer, positions=128 if "pad_to_multiple_of" not in kwargs else 100, layers=1)
    with pytest.raises(ValueError, match=message):
        DataCollatorForMaskedLM(tokenizer, model=model, **kwargs)


def test_pad_to_multiple_of_past_the_model_is_refused_at_the_call(tokenizer):
    collator = DataCollatorForMaskedLM(tokenizer, model=tiny_bert(tokenizer, positions=100, layers=1),
                                       pad_to_multiple_of=64, seed=0)  # fmt: skip
    assert collator([[300] * 60])["input_ids"].shape == (1, 64)
    with pytest.raises(ValueError, match="pad_to_multiple_of=64 rounds rows of 70 tokens up to 128, past the 100"):
        collator([[300] * 70])


def test_without_a_model_the_tokenizers_real_limit_names_the_fix(tokenizer):
    limited = _wrapped(tokenizer, pad_token="<pad>", mask_token="<mask>", model_max_length=32)
    with pytest.raises(
        ValueError, match=r"feature 0 has 40 tokens but the tokenizer \(model_max_length=32\)"
    ) as caught:
        DataCollatorForMaskedLM(limited, seed=0)([[300] * 40])
    assert "max_length=32" in str(caught.value) and "model=" in str(caught.value)
    # an explicit max_length is the user's row length: chunks of 40, not a refusal
    assert DataCollatorForMaskedLM(limited, max_length=40, seed=0)([[300] * 80])["input_ids"].shape == (2, 40)


def test_the_1e30_placeholder_is_no_limit(tokenizer):
    unlimited = _wrapped(tokenizer, pad_token="<pad>", mask_token="<mask>")
    assert unlimited.model_max_length > 1e29
    assert DataCollatorForMaskedLM(unlimited, seed=0)([[300] * 3000])["input_ids"].shape == (1, 3000)


def test_electra_pair_limits_rows_by_its_position_table(tokenizer, electra):
    with pytest.raises(ValueError, match="feature 0 has 65 tokens but ElectraPretrainingModel reads at most 64"):
        DataCollatorForMaskedLM(tokenizer, model=electra, seed=0)([[300] * 65])


def test_packing_takes_roberta_first_position_from_the_model(tokenizer, roberta66):
    derived = DataCollatorForMaskedLM(tokenizer, model=roberta66, packing=True, max_length=32, seed=0)
    assert derived.position_ids_start == tokenizer.pad_token_id + 1
    explicit = DataCollatorForMaskedLM(tokenizer, packing=True, max_length=32, seed=0, position_ids_start=1,
                                       attn_implementation=derived.attn_implementation)  # fmt: skip
    docs = [[300] * 20, [301] * 12, [302] * 30]
    ours, theirs = derived(docs), explicit(docs)
    assert ours["position_ids"].max().item() <= 65  # inside RoBERTa's 66-row table
    for key in ("input_ids", "labels", "position_ids", "attention_mask"):
        assert torch.equal(ours[key], theirs[key]), key
    with pytest.raises(ValueError, match="position_ids_start=0 but RobertaForMaskedLM numbers positions from 1"):
        DataCollatorForMaskedLM(tokenizer, model=roberta66, packing=True, max_length=32, position_ids_start=0)


def test_a_tokenizer_larger_than_the_model_embedding_is_refused(tokenizer):
    small = tiny_bert(vocab_size=len(tokenizer) - 24, positions=64, layers=1)
    with pytest.raises(ValueError, match=r"1024 tokens but BertForMaskedLM's input embedding has 1000 rows.*resize"):
        DataCollatorForMaskedLM(tokenizer, model=small)


@pytest.mark.parametrize("model_name, bad_type", [("bert", 2), ("roberta", 1)])
def test_token_types_past_the_model_vocabulary_are_refused(tokenizer, bert128, roberta66, model_name, bad_type):
    model = bert128 if model_name == "bert" else roberta66
    collator = DataCollatorForMaskedLM(tokenizer, model=model, seed=0)
    ok = collator([{"input_ids": IDS, "token_type_ids": [0] * 4}])
    assert ok["token_type_ids"].tolist() == [[0, 0, 0, 0]]
    with pytest.raises(ValueError, match=f"feature 1: token_type_ids must lie in \\[0, type_vocab_size={bad_type}\\)"):
        collator(
            [{"input_ids": IDS, "token_type_ids": [0] * 4}, {"input_ids": IDS, "token_type_ids": [0, bad_type, 0, 0]}]
        )


@pytest.mark.parametrize("model", ["bert-base-uncased", {"max_position_embeddings": 8}])
def test_model_must_be_a_torch_module(tokenizer, model):
    with pytest.raises(TypeError, match="model must be the torch model"):
        DataCollatorForMaskedLM(tokenizer, model=model)


# --------------------------------------------------------------------------- ELECTRA and the sparse indices
def test_issue_electra_takes_the_collators_sparse_indices(tokenizer, electra):
    electra.eval()  # no dropout: the two forwards must be comparable
    docs = [[300 + i for i in range(n)] for n in (30, 9, 17)]
    sparse = DataCollatorForMaskedLM(tokenizer, seed=0, mlm_probability=0.3, return_sparse_indices=True)(docs)
    dense = DataCollatorForMaskedLM(tokenizer, seed=0, mlm_probability=0.3)(docs)
    with torch.no_grad():
        got = electra(**sparse, sampling_seed=3)
        expected = electra(**dense, sampling_seed=3)
    assert got.generator_logits.shape[0] == sparse["masked_positions"].numel() > 0
    for key in ("generator_logits", "mlm_targets", "replaced_input_ids", "discriminator_logits"):
        assert torch.equal(got[key], expected[key]), key


def test_electra_trains_and_evaluates_on_sparse_batches(tokenizer, electra, tmp_path, one_torch_thread):
    rows = [{"input_ids": [300 + (7 * i + j) % 600 for j in range(12 + i)]} for i in range(8)]
    args = TrainingArguments(output_dir=str(tmp_path), per_device_train_batch_size=4, per_device_eval_batch_size=4,
                             max_steps=2, report_to=[], save_strategy="no", use_cpu=True, disable_tqdm=True,
                             logging_strategy="no")  # fmt: skip
    collator = DataCollatorForMaskedLM(tokenizer, seed=0, return_sparse_indices=True)
    trainer = AuxiliaryObjectiveTrainer(model=electra, args=args, data_collator=collator, train_dataset=rows,
                                        eval_dataset=rows[:4])  # fmt: skip
    assert np.isfinite(trainer.train().training_loss)
    metrics = trainer.evaluate()
    assert np.isfinite(metrics["eval_loss"]) and 0.0 <= metrics["eval_rtd_accuracy"] <= 1.0


@pytest.mark.parametrize(
    "tamper, error, message",
    [
        pytest.param(lambda p: p[1:], ValueError, "must list the .* flat indices of labels != -100", id="one-dropped"),
        pytest.param(lambda p: p.flip(0), ValueError, "in ascending order", id="reordered"),
        pytest.param(lambda p: p.float(), TypeError, "integer flat indices", id="float"),
        pytest.param(lambda p: p[None], ValueError, "must be 1D", id="2d"),
        pytest.param(lambda p: p.tolist(), TypeError, "1D integer tensor", id="a-list"),
    ],
)
def test_electra_refuses_tampered_sparse_indices(tokenizer, electra, tamper, error, message):
    batch = DataCollatorForMaskedLM(tokenizer, seed=0, mlm_probability=0.5, return_sparse_indices=True)(
        [[300 + i for i in range(20)], [400 + i for i in range(9)]]
    )
    batch["masked_positions"] = tamper(batch["masked_positions"])
    with pytest.raises(error, match=message):
        electra(**batch, sampling_seed=0)


@pytest.mark.parametrize(
    "kwargs",
    [
        pytest.param({"pad_to_multiple_of": 16}, id="padding"),
        pytest.param({"max_length": 8, "pad_to_multiple_of": 3}, id="chunked"),
        pytest.param({"packing": True, "max_length": 16}, id="packed"),
    ],
)
def test_sparse_indices_point_at_the_selected_real_tokens_only(tokenizer, kwargs):
    docs = [[300 + i for i in range(n)] for n in (13, 2, 9, 5)]
    collator = DataCollatorForMaskedLM(tokenizer, seed=1, mlm_probability=0.5, mask_replace_prob=0.0,
                                       random_replace_prob=0.0, return_sparse_indices=True, **kwargs)  # fmt: skip
    batch = collator(docs)  # inputs left as they are: the labels must be the tokens at the indices
    positions, labels, inputs = batch["masked_positions"], batch["labels"].view(-1), batch["input_ids"].view(-1)
    assert positions.dtype == torch.int64 and positions.numel() > 0
    assert torch.equal(positions, (labels != -100).nonzero().flatten())
    assert torch.equal(labels[positions], inputs[positions])
    assert not (inputs[positions] == tokenizer.pad_token_id).any()
    assert sorted(inputs[inputs != tokenizer.pad_token_id].tolist()) == sorted(t for d in docs for t in d)


# --------------------------------------------------------------------------- the feature container
@pytest.mark.parametrize(
    "features, word",
    [
        pytest.param({"input_ids": IDS}, "got a dict; wrap a single feature", id="one-dict"),
        pytest.param("300 301", "got a str", id="a-string"),
        pytest.param(300, "got a int", id="an-int"),
    ],
)
def test_features_must_be_a_list(tokenizer, features, word):
    with pytest.raises(TypeError, match=word):
        DataCollatorForMaskedLM(tokenizer, seed=0)(features)


def test_a_generator_of_features_collates_like_a_list(tokenizer):
    collator = DataCollatorForMaskedLM(tokenizer, seed=0)
    got = collator(f for f in [{"input_ids": IDS}, {"input_ids": IDS[:2]}])
    expected = collator([{"input_ids": IDS}, {"input_ids": IDS[:2]}])
    assert all(torch.equal(got[k], expected[k]) for k in expected)


@pytest.mark.parametrize("ids", [None, 300, torch.tensor(300)], ids=["none", "an-int", "a-0d-tensor"])
def test_input_ids_that_are_no_sequence(tokenizer, ids):
    with pytest.raises(TypeError, match="feature 1: input_ids must be a 1D list of ints"):
        DataCollatorForMaskedLM(tokenizer, seed=0)([{"input_ids": IDS}, {"input_ids": ids}])


# --------------------------------------------------------------------------- per-token extras
@pytest.mark.parametrize(
    "extra, error, message",
    [
        ({"attention_mask": [1, 1]}, ValueError, "attention_mask has 2 entries but input_ids has 4"),
        (
            {"attention_mask": [1, 2, 1, 1]},
            ValueError,
            "attention_mask must hold 0 / 1, got \\[1, 2\\]; values above 1",
        ),
        ({"attention_mask": [1, -1, 1, 1]}, ValueError, r"attention_mask must hold 0 / 1, got \[-1, 1\]$"),
        ({"attention_mask": [1.0, 1.0, 1.0, 1.0]}, TypeError, "attention_mask must be a 1D list of ints"),
        ({"attention_mask": "1111"}, TypeError, "attention_mask"),
        ({"attention_mask": torch.tensor([1, 1, 1, 0])}, ValueError, "feature 0 is padded"),
        ({"word_ids": ["a", "b", "c", "d"]}, TypeError, "word_ids must hold ints .* got a str"),
        ({"word_ids": [0.0, 0.5, 1.0, 2.0]}, TypeError, "word_ids must hold ints .* got a float"),
        ({"word_ids": [[0], [1], [2], [3]]}, TypeError, "word_ids must hold ints .* got a list"),
        ({"word_ids": [True, 0, 1, 1]}, TypeError, "word_ids must hold ints .* got a bool"),
        ({"word_ids": [-1, -1, 0, 1]}, ValueError, "word_ids must be >= 0"),
        ({"word_ids": np.zeros((4, 1), dtype=np.int64)}, TypeError, "word_ids must be one flat sequence"),
        ({"word_ids": 4}, TypeError, "feature 0: word_ids must be a 1D list"),
        ({"special_tokens_mask": [2, 0, 0, 0]}, ValueError, "special_tokens_mask must hold 0 / 1"),
        ({"special_tokens_mask": [0, -1, 0, 0]}, ValueError, "special_tokens_mask must hold 0 / 1"),
        ({"special_tokens_mask": None}, TypeError, "feature 0: special_tokens_mask must be a 1D list"),
        ({"token_type_ids": [0, -1, 0, 0]}, ValueError, "token_type_ids must hold token type ids >= 0"),
        ({"token_type_ids": None}, TypeError, "feature 0: token_type_ids must be a 1D list"),
    ],
)
def test_malformed_per_token_extras_are_named(tokenizer, extra, error, message):
    with pytest.raises(error, match=message):
        DataCollatorForMaskedLM(tokenizer, whole_word_mask=True, seed=0)([{"input_ids": IDS, **extra}])


def test_a_short_extra_names_its_feature(tokenizer):
    features = [{"input_ids": IDS, "word_ids": [0, 1, 2, 3]}, {"input_ids": IDS, "word_ids": [0, 1]}]
    with pytest.raises(ValueError, match="feature 1: 'word_ids' has 2 entries but input_ids has 4"):
        DataCollatorForMaskedLM(tokenizer, whole_word_mask=True, seed=0)(features)


def test_numpy_word_ids_and_bool_masks_are_read(tokenizer):
    collator = DataCollatorForMaskedLM(tokenizer, whole_word_mask=True, mlm_probability=1.0, mask_replace_prob=0.0,
                                       random_replace_prob=0.0, seed=0)  # fmt: skip
    batch = collator([{"input_ids": IDS, "word_ids": np.array([0, 0, 1, 1]), "attention_mask": [True] * 4,
                       "special_tokens_mask": [True, False, False, False]}])  # fmt: skip
    assert batch["labels"].tolist() == [[-100, *IDS[1:]]]


# --------------------------------------------------------------------------- arguments
@pytest.mark.parametrize("tok", [None, "bert-base-uncased", "backend"], ids=["none", "a-name", "a-raw-tokenizers-one"])
def test_tokenizer_must_be_a_transformers_tokenizer(tokenizer, tok):
    tok = tokenizer.backend_tokenizer if tok == "backend" else tok
    with pytest.raises(TypeError, match="tokenizer must be a transformers tokenizer"):
        DataCollatorForMaskedLM(tok)


@pytest.mark.parametrize(
    "kwargs",
    [{"sliding_window": 8}, {"position_ids_start": 2}, {"packed_attention": "4d_mask"}],
    ids=["sliding_window", "position_ids_start", "packed_attention"],
)
def test_packing_only_arguments_without_packing_are_refused(tokenizer, kwargs):
    name = next(iter(kwargs))
    with pytest.raises(ValueError, match=f"{name}=.* applies to packing=True only"):
        DataCollatorForMaskedLM(tokenizer, **kwargs)


@pytest.mark.parametrize(
    "value, error",
    [("1.5", TypeError), ("0", TypeError), (np.float64(1.5), ValueError), (torch.tensor(2.0), ValueError),
     (np.float32(0.0), ValueError), (-0.0, ValueError), (None, TypeError)],
    ids=["string-above-1", "string-zero", "numpy-above-1", "tensor-above-1", "numpy-zero", "negative-zero", "none"],
)  # fmt: skip
def test_mlm_probability_out_of_range_in_any_form(tokenizer, value, error):
    with pytest.raises(error, match="mlm_probability"):
        DataCollatorForMaskedLM(tokenizer, mlm_probability=value)


def test_a_tokenizer_without_mask_token_works_with_random_replacements_only(tokenizer):
    no_mask = _wrapped(tokenizer, pad_token="<pad>")
    assert no_mask.mask_token_id is None
    collator = DataCollatorForMaskedLM(no_mask, mlm_probability=1.0, mask_replace_prob=0.0, random_replace_prob=1.0,
                                       seed=0)  # fmt: skip
    batch = collator([[300 + i for i in range(40)]])
    assert batch["labels"].tolist() == [[300 + i for i in range(40)]]
    assert not (batch["input_ids"] == tokenizer.mask_token_id).any()  # "<mask>" is just a token to this one
    assert (batch["input_ids"] != batch["labels"]).sum() > 30  # replaced by random ids


def test_a_tokenizer_without_pad_token_is_refused(tokenizer):
    with pytest.raises(ValueError, match="no pad token"):
        DataCollatorForMaskedLM(_wrapped(tokenizer, mask_token="<mask>"))
