"""lm-evaluation-harness's rolling windows and unit counts: hand-worked layouts and a brute-force reference.

``lm_eval_windows`` below is a transcription of lm-eval's ``get_rolling_token_windows`` and
``make_disjoint_window`` (``context_len=1``, as ``HFLM.loglikelihood_rolling`` calls them) and of
how ``_loglikelihood_tokens`` builds the forward pass of each (context, continuation) pair; the
reference score runs one forward pass per window from it, independently of hf_lmobj's planner.
"""

from __future__ import annotations

import copy
import math
import re

import pytest
import torch

from hf_lmobj.metrics import load
from hf_lmobj.metrics.scoring import plan_windows, score_texts
from hf_lmobj.metrics.sums import count_words


def get_rolling_token_windows(token_list, prefix_token, max_seq_len, context_len):
    """lm-eval's generator of (context, continuation) pairs covering ``token_list`` once."""
    assert 1 <= context_len <= max_seq_len
    if not token_list:
        return
    pred_len = max_seq_len - context_len + 1
    predicted = 0
    first_seq_len = min(max_seq_len, len(token_list))
    yield [prefix_token] + token_list[: first_seq_len - 1], token_list[:first_seq_len]
    predicted += first_seq_len
    while predicted < len(token_list):
        window_pred_len = min(len(token_list) - predicted, pred_len)
        window_end = predicted + window_pred_len
        yield (
            token_list[window_end - max_seq_len - 1 : window_end - 1],
            token_list[window_end - window_pred_len : window_end],
        )
        predicted += window_pred_len


def make_disjoint_window(pair):
    context, continuation = pair
    return context[: len(context) - (len(continuation) - 1)], continuation


def lm_eval_windows(tokens, prefix, max_length):
    """(forward-pass inputs, scored continuation) per window, as lm-eval's HFLM runs them."""
    out = []
    for context, continuation in map(make_disjoint_window, get_rolling_token_windows(tokens, prefix, max_length, 1)):
        inputs = (context + continuation)[-(max_length + 1) :][:-1]
        out.append((inputs, continuation))
    return out


def our_windows(tokens, prefix, max_length):
    """The same pairs from hf_lmobj's planner: ids = [prefix] + tokens, stride = max_length."""
    ids = [prefix, *tokens]
    return [
        (ids[begin:end], ids[first + 1 : end + 1])
        for begin, first, end in plan_windows(len(ids), max_length, max_length)
    ]


def test_hand_worked_layout_ten_tokens_windows_of_four():
    tokens = [f"t{i}" for i in range(10)]
    expected = [
        (["p", "t0", "t1", "t2"], ["t0", "t1", "t2", "t3"]),  # first window: the prefix, then the text
        (["t3", "t4", "t5", "t6"], ["t4", "t5", "t6", "t7"]),  # one token of context (t3)
        (["t5", "t6", "t7", "t8"], ["t8", "t9"]),  # last, short: backed up to a full window
    ]
    assert lm_eval_windows(tokens, "p", 4) == expected
    assert our_windows(tokens, "p", 4) == expected
    assert plan_windows(11, 4, 4) == [(0, 0, 4), (4, 4, 8), (6, 8, 10)]


def test_hand_worked_layout_short_text_and_exact_multiple():
    assert lm_eval_windows(["a", "b"], "p", 4) == [(["p", "a"], ["a", "b"])]
    assert lm_eval_windows(list("abcdef"), "p", 3) == [(["p", "a", "b"], list("abc")), (list("cde"), list("def"))]
    assert our_windows(list("abcdef"), "p", 3) == lm_eval_windows(list("abcdef"), "p", 3)


@pytest.mark.parametrize("max_length", [1, 2, 3, 5, 8])
def test_planner_equals_lm_evals_windows_for_every_length(max_length):
    for n in range(1, 40):
        tokens = list(range(100, 100 + n))
        assert our_windows(tokens, -1, max_length) == lm_eval_windows(tokens, -1, max_length), n


def brute_force_nll(model, tokens: list[int], prefix: int, max_length: int) -> float:
    """Sum of -log p(continuation) over lm-eval's windows, one forward pass each, log_softmax by hand."""
    total = 0.0
    with torch.no_grad():
        for inputs, continuation in lm_eval_windows(tokens, prefix, max_length):
            logits = model(input_ids=torch.tensor([inputs])).logits[0].double()  # (T, V)
            logprobs = torch.log_softmax(logits, dim=-1)[-len(continuation) :]  # (C, V)
            total -= logprobs.gather(1, torch.tensor(continuation)[:, None]).sum().item()
    return total


@pytest.fixture(scope="module")
def texts(corpus):
    docs = corpus["validation"]["text"]
    return [docs[0][:500], "  leading and\ttrailing  \n", docs[1][:90] + " 注释 héllo"]


@pytest.mark.parametrize("max_length", [7, 16])
def test_lm_eval_mode_equals_the_brute_force_reference(tiny_gpt2, tokenizer, texts, max_length):
    scores = score_texts(
        tiny_gpt2, tokenizer, texts, max_length=max_length, windows="lm_eval", batch_size=3, progress=False
    )
    for text, score in zip(texts, scores):
        tokens = tokenizer(text, add_special_tokens=False)["input_ids"]
        assert score.num_tokens == len(tokens)
        assert score.nll == pytest.approx(
            brute_force_nll(tiny_gpt2, tokens, tokenizer.bos_token_id, max_length), rel=1e-5
        )
        assert score.num_words == len(re.split(r"\s+", text)) and score.num_bytes == len(text.encode("utf-8"))


def test_lm_eval_mode_starts_with_eos_when_the_tokenizer_has_no_bos(tiny_gpt2, tokenizer, texts):
    tokens = tokenizer(texts[0], add_special_tokens=False)["input_ids"]
    tokenizer = copy.deepcopy(tokenizer)
    tokenizer.bos_token = None
    assert tokenizer.bos_token_id is None and tokenizer.eos_token_id is not None
    (score,) = score_texts(tiny_gpt2, tokenizer, texts[:1], max_length=16, windows="lm_eval", progress=False)
    assert score.nll == pytest.approx(brute_force_nll(tiny_gpt2, tokens, tokenizer.eos_token_id, 16), rel=1e-5)
    with pytest.raises(ValueError, match="bos_token"):
        score_texts(tiny_gpt2, tokenizer, texts[:1], max_length=16, progress=False)  # strided needs a BOS


def test_lm_eval_mode_refuses_settings_it_does_not_have(tiny_gpt2, tokenizer):
    with pytest.raises(ValueError, match="stride"):
        score_texts(tiny_gpt2, tokenizer, ["abc"], max_length=8, stride=4, windows="lm_eval", progress=False)
    with pytest.raises(ValueError, match="add_start_token"):
        score_texts(
            tiny_gpt2, tokenizer, ["abc"], max_length=8, add_start_token=False, windows="lm_eval", progress=False
        )
    with pytest.raises(ValueError, match="windows must be one of"):
        score_texts(tiny_gpt2, tokenizer, ["abc"], windows="rolling", progress=False)


def test_word_counts_are_lm_evals():
    for text in ("def f(x):\n    return x", " a  b ", "", "one", "tab\tand\nnewline "):
        assert count_words(text) == len(re.split(r"\s+", text))
    assert count_words(" a b ") == 4  # the empty strings at both ends count, as in lm-eval


def test_the_modules_report_lm_evals_three_figures(tiny_gpt2, tokenizer, texts):
    kwargs = dict(
        predictions=texts, model=tiny_gpt2, tokenizer=tokenizer, max_length=16, windows="lm_eval", progress=False
    )
    scores = score_texts(tiny_gpt2, tokenizer, texts, max_length=16, windows="lm_eval", progress=False)
    nll = math.fsum(s.nll for s in scores)
    words = sum(len(re.split(r"\s+", t)) for t in texts)
    num_bytes = sum(len(t.encode("utf-8")) for t in texts)
    perplexity = load("perplexity").compute(**kwargs)
    bits = load("bits_per_byte").compute(**kwargs)
    assert perplexity["num_words"] == words
    assert perplexity["word_perplexity"] == pytest.approx(math.exp(nll / words), rel=1e-9)
    assert bits["byte_perplexity"] == pytest.approx(math.exp(nll / num_bytes), rel=1e-9)
    assert bits["bits_per_byte"] == pytest.approx(nll / num_bytes / math.log(2), rel=1e-9)
    assert bits["byte_perplexity"] == pytest.approx(2 ** bits["bits_per_byte"], rel=1e-9)


def test_word_perplexity_from_sums_needs_every_entry_counted():
    perplexity = load("perplexity")
    result = perplexity.compute(nll=[2.0, 4.0], num_tokens=[1, 3], num_words=[1, 2])
    assert result["word_perplexity"] == pytest.approx(math.exp(2.0)) and result["num_words"] == 3
    assert "word_perplexity" not in perplexity.compute(nll=[2.0, 4.0], num_tokens=[1, 3])
    perplexity.add_batch(nll=[2.0], num_tokens=[1], num_words=[1])
    perplexity.add(nll=4.0, num_tokens=3)  # words not counted: no word perplexity for the corpus
    assert "word_perplexity" not in perplexity.compute()
    with pytest.raises(ValueError, match=r"num_words\[0\] is -1"):
        perplexity.compute(nll=[1.0], num_tokens=[1], num_words=[-1])
