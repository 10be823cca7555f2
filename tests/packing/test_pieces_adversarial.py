"""Adversarial inputs to ``document_pieces`` and ``split_documents``: special-token strings in the text,
empty / one-character / multi-byte texts, bad piece sizes, texts that are not a list of strings, a
tokenizer without BOS."""

from __future__ import annotations

import copy

import datasets
import pytest

from hf_lmobj.packing.pieces import document_pieces, split_documents
from hf_lmobj.plain_text import special_ids


@pytest.mark.parametrize(
    "text",
    ["x = '<fim_prefix>'\n", "'</s>' + '<s>'", "<pad><pad><pad>", "[MASK] <mask> <unk>", "<|endoftext|>\n",
     "<fim_prefix><fim_suffix><fim_middle>"],
)  # fmt: skip
def test_special_token_strings_stay_characters(tokenizer, text):
    pieces = document_pieces([text], tokenizer, max_tokens=3)
    ids = [i for piece in pieces["input_ids"] for i in piece]
    assert ids[0] == tokenizer.bos_token_id and ids[-1] == tokenizer.eos_token_id
    assert not set(ids[1:-1]) & special_ids(tokenizer)  # no control token inside the document
    assert "".join(pieces["text"]) == text
    assert [tokenizer.decode(p, skip_special_tokens=False) for p in pieces["input_ids"]][1:-1] == pieces["text"][1:-1]


def test_an_empty_text_is_one_piece_framed_by_bos_and_eos(tokenizer):
    pieces = document_pieces(["", "x"], tokenizer, max_tokens=1)
    bos, eos, x = tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer("x")["input_ids"]
    assert pieces == {"input_ids": [[bos, eos], [bos, *x, eos]], "text": ["", "x"]}


def test_multi_byte_characters_are_never_split_between_pieces(tokenizer):
    text = "中文☃é" * 3
    pieces = document_pieces([text], tokenizer, max_tokens=4)  # a UTF-8 character is at most 4 bytes
    assert "".join(pieces["text"]) == text and len(pieces["text"]) > 1
    assert all("\ufffd" not in tokenizer.decode(p) for p in pieces["input_ids"])  # whole characters each
    assert len(tokenizer("中", add_special_tokens=False)["input_ids"]) > 1  # a character of several tokens:
    with pytest.raises(ValueError, match="one character, more than max_tokens=1"):  # no piece can hold it
        document_pieces(["中"], tokenizer, max_tokens=1)


@pytest.mark.parametrize(
    "max_tokens, error",
    [(0, ValueError), (-2, ValueError), (True, TypeError), (2.5, TypeError), ("4", TypeError), (None, TypeError)],
)
def test_bad_piece_sizes_are_refused(tokenizer, max_tokens, error):
    with pytest.raises(error, match="max_tokens must be an int >= 1"):
        document_pieces(["x = 1\n"], tokenizer, max_tokens=max_tokens)


@pytest.mark.parametrize(
    "texts, word",
    [("x = 1\n", "wrap one text in a list"), (["x", None], r"texts\[1\] must be a string"), ([b"x"], "bytes"),
     (42, "list of strings")],
)  # fmt: skip
def test_texts_that_are_not_a_list_of_strings_are_refused(tokenizer, texts, word):
    with pytest.raises(TypeError, match=word):
        document_pieces(texts, tokenizer, max_tokens=4)


def test_a_tokenizer_without_bos_is_refused(tokenizer):
    bare = copy.deepcopy(tokenizer)
    bare.bos_token = None
    with pytest.raises(ValueError, match="has no bos_token"):
        document_pieces(["x"], bare, max_tokens=4)


@pytest.mark.parametrize("max_tokens, error", [(0, ValueError), (True, TypeError), (1.5, TypeError)])
def test_split_documents_refuses_bad_piece_sizes(max_tokens, error):
    with pytest.raises(error, match="max_tokens must be an int >= 1"):
        split_documents(datasets.Dataset.from_dict({"input_ids": [[1, 2, 3]]}), max_tokens)


def test_split_documents_refuses_what_is_not_a_tokenized_dataset():
    with pytest.raises(ValueError, match="'input_ids' column"):
        split_documents(datasets.Dataset.from_dict({"text": ["a"]}), 4)
    with pytest.raises(ValueError, match="'input_ids' column"):
        split_documents([[1, 2, 3]], 4)


def test_split_documents_keeps_empty_and_one_token_documents():
    ds = datasets.Dataset.from_dict({"input_ids": [[], [7], [1, 2, 3]]})
    assert split_documents(ds, 2)["input_ids"] == [[], [7], [1], [2, 3]]
