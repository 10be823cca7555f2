"""Tokenizer-free comparison: token NLL spread exactly over UTF-8 bytes, two models with different tokenizers."""

from __future__ import annotations

import copy
import math
from fractions import Fraction

import numpy as np
import pytest
import torch
from transformers import PreTrainedTokenizer

from hf_lmobj.metrics.byte_alignment import compare_per_byte, per_byte_nll, spread_over_bytes, token_byte_ends
from hf_lmobj.metrics.scoring import score_texts
from tests.testing_utils import tiny_llama

TEXTS = [
    "def f(x):\n    return x + 1\n",
    "café — naïve é, 中文字符 and an emoji 😀🎉 end",
    "  leading spaces, trailing ones  ",
    "x",
    "print('done')</s>",
]
DOMAINS = ["code", "prose", "prose", "code", "code"]


@pytest.fixture(scope="module")
def tok_small():
    """A second byte-level BPE, vocab 512: another tokenization of the same texts."""
    from hf_lmobj.corpus import build_tokenizer

    return build_tokenizer(vocab_size=512, max_documents=300)


@pytest.fixture(scope="module")
def llama_small(tok_small):
    return tiny_llama(tok_small, positions=256, seed=7).eval()


def with_head(model, scale: float):
    """A copy of ``model`` whose output head is scaled: 0 gives the uniform distribution, 100 a confident guess."""
    other = copy.deepcopy(model)
    with torch.no_grad():
        other.get_output_embeddings().weight.mul_(scale)
    return other


class CharTokenizer(PreTrainedTokenizer):
    """A slow (Python) tokenizer: it gives no offset mapping."""

    def __init__(self, **kwargs):
        self._vocab = {chr(i): i for i in range(256)}
        super().__init__(bos_token=chr(1), eos_token=chr(2), pad_token=chr(0), **kwargs)

    @property
    def vocab_size(self):
        return 256

    def get_vocab(self):
        return dict(self._vocab)

    def _tokenize(self, text):
        return list(text)

    def _convert_token_to_id(self, token):
        return self._vocab.get(token, 3)

    def _convert_id_to_token(self, index):
        return chr(index)


@pytest.mark.parametrize(
    "nll,ends,num_bytes,expected",
    [([3.0, 1.0], [2, 3], 3, [1.5, 1.5, 1.0]),  # plain: each token its own bytes
     ([1.0, 2.0], [4, 4], 4, [0.5, 0.5, 1.0, 1.0]),  # two pieces of one emoji share its 4 bytes in order
     ([1.0, 2.0, 3.0], [2, 2, 2], 2, [3.0, 3.0]),  # more tokens than bytes: the zero-width one lands on a byte
     ([4.0], [2], 4, [1.0, 1.0, 1.0, 1.0]),  # trailing bytes the offsets left out go to the last token
     ([2.0, 6.0], [0, 3], 3, [2.0, 3.0, 3.0]),  # a zero-width first token joins the next: slices in order
     ([1.0, 2.0, 4.0], [1, 3, 2], 3, [1.0, 2.0, 4.0]),  # ends made non-decreasing: 3, 2 -> 3, 3 share 2 bytes
     ([math.inf, 1.0], [1, 2], 2, [math.inf, 1.0])],
)  # fmt: skip
def test_spread_over_bytes_by_hand(nll, ends, num_bytes, expected):
    assert spread_over_bytes(nll, ends, num_bytes).tolist() == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize("value,width", [(0.1, 7), (1.0, 3), (6.931471805599453, 13), (1e-30, 5), (2.5, 1)])
def test_a_tokens_share_of_each_byte_adds_up_to_it_exactly(value, width):
    shares = spread_over_bytes([value], [width], width)
    assert sum(map(Fraction, shares.tolist())) == Fraction(value) and math.fsum(shares.tolist()) == value
    assert shares.max() - shares.min() <= np.spacing(value)  # even, to one unit in the value's last place


def test_byte_ends_read_char_offsets_as_utf8_bytes(tokenizer):
    (ends,) = token_byte_ends(tokenizer, ["é中文😀x"])
    assert ends.tolist() == [2, 2, 5, 5, 5, 8, 8, 8, 12, 12, 12, 12, 13]  # é: 2 bytes, 中/文: 3, 😀: 4, x: 1


@pytest.mark.parametrize("which", ["gpt2_1024", "llama_512"])
@pytest.mark.parametrize("max_length,stride,windows", [(256, None, "strided"), (8, 3, "strided"), (8, None, "lm_eval")])
def test_per_byte_arrays_sum_to_each_texts_nll(request, which, max_length, stride, windows):
    model, tok = (
        (request.getfixturevalue("tiny_gpt2"), request.getfixturevalue("tokenizer"))
        if which == "gpt2_1024"
        else (request.getfixturevalue("llama_small"), request.getfixturevalue("tok_small"))
    )
    arrays, scores = per_byte_nll(model, tok, TEXTS, max_length=max_length, stride=stride, windows=windows,
                                  progress=False)  # fmt: skip
    for text, array, score in zip(TEXTS, arrays, scores):
        assert array.dtype == np.float64 and len(array) == len(text.encode("utf-8")) == score.num_bytes
        assert math.fsum(array.tolist()) == score.nll  # exact: every byte holds one token's exact share
        assert (array > 0).all()


def test_a_model_compared_with_itself_gives_exactly_zero(tiny_gpt2, tokenizer):
    result = compare_per_byte(TEXTS, tiny_gpt2, tokenizer, tiny_gpt2, tokenizer, domains=DOMAINS, top_k=2,
                              max_length=16, stride=5, progress=False)  # fmt: skip
    assert result["overall"]["gap"] == 0.0 and all(row["gap"] == 0.0 for row in result["per_text"])
    assert {domain: row["gap"] for domain, row in result["per_domain"].items()} == {"code": 0.0, "prose": 0.0}
    assert result["overall"]["bits_per_byte_a"] == result["overall"]["bits_per_byte_b"] > 0
    assert result["top"] == [{"index": 0, "domain": "code", "gap": 0.0}, {"index": 1, "domain": "prose", "gap": 0.0}]


def test_uniform_models_match_the_hand_computed_bits_per_byte(tiny_gpt2, tokenizer, llama_small, tok_small):
    a, b = with_head(tiny_gpt2, 0.0), with_head(llama_small, 0.0)  # zero logits: ln V nats per token
    result = compare_per_byte(TEXTS, a, tokenizer, b, tok_small, max_length=64, progress=False)
    num_bytes = sum(len(t.encode("utf-8")) for t in TEXTS)
    tokens_a = sum(len(tokenizer(t, add_special_tokens=False)["input_ids"]) for t in TEXTS)
    tokens_b = sum(len(tok_small(t, add_special_tokens=False)["input_ids"]) for t in TEXTS)
    expected_a, expected_b = tokens_a * math.log2(1024) / num_bytes, tokens_b * math.log2(512) / num_bytes
    overall = result["overall"]
    assert overall["bytes"] == num_bytes and overall["texts"] == len(TEXTS) and result["per_domain"] == {}
    assert overall["bits_per_byte_a"] == pytest.approx(expected_a, rel=1e-6)
    assert overall["bits_per_byte_b"] == pytest.approx(expected_b, rel=1e-6)
    assert overall["gap"] == pytest.approx(expected_b - expected_a, rel=1e-5)


def test_a_clearly_worse_model_gives_a_positive_gap_and_swapping_negates_it(
    tiny_gpt2, tokenizer, llama_small, tok_small
):
    uniform, confident_random = with_head(tiny_gpt2, 0.0), with_head(llama_small, 100.0)
    kwargs = dict(domains=DOMAINS, top_k=len(TEXTS), max_length=32, progress=False)
    forward = compare_per_byte(TEXTS, uniform, tokenizer, confident_random, tok_small, **kwargs)
    backward = compare_per_byte(TEXTS, confident_random, tok_small, uniform, tokenizer, **kwargs)
    assert forward["overall"]["gap"] > 1.0 and all(row["gap"] > 0 for row in forward["per_text"])
    assert all(row["gap"] > 0 for row in forward["per_domain"].values())
    assert backward["overall"]["gap"] == -forward["overall"]["gap"]  # b - a rounded once: exactly antisymmetric
    assert [row["gap"] for row in backward["per_text"]] == [-row["gap"] for row in forward["per_text"]]
    gaps = [abs(row["gap"]) for row in forward["top"]]
    assert gaps == sorted(gaps, reverse=True) and sorted(row["index"] for row in forward["top"]) == list(range(5))


def test_per_domain_and_per_text_figures_come_from_the_per_byte_arrays(tiny_gpt2, tokenizer, llama_small, tok_small):
    result = compare_per_byte(TEXTS, tiny_gpt2, tokenizer, llama_small, tok_small, domains=DOMAINS, top_k=0,
                              return_per_byte=True, max_length=32, progress=False)  # fmt: skip
    a, b = result["per_byte_a"], result["per_byte_b"]
    prose = [1, 2]
    num_bytes = sum(len(a[i]) for i in prose)
    nll_a = math.fsum(np.concatenate([a[i] for i in prose]).tolist())
    assert result["per_domain"]["prose"]["texts"] == 2 and result["per_domain"]["prose"]["bytes"] == num_bytes
    assert result["per_domain"]["prose"]["bits_per_byte_a"] == nll_a / num_bytes / math.log(2)
    row = result["per_text"][3]
    assert (row["index"], row["domain"], row["bytes"]) == (3, "code", 1)
    assert row["gap"] == (b[3][0] - a[3][0]) / math.log(2) and result["top"] == []
    assert list(result["per_domain"]) == ["code", "prose"]


@pytest.mark.parametrize(
    "texts,kwargs,error,word",
    [(TEXTS, {"domains": ["code"]}, ValueError, "one domain per text"),
     (TEXTS, {"domains": "code"}, TypeError, "domains"),
     (TEXTS, {"domains": ["code", "", "x", "y", "z"]}, ValueError, r"domains\[1\]"),
     ([], {}, ValueError, "empty"), ("abc", {}, TypeError, "list of strings"),
     (["abc", ""], {}, ValueError, r"texts\[1\] is empty"), (["ok", "\ud800"], {}, ValueError, "surrogate"),
     (TEXTS, {"top_k": -1}, ValueError, "top_k"), (TEXTS, {"top_k": True}, TypeError, "top_k"),
     (TEXTS, {"return_per_byte": "yes"}, TypeError, "return_per_byte"),
     (TEXTS, {"add_start_token": False}, ValueError, "start token"),
     (TEXTS, {"windows": "rolling"}, ValueError, "windows")],
)  # fmt: skip
def test_compare_refuses_hostile_input_before_scoring(tokenizer, texts, kwargs, error, word):
    with pytest.raises(error, match=word):  # "unused" as models: nothing may be loaded or run first
        compare_per_byte(texts, "unused-a", tokenizer, "unused-b", tokenizer, progress=False, **kwargs)


def test_a_model_and_tokenizer_saved_to_a_folder_compare_like_in_memory(tiny_gpt2, tokenizer, tmp_path):
    tiny_gpt2.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    result = compare_per_byte(TEXTS, tiny_gpt2, tokenizer, str(tmp_path), None, max_length=32, device="cpu",
                              progress=False)  # fmt: skip
    assert result["overall"]["gap"] == pytest.approx(0.0, abs=1e-6)
    assert result["overall"]["bits_per_byte_a"] == pytest.approx(result["overall"]["bits_per_byte_b"], rel=1e-6)


def test_a_tokenizer_without_offsets_is_refused_by_name(tokenizer):
    with pytest.raises(TypeError, match="tok_b must be a fast tokenizer"):
        compare_per_byte(TEXTS, "unused-a", tokenizer, "unused-b", CharTokenizer(), progress=False)
    with pytest.raises(TypeError, match="fast tokenizer"):
        token_byte_ends(CharTokenizer(), TEXTS)


def test_a_tokenizer_without_bos_needs_lm_eval_windows(tokenizer):
    no_bos = copy.deepcopy(tokenizer)
    no_bos.bos_token = None
    with pytest.raises(ValueError, match="tok_a has no BOS token.*lm_eval"):
        compare_per_byte(TEXTS, "unused-a", no_bos, "unused-b", tokenizer, progress=False)


def test_token_nll_of_another_tokenization_is_refused(tokenizer, tok_small, tiny_gpt2):
    (score,) = score_texts(tiny_gpt2, tokenizer, TEXTS[1:2], max_length=64, progress=False, return_token_nll=True)
    (ends,) = token_byte_ends(tok_small, TEXTS[1:2])
    assert len(ends) != len(score.token_nll)
    with pytest.raises(ValueError, match="alike"):
        spread_over_bytes(score.token_nll, ends, len(TEXTS[1].encode("utf-8")))


@pytest.mark.parametrize(
    "nll,ends,num_bytes,error,word",
    [([float("nan")], [1], 1, ValueError, "NaN"), ([-1.0], [1], 1, ValueError, "negative"),
     ([], [], 1, ValueError, "non-empty"), ([1.0], [1], 0, ValueError, "num_bytes")],
)  # fmt: skip
def test_spread_over_bytes_refuses_bad_values(nll, ends, num_bytes, error, word):
    with pytest.raises(error, match=word):
        spread_over_bytes(nll, ends, num_bytes)
