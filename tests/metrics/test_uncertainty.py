"""Bootstrap intervals and paired comparisons: coverage with a known truth, hand-computed tests, hostile inputs."""

from __future__ import annotations

import math
import statistics
from fractions import Fraction

import numpy as np
import pytest

from hf_lmobj.metrics.slices import LN2, DocumentSums, domain_figures
from hf_lmobj.metrics.uncertainty import (
    bootstrap_intervals,
    interval_keys,
    minimum_detectable_effect,
    paired_comparison,
    sign_test,
)


def table(nll, nbytes, domain, tokens=None, words=None, doc_id=None) -> DocumentSums:
    n = len(nll)
    return DocumentSums(
        nll=list(nll),
        tokens=list(nbytes) if tokens is None else tokens,
        bytes=list(nbytes),
        words=[0] * n if words is None else words,
        doc_id=list(range(n)) if doc_id is None else doc_id,
        domain=list(domain),
    )


def synthetic(rng, sizes: dict[str, int], bits_per_byte: dict[str, float]) -> DocumentSums:
    """Documents of 50..399 bytes whose bits per byte are Gamma(2)-distributed around each domain's mean."""
    domains, nbytes, nll = [], [], []
    for domain, n in sizes.items():
        b = rng.integers(50, 400, n)
        rate = rng.gamma(2.0, bits_per_byte[domain] / 2.0, n)
        domains += [domain] * n
        nbytes.append(b)
        nll.append(b * LN2 * rate)
    nbytes = np.concatenate(nbytes)
    return table(np.concatenate(nll), nbytes, domains, tokens=list(nbytes // 4 + 1))


@pytest.fixture(scope="module")
def levels_table() -> DocumentSums:
    rng = np.random.default_rng(3)
    return synthetic(
        rng, {"code/c": 30, "code/python": 40, "wiki": 50}, {"code/c": 0.6, "code/python": 0.9, "wiki": 1.2}
    )


def test_the_95_percent_interval_covers_the_true_micro_and_macro_in_95_percent_of_eval_sets():
    # truth: the domains' expected bits per byte are 0.8 (200 documents) and 1.4 (100 documents), with the same
    # byte-length distribution, so the micro truth is (200 * 0.8 + 100 * 1.4) / 300 = 1.0 and the macro 1.1
    rng, trials = np.random.default_rng(0), 500
    hits = {"micro": 0, "macro": 0}
    for trial in range(trials):
        sums = synthetic(rng, {"a": 200, "b": 100}, {"a": 0.8, "b": 1.4})
        intervals = bootstrap_intervals(sums, samples=1000, confidence=0.95, seed=trial)
        for key, truth in (("micro", 1.0), ("macro", 1.1)):
            low, high = intervals[f"bits_per_byte/{key}"]
            hits[key] += low <= truth <= high
    assert 0.92 <= hits["micro"] / trials <= 0.98
    assert 0.92 <= hits["macro"] / trials <= 0.98


@pytest.mark.parametrize("levels", [True, False])
def test_an_interval_for_every_figure_in_the_order_of_domain_figures(levels_table, levels):
    intervals = bootstrap_intervals(levels_table, samples=200, levels=levels)
    point = domain_figures(levels_table, levels)
    assert list(intervals) == list(point)
    assert all(low <= point[key] <= high for key, (low, high) in intervals.items())


def test_word_perplexity_gets_an_interval_when_words_were_counted():
    t = table([1.0, 2.0, 3.0], [4, 4, 4], ["x"] * 3, words=[2, 2, 3])
    intervals = bootstrap_intervals(t, samples=100)
    assert [k for k in intervals if k.startswith("word_perplexity")] == [
        "word_perplexity/x",
        "word_perplexity/micro",
        "word_perplexity/macro",
    ]


def test_the_same_seed_gives_the_same_intervals_and_another_seed_others(levels_table):
    first = bootstrap_intervals(levels_table, samples=300, seed=5)
    assert bootstrap_intervals(levels_table, samples=300, seed=5) == first
    assert bootstrap_intervals(levels_table, samples=300, seed=6) != first


def test_the_rows_order_does_not_change_the_intervals(levels_table):
    order = np.random.default_rng(1).permutation(len(levels_table))
    fields = ("nll", "tokens", "bytes", "words", "doc_id", "domain")
    shuffled = DocumentSums(*([getattr(levels_table, f)[i] for i in order] for f in fields))
    assert bootstrap_intervals(shuffled, samples=200) == bootstrap_intervals(levels_table, samples=200)


def test_a_one_document_domain_has_a_zero_width_interval_at_its_figure():
    t = table([3 * LN2, 1.0, 2.0], [2, 3, 5], ["solo", "many", "many"])
    intervals = bootstrap_intervals(t, samples=100)
    assert intervals["bits_per_byte/solo"] == (1.5, 1.5)
    assert intervals["perplexity/solo"] == pytest.approx((2**1.5, 2**1.5))


def test_nll_near_the_largest_float_gives_finite_intervals_not_nan():
    t = table([1e308, 1e308, 1e308], [1, 1, 1], ["x"] * 3)
    intervals = bootstrap_intervals(t, samples=50)
    assert intervals["bits_per_byte/micro"] == pytest.approx((1e308 / LN2, 1e308 / LN2))
    assert intervals["perplexity/micro"] == (math.inf, math.inf)
    assert paired_comparison(t, t, samples=50)["compare/bits_per_byte/x_ci_low"] == 0.0


def test_perplexity_intervals_are_exp_of_the_log_loss_intervals(levels_table):
    intervals = bootstrap_intervals(levels_table, samples=300)
    low, high = intervals["bits_per_byte/micro"]
    assert intervals["byte_perplexity/micro"] == pytest.approx((2**low, 2**high), rel=1e-12)


def test_a_wider_confidence_gives_a_wider_interval(levels_table):
    narrow = bootstrap_intervals(levels_table, samples=500, confidence=0.5)["bits_per_byte/micro"]
    wide = bootstrap_intervals(levels_table, samples=500, confidence=0.99)["bits_per_byte/micro"]
    assert wide[0] < narrow[0] < narrow[1] < wide[1]


def test_interval_keys_are_the_metrics_json_bounds():
    assert interval_keys({"perplexity/wiki": (2.0, 3.0)}) == {
        "perplexity/wiki_ci_low": 2.0,
        "perplexity/wiki_ci_high": 3.0,
    }


T1 = table([1.0, 2.0], [2, 2], ["x", "x"])


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"samples": 0}, ValueError, "samples must be an int >= 1"),
        ({"samples": -5}, ValueError, "samples must be an int >= 1"),
        ({"samples": 10.0}, TypeError, "samples must be an int"),
        ({"samples": True}, TypeError, "samples must be an int"),
        ({"samples": 10**9}, ValueError, "use fewer samples"),
        ({"confidence": 0}, ValueError, r"confidence must be a number in \(0, 1\)"),
        ({"confidence": 1.0}, ValueError, r"confidence must be a number in \(0, 1\)"),
        ({"confidence": 95}, ValueError, r"confidence must be a number in \(0, 1\)"),
        ({"confidence": float("nan")}, ValueError, "confidence must be a number"),
        ({"confidence": "0.95"}, TypeError, "confidence must be a number"),
        ({"seed": -1}, ValueError, r"seed must be an int in \[0, 2\*\*32\)"),
        ({"seed": 2**32}, ValueError, "seed must be an int"),
        ({"seed": 1.5}, TypeError, "seed must be an int"),
        ({"levels": 1}, TypeError, "levels must be True or False"),
    ],
)
def test_bootstrap_refuses_bad_settings_by_name(kwargs, error, match):
    with pytest.raises(error, match=match):
        bootstrap_intervals(T1, **kwargs)


def test_bootstrap_refuses_what_is_not_a_table():
    with pytest.raises(TypeError, match="sums must be a DocumentSums"):
        bootstrap_intervals({"nll": [1.0], "bytes": [1]})


def test_a_model_compared_with_itself_differs_by_zero_with_an_interval_at_zero(levels_table):
    out = paired_comparison(levels_table, levels_table, samples=300)
    for suffix in ("code", "code/macro", "code/c", "code/python", "wiki", "micro", "macro"):
        key = f"compare/bits_per_byte/{suffix}"
        assert (out[key], out[f"{key}_ci_low"], out[f"{key}_ci_high"]) == (0.0, 0.0, 0.0)
    assert out["compare/sign_test_p/micro"] == 1.0
    assert out["compare/win_rate/micro"] == 0.0
    assert out["compare/ties/micro"] == out["compare/documents/micro"] == 120
    assert out["compare/mde_bits_per_byte/micro"] == 0.0


def test_a_planted_improvement_is_detected(levels_table):
    rng = np.random.default_rng(9)
    better = np.asarray(levels_table.nll) * rng.uniform(0.90, 1.04, len(levels_table))  # mostly 3% better
    b = DocumentSums(
        better.tolist(), *(getattr(levels_table, f) for f in ("tokens", "bytes", "words", "doc_id", "domain"))
    )
    out = paired_comparison(levels_table, b, samples=1000)
    assert out["compare/bits_per_byte/micro"] < 0
    assert out["compare/bits_per_byte/micro_ci_high"] < 0 and out["compare/bits_per_byte/macro_ci_high"] < 0
    assert out["compare/sign_test_p/micro"] < 0.05
    assert out["compare/win_rate/micro"] > 0.5
    point_a, point_b = domain_figures(levels_table), domain_figures(b)
    assert out["compare/bits_per_byte/wiki"] == point_b["bits_per_byte/wiki"] - point_a["bits_per_byte/wiki"]


def test_the_paired_interval_resamples_the_documents_of_the_single_bootstrap(levels_table):
    zero = DocumentSums(
        [0.0] * len(levels_table), *(getattr(levels_table, f) for f in ("tokens", "bytes", "words", "doc_id", "domain"))
    )
    out = paired_comparison(levels_table, zero, samples=400, seed=4)
    single = bootstrap_intervals(levels_table, samples=400, seed=4)
    for suffix in ("code/python", "code/macro", "micro", "macro"):
        low, high = single[f"bits_per_byte/{suffix}"]
        assert out[f"compare/bits_per_byte/{suffix}_ci_low"] == pytest.approx(-high, rel=1e-12)
        assert out[f"compare/bits_per_byte/{suffix}_ci_high"] == pytest.approx(-low, rel=1e-12)


def test_win_rate_sign_test_and_mde_by_hand():
    # 5 documents of 1 byte: b is better on 3 (by 0.1, 0.2, 0.3 bits), worse on 1 (by 0.4), tied on 1
    a = table([1.0] * 5, [1] * 5, ["x"] * 5)
    b = table([1.0 - 0.1 * LN2, 1.0 - 0.2 * LN2, 1.0 - 0.3 * LN2, 1.0 + 0.4 * LN2, 1.0], [1] * 5, ["x"] * 5)
    out = paired_comparison(a, b, samples=50)
    assert out["compare/win_rate/x"] == 3 / 5
    assert out["compare/ties/x"] == 1
    assert out["compare/sign_test_p/x"] == 2 * (1 + 4) / 16  # 3 wins and 1 loss of 4: 2 P(X <= 1), X ~ Bin(4, 1/2)
    differences = [-0.1, -0.2, -0.3, 0.4, 0.0]
    z = 1.959963984540054 + 0.8416212335729143  # z_{0.975} + z_{0.8}
    assert out["compare/mde_bits_per_byte/x"] == pytest.approx(z * statistics.stdev(differences) / math.sqrt(5))
    assert out["compare/bits_per_byte/x"] == pytest.approx(-0.2 / 5)


def test_mde_formula_by_hand():
    # differences 0.1 .. 0.4: sd = sqrt(((.15)^2 + (.05)^2) * 2 / 3) = 0.1290994..., n = 4
    assert minimum_detectable_effect([0.1, 0.2, 0.3, 0.4]) == pytest.approx(2.801585218 * 0.1290994449 / 2, rel=1e-8)
    assert minimum_detectable_effect([0.1, 0.2, 0.3, 0.4], alpha=0.01, power=0.9) == pytest.approx(
        (2.5758293035489 + 1.2815515655446) * 0.1290994449 / 2, rel=1e-8
    )
    with pytest.raises(ValueError, match="at least 2 finite"):
        minimum_detectable_effect([0.1])


@pytest.mark.parametrize(
    "wins, losses, p",
    [
        (9, 1, 22 / 1024),
        (1, 9, 22 / 1024),
        (5, 5, 1.0),
        (0, 0, 1.0),
        (10, 0, 2 / 1024),
        (0, 20, 2 / 2**20),
        (1, 0, 1.0),
    ],
)
def test_sign_test_exact_values(wins, losses, p):
    assert sign_test(wins, losses) == p


def test_sign_test_on_many_pairs_matches_exact_fractions():
    n, k = 8200, 4000
    term, total = 1, 1  # C(n, 0); every term up to C(n, k), exactly, by the upward recurrence
    for i in range(k):
        term = term * (n - i) // (i + 1)
        total += term
    assert term == math.comb(n, k)
    exact = Fraction(2 * total, 2**n)
    assert sign_test(k, n - k) == pytest.approx(float(exact), rel=1e-15)
    assert sign_test(0, 100_000) == 0.0  # 2 ** -99999 is below the smallest float


@pytest.mark.parametrize(
    "wins, losses, error", [(-1, 3, ValueError), (2, -3, ValueError), (2.0, 3, TypeError), (True, 3, TypeError)]
)
def test_sign_test_refuses_bad_counts(wins, losses, error):
    with pytest.raises(error, match="must be an int >= 0"):
        sign_test(wins, losses)


def test_b_in_another_row_order_is_aligned_by_doc_id(levels_table):
    order = np.random.default_rng(2).permutation(len(levels_table))
    fields = ("nll", "tokens", "bytes", "words", "doc_id", "domain")
    shuffled = DocumentSums(*([getattr(levels_table, f)[i] for i in order] for f in fields))
    assert paired_comparison(levels_table, shuffled, samples=100)["compare/bits_per_byte/micro_ci_high"] == 0.0


def test_macro_keys_carry_no_document_tests_and_one_document_domains_no_mde():
    t = table([1.0, 2.0, 3.0], [2, 2, 2], ["a/x", "a/x", "b"])
    out = paired_comparison(t, t, samples=20)
    assert "compare/win_rate/a/macro" not in out and "compare/win_rate/macro" not in out
    assert "compare/mde_bits_per_byte/b" not in out and "compare/mde_bits_per_byte/a/x" in out


@pytest.mark.parametrize(
    "b, error, match",
    [
        (
            table([1.0, 2.0], [2, 2], ["x", "x"], doc_id=[0, 7]),
            ValueError,
            r"1 doc_id only in a \(first: \[1\]\), 1 only in b \(first: \[7\]\)",
        ),
        (table([1.0, 2.0], [2, 2], ["x", "y"]), ValueError, "doc_id 1 has domain 'x' in a and 'y' in b"),
        (table([1.0, 2.0], [2, 3], ["x", "x"]), ValueError, "doc_id 1 has 2 bytes in a and 3 in b: not the same text"),
        (table([1.0, 2.0], [2, 2], ["x", "x"], doc_id=["0", "1"]), TypeError, "same kind of doc_id"),
        (table([1.0], [2], ["x"]), ValueError, "only in a"),
        ([1.0, 2.0], TypeError, "b must be a DocumentSums"),
    ],
)
def test_paired_comparison_refuses_tables_of_other_documents_by_name(b, error, match):
    with pytest.raises(error, match=match):
        paired_comparison(T1, b, samples=10)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"samples": 0}, ValueError, "samples must be an int >= 1"),
        ({"confidence": 1.5}, ValueError, "confidence must be a number in"),
        ({"alpha": 0.0}, ValueError, r"alpha must be a number in \(0, 1\)"),
        ({"power": 1}, ValueError, r"power must be a number in \(0, 1\)"),
    ],
)
def test_paired_comparison_refuses_bad_settings_by_name(kwargs, error, match):
    with pytest.raises(error, match=match):
        paired_comparison(T1, T1, **kwargs)
