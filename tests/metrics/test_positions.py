"""Per-target NLL out of ``score_texts`` and loss by position bucket: exact sums, windows and hostile input."""

from __future__ import annotations

import json
import math
import sys
from fractions import Fraction

import numpy as np
import pytest
import torch

from hf_lmobj.metrics.position_plot import plot_loss_by_position
from hf_lmobj.metrics.positions import (
    exact_sum,
    loss_by_position,
    merge_buckets,
    position_buckets,
)
from hf_lmobj.metrics.scoring import TextScore, TokenScore, plan_windows, score_texts

WINDOW_CASES = [  # (max_length, stride, windows, add_start_token)
    (16, 5, "strided", True),
    (16, 16, "strided", True),
    (24, 23, "strided", True),
    (256, None, "strided", True),
    (16, None, "lm_eval", True),
    (32, 7, "strided", False),
]


@pytest.fixture(scope="module")
def texts(corpus):
    """Texts of 1 to ~190 tokens, one with non-ASCII text, one ending with the EOS token's own text."""
    docs = corpus["train"]["text"]
    return [docs[0][:400], docs[1][:150] + "\n# 注释: héllo 😀\n", docs[2][:60] + "</s>", "x = 1"]


def scored(model, tokenizer, texts, max_length, stride, windows="strided", add_start_token=True, **kw):
    return score_texts(model, tokenizer, texts, max_length=max_length, stride=stride, windows=windows,
                       add_start_token=add_start_token, batch_size=3, progress=False, **kw)  # fmt: skip


@pytest.mark.parametrize("max_length,stride,windows,start", WINDOW_CASES)
def test_token_nll_sums_to_the_text_nll_exactly(tiny_gpt2, tokenizer, texts, max_length, stride, windows, start):
    off = scored(tiny_gpt2, tokenizer, texts, max_length, stride, windows, start)
    on = scored(tiny_gpt2, tokenizer, texts, max_length, stride, windows, start, return_token_nll=True)
    for plain, full in zip(off, on):
        assert type(full) is TokenScore and full.token_nll.dtype == np.float64 and full.token_context.dtype == np.int64
        assert len(full.token_nll) == len(full.token_context) == full.num_tokens
        assert full.nll == math.fsum(full.token_nll.tolist())  # exact, float64
        assert full.text_score[1:] == plain[1:]  # tokens, bytes, words unchanged
        assert full.nll == pytest.approx(plain.nll, rel=1e-6)  # float32 window sums vs exact sum of the same values


@pytest.mark.parametrize("max_length,stride,windows,start", WINDOW_CASES[:5])
def test_outputs_are_unchanged_when_off(tiny_gpt2, tokenizer, texts, max_length, stride, windows, start):
    default = scored(tiny_gpt2, tokenizer, texts, max_length, stride, windows, start)
    off = scored(tiny_gpt2, tokenizer, texts, max_length, stride, windows, start, return_token_nll=False)
    assert off == default and all(type(s) is TextScore and len(s) == 4 for s in off)


@pytest.mark.parametrize("max_length,stride", [(16, 5), (24, 23), (16, 16)])
def test_token_context_is_the_window_context_of_each_position(tiny_gpt2, tokenizer, texts, max_length, stride):
    (score,) = scored(tiny_gpt2, tokenizer, texts[:1], max_length, stride, return_token_nll=True)
    expected = np.zeros(score.num_tokens, dtype=np.int64)
    for begin, first, end in plan_windows(score.num_tokens + 1, max_length, stride):
        expected[first:end] = np.arange(first + 1, end + 1) - begin  # target t = p + 1 saw t - begin tokens
    assert score.token_context.tolist() == expected.tolist()
    assert score.token_context[:max_length].tolist() == list(range(1, max_length + 1))  # the first window: t itself
    assert score.token_context[max_length:].min() >= max_length - stride + 1 and score.token_context.max() <= max_length


def test_token_values_are_the_models_own_per_token_loss(tiny_gpt2, tokenizer, texts):
    (score,) = scored(tiny_gpt2, tokenizer, texts[1:2], 256, None, return_token_nll=True)
    ids = torch.tensor([[tokenizer.bos_token_id] + tokenizer(texts[1], add_special_tokens=False)["input_ids"]])
    with torch.no_grad():
        logits = tiny_gpt2(input_ids=ids).logits[0, :-1]
    reference = torch.nn.functional.cross_entropy(logits, ids[0, 1:], reduction="none")
    assert score.token_nll == pytest.approx(reference.double().numpy(), rel=1e-5, abs=1e-6)


def test_bos_is_never_a_target_and_only_the_texts_own_eos_is(tiny_gpt2, tokenizer, texts):
    with_bos, ends_with_eos = scored(tiny_gpt2, tokenizer, [texts[3], texts[2]], 64, None, return_token_nll=True)
    (without_bos,) = scored(tiny_gpt2, tokenizer, [texts[3]], 64, None, add_start_token=False, return_token_nll=True)
    text_ids = tokenizer(texts[3], add_special_tokens=False)["input_ids"]
    assert with_bos.num_tokens == len(text_ids) and without_bos.num_tokens == len(text_ids) - 1
    for score, ids in ((with_bos, [tokenizer.bos_token_id] + text_ids), (without_bos, text_ids)):
        with torch.no_grad():  # target k + 1 from tokens [0, k]: BOS is input only, the first text token its target
            logits = tiny_gpt2(input_ids=torch.tensor([ids])).logits[0, :-1]
        reference = torch.nn.functional.cross_entropy(logits, torch.tensor(ids[1:]), reduction="none")
        assert score.token_nll == pytest.approx(reference.double().numpy(), rel=1e-5, abs=1e-6)
    eos_ids = tokenizer(texts[2], add_special_tokens=False)["input_ids"]
    assert eos_ids[-1] == tokenizer.eos_token_id and ends_with_eos.num_tokens == len(eos_ids)  # no EOS added


@pytest.mark.parametrize(
    "max_position,base,edges",
    [(1, 2, [1, 2]), (2, 2, [1, 2, 4]), (7, 2, [1, 2, 4, 8]), (8, 2, [1, 2, 4, 8, 16]), (5, 3, [1, 3, 9]),
     (99, 10, [1, 10, 100]), (100, 10, [1, 10, 100, 1000]), (4097, 2, [2**k for k in range(14)])],
)  # fmt: skip
def test_position_buckets_are_exact_powers(max_position, base, edges):
    assert position_buckets(max_position, base) == edges


@pytest.mark.parametrize(
    "args,error,word",
    [((0,), ValueError, "max_position"), ((True,), TypeError, "max_position"), ((8, 1), ValueError, "base"),
     ((8, 2.0), TypeError, "base"), ((8.0,), TypeError, "max_position")],
)  # fmt: skip
def test_position_buckets_refuse_bad_arguments(args, error, word):
    with pytest.raises(error, match=word):
        position_buckets(*args)


def test_loss_by_position_against_a_hand_computed_table():
    result = loss_by_position([[1.0, 0.5, 0.25, 0.125], [2.0, 1.0]], [1, 2, 4, 8], contexts=[[1, 2, 2, 2], [1, 2]])
    rows = [
        (b["start"], b["stop"], b["texts"], b["count"], b["nll"], b["mean"], b["mean_context"])
        for b in result["buckets"]
    ]
    assert rows == [(1, 2, 2, 2, 3.0, 1.5, 1.0), (2, 4, 2, 3, 1.75, 1.75 / 3, 2.0), (4, 8, 1, 1, 0.125, 0.125, 2.0)]
    total = result["total"]
    assert (total["texts"], total["count"], total["nll"], total["context_sum"]) == (2, 6, 4.875, 10)
    assert result["edges"] == [1, 2, 4, 8]


def test_bucket_sums_equal_the_totals_exactly_on_scored_texts(tiny_gpt2, tokenizer, texts):
    scores = scored(tiny_gpt2, tokenizer, texts, 16, 5, return_token_nll=True)
    result = loss_by_position(scores, position_buckets(max(s.num_tokens for s in scores)))
    all_values = np.concatenate([s.token_nll for s in scores]).tolist()
    partials = [p for b in result["buckets"] for p in b["nll_partials"]]
    assert math.fsum(partials) == result["total"]["nll"] == math.fsum(all_values)
    assert sum((Fraction(p) for p in partials), Fraction(0)) == sum(map(Fraction, all_values), Fraction(0))
    assert sum(b["count"] for b in result["buckets"]) == result["total"]["count"] == sum(s.num_tokens for s in scores)
    assert result["buckets"][0]["texts"] == 4 and result["buckets"][-1]["texts"] == 1
    assert result["buckets"][-1]["mean_context"] <= 16 < result["buckets"][-1]["start"]  # windows bound the context


def test_sums_stay_exact_where_a_float_sum_would_not():
    values = [1e16, 1.0, 1.0, 3e-17, 2.5]  # a float sum left to right loses both ones (ulp 2 at 1e16)
    result = loss_by_position([values], [1, 2, 8])
    assert result["buckets"][1]["nll_partials"] == [4.5, 3e-17]  # 4.5 + 3e-17 exactly
    assert result["total"]["nll"] == 1e16 + 4 != sum(values)  # correctly rounded, unlike the naive sum
    assert sum(map(Fraction, result["total"]["nll_partials"])) == sum(map(Fraction, values))
    assert exact_sum(np.array(values)) == sum(map(Fraction, values)) and exact_sum(np.array([])) == 0


def test_an_infinite_nll_makes_its_bucket_and_the_total_infinite():
    result = loss_by_position([[1.0, math.inf, 2.0]], [1, 2, 4])
    assert [b["nll"] for b in result["buckets"]] == [1.0, math.inf] and result["buckets"][1]["mean"] == math.inf
    assert result["total"]["nll"] == math.inf and result["total"]["count"] == 3


def test_merging_ranks_equals_one_process_bit_for_bit(tiny_gpt2, tokenizer, texts):
    scores = scored(tiny_gpt2, tokenizer, texts, 16, 5, return_token_nll=True)
    edges = position_buckets(256)
    whole = loss_by_position(scores, edges)
    ranks = [loss_by_position(scores[0::2], edges), loss_by_position(scores[1::2], edges)]
    assert merge_buckets(ranks) == whole
    three = [loss_by_position(part, edges) for part in (scores[:1], scores[1:3], scores[3:])]
    assert merge_buckets([json.loads(json.dumps(r)) for r in three]) == whole  # ranks may exchange JSON


@pytest.mark.parametrize(
    "results,error,word",
    [([], TypeError, "non-empty"), ({"edges": [1, 2]}, TypeError, "list"), ([{"edges": [1, 2]}], ValueError, "not a"),
     ([loss_by_position([[1.0]], [1, 2]), loss_by_position([[1.0]], [1, 2, 4])], ValueError, "edges"),
     ([loss_by_position([[1.0]], [1, 2]), loss_by_position([[1.0]], [1, 2], contexts=[[1]])], ValueError, "contexts")],
)  # fmt: skip
def test_merge_refuses_results_that_do_not_add_up(results, error, word):
    with pytest.raises(error, match=word):
        merge_buckets(results)


def test_merge_refuses_a_bucket_without_its_exact_sums():
    result = loss_by_position([[1.0]], [1, 2])
    del result["buckets"][0]["nll_partials"]
    with pytest.raises(ValueError, match=r"results\[0\]\['buckets'\]\[0\]"):
        merge_buckets([result])


@pytest.mark.parametrize(
    "scores,edges,kwargs,error,word",
    [([[1.0] * 8], [1, 2, 4, 8], {}, ValueError, "position_buckets"), ([[1.0]], [2, 4], {}, ValueError, "start at 1"),
     ([[1.0]], [1, 4, 4], {}, ValueError, "increasing"), ([[1.0]], [1], {}, TypeError, "two ints"),
     ([[float("nan")]], [1, 2], {}, ValueError, r"scores\[0\]\[0\]"), ([[-0.5]], [1, 2], {}, ValueError, ">= 0"),
     ([[[1.0]]], [1, 2], {}, ValueError, "1-D"), ([], [1, 2], {}, TypeError, "non-empty"),
     ("abc", [1, 2], {}, TypeError, "non-empty list"), ([["a"]], [1, 2], {}, TypeError, "floats"),
     ([[1.0], [2.0]], [1, 2], {"contexts": [[1]]}, ValueError, "2 arrays"),
     ([[1.0, 2.0]], [1, 4], {"contexts": [[1]]}, ValueError, "2 ints"),
     ([[1.0]], [1, 2], {"contexts": [[0]]}, ValueError, "at least 1")],
)  # fmt: skip
def test_loss_by_position_refuses_hostile_input(scores, edges, kwargs, error, word):
    with pytest.raises(error, match=word):
        loss_by_position(scores, edges, **kwargs)


def test_token_scores_cannot_take_other_contexts_nor_mix_with_bare_arrays():
    score = TokenScore(3.0, 2, 2, 1, np.array([1.0, 2.0]), np.array([1, 2]))
    with pytest.raises(ValueError, match="contexts=None"):
        loss_by_position([score], [1, 4], contexts=[[1, 2]])
    with pytest.raises(ValueError, match="some texts have contexts"):
        loss_by_position([score, [1.0]], [1, 4])


def test_plot_writes_a_png(tmp_path):
    result = loss_by_position([[1.0, 0.5, 0.25], [2.0]], [1, 2, 4, 8])
    path = plot_loss_by_position(result, tmp_path / "figures" / "loss_by_position.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and [p.name for p in path.parent.iterdir()] == [path.name]
    for empty in (loss_by_position([[]], [1, 2]), loss_by_position([[math.inf]], [1, 2])):
        with pytest.raises(ValueError, match="nothing to plot"):
            plot_loss_by_position(empty, tmp_path / "empty.png")


def test_plot_without_matplotlib_names_the_extra(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match=r"pip install hf_lmobj\[recipes\]"):
        plot_loss_by_position(loss_by_position([[1.0]], [1, 2]), tmp_path / "x.png")
    assert not (tmp_path / "x.png").exists()


def test_return_token_nll_must_be_a_flag(tiny_gpt2, tokenizer):
    with pytest.raises(TypeError, match="return_token_nll"):
        score_texts(tiny_gpt2, tokenizer, ["abc"], max_length=16, progress=False, return_token_nll="yes")
