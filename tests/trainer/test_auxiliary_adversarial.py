"""Adversarial inputs to ``AuxiliaryObjectiveTrainer``: eval sets that score nothing, wrong objectives and counts.

Input classes: eval sets without a single target (every label -100, no labels at all, no real token
for ELECTRA's RTD): ``nan`` and a warning, never a score, for MTP, ELECTRA and a plain model alike,
as ``ObjectiveTrainer``; an objective that contradicts the model; denominators without one count per
term; a model passed to ``compute_loss`` other than the trainer's; the stock model's tensor-parallel
degree seen through the wrapper.
"""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from auxiliary_step import build_aux_model, build_rows
from distributed_step import sgd_args

from hf_lmobj.models.mtp import MTPConfig, MultiTokenPredictionModel
from hf_lmobj.models.sharding import ranks_per_replica
from hf_lmobj.trainer.auxiliary import AuxiliaryObjectiveTrainer
from tests.testing_utils import build_model, stack_rows


def _trainer(model, tmp_path, eval_rows) -> AuxiliaryObjectiveTrainer:
    args = sgd_args(str(tmp_path), 4, 1)
    args.per_device_eval_batch_size = 4
    return AuxiliaryObjectiveTrainer(model=model, args=args, data_collator=stack_rows, eval_dataset=eval_rows)


def _mtp_rows(labels: str) -> list[dict]:
    rows = build_rows("mtp")[:4]
    if labels == "all -100":
        return [{**r, "labels": torch.full_like(r["labels"], -100), "shift_labels": torch.full_like(r["labels"], -100)}
                for r in rows]  # fmt: skip
    return [{"input_ids": r["input_ids"], "position_ids": r["position_ids"]} for r in rows]


@pytest.mark.parametrize("kind", ["mtp", "plain"])
@pytest.mark.parametrize("labels", ["all -100", "no labels"])
def test_a_causal_eval_set_without_targets_is_nan_with_a_warning(kind, labels, tmp_path, one_torch_thread):
    model = build_aux_model("mtp") if kind == "mtp" else build_model("causal")
    trainer = _trainer(model, tmp_path, _mtp_rows(labels))
    with pytest.warns(RuntimeWarning, match="no target"):
        metrics = trainer.evaluate()
    assert math.isnan(metrics["eval_loss"]) and math.isnan(metrics["eval_perplexity"])
    assert metrics["eval_num_target_tokens"] == 0


def _electra_rows(case: str) -> list[dict]:
    rows = build_rows("electra")[:4]
    if case == "no masked token":
        return [{**r, "labels": torch.full_like(r["labels"], -100)} for r in rows]
    return [{"input_ids": r["input_ids"], "attention_mask": r["attention_mask"]} for r in rows]


@pytest.mark.parametrize(
    "case, nan_terms, warnings",
    [
        ("no masked token", {"mlm_loss", "masked_accuracy"}, 1),
        ("no labels", {"mlm_loss", "masked_accuracy", "rtd_loss", "rtd_accuracy"}, 2),
    ],
)
def test_an_electra_eval_set_without_targets_is_nan_with_a_warning(case, nan_terms, warnings, tmp_path,
                                                                   one_torch_thread):  # fmt: skip
    trainer = _trainer(build_aux_model("electra"), tmp_path, _electra_rows(case))
    with pytest.warns(RuntimeWarning, match="has no target") as caught:
        metrics = trainer.evaluate()
    assert len([w for w in caught if "has no target" in str(w.message)]) == warnings
    assert math.isnan(metrics["eval_loss"])
    for term in ("mlm_loss", "masked_accuracy", "rtd_loss", "rtd_accuracy"):
        assert math.isnan(metrics[f"eval_{term}"]) is (term in nan_terms), term
    assert metrics["eval_num_masked_tokens"] == 0


def test_an_electra_eval_set_with_targets_reports_numbers_and_counts(tmp_path, one_torch_thread):
    rows = build_rows("electra")[:4]
    metrics = _trainer(build_aux_model("electra"), tmp_path, rows).evaluate()
    batch = stack_rows(rows)
    assert metrics["eval_num_masked_tokens"] == int((batch["labels"] != -100).sum())
    assert metrics["eval_num_rtd_tokens"] == int(batch["attention_mask"].sum())
    assert metrics["eval_loss"] == pytest.approx(metrics["eval_mlm_loss"] + 50.0 * metrics["eval_rtd_loss"])


@pytest.mark.parametrize("kind, objective", [("mtp", "masked"), ("mtp", "span"), ("electra", "causal")])
def test_an_objective_that_contradicts_the_model_is_refused(kind, objective, tmp_path):
    with pytest.raises(ValueError, match=f"drop objective='{objective}'"):
        AuxiliaryObjectiveTrainer(model=build_aux_model(kind), args=sgd_args(str(tmp_path), 1, 1), objective=objective)


@pytest.mark.parametrize("counts", [7, torch.tensor(7), torch.tensor([7, 3, 1])], ids=["int", "0-d", "three"])
def test_electra_needs_two_counts(counts, tmp_path, one_torch_thread):
    model = build_aux_model("electra")
    trainer = AuxiliaryObjectiveTrainer(model=model, args=sgd_args(str(tmp_path), 1, 1))
    with pytest.raises(ValueError, match="2 counts"):
        trainer.compute_loss(model, stack_rows(build_rows("electra")[:2]), num_items_in_batch=counts)


def test_compute_loss_uses_the_modules_of_the_model_it_is_given(tmp_path, one_torch_thread):
    """Not the trainer's own model's MTP modules (they differ here by their seed)."""
    mine = MultiTokenPredictionModel(build_model("causal"), MTPConfig(num_depths=2), seed=0)
    other = MultiTokenPredictionModel(build_model("causal"), MTPConfig(num_depths=2), seed=1)
    batch = stack_rows(build_rows("mtp"))
    trainer = AuxiliaryObjectiveTrainer(model=mine, args=sgd_args(str(tmp_path), 8, 1))
    own = AuxiliaryObjectiveTrainer(model=other, args=sgd_args(str(tmp_path), 8, 1))
    got, want = trainer.compute_loss(other, dict(batch)).item(), own.compute_loss(other, dict(batch)).item()
    assert got == want and got != trainer.compute_loss(mine, dict(batch)).item()


def test_the_wrapper_shows_the_stock_models_tensor_parallel_degree():
    base = build_model("causal")
    base._tp_size = 2  # what transformers sets on a model loaded with tp_plan="auto" on 2 ranks
    model = MultiTokenPredictionModel(base, MTPConfig(num_depths=1))
    assert (model.tp_size, model._tp_size) == (2, 2)
    assert ranks_per_replica(SimpleNamespace(parallelism_config=None), model) == 2
    assert MultiTokenPredictionModel(build_model("causal")).tp_size is None
