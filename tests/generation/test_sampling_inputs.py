"""Adversarial inputs to ``SamplingLogitsProcessor`` (and ``sample_next_token``): clear errors or exact filtering.

Input classes: probabilities (``top_p``, ``min_p``: 0, 1, NaN, strings, bools, per-row lists
with a bool), temperatures (negative, inf, tiny enough to overflow float32, huge), ``top_k`` and
``min_tokens_to_keep`` (floats, bools, negatives), per-row tensors of the wrong size or dtype,
and scores (integer, bool, 1-D, NaN / +inf, all ``-inf``, float16, top-p near 1 in float32).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_lmobj import SamplingLogitsProcessor
from hf_lmobj.generation.sampling import sample_next_token


def _top_p_reference(x: torch.Tensor, top_p: float) -> torch.Tensor:
    """(B, V) bool: the textbook rule in float64 (keep a token when the mass ranked above it < top_p)."""
    probs = x.double().softmax(-1)
    ranked, order = probs.sort(-1, descending=True)
    above = ranked.cumsum(-1) - ranked
    keep_ranked = above < top_p
    keep_ranked[:, 0] = True
    threshold = torch.where(keep_ranked, ranked, math.inf).amin(-1, keepdim=True)  # smallest kept probability
    return probs >= threshold


@pytest.mark.parametrize(
    "kwargs, error, word",
    [
        (dict(top_p=0.0), ValueError, "top_p"),
        (dict(top_p=1.0000001), ValueError, "top_p"),
        (dict(top_p=math.nan), ValueError, "top_p"),
        (dict(top_p="0.9"), TypeError, "top_p"),
        (dict(top_p=True), TypeError, "top_p"),
        (dict(top_p=[0.5, True]), TypeError, "top_p"),
        (dict(top_p=[0.5, "0.9"]), TypeError, "top_p"),
        (dict(top_p=torch.tensor([0.5, 1.5])), ValueError, "top_p"),
        (dict(top_p=torch.tensor([[0.5]])), ValueError, "1-D"),
        (dict(top_p=torch.tensor([True])), TypeError, "top_p"),
        (dict(min_p=-0.1), ValueError, "min_p"),
        (dict(min_p=1.1), ValueError, "min_p"),
        (dict(min_p=math.inf), ValueError, "min_p"),
        (dict(temperature=-1.0), ValueError, "temperature"),
        (dict(temperature=math.inf), ValueError, "temperature"),
        (dict(temperature=math.nan), ValueError, "temperature"),
        (dict(temperature="hot"), TypeError, "temperature"),
        (dict(temperature=False), TypeError, "temperature"),
        (dict(temperature=torch.tensor([1.0, -0.5])), ValueError, "temperature"),
        (dict(top_k=2.5), TypeError, "top_k"),
        (dict(top_k=2.0), TypeError, "top_k"),
        (dict(top_k=-1), ValueError, "top_k"),
        (dict(top_k=True), TypeError, "top_k"),
        (dict(top_k=torch.tensor([1.0])), TypeError, "integer"),
        (dict(top_k=[1, 2.5]), TypeError, "top_k"),
        (dict(min_tokens_to_keep=0), ValueError, "min_tokens_to_keep"),
        (dict(min_tokens_to_keep=1.0), TypeError, "min_tokens_to_keep"),
        (dict(min_tokens_to_keep=True), TypeError, "min_tokens_to_keep"),
    ],
)
def test_bad_parameters(kwargs, error, word):
    with pytest.raises(error, match=word):
        SamplingLogitsProcessor(**kwargs)


@pytest.mark.parametrize(
    "scores, error, word",
    [
        (torch.tensor([[3, 2, 1]]), TypeError, "floating point"),
        (torch.tensor([[True, False]]), TypeError, "floating point"),
        (torch.tensor([[1 + 1j, 2 + 0j]]), TypeError, "floating point"),
        (torch.zeros(4), ValueError, "batch, vocab"),
        (torch.zeros(1, 2, 3), ValueError, "batch, vocab"),
        ([[1.0, 2.0]], TypeError, "torch.Tensor"),
        (torch.tensor([[0.0, math.nan]]), ValueError, "NaN"),
        (torch.tensor([[0.0, math.inf]]), ValueError, r"\+inf"),
    ],
)
def test_bad_scores(scores, error, word):
    with pytest.raises(error, match=word):
        SamplingLogitsProcessor(top_k=1)(None, scores)


def test_per_row_values_must_match_the_batch():
    with pytest.raises(ValueError, match="3 values but the batch has 4 rows"):
        SamplingLogitsProcessor(top_p=[0.5, 0.6, 0.7])(None, torch.zeros(4, 5))


def test_numpy_parameters_are_numbers():
    proc = SamplingLogitsProcessor(temperature=np.float32(0.5), top_k=np.int64(2), top_p=np.float64(0.99))
    out = proc(None, torch.tensor([[1.0, 3.0, 2.0]]))
    assert out.tolist() == [[-math.inf, 6.0, 4.0]]


def test_sampling_a_row_without_a_finite_score_names_it():
    scores = torch.zeros(2, 3)
    scores[1] = -math.inf
    with pytest.raises(ValueError, match=r"rows \[1\]"):
        sample_next_token(scores)


# --------------------------------------------------------------------------- numerically limited regimes
@pytest.mark.parametrize("top_p", [0.999999, 0.9999999, 1 - 1e-9])
def test_top_p_near_one_on_float32_cuts_where_float64_does(top_p):
    g = torch.Generator().manual_seed(197)
    x = torch.randn(1, 1000, generator=g) * 3
    x[0, :3] += torch.tensor([25.0, 20.0, 17.0])  # peaked: a handful of tokens hold all but ~1e-6
    kept = SamplingLogitsProcessor(top_p=top_p)(None, x).isfinite()
    assert torch.equal(kept, _top_p_reference(x, top_p))
    assert kept.sum() < 1000  # a cut was made


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(0, 10_000),
    vocab=st.integers(2, 3000),
    peak=st.floats(0.0, 40.0),
    top_p=st.sampled_from([0.5, 0.9, 0.99, 0.999, 0.999999, 1 - 1e-8]),
)
def test_top_p_equals_the_float64_rule(seed, vocab, peak, top_p):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, vocab, generator=g) * 2
    x[:, 0] += peak
    kept = SamplingLogitsProcessor(top_p=top_p)(None, x).isfinite()
    reference = _top_p_reference(x, top_p)
    # the rule on exact float64 sums; a tie with the boundary (equal scores) keeps both in both
    assert torch.equal(kept, reference)


@pytest.mark.parametrize("temperature", [1e-30, 1e-40, 1e-45, 1e-300])
def test_a_temperature_that_overflows_float32_gives_the_greedy_distribution(temperature):
    scores = torch.tensor([[1e10, 1e10 - 1e3, 0.0], [3.0, 2.0, -1.0]])
    out = SamplingLogitsProcessor(temperature=temperature)(None, scores)
    assert not out.isnan().any() and not (out == math.inf).any()
    assert out.softmax(-1).tolist() == [[1.0, 0.0, 0.0], [1.0, 0.0, 0.0]]


@settings(max_examples=60, deadline=None)
@given(
    logits=st.lists(st.floats(-(2.0**100), 2.0**100, width=32), min_size=2, max_size=8),
    temperature=st.floats(1e-40, 1e3),
)
def test_temperature_gives_the_float64_softmax(logits, temperature):
    x = torch.tensor([logits], dtype=torch.float32)
    out = SamplingLogitsProcessor(temperature=temperature)(None, x)
    assert out.isfinite().any() and not out.isnan().any() and not (out == math.inf).any()
    expected = (x.double() / temperature).softmax(-1)
    if expected.isfinite().all():
        torch.testing.assert_close(out.double().softmax(-1), expected, atol=1e-6, rtol=1e-4)


def test_a_huge_temperature_leaves_a_uniform_distribution():
    out = SamplingLogitsProcessor(temperature=1e30)(None, torch.tensor([[5.0, -5.0]]))
    assert out.softmax(-1).tolist() == [[0.5, 0.5]]


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_scores_keep_what_float32_keeps(dtype):
    g = torch.Generator().manual_seed(3)
    scores = (torch.randn(3, 200, generator=g) * 4).to(dtype)
    proc = SamplingLogitsProcessor(temperature=0.01, top_k=50, top_p=0.95, min_p=0.01)
    out = proc(None, scores)
    assert out.dtype == dtype and not out.isnan().any()
    assert torch.equal(out.isfinite(), proc(None, scores.float()).isfinite())


def test_an_all_minus_inf_row_passes_through():
    scores = torch.tensor([[-math.inf, -math.inf], [0.0, 1.0]])
    out = SamplingLogitsProcessor(temperature=0.5, top_p=0.5)(None, scores)
    assert out[0].tolist() == [-math.inf, -math.inf] and out[1].tolist() == [-math.inf, 2.0]


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16])
def test_the_input_scores_are_never_modified(dtype):
    scores = (torch.randn(4, 300, generator=torch.Generator().manual_seed(1)) * 3).to(dtype)
    before = scores.clone()
    SamplingLogitsProcessor(temperature=0.7, top_k=40, top_p=0.999999, min_p=0.001)(None, scores)
    assert torch.equal(scores, before)
