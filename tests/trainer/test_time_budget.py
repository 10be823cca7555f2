"""Training for a wall-clock budget: the step count that fits, and a timing that changes nothing."""

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel, TrainingArguments

from hf_lmobj.collators.causal import DataCollatorForCausalLM
from hf_lmobj.optim.muon import MuonAdamW, MuonAdamWFactory
from hf_lmobj.trainer.cpu_threads import RuntimeArguments
from hf_lmobj.trainer.objective_trainer import ObjectiveTrainer
from hf_lmobj.trainer.time_budget import (
    StepBudget,
    fit_max_steps_to_budget,
    steps_within,
    time_optimizer_step,
    time_training_steps,
)


def _trainer(tokenizer, tmp_path, max_steps: int, muon: bool = False) -> ObjectiveTrainer:
    torch.manual_seed(7)
    config = GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=1, n_head=2, n_positions=64)
    rows = [{"input_ids": torch.randint(300, len(tokenizer), (40,)).tolist()} for _ in range(16)]
    args = TrainingArguments(
        output_dir=str(tmp_path), max_steps=max_steps, per_device_train_batch_size=4, learning_rate=1e-2,
        report_to="none", save_strategy="no", use_cpu=True, seed=3, remove_unused_columns=False,
        lr_scheduler_type="cosine", warmup_steps=1,
    )  # fmt: skip
    return ObjectiveTrainer(
        model=GPT2LMHeadModel(config), args=args, train_dataset=rows,
        data_collator=DataCollatorForCausalLM(tokenizer=tokenizer, max_length=40),
        optimizer_cls_and_kwargs=(MuonAdamWFactory, {"lr": 1e-2}) if muon else None,
    )  # fmt: skip


@pytest.mark.parametrize(
    "seconds,per_step,max_steps,expected",
    [(420.0, 1.3, 650, 302), (420.0, 0.5, 650, 650), (1.0, 30.0, 650, 1), (10.8, 1.0, 20, 10)],
)
def test_steps_within(seconds, per_step, max_steps, expected):
    assert steps_within(seconds, per_step, max_steps) == expected


def test_timing_leaves_rng_parameters_and_gradients_alone(tokenizer, tmp_path, one_torch_thread):
    trainer = _trainer(tokenizer, tmp_path, max_steps=2)
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    rng = torch.get_rng_state()
    times = time_training_steps(trainer, 2)
    assert len(times) == 2 and all(t > 0 for t in times)
    assert torch.equal(torch.get_rng_state(), rng)
    for name, p in trainer.model.named_parameters():
        assert torch.equal(p, before[name]) and p.grad is None, name


@pytest.mark.parametrize("muon", [False, True])
def test_timing_the_optimizer_leaves_trainer_and_model_alone(tokenizer, tmp_path, one_torch_thread, muon):
    trainer = _trainer(tokenizer, tmp_path, max_steps=2, muon=muon)
    before = {name: p.detach().clone() for name, p in trainer.model.named_parameters()}
    assert time_optimizer_step(trainer) > 0
    assert trainer.optimizer is None  # built again, fresh, by train()
    for name, p in trainer.model.named_parameters():
        assert torch.equal(p, before[name]) and p.grad is None, name
    trainer.train()
    assert isinstance(trainer.optimizer.optimizer, MuonAdamW) == muon


@pytest.mark.parametrize("muon", [False, True])
def test_a_budget_run_is_the_run_with_that_max_steps(tokenizer, tmp_path, one_torch_thread, muon):
    budgeted = _trainer(tokenizer, tmp_path / "a", max_steps=3, muon=muon)
    budget = fit_max_steps_to_budget(budgeted, minutes=60.0)  # binds nowhere: all 3 steps fit
    assert budget == StepBudget(60.0, budget.seconds_per_step, 3, 3) and budgeted.args.max_steps == 3
    budgeted.train()
    direct = _trainer(tokenizer, tmp_path / "b", max_steps=3, muon=muon)
    direct.train()
    for (name, p), q in zip(budgeted.model.named_parameters(), direct.model.parameters(), strict=True):
        torch.testing.assert_close(p, q, rtol=0, atol=0, msg=name)


def test_a_tight_budget_lowers_max_steps_and_the_schedule_follows(tokenizer, tmp_path, one_torch_thread):
    trainer = _trainer(tokenizer, tmp_path, max_steps=1_000_000)
    budget = fit_max_steps_to_budget(trainer, minutes=0.02)  # 1.2 s of steps
    assert 1 <= budget.steps < 1_000_000 and trainer.args.max_steps == budget.steps
    assert budget.summary().startswith("0.02 min at ") and budget.summary().endswith(f"{budget.steps} of 1000000 steps")
    trainer.train()
    assert trainer.state.global_step == budget.steps
    assert trainer.lr_scheduler.get_last_lr()[0] == pytest.approx(0.0, abs=1e-12)  # cosine ended with the run


def test_bad_budgets_are_refused(tokenizer, tmp_path):
    with pytest.raises(ValueError, match="max_train_minutes must be positive"):
        RuntimeArguments(max_train_minutes=0)
    trainer = _trainer(tokenizer, tmp_path, max_steps=-1)
    with pytest.raises(ValueError, match="max_train_minutes needs max_steps > 0"):
        fit_max_steps_to_budget(trainer, minutes=1.0)
