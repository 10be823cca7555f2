"""The pre-training report's evaluation (issue 36): figures per domain with intervals, lm-eval's byte and word
perplexity, loss by position and the contamination rate of its own validation split."""

from __future__ import annotations

import math

import pytest

from hf_lmobj.metrics.sums import bits_per_byte_from_sums
from tests.testing_utils import QUICK, ROOT, load_recipe

ARGS = ["--config", str(ROOT / "recipes/configs/causal/demo.yaml"), *QUICK, "--max_steps", "2",
        "--max_train_minutes", "null", "--torch_threads", "1", "--ngram_orders", "3", "--bootstrap_samples", "200",
        "--validation_fraction", "0.1"]  # fmt: skip


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[dict, str]:
    out = tmp_path_factory.mktemp("evaluation") / "run"
    metrics = load_recipe().main([*ARGS, "--output_dir", str(out)])
    return metrics, (out / "README.md").read_text()


def test_figures_per_stdlib_package_with_intervals(run):
    metrics, card = run
    domains = [k.split("/", 1)[1] for k in metrics if k.startswith("bits_per_byte/") and "_ci_" not in k]
    packages = [d for d in domains if d not in ("micro", "macro")]
    assert len(packages) >= 2 and "micro" in domains and "macro" in domains
    assert metrics["bits_per_byte/micro"] == pytest.approx(metrics["validation_bits_per_byte"], rel=1e-9)
    for domain in domains:
        low, high = metrics[f"bits_per_byte/{domain}_ci_low"], metrics[f"bits_per_byte/{domain}_ci_high"]
        assert low - 1e-9 <= metrics[f"bits_per_byte/{domain}"] <= high + 1e-9  # a one-document domain: low == high
    assert "bits_per_byte/micro_ci_low" in card and "loss_by_position.png" in card  # intervals and plot in the card


def test_lm_eval_byte_and_word_perplexity_beside_bits_per_byte(run):
    metrics, _ = run
    assert metrics["validation_byte_perplexity"] == pytest.approx(2 ** metrics["validation_bits_per_byte"], rel=1e-9)
    assert metrics["validation_word_perplexity"] > metrics["validation_byte_perplexity"]


def test_loss_by_position_buckets_average_to_the_whole(run):
    metrics, _ = run
    means = {k: v for k, v in metrics.items() if k.startswith("loss_by_position/") and not k.endswith("_targets")}
    counts = [metrics[f"{k}_targets"] for k in means]
    assert list(means)[0] == "loss_by_position/1-2" and all(math.isfinite(v) for v in means.values())
    assert sum(counts) == metrics["validation_tokens"]  # every scored target in one bucket
    weighted = sum(mean * count for mean, count in zip(means.values(), counts)) / sum(counts)
    assert weighted == pytest.approx(math.log(metrics["validation_perplexity"]), rel=1e-9)  # the buckets make the whole


def test_the_contamination_rate_of_its_own_split_is_reported(run):
    metrics, _ = run
    assert 0.0 <= metrics["contamination/rate"] <= 1.0 and metrics["contamination/documents"] >= 1
    assert metrics["contamination/n"] == 13


def test_micro_is_sum_over_sum():
    assert bits_per_byte_from_sums([2.0, 4.0], [10, 30]) == pytest.approx(6.0 / 40 / math.log(2))
