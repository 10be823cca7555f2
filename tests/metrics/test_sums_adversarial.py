"""Hostile sums: overflowing totals, huge counts, inf / NaN / negative NLL, bools, sets, mismatched or empty
lists, through the *_from_sums functions, the metrics' way in and lighteval's per-document sums."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from hf_lmobj.metrics import load
from hf_lmobj.metrics.lighteval_data import TextSums, corpus_figure, text_sums
from hf_lmobj.metrics.sums import (
    _check_counts,
    _check_flag,
    _check_int,
    _check_nll_sums,
    bits_per_byte_from_sums,
    byte_perplexity_from_sums,
    check_sums,
    check_window_lengths,
    nll_per_unit,
    perplexity_from_sums,
    total_nll,
    word_perplexity_from_sums,
)
from hf_lmobj.metrics.sums_metric import sums_from_compute_args

FIGURES = [perplexity_from_sums, bits_per_byte_from_sums, byte_perplexity_from_sums, word_perplexity_from_sums]
LN2 = math.log(2)


# ------------------------------------------------------------------------------ the example
@pytest.mark.parametrize("figure", FIGURES)
def test_huge_finite_nll_sums_give_inf_not_an_overflow_error(figure):
    assert figure([1e308, 1e308], [1, 1]) == (1e308 / LN2 if figure is bits_per_byte_from_sums else math.inf)
    assert figure([1.7e308, 1.7e308, 1.7e308], [1, 1, 1]) == math.inf  # the total and the ratio pass a float


@pytest.mark.parametrize(
    "nll, counts, want",
    [
        ([1e308, 1e308], [10**10, 10**10], float(Fraction(1e308) / Fraction(LN2) / 10**10)),  # exact, no overflow
        ([3.0], [10**400], 0.0),  # a count beyond a float: the ratio underflows to 0, no OverflowError
        ([math.inf, 1e308, 1e308], [1, 1, 1], math.inf),  # fsum overflows even beside an inf
        ([math.inf], [5], math.inf),
        ([-0.0], [4], 0.0),  # -0.0 is 0: never a "-0.0 bits per byte"
        ([0.0, 0.0], [1, 1], 0.0),
    ],
)
def test_bits_per_byte_at_the_edges_of_a_float(nll, counts, want):
    got = bits_per_byte_from_sums(nll, counts)
    assert got == want and math.copysign(1.0, got) == 1.0


@pytest.mark.parametrize(
    "nll, counts, want",
    [
        ([5.0, 7.0], [2, 4], 2.0),
        ([1e308, 1e308, 1e308], [3, 3, 3], float(Fraction(1e308) / 3)),  # exact through fractions
        ([float(2**1000)] * 4, [2**1000, 2**1000], 2.0),
    ],
)
def test_nll_per_unit_is_the_exact_ratio(nll, counts, want):
    assert nll_per_unit(nll, counts) == want


def test_total_nll_never_raises():
    assert total_nll([1e308, 1e308]) == math.inf and total_nll([0.1, 0.2]) == math.fsum([0.1, 0.2])
    assert total_nll([]) == 0.0


# --------------------------------------------------------------------------------------- check_sums
@pytest.mark.parametrize(
    "nll, counts, error, match",
    [
        ([], [], ValueError, "are empty; pass at least one entry"),
        ([1.0, 2.0], [3], ValueError, r"nll \(2\) and num_tokens \(1\) must have one entry per text"),
        ([1.0], [0], ValueError, r"num_tokens\[0\] is 0; it must be >= 1; every entry needs at least one"),
        ([1.0], [-3], ValueError, r"num_tokens\[0\] is -3; counts cannot be negative"),
        ([math.nan], [1], ValueError, r"nll\[0\] is nan; it must be a summed negative log-likelihood >= 0"),
        ([-1.0], [1], ValueError, r"nll\[0\] is -1.0"),
        ([-math.inf], [1], ValueError, r"nll\[0\] is -inf"),
        ([True], [1], TypeError, r"nll\[0\] must be a number"),
        ([1.0], [True], TypeError, r"num_tokens\[0\] must be a whole number"),
        ([np.bool_(True)], [1], TypeError, r"nll\[0\] must be a number"),
        (["1.0"], [1], TypeError, r"nll\[0\] must be a number .* got '1.0'"),
        ([1.0], ["3"], TypeError, r"num_tokens\[0\] must be a whole number, got '3'"),
        ([1.0], [1.5], ValueError, r"num_tokens\[0\] is 1.5; counts must be whole numbers"),
        ([1.0], [math.inf], ValueError, r"num_tokens\[0\] is inf"),
        ([1.0], [None], TypeError, r"num_tokens\[0\] must be a whole number, got None"),
        ([10**400], [1], ValueError, r"nll\[0\] is beyond the largest float"),
        ([Fraction(10**400)], [1], ValueError, r"nll\[0\] is beyond the largest float"),
        ({1.0, 2.0}, [1, 2], TypeError, "nll must be a list with one entry per text, in order; got a set"),
        ([1.0], {"a": 1}, TypeError, "num_tokens must be a list .* got a dict"),
        (np.ones((2, 1)), [1, 1], ValueError, r"nll must be 1-D .* shape \(2, 1\)"),
        (np.array(1.0), [1], ValueError, r"nll must be 1-D .* shape \(\)"),
        (np.float64(1.0), [1], TypeError, "nll must be a list with one entry per text, got float64"),
        ("1.0", [1], TypeError, "nll must be a list with one entry per text, got str"),
        ((x for x in [1.0]), [1], TypeError, "nll must be a list with one entry per text, got generator"),
    ],
)
def test_check_sums_refuses_by_entry(nll, counts, error, match):
    with pytest.raises(error, match=match):
        check_sums(nll, counts, "num_tokens")


def test_numpy_and_huge_counts_are_accepted_as_they_are():
    assert check_sums(np.array([1.5, 2.0], dtype=np.float32), np.array([3, 4], dtype=np.uint64), "n") == (
        [1.5, 2.0],
        [3, 4],
    )
    assert _check_counts([1e300], "num_bytes") == [int(1e300)]
    assert _check_nll_sums((Fraction(1, 2), np.float16(2))) == [0.5, 2.0]


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: _check_int(True, "max_length"), TypeError, "max_length must be an int >= 1, got True"),
        (lambda: _check_int(0, "stride"), ValueError, "stride must be an int >= 1, got 0"),
        (lambda: _check_int(8.0, "max_length"), TypeError, "got 8.0"),
        (lambda: _check_flag("False", "add_start_token"), TypeError, "add_start_token must be True or False"),
        (lambda: check_window_lengths(8, 9), ValueError, r"stride must be an int in \[1, max_length=8\]"),
    ],
)
def test_window_and_flag_checks(call, error, match):
    with pytest.raises(error, match=match):
        call()


# ----------------------------------------------------------------------------- the metrics' way in
@pytest.mark.parametrize(
    "predictions, references, kwargs, match",
    [
        (None, ["x"], {}, "this metric takes no references"),
        (None, None, {"model_id": "m"}, r"\['model_id'\] need predictions"),
        (["a"], None, {"model_id": "m", "nll": [1.0]}, "pass either predictions=texts .* not both"),
        (["a"], None, {"model_id": "m", "model": object()}, "exactly one of model_id"),
    ],
)
def test_sums_from_compute_args_refuses_two_ways_in(predictions, references, kwargs, match):
    with pytest.raises(ValueError, match=match):
        sums_from_compute_args(predictions, references, kwargs, "num_tokens", ("num_words",))


def test_a_misspelt_keyword_is_refused_by_name():
    with pytest.raises(
        TypeError,
        match=r"unknown keyword\(s\) \['num_token'\]; this metric takes the sums nll=, num_tokens=, num_words=",
    ):
        sums_from_compute_args(None, None, {"nll": [1.0], "num_token": [2]}, "num_tokens", ("num_words",))


@pytest.fixture(scope="module")
def perplexity():
    return load("perplexity")


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"nll": [1.0], "num_tokens": [2**63]}, ValueError, r"num_tokens\[0\] is 9223372036854775808, beyond"),
        ({"nll": [1.0], "num_tokens": [1], "num_words": [2**64]}, ValueError, r"num_words\[0\] .* beyond the metric"),
        ({"nll": [1.0], "num_token": [1]}, TypeError, r"unknown keyword\(s\) \['num_token'\]"),
        ({"nll": [1.0]}, ValueError, r"pass nll=\[...\] and num_tokens=\[...\]"),
        ({"nll": [1.0], "num_tokens": [1], "num_words": [-1]}, ValueError, r"num_words\[0\] is -1"),
        ({"nll": [1.0, 2.0], "num_tokens": [1, 1], "num_words": [1]}, ValueError, r"nll \(2\) and num_words \(1\)"),
    ],
)
def test_the_perplexity_metric_refuses_before_evaluate_casts(perplexity, kwargs, error, match):
    with pytest.raises(error, match=match):
        perplexity.compute(**kwargs)


def test_the_perplexity_metric_gives_inf_for_an_overflowing_corpus(perplexity):
    result = perplexity.compute(nll=[1e300, 1e300], num_tokens=[1, 1])
    assert result["perplexity"] == math.inf and result["num_tokens"] == 2


def test_add_refuses_a_text_and_wants_both_sums(perplexity):
    with pytest.raises(ValueError, match="add takes nll= and num_tokens="):
        perplexity.add(prediction="some text")
    with pytest.raises(ValueError, match="add needs nll= and num_tokens="):
        perplexity.add(nll=1.0)


# ------------------------------------------------------------------------- lighteval's per-document sums
@pytest.mark.parametrize(
    "text, logprobs, error, match",
    [
        ("a", [0.5], ValueError, r"logprobs\[0\] is 0.5; a log-probability must be <= 0"),
        ("a", [math.nan], ValueError, r"logprobs\[0\] is nan"),
        ("a", [], ValueError, "logprobs is empty: the document was not scored"),
        ("a", [True], TypeError, r"logprobs\[0\] must be a real number"),
        ("a", -1.0, TypeError, "logprobs must be a list of log-probabilities, got float"),
        ("", [-1.0], ValueError, "must be a non-empty string"),
        ("a\ud800", [-1.0], ValueError, "a lone surrogate"),
    ],
)
def test_text_sums_refuses_by_entry(text, logprobs, error, match):
    with pytest.raises(error, match=match):
        text_sums(text, logprobs)


def test_text_sums_of_huge_and_impossible_log_probabilities():
    assert text_sums("a b", [-1e308, -1e308]) == TextSums(math.inf, 3, 2)  # was an OverflowError in fsum
    assert text_sums("é", [-math.inf, -1.0]) == TextSums(math.inf, 2, 1)
    assert text_sums("x", [-0.0]).nll == 0.0


@pytest.mark.parametrize(
    "items, error, match",
    [
        ([], ValueError, "are empty"),
        ([(1.0, 1, 1)], TypeError, r"items\[0\] must be a TextSums"),
        (TextSums(1.0, 1, 1), TypeError, r"items\[0\] must be a TextSums"),  # one TextSums is no list of them
        ("abc", TypeError, "items must be a list of TextSums"),
        ([TextSums(1.0, 0, 1)], ValueError, r"num_bytes\[0\] is 0"),
    ],
)
def test_corpus_figure_refuses_what_is_not_a_list_of_text_sums(items, error, match):
    with pytest.raises(error, match=match):
        corpus_figure("bits_per_byte", items)
