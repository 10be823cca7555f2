"""The metrics' way in: sums as given, or texts scored by the scorer the metric script hands over."""

from __future__ import annotations

import pytest

from hf_lmobj.metrics.scoring import TextScore
from hf_lmobj.metrics.sums_metric import sums_from_compute_args


def test_texts_go_to_the_given_scorer_with_the_model_keywords():
    seen = {}

    def scorer(model, tokenizer, texts, **kwargs):
        seen.update(model=model, tokenizer=tokenizer, texts=texts, **kwargs)
        return [TextScore(nll=1.5, num_tokens=3, num_bytes=7, num_words=2) for _ in texts]

    sums = sums_from_compute_args(
        ["a b", "c d"], None, {"model_id": "m", "max_length": 8}, "num_tokens", ("num_words",), scorer
    )
    assert sums == {"nll": [1.5, 1.5], "num_tokens": [3, 3], "num_words": [2, 2]}
    assert seen == {"model": "m", "tokenizer": None, "texts": ["a b", "c d"], "max_length": 8}


def test_sums_pass_through_without_a_scorer():
    assert sums_from_compute_args(None, None, {"nll": [1.0], "num_bytes": [2]}, "num_bytes") == {
        "nll": [1.0],
        "num_bytes": [2],
    }


def test_texts_without_a_scorer_are_refused_by_name():
    with pytest.raises(ValueError, match="sums only .*no score_texts"):
        sums_from_compute_args(["a text"], None, {"model_id": "m"}, "num_tokens")


def test_scoring_keeps_the_first_release_behaviour_of_its_names():
    from hf_lmobj.metrics import scoring

    assert scoring.TextScoringMetric.score_texts is scoring.score_texts  # texts scored, as before the split
    with pytest.raises(ValueError, match="exactly one of model_id"):  # reaches the scorer's checks, not "sums only"
        scoring.text_sums_from_compute_args(["a text"], None, {}, "num_tokens")
