"""recipes/pretrain.py resuming a preempted run: `true` / `last`, refusals before any data, a budget kept."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from hf_lmobj.trainer import time_budget
from hf_lmobj.trainer.resume import RUN_DECISIONS_NAME
from hf_lmobj.trainer.state_files import COMPLETE_NAME
from tests.testing_utils import QUICK, ROOT, load_recipe

# 4 steps under a 0.6 s budget at a faked 0.1 s per step (0.6 / (0.1 * 1.05 + 0.025)), checkpoints 2 and 4
COMMON = [
    "--config", str(ROOT / "recipes/configs/causal/demo.yaml"), *QUICK, "--max_steps", "50",
    "--max_train_minutes", "0.01", "--save_strategy", "steps", "--save_steps", "2", "--eval_strategy", "no",
    "--ngram_orders", "3", "--sample_max_new_tokens", "4",
]  # fmt: skip


def _fake_step_seconds(monkeypatch: pytest.MonkeyPatch, seconds: float) -> None:
    """The budget's timing, made exact: every pass takes ``seconds``, an optimizer update nothing."""
    monkeypatch.setattr(time_budget, "time_training_steps", lambda trainer, repeats: [seconds] * repeats)
    monkeypatch.setattr(time_budget, "time_optimizer_step", lambda trainer, repeats=3: 0.0)


def _no_data_phase(monkeypatch: pytest.MonkeyPatch, recipe) -> None:
    """A resume that cannot work must fail before the corpus or the tokenizer is touched."""

    def reached(*args, **kwargs):
        raise AssertionError("the data phases ran before the resume was checked")

    monkeypatch.setattr(recipe, "open_sources", reached)
    monkeypatch.setattr(recipe, "run_tokenizer", reached)


def _state(folder: Path) -> dict:
    return json.loads((folder / "trainer_state.json").read_text())


def _logged(state: dict, step: int) -> dict:
    return next(entry for entry in state["log_history"] if entry["step"] == step and "learning_rate" in entry)


@pytest.fixture(scope="module")
def budget_run(tmp_path_factory) -> Path:
    """The uninterrupted run: a budget chose 4 of 50 steps; checkpoints at steps 2 and 4."""
    out = tmp_path_factory.mktemp("uninterrupted") / "run"
    with pytest.MonkeyPatch.context() as patch:
        _fake_step_seconds(patch, 0.1)
        load_recipe().main([*COMMON, "--output_dir", str(out)])
    return out


@pytest.mark.slow
def test_a_new_run_records_its_budget_before_training(budget_run):
    decisions = json.loads((budget_run / RUN_DECISIONS_NAME).read_text())
    assert decisions["max_steps"] == 4 and decisions["weights_from"] is None
    assert decisions["budget"] == {"minutes": 0.01, "seconds_per_step": 0.1, "requested": 50, "steps": 4}
    assert _state(budget_run / "checkpoint-4")["max_steps"] == 4


@pytest.mark.slow
def test_a_requeued_run_resumes_with_true_and_keeps_the_first_starts_budget(budget_run, tmp_path, monkeypatch, capsys):
    killed = tmp_path / "run"  # what the killed job left behind: its first checkpoint and its decisions
    shutil.copytree(budget_run / "checkpoint-2", killed / "checkpoint-2")
    shutil.copy(budget_run / RUN_DECISIONS_NAME, killed)
    assert (killed / "checkpoint-2" / COMPLETE_NAME).is_file()  # written by ObjectiveTrainer, last
    _fake_step_seconds(monkeypatch, 0.05)  # requeued on a machine twice as fast: timed again, 7 steps would fit
    load_recipe().main([*COMMON, "--output_dir", str(killed), "--resume_from_checkpoint", "true"])
    report = capsys.readouterr().out
    assert f"resuming with max_steps 4 from {killed / 'checkpoint-2'}, not timed again" in report
    assert "0.01 min: 4 of 50 steps, chosen at the first start" in report
    full, resumed = _state(budget_run / "checkpoint-4"), _state(killed / "checkpoint-4")
    assert resumed["max_steps"] == full["max_steps"] == 4
    for step in (3, 4):  # the schedule of the uninterrupted run, and its losses
        assert _logged(resumed, step)["learning_rate"] == _logged(full, step)["learning_rate"]
        assert _logged(resumed, step)["loss"] == pytest.approx(_logged(full, step)["loss"], rel=1e-5)
    assert json.loads((killed / RUN_DECISIONS_NAME).read_text())["budget"]["seconds_per_step"] == 0.1  # kept


@pytest.mark.slow
@pytest.mark.parametrize("name", ["optimizer.pt", "scheduler.pt"])
def test_a_checkpoint_without_its_optimizer_or_scheduler_is_refused_before_any_data(
    budget_run, tmp_path, monkeypatch, name
):
    checkpoint = tmp_path / "checkpoint-2"
    shutil.copytree(budget_run / "checkpoint-2", checkpoint)
    (checkpoint / name).unlink()
    recipe = load_recipe()
    _no_data_phase(monkeypatch, recipe)
    args = [*COMMON, "--output_dir", str(tmp_path / "resumed"), "--resume_from_checkpoint", str(checkpoint)]
    with pytest.raises(ValueError, match=f"{re.escape(str(checkpoint))} has no {re.escape(name)}") as refused:
        recipe.main(args)
    assert "--weights_only_restart true" in str(refused.value)


@pytest.mark.slow
def test_rerunning_over_checkpoints_is_refused_and_names_both_fixes(budget_run, monkeypatch):
    recipe = load_recipe()
    _no_data_phase(monkeypatch, recipe)
    with pytest.raises(ValueError, match=re.escape(f"{budget_run} holds checkpoints")) as refused:
        recipe.main([*COMMON, "--output_dir", str(budget_run)])
    message = str(refused.value)
    assert "checkpoint-2, checkpoint-4" in message
    assert "--resume_from_checkpoint last" in message
    assert "--overwrite_output_dir true" in message and "another --output_dir" in message


@pytest.mark.slow
def test_last_without_a_complete_checkpoint_is_refused_before_any_data(budget_run, tmp_path, monkeypatch):
    out = tmp_path / "run"
    shutil.copytree(budget_run / "checkpoint-2", out / "checkpoint-2")
    (out / "checkpoint-2" / COMPLETE_NAME).unlink(missing_ok=True)  # a save cut short
    recipe = load_recipe()
    _no_data_phase(monkeypatch, recipe)
    with pytest.raises(ValueError, match=re.escape(f"{out} holds no complete checkpoint")) as refused:
        recipe.main([*COMMON, "--output_dir", str(out), "--resume_from_checkpoint", "last"])
    assert f"checkpoint-2 lack {COMPLETE_NAME}" in str(refused.value)


@pytest.mark.slow
def test_weights_only_restart_over_old_checkpoints_is_a_new_run_from_the_weights(budget_run, tmp_path):
    out = tmp_path / "run"  # an earlier run's checkpoints, the optimizer and schedule gone from the one we keep
    for name in ("checkpoint-2", "checkpoint-4"):
        shutil.copytree(budget_run / name, out / name)
    for name in ("optimizer.pt", "scheduler.pt"):
        (out / "checkpoint-2" / name).unlink()
    weights = load_file(out / "checkpoint-2" / "model.safetensors")
    load_recipe().main(
        [*COMMON, "--max_train_minutes", "null", "--max_steps", "2", "--save_steps", "1", "--learning_rate", "0",
         "--output_dir", str(out), "--resume_from_checkpoint", str(out / "checkpoint-2"),
         "--weights_only_restart", "true", "--overwrite_output_dir", "true"]
    )  # fmt: skip
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-1", "checkpoint-2"]  # the old ones deleted
    state = _state(out / "checkpoint-2")
    assert state["max_steps"] == 2 and [e["step"] for e in state["log_history"] if "loss" in e] == [1, 2]
    trained = load_file(out / "model.safetensors")  # learning rate 0: the weights it started from
    assert trained.keys() == weights.keys()
    for name in weights:
        torch.testing.assert_close(trained[name], weights[name], rtol=0, atol=0, msg=name)
    decisions = json.loads((out / RUN_DECISIONS_NAME).read_text())
    assert decisions == {"max_steps": 2, "budget": None, "weights_from": str(out / "checkpoint-2")}
