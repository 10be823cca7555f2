"""Strided sliding-window scoring against hand-written loops and the stock model's own loss."""

from __future__ import annotations

import math

import pytest
import torch

from hf_lmobj.metrics.scoring import TextScore, plan_windows, score_texts


@pytest.fixture(scope="module")
def gpt2(tiny_gpt2):
    return tiny_gpt2


@pytest.fixture(scope="module")
def texts(corpus):
    """Three stdlib snippets of different lengths, one with non-ASCII text."""
    docs = corpus["train"]["text"]
    return [docs[0][:400], docs[1][:150] + "\n# 注释: héllo\n", docs[2][:60]]


def reference_nll(model, ids: list[int], max_length: int, stride: int) -> float:
    """The textbook strided loop: stock model loss per window (labels -100 where already scored)."""
    nll, done, last = 0.0, 0, len(ids) - 1
    with torch.no_grad():
        while done < last:
            end = min(done + (max_length if done == 0 else stride), last)
            begin = max(0, end - max_length)
            window = torch.tensor([ids[begin : end + 1]])  # + the last target, as a label only
            labels = window.clone()
            labels[:, : done - begin + 1] = -100  # targets up to position `done` were scored before
            loss = model(input_ids=window, labels=labels).loss  # mean over end - done targets
            nll += loss.item() * (end - done)
            done = end
    return nll


def encode(tokenizer, text: str) -> list[int]:
    return [tokenizer.bos_token_id] + tokenizer(text, add_special_tokens=False)["input_ids"]


@pytest.mark.parametrize("max_length,stride", [(16, 5), (16, 16), (24, 23)])
def test_strided_scores_equal_a_direct_loop_over_windows(gpt2, tokenizer, texts, max_length, stride):
    scores = score_texts(gpt2, tokenizer, texts, max_length=max_length, stride=stride, batch_size=4, progress=False)
    for text, score in zip(texts, scores):
        ids = encode(tokenizer, text)
        expected = reference_nll(gpt2, ids, max_length, stride)
        assert score.num_tokens == len(ids) - 1
        assert score.num_bytes == len(text.encode("utf-8"))
        assert score.nll == pytest.approx(expected, rel=1e-5)


def test_one_window_equals_the_models_own_loss_on_the_whole_text(gpt2, tokenizer, texts):
    (score,) = score_texts(gpt2, tokenizer, texts[:1], max_length=256, progress=False)
    ids = torch.tensor([encode(tokenizer, texts[0])])
    with torch.no_grad():
        loss = gpt2(input_ids=ids, labels=ids).loss.item()
    assert score.num_tokens == ids.shape[1] - 1
    assert score.nll == pytest.approx(loss * (ids.shape[1] - 1), rel=1e-5)


def test_without_start_token_the_first_token_is_not_scored(gpt2, tokenizer, texts):
    (score,) = score_texts(gpt2, tokenizer, texts[2:], add_start_token=False, progress=False)
    ids = torch.tensor([tokenizer(texts[2], add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        loss = gpt2(input_ids=ids, labels=ids).loss.item()
    assert score.num_tokens == ids.shape[1] - 1
    assert score.nll == pytest.approx(loss * (ids.shape[1] - 1), rel=1e-5)


def test_batching_across_texts_does_not_change_results(gpt2, tokenizer, texts):
    one = score_texts(gpt2, tokenizer, texts, max_length=16, stride=8, batch_size=1, progress=False)
    many = score_texts(gpt2, tokenizer, texts, max_length=16, stride=8, batch_size=7, progress=False)
    for a, b in zip(one, many):
        assert (a.num_tokens, a.num_bytes) == (b.num_tokens, b.num_bytes)
        assert a.nll == pytest.approx(b.nll, rel=1e-5)


def test_model_loaded_from_a_path_gives_the_in_memory_result(gpt2, tokenizer, texts, tmp_path):
    gpt2.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    from_path = score_texts(str(tmp_path), None, texts, max_length=32, progress=False)
    in_memory = score_texts(gpt2, tokenizer, texts, max_length=32, progress=False)
    for a, b in zip(from_path, in_memory):
        assert a.nll == pytest.approx(b.nll, rel=1e-5) and a.num_tokens == b.num_tokens


def test_windows_score_every_target_once_with_bounded_context():
    for n in range(1, 40):
        for max_length in (1, 2, 5, 8):
            for stride in range(1, max_length + 1):
                windows = plan_windows(n, max_length, stride)
                scored = [p for _, first, end in windows for p in range(first, end)]
                assert scored == list(range(n - 1))
                assert all(0 <= begin <= first < end and end - begin <= max_length for begin, first, end in windows)


def test_bad_arguments_raise_clear_errors(gpt2, tokenizer):
    with pytest.raises(ValueError, match="stride"):
        score_texts(gpt2, tokenizer, ["abc"], max_length=4, stride=5, progress=False)
    with pytest.raises(ValueError, match=r"texts\[1\].*nothing to predict"):
        score_texts(gpt2, tokenizer, ["abc", ""], progress=False)
    with pytest.raises(TypeError, match="list of strings"):
        score_texts(gpt2, tokenizer, "abc", progress=False)
    with pytest.raises(TypeError, match="tokenizer"):
        score_texts(gpt2, None, ["abc"], progress=False)
    with pytest.raises(ValueError, match="batch_size"):
        score_texts(gpt2, tokenizer, ["abc"], batch_size=0, progress=False)


def test_text_score_is_a_plain_tuple():
    nll, tokens, num_bytes, num_words = TextScore(1.5, 3, 4, 2)
    assert (nll, tokens, num_bytes, num_words) == (1.5, 3, 4, 2) and math.isclose(TextScore(1.5, 3, 4).nll, 1.5)
    assert TextScore(1.5, 3, 4).num_words == 0  # not counted
