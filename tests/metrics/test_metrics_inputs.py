"""Adversarial inputs to the perplexity and bits-per-byte metrics: clear errors or the exact value.

Both metrics are loaded as a user would (``hf_lmobj.metrics.load``, i.e. ``evaluate.load`` of the
Space folders). Input classes: counts (fractions that ``evaluate``'s int64 cast would truncate,
bools, strings, 0, negatives, numpy ints, integral floats), NLL sums (NaN, negative, strings,
bools, overflowing), mismatched / empty lists, every way in (``compute``, ``add_batch``,
``add``), and the window lengths of model scoring (checked before any model is loaded).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_lmobj.metrics import load

COUNT = {"perplexity": "num_tokens", "bits_per_byte": "num_bytes"}


@pytest.fixture(scope="module")
def metrics():
    return {name: load(name) for name in COUNT}


def _value(name: str, nll: list[float], counts: list[int]) -> float:
    total = math.fsum(nll)
    if name == "perplexity":
        mean = total / sum(counts)
        return math.inf if mean > 709 else math.exp(mean)
    return total / math.log(2) / sum(counts)


@pytest.mark.parametrize("name", sorted(COUNT))
@pytest.mark.parametrize(
    "nll, counts, error, word",
    [
        pytest.param([1.0], [1.5], ValueError, "whole numbers", id="fractional-count"),
        pytest.param([1.0], [0.999], ValueError, "whole numbers", id="count-just-below-1"),
        pytest.param([1.0], [True], TypeError, "whole number", id="bool-count"),
        pytest.param([1.0], ["3"], TypeError, "whole number", id="string-count"),
        pytest.param([1.0], [None], TypeError, "whole number", id="none-count"),
        pytest.param([1.0], [0], ValueError, "is 0", id="zero-count"),
        pytest.param([1.0], [-2], ValueError, "negative", id="negative-count"),
        pytest.param([1.0], [math.nan], ValueError, "whole numbers", id="nan-count"),
        pytest.param([1.0], [math.inf], ValueError, "whole numbers", id="inf-count"),
        pytest.param([math.nan], [1], ValueError, "nll", id="nan-nll"),
        pytest.param([-0.5], [1], ValueError, "nll", id="negative-nll"),
        pytest.param(["1.0"], [1], TypeError, "nll", id="string-nll"),
        pytest.param([True], [1], TypeError, "nll", id="bool-nll"),
        pytest.param([1.0, 2.0], [1], ValueError, r"nll \(2\) and", id="mismatch"),
        pytest.param([], [], ValueError, "empty", id="empty"),
    ],
)
def test_bad_sums_are_refused_before_evaluate_casts_them(metrics, name, nll, counts, error, word):
    with pytest.raises(error, match=word):
        metrics[name].compute(nll=nll, **{COUNT[name]: counts})


@pytest.mark.parametrize("name", sorted(COUNT))
@pytest.mark.parametrize("how", ["add_batch", "add"])
def test_every_way_in_checks_counts(metrics, name, how):
    metric = metrics[name]
    value = [2.5] if how == "add_batch" else 2.5
    with pytest.raises(ValueError, match="whole numbers"):
        getattr(metric, how)(nll=[1.0] if how == "add_batch" else 1.0, **{COUNT[name]: value})


@pytest.mark.parametrize("name", sorted(COUNT))
def test_add_and_add_batch_give_the_corpus_value(metrics, name):
    metric = metrics[name]
    metric.add(nll=2.0, **{COUNT[name]: 2})
    metric.add_batch(nll=[4.0, 1.0], **{COUNT[name]: [np.int64(3), 3.0]})
    assert metric.compute()[name] == pytest.approx(_value(name, [2.0, 4.0, 1.0], [2, 3, 3]))


@pytest.mark.parametrize("nll", [1e6, 709 * 2.0, 1e300])
def test_perplexity_overflows_to_inf(metrics, nll):
    result = metrics["perplexity"].compute(nll=[nll], num_tokens=[1])
    assert result["perplexity"] == math.inf and result["perplexities"] == [math.inf]


def test_infinite_nll_is_an_infinite_perplexity(metrics):
    assert metrics["perplexity"].compute(nll=[math.inf], num_tokens=[3])["perplexity"] == math.inf


@settings(max_examples=40, deadline=None)
@given(
    entries=st.lists(st.tuples(st.floats(0, 1e4), st.integers(1, 10**6)), min_size=1, max_size=6),
    name=st.sampled_from(sorted(COUNT)),
)
def test_sums_give_the_corpus_formula(metrics, entries, name):
    nll, counts = [e[0] for e in entries], [e[1] for e in entries]
    got = metrics[name].compute(nll=nll, **{COUNT[name]: counts})[name]
    assert got == pytest.approx(_value(name, nll, counts), rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(count=st.floats(0.0, 1e6).filter(lambda c: not c.is_integer()), name=st.sampled_from(sorted(COUNT)))
def test_any_fractional_count_is_refused(metrics, count, name):
    with pytest.raises(ValueError, match="whole numbers"):
        metrics[name].compute(nll=[1.0], **{COUNT[name]: [count]})


@pytest.mark.parametrize("name", sorted(COUNT))
@pytest.mark.parametrize(
    "kwargs, error, word",
    [
        ({"stride": 0, "max_length": 8}, ValueError, "stride"),
        ({"stride": 9, "max_length": 8}, ValueError, "stride"),
        ({"stride": 2.5, "max_length": 8}, TypeError, "stride"),
        ({"max_length": 0}, ValueError, "max_length"),
        ({"max_length": 8.0}, TypeError, "max_length"),
        ({"batch_size": 0}, ValueError, "batch_size"),
        ({"batch_size": True}, TypeError, "batch_size"),
        ({"add_start_token": "no"}, TypeError, "add_start_token"),
    ],
)
def test_window_arguments_are_checked_before_any_model_loads(metrics, name, kwargs, error, word):
    with pytest.raises(error, match=word):  # model_id does not exist: the check comes first
        metrics[name].compute(predictions=["a text"], model_id="/nonexistent/model", **kwargs)


@pytest.mark.parametrize("name", sorted(COUNT))
def test_one_way_in_at_a_time(metrics, name):
    with pytest.raises(ValueError, match="not both"):
        metrics[name].compute(predictions=["a"], model_id="x", nll=[1.0], **{COUNT[name]: [1]})
    with pytest.raises(ValueError, match="references"):
        metrics[name].compute(predictions=["a"], references=["b"], model_id="x")
