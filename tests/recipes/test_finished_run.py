"""A finished run resumed again: the recipe says it is complete and trains nothing; the trainer no step past it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from transformers import GPT2Config, GPT2LMHeadModel, TrainingArguments

from hf_lmobj.collators.causal import DataCollatorForCausalLM
from hf_lmobj.trainer import time_budget
from hf_lmobj.trainer.objective_trainer import ObjectiveTrainer
from tests.testing_utils import QUICK, ROOT, load_recipe

# 4 steps (the demo's 7-minute budget keeps them all, its timing faked), checkpoints at steps 2 and 4
COMMON = [
    "--config", str(ROOT / "recipes/configs/causal/demo.yaml"), *QUICK, "--max_steps", "4",
    "--save_strategy", "steps", "--save_steps", "2", "--eval_strategy", "no", "--ngram_orders", "3",
    "--sample_max_new_tokens", "4", "--max_train_minutes", "7",  # a budgeted run: its first start fixed max_steps
]  # fmt: skip
KEPT = ("README.md", "metrics.json", "model.safetensors", "trainer_state.json", "run_decisions.json")


def _step(folder: Path) -> int:
    return json.loads((folder / "trainer_state.json").read_text())["global_step"]


def _untouched_phases(monkeypatch: pytest.MonkeyPatch, recipe) -> None:
    """A complete run reads no corpus, trains no tokenizer, builds no trainer."""

    def reached(*args, **kwargs):
        raise AssertionError("a phase ran for a run that was already complete")

    for name in ("open_sources", "run_tokenizer", "setup"):
        monkeypatch.setattr(recipe, name, reached)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("finished") / "run"
    with pytest.MonkeyPatch.context() as patch:  # the budget's timing made exact: 0.1 s a step, 4 of 4 fit
        patch.setattr(time_budget, "time_training_steps", lambda trainer, repeats: [0.1] * repeats)
        patch.setattr(time_budget, "time_optimizer_step", lambda trainer, repeats=3: 0.0)
        load_recipe().main([*COMMON, "--output_dir", str(out)])
    return out


@pytest.mark.slow
@pytest.mark.parametrize("resume", ["last", "true", "checkpoint-4"])
def test_a_finished_run_resumed_again_says_it_is_complete_and_changes_nothing(
    finished_run, monkeypatch, capsys, resume
):
    before = {name: (finished_run / name).read_bytes() for name in KEPT}
    folders = sorted(p.name for p in finished_run.glob("checkpoint-*"))
    recipe = load_recipe()
    _untouched_phases(monkeypatch, recipe)
    requested = str(finished_run / resume) if resume.startswith("checkpoint") else resume
    capsys.readouterr()
    metrics = recipe.main([*COMMON, "--output_dir", str(finished_run), "--resume_from_checkpoint", requested])
    said = capsys.readouterr().out
    assert said.startswith(f"the run in {finished_run} is complete (step 4 of 4); nothing to train (")
    assert "--max_train_minutes null" in said  # the demo's budget fixed max_steps: the way to train further
    assert folders == ["checkpoint-2", "checkpoint-4"] == sorted(p.name for p in finished_run.glob("checkpoint-*"))
    assert _step(finished_run / "checkpoint-4") == 4
    assert {name: (finished_run / name).read_bytes() for name in KEPT} == before  # card, metrics, model kept
    assert metrics == json.loads(before["metrics.json"])  # the finished run's figures, not new ones


@pytest.mark.slow
def test_a_finished_run_without_its_metrics_says_where_the_model_is(finished_run, tmp_path, monkeypatch, capsys):
    out = tmp_path / "run"  # stopped after training: checkpoints and model, no report
    for name in ("checkpoint-2", "checkpoint-4"):
        (out / name).mkdir(parents=True)
        for file in (finished_run / name).iterdir():
            (out / name / file.name).write_bytes(file.read_bytes())
    recipe = load_recipe()
    _untouched_phases(monkeypatch, recipe)
    assert recipe.main([*COMMON, "--output_dir", str(out), "--resume_from_checkpoint", "last"]) == {}
    said = capsys.readouterr().out
    assert f"the run in {out} is complete (step 4 of 4)" in said
    assert f"{out / 'metrics.json'} is missing" in said and not (out / "checkpoint-5").exists()


def _trainer(tokenizer, out: Path, max_steps: int, epochs: float = 3.0) -> ObjectiveTrainer:
    """8 rows in batches of 4: 2 steps an epoch; a checkpoint at every step."""
    torch.manual_seed(7)
    config = GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=1, n_head=2, n_positions=64)
    rows = [{"input_ids": torch.randint(300, len(tokenizer), (24,)).tolist()} for _ in range(8)]
    args = TrainingArguments(
        output_dir=str(out), max_steps=max_steps, num_train_epochs=epochs, per_device_train_batch_size=4,
        learning_rate=1e-2, report_to="none", save_strategy="steps", save_steps=1, use_cpu=True, seed=3,
        remove_unused_columns=False, disable_tqdm=True,
    )  # fmt: skip
    return ObjectiveTrainer(
        model=GPT2LMHeadModel(config), args=args, train_dataset=rows,
        data_collator=DataCollatorForCausalLM(tokenizer=tokenizer, max_length=24),
    )  # fmt: skip


@pytest.mark.parametrize(
    "max_steps,epochs,last",
    [
        (3, 3.0, 3),  # max_steps inside an epoch: the stock loop trained step 4 before its stop check
        (-1, 1.5, 3),  # by epochs, rounded up to whole epochs by the loop: 1.5 epochs are 3 steps
    ],
)
def test_the_trainer_resumed_at_max_steps_trains_no_step(
    tokenizer, tmp_path, one_torch_thread, max_steps, epochs, last
):
    _trainer(tokenizer, tmp_path, max_steps, epochs).train()
    assert sorted(p.name for p in tmp_path.glob("checkpoint-*")) == [f"checkpoint-{s}" for s in range(1, last + 1)]
    again = _trainer(tokenizer, tmp_path, max_steps, epochs)
    output = again.train(resume_from_checkpoint=True)
    assert again.state.global_step == output.global_step == last
    assert not (tmp_path / f"checkpoint-{last + 1}").exists()
    weights = load_file(tmp_path / f"checkpoint-{last}" / "model.safetensors")
    for name, tensor in again.model.state_dict().items():  # the checkpoint's weights, untouched
        if name in weights:
            torch.testing.assert_close(tensor, weights[name], rtol=0, atol=0, msg=name)
