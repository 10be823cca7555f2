"""Adversarial inputs to fill-in-the-middle on documents: the collator, ``FimTransform``, ``fim_dataset``
and ``FimPieces`` (FIM on streamed text).

Input classes: special-token strings inside the text (FIM sentinels, ``</s>``, ``<pad>``, ``<mask>``, ...),
ids that hold a sentinel or a control token, ids that do not match their text (truncated), empty,
one-character and whitespace-only documents, rates out of [0, 1] / NaN / bools / strings, bad levels,
text columns, seeds and epochs, wrong dtypes of ids and of text.
"""

from __future__ import annotations

import math

import datasets
import numpy as np
import pytest
import torch

from hf_lmobj.data.transforms import FimPieces
from hf_lmobj.fim.collator import DataCollatorForFillInTheMiddle, fim_dataset
from hf_lmobj.fim.format import fim_token_ids, undo_fim
from hf_lmobj.fim.transform import FimDraw, FimTransform
from hf_lmobj.packing.pieces import document_pieces
from hf_lmobj.plain_text import encode_plain, special_ids

LITERALS = [
    "s = '<fim_prefix>'\n",
    "s = '<fim_middle>'\n",
    "tok.add_tokens(['<fim_suffix>', '<fim_pad>'])\n",
    "<fim_prefix><fim_suffix><fim_middle>",  # only sentinel strings
    "text = '</s>'  # the EOS string\n",
    "print('<s>', '<pad>', '<mask>', '<unk>')\n",
    "'<|endoftext|>' and '[MASK]'\n",
    "span = '<extra_id_0>'; mode = '[S]'\n",
]


def _plain_doc(tokenizer, text: str) -> dict:
    """A document as the FIM recipe encodes it: the text as plain characters, BOS / EOS by id."""
    return {"input_ids": [tokenizer.bos_token_id, *encode_plain(tokenizer, [text])[0], tokenizer.eos_token_id],
            "text": text}  # fmt: skip


def _controls_inside(tokenizer, ids: list[int]) -> list[int]:
    """Control tokens of a FIM'd document other than its BOS, its 3 sentinels and its final EOS."""
    fim = fim_token_ids(tokenizer)
    body = ids[1:-1] if ids[:1] == [tokenizer.bos_token_id] else ids[:-1]
    return [i for i in body if i in special_ids(tokenizer) and i not in fim.sentinels]


# ----------------------------------------------------------------------------- literal text stays text
@pytest.mark.parametrize("level", ["char", "line"])
@pytest.mark.parametrize("text", LITERALS)
def test_special_token_strings_in_the_text_stay_characters(tokenizer, text, level):
    fim = fim_token_ids(tokenizer)
    collator = DataCollatorForFillInTheMiddle(tokenizer, fim_rate=1.0, seed=0, fim_level=level)
    doc = _plain_doc(tokenizer, text)
    outs = collator.fim_input_ids([doc])
    n = len(text)  # and every piece holding the whole text: prefix, middle or suffix
    outs += [collator.transform.permute(doc["input_ids"], text, FimDraw(True, spm, start, end))
             for spm in (False, True) for start, end in ((0, 0), (0, n), (n, n))]  # fmt: skip
    for out in outs:
        assert [out.count(s) for s in fim.sentinels] == [1, 1, 1]  # the transform's sentinels, nothing else
        assert _controls_inside(tokenizer, out) == []
        assert tokenizer.decode(undo_fim(out, fim, tokenizer.eos_token_id)[1:-1]) == text


def test_a_file_mentioning_fim_prefix_goes_through_the_recipe_path(tokenizer):
    text = "FIM_PREFIX = '<fim_prefix>'\n\ndef f(x):\n    return '<fim_middle>' + x\n"
    pieces = datasets.Dataset.from_dict(document_pieces([text], tokenizer, max_tokens=8))
    fimmed = fim_dataset(pieces, tokenizer, fim_rate=1.0, seed=0)
    fim = fim_token_ids(tokenizer)
    # each piece back in order, less its end-of-middle EOS (only the last piece ended the document)
    restored = [tokenizer.decode(undo_fim(ids, fim, tokenizer.eos_token_id)[:-1]) for ids in fimmed["input_ids"]]
    assert len(restored) > 1 and all(row.count(fim.prefix) == 1 for row in fimmed["input_ids"])
    assert "".join(restored) == f"<s>{text}"


def test_fim_pieces_keeps_literal_sentinels_as_text(tokenizer):
    fim = fim_token_ids(tokenizer)
    pieces = FimPieces(FimTransform(tokenizer, fim_rate=1.0), max_tokens=6, seed=0)
    (documents,) = pieces(["x = '<fim_prefix>' + '</s>'\n"])
    assert len(documents) > 1 and all(int((d == fim.prefix).sum()) == 1 for d in documents)
    assert all(_controls_inside(tokenizer, d.tolist()) == [] for d in documents)


# ----------------------------------------------------------------------------- ids against text
def test_ids_that_hold_a_fim_sentinel_are_refused_at_every_level(tokenizer):
    fim = fim_token_ids(tokenizer)
    text = "s = '<fim_prefix>'\n"
    parsed = tokenizer(text)["input_ids"]  # special-token parsing on: the string became the sentinel
    assert fim.prefix in parsed
    for level in ("char", "line", "token"):
        with pytest.raises(ValueError, match="split_special_tokens=True"):
            FimTransform(tokenizer, fim_rate=1.0, fim_level=level)([{"input_ids": parsed, "text": text}], seed=0)


@pytest.mark.parametrize("literal", ["</s>", "<pad>", "<mask>", "<extra_id_3>"])
def test_control_tokens_inside_the_ids_at_text_level_are_refused(tokenizer, literal):
    text = f"a = '{literal}'\n"
    ids = tokenizer(text)["input_ids"]  # parsed: the control token sits inside the document
    collator = DataCollatorForFillInTheMiddle(tokenizer, fim_rate=0.0, seed=0)  # even when nothing is FIM'd
    with pytest.raises(ValueError, match=f"feature 0: input_ids hold the control token '{literal}'"):
        collator.fim_input_ids([{"input_ids": ids, "text": text}])
    token_level = DataCollatorForFillInTheMiddle(tokenizer, fim_rate=0.0, seed=0, fim_level="token")
    assert token_level.fim_input_ids([{"input_ids": ids}]) == [ids]  # ids only: the user's ids, untouched


def test_truncated_ids_with_a_whole_text_are_refused(tokenizer):
    text = "def f(x):\n    return x + 1\n" * 5
    truncated = tokenizer(text, truncation=True, max_length=11)["input_ids"]
    assert len(truncated) == 11
    collator = DataCollatorForFillInTheMiddle(tokenizer, fim_rate=1.0, seed=0)
    whole = _plain_doc(tokenizer, "x = 1\n")
    with pytest.raises(ValueError, match=r"feature 1: input_ids and 'text' are not the same document.*truncat"):
        collator([whole, {"input_ids": truncated, "text": text}])
    with pytest.raises(ValueError, match="document_pieces"):
        fim_dataset(datasets.Dataset.from_dict({"input_ids": [truncated], "text": [text]}), tokenizer, fim_rate=0.0)


def test_the_text_of_another_document_is_refused(tokenizer):
    features = [_plain_doc(tokenizer, "x = 1\n"), {**_plain_doc(tokenizer, "y = 2\n"), "text": "z = 3\n"}]
    with pytest.raises(ValueError, match="feature 1: .*differ from character 0"):
        FimTransform(tokenizer, fim_rate=1.0)(features, seed=0)
    with pytest.raises(ValueError, match="not the same document"):
        FimTransform(tokenizer).permute(features[1]["input_ids"], "z = 3\n", FimDraw(True, False, 1, 2))


def test_ids_that_match_the_text_pass_and_the_token_level_reads_no_text(tokenizer):
    text = "def f(x):\n    return x\n"
    doc = _plain_doc(tokenizer, text)
    out = FimTransform(tokenizer, fim_rate=1.0, fim_level="token")([{**doc, "text": "unrelated"}], seed=0)
    assert undo_fim(out[0], fim_token_ids(tokenizer), tokenizer.eos_token_id) == doc["input_ids"]
    assert FimTransform(tokenizer, fim_rate=0.0)([doc], seed=0) == [doc["input_ids"]]


# ----------------------------------------------------------------------------- degenerate documents
@pytest.mark.parametrize("level", ["char", "line", "token"])
def test_an_empty_document_gets_the_three_sentinels_and_eos(tokenizer, level):
    fim = fim_token_ids(tokenizer)
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    (out,) = FimTransform(tokenizer, fim_rate=1.0, fim_level=level)([{"input_ids": [bos, eos], "text": ""}], seed=0)
    assert out in ([bos, fim.prefix, fim.suffix, fim.middle, eos],)  # PSM and SPM coincide on nothing


@pytest.mark.parametrize("text", ["x", " ", "\n", "   \n\t\n", "中"])
def test_one_character_and_whitespace_only_documents_round_trip(tokenizer, text):
    fim = fim_token_ids(tokenizer)
    for spm in (False, True):
        for start, end in ((0, 0), (0, len(text)), (len(text), len(text))):
            out = FimTransform(tokenizer).permute(_plain_doc(tokenizer, text)["input_ids"], text,
                                                  FimDraw(True, spm, start, end))  # fmt: skip
            assert tokenizer.decode(undo_fim(out, fim, tokenizer.eos_token_id)) == f"<s>{text}</s>"


def test_empty_input_ids_are_refused(tokenizer):
    with pytest.raises(ValueError, match="feature 0: input_ids is empty"):
        FimTransform(tokenizer, fim_rate=1.0)([{"input_ids": [], "text": ""}], seed=0)


# ----------------------------------------------------------------------------- rates, levels, columns
@pytest.mark.parametrize("field", ["fim_rate", "spm_rate"])
@pytest.mark.parametrize(
    "value",
    [math.nan, math.inf, -math.inf, 1.0000001, -1e-9, None, "0.5", True, False, [0.5], np.array([0.5])],
    ids=["nan", "inf", "-inf", "above-1", "below-0", "none", "string", "true", "false", "list", "array"],
)
def test_rates_that_are_not_probabilities_are_refused(tokenizer, field, value):
    with pytest.raises(ValueError, match=f"{field} must be a number in \\[0, 1\\]"):
        FimTransform(tokenizer, **{field: value})


@pytest.mark.parametrize("value, expected", [(np.float32(0.25), 0.25), (1, 1.0), (0, 0.0), (-0.0, 0.0)])
def test_numeric_rates_of_other_types_are_read_as_floats(tokenizer, value, expected):
    collator = DataCollatorForFillInTheMiddle(tokenizer, fim_rate=value, spm_rate=value)
    assert (collator.fim_rate, collator.spm_rate) == (expected, expected) and type(collator.fim_rate) is float


@pytest.mark.parametrize("level", ["CHAR", "word", "", None, 1])
def test_unknown_levels_are_refused(tokenizer, level):
    with pytest.raises(ValueError, match="fim_level must be one of"):
        fim_dataset(datasets.Dataset.from_dict({"input_ids": [[300]]}), tokenizer, fim_level=level)


@pytest.mark.parametrize("column", ["", 0, None])
def test_bad_text_columns_are_refused(tokenizer, column):
    with pytest.raises(TypeError, match="text_column must be a non-empty string"):
        DataCollatorForFillInTheMiddle(tokenizer, text_column=column)


@pytest.mark.parametrize("text", [None, b"x = 1\n", 12, ["x = 1\n"]])
def test_text_that_is_not_a_string_is_refused_at_character_level(tokenizer, text):
    doc = {**_plain_doc(tokenizer, "x = 1\n"), "text": text}
    with pytest.raises(ValueError, match="feature 0: fim_level='char' cuts the document's text"):
        DataCollatorForFillInTheMiddle(tokenizer, fim_rate=1.0, seed=0)([doc])


@pytest.mark.parametrize("seed", [-1, 1.5, True, "0"])
def test_bad_seeds_are_refused(tokenizer, seed):
    with pytest.raises((TypeError, ValueError), match="seed"):
        fim_dataset(datasets.Dataset.from_dict({"input_ids": [[300]]}), tokenizer, seed=seed, fim_level="token")


@pytest.mark.parametrize("epoch", [-1, True, 0.5])
def test_bad_epochs_are_refused(tokenizer, epoch):
    with pytest.raises(ValueError, match="epoch must be a non-negative int"):
        DataCollatorForFillInTheMiddle(tokenizer, epoch=epoch)


# ----------------------------------------------------------------------------- ids of the wrong kind
@pytest.mark.parametrize(
    "ids, error, word",
    [
        ([300.0, 301.0], TypeError, "list of ints"),
        (["300"], TypeError, "list of ints"),
        ([[300, 301]], ValueError, "1D"),
        (torch.tensor([300.0]), TypeError, "float32"),
        ([300, True], TypeError, "bool"),
        ([300, 5000], ValueError, "len\\(tokenizer\\)"),  # the ids of a larger tokenizer
    ],
    ids=["floats", "strings", "2d", "torch-float", "bool", "other-vocabulary"],
)
def test_token_level_transform_refuses_ids_of_the_wrong_kind(tokenizer, ids, error, word):
    with pytest.raises(error, match=word):
        FimTransform(tokenizer, fim_rate=1.0, fim_level="token")([{"input_ids": ids}], seed=0)


# ----------------------------------------------------------------------------- FimPieces arguments
@pytest.mark.parametrize(
    "texts, error, word",
    [("x = 1\n", TypeError, "wrap one text in a list"), (["x", None], TypeError, r"texts\[1\] must be a string")],
)
def test_fim_pieces_refuses_texts_that_are_not_a_list_of_strings(tokenizer, texts, error, word):
    with pytest.raises(error, match=word):
        FimPieces(FimTransform(tokenizer, fim_rate=1.0), max_tokens=8, seed=0)(texts)


@pytest.mark.parametrize("max_tokens", [0, -3, True, 2.5])
def test_fim_pieces_refuses_bad_piece_sizes(tokenizer, max_tokens):
    with pytest.raises((TypeError, ValueError), match="max_tokens"):
        FimPieces(FimTransform(tokenizer), max_tokens=max_tokens)


def test_fim_pieces_of_an_empty_text_is_one_document(tokenizer):
    fim = fim_token_ids(tokenizer)
    ((document,),) = FimPieces(FimTransform(tokenizer, fim_rate=1.0), max_tokens=8, seed=0)([""])
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    assert document.tolist() == [bos, fim.prefix, fim.suffix, fim.middle, eos]


# ----------------------------------------------------------------------------- attention_mask: packed rows
@pytest.mark.parametrize(
    "mask, error, message",
    [
        pytest.param(lambda n: [2] * (n - 2) + [3, 3], ValueError, "packed row .* numbers documents", id="pack-dataset"),
        pytest.param(lambda n: [1] * (n - 1) + [2], ValueError, "packed row .* numbers documents", id="axolotl"),
        pytest.param(lambda n: torch.full((n,), 2), ValueError, "packed row .* numbers documents", id="one-doc-tensor"),
        pytest.param(lambda n: [1] * (n - 1) + [0], ValueError, "feature 0 is padded", id="padded"),
        pytest.param(lambda n: [1] * (n - 1) + [-1], ValueError, "feature 0 is padded", id="negative"),
        pytest.param(lambda n: [1.0] * n, TypeError, "feature 0: attention_mask must be a 1D list of ints",
                     id="floats"),
        pytest.param(lambda n: ["1"] * n, TypeError, "feature 0: attention_mask must be a 1D list of ints",
                     id="strings"),
    ],
)  # fmt: skip
def test_attention_masks_other_than_all_ones_are_refused(tokenizer, mask, error, message):
    doc = _plain_doc(tokenizer, "x = 1\n")
    collator = DataCollatorForFillInTheMiddle(tokenizer, fim_rate=1.0, seed=0)
    with pytest.raises(error, match=message):
        collator([{**doc, "attention_mask": mask(len(doc["input_ids"]))}])


@pytest.mark.parametrize("mask", [lambda n: [1] * n, lambda n: [True] * n, lambda n: torch.ones(n, dtype=torch.long)])
def test_an_all_ones_attention_mask_is_a_document(tokenizer, mask):
    doc = _plain_doc(tokenizer, "x = 1\n")
    collator = DataCollatorForFillInTheMiddle(tokenizer, fim_rate=1.0, seed=0)
    assert collator([{**doc, "attention_mask": mask(len(doc["input_ids"]))}])["input_ids"].tolist() == (
        collator([doc])["input_ids"].tolist()
    )
