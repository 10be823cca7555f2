"""Adversarial inputs to ``ObjectiveTrainer``, ``make_compute_loss_func`` and ``LanguageModelingMetrics``.

Input classes: arguments (objective, chunk size, flags, loss options), eval sets that cannot
produce a single target (every label -100, no labels at all: ``nan`` and a warning, never 0.0),
counts of the metrics pair, and the overflow of perplexity (inf, consistent with the metrics).
"""

from __future__ import annotations

import math

import datasets
import pytest
import torch
from transformers import EvalPrediction, TrainingArguments, default_data_collator

from hf_lmobj import ObjectiveTrainer
from hf_lmobj.metrics.trainer_metrics import LanguageModelingMetrics
from hf_lmobj.trainer.compute_loss import make_compute_loss_func
from tests.testing_utils import tiny_gpt2

V = 64


@pytest.fixture(scope="module")
def model():
    return tiny_gpt2(vocab_size=V, positions=16, width=16, layers=1)


def _trainer(model, tmp_path, **kwargs) -> ObjectiveTrainer:
    args = TrainingArguments(str(tmp_path), per_device_eval_batch_size=2, report_to=[], use_cpu=True, disable_tqdm=True)
    return ObjectiveTrainer(model=model, args=args, data_collator=default_data_collator, **kwargs)


def _rows(labels: list[list[int]]) -> datasets.Dataset:
    return datasets.Dataset.from_dict({"input_ids": [[1, 2, 3, 4]] * len(labels), "labels": labels})


@pytest.mark.parametrize(
    "kwargs, error, word",
    [
        ({"objective": "gpt"}, ValueError, "objective must be one of"),
        ({"objective": "sequence_classification"}, ValueError, "not a pre-training objective"),
        ({"chunk_size": 0}, ValueError, "chunk_size"),
        ({"chunk_size": 2.5}, TypeError, "chunk_size"),
        ({"use_linear_head": "no"}, TypeError, "use_linear_head"),
        ({"z_loss": math.nan}, ValueError, "z_loss"),
        ({"z_loss": -1.0}, ValueError, "z_loss"),
        ({"logit_softcap": 0.0}, ValueError, "logit_softcap"),
        ({"compute_loss_func": lambda *a, **k: None}, ValueError, "compute_loss_func"),
    ],
)
def test_trainer_arguments(model, tmp_path, kwargs, error, word):
    with pytest.raises(error, match=word):
        _trainer(model, tmp_path, **kwargs)


@pytest.mark.parametrize(
    "labels",
    [
        pytest.param([[-100] * 4] * 3, id="every-label-ignored"),
        pytest.param([[7, -100, -100, -100]] * 2, id="only-first"),
    ],
)
def test_eval_without_a_target_is_nan_with_a_warning_never_zero(model, tmp_path, labels):
    trainer = _trainer(model, tmp_path)
    with pytest.warns(RuntimeWarning, match="no target"):
        metrics = trainer.evaluate(_rows(labels))
    assert math.isnan(metrics["eval_loss"]) and math.isnan(metrics["eval_perplexity"])
    assert metrics["eval_num_target_tokens"] == 0


def test_eval_without_labels_is_nan_with_a_warning(model, tmp_path):
    trainer = _trainer(model, tmp_path)
    with pytest.warns(RuntimeWarning, match="no target"):
        metrics = trainer.evaluate(datasets.Dataset.from_dict({"input_ids": [[1, 2, 3, 4]] * 2}))
    assert math.isnan(metrics["eval_loss"])


def test_eval_loss_is_the_corpus_mean_and_perplexity_its_exponential(model, tmp_path):
    trainer = _trainer(model, tmp_path)
    metrics = trainer.evaluate(_rows([[1, 2, 3, 4], [1, -100, 3, -100], [1, 2, -100, 4]]))
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([[1, 2, 3, 4]])).logits[0, :-1]  # (3, V)
    nll = torch.nn.functional.cross_entropy(logits, torch.tensor([2, 3, 4]), reduction="none")
    expected = (nll.sum() + nll[1] + nll[0] + nll[2]) / 6  # targets: 3 + 1 (3) + 2 (2, 4)
    assert metrics["eval_num_target_tokens"] == 6
    assert metrics["eval_loss"] == pytest.approx(expected.item(), rel=1e-5)
    assert metrics["eval_perplexity"] == pytest.approx(math.exp(expected.item()), rel=1e-5)


@pytest.mark.parametrize(
    "objective, options, error",
    [
        ("gpt", {}, ValueError),
        ("causal", {"label_smoothing": math.nan}, ValueError),
        ("masked", {"z_loss": "1e-4"}, TypeError),
        ("span", {"logit_softcap": -3.0}, ValueError),
    ],
)
def test_make_compute_loss_func_checks_at_construction(objective, options, error):
    with pytest.raises(error):
        make_compute_loss_func(objective, **options)


def test_make_compute_loss_func_refuses_float_labels():
    fn = make_compute_loss_func("masked")
    with pytest.raises(TypeError, match="integer class indices"):
        fn({"logits": torch.zeros(1, 2, V)}, torch.tensor([[1.0, 2.0]]))


# --------------------------------------------------------------------------- the stock-Trainer metrics pair
@pytest.mark.parametrize(
    "kwargs, error",
    [
        ({"num_bytes": 0}, ValueError),
        ({"num_bytes": 1.5}, ValueError),
        ({"num_bytes": True}, TypeError),
        ({"num_bytes": "100"}, TypeError),
        ({"num_rows": -1}, ValueError),
    ],
)
def test_metrics_pair_counts(kwargs, error):
    with pytest.raises(error, match=next(iter(kwargs))):
        LanguageModelingMetrics(**kwargs)


def test_metrics_pair_without_targets_is_nan_with_a_warning():
    metrics = LanguageModelingMetrics(num_bytes=10)
    with pytest.warns(RuntimeWarning, match="no target"):
        out = metrics.compute_metrics(EvalPrediction(predictions=torch.zeros(2, 2).numpy(), label_ids=None))
    assert math.isnan(out["perplexity"]) and math.isnan(out["bits_per_byte"]) and out["num_tokens"] == 0


def test_metrics_pair_overflows_to_inf_like_the_metric():
    rows = torch.tensor([[1e6, 1.0]]).numpy()
    out = LanguageModelingMetrics().compute_metrics(EvalPrediction(predictions=rows, label_ids=None))
    assert out["perplexity"] == math.inf and out["nll_per_token"] == 1e6
