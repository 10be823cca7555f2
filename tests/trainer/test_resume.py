"""``hf_lmobj.trainer.resume`` on hand-made checkpoint folders: which checkpoint, what is refused, weights."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from transformers import GPT2Config, GPT2LMHeadModel, TrainingArguments

from hf_lmobj.trainer.checkpoints import load_checkpoint_weights, write_complete_marker
from hf_lmobj.trainer.resume import ResumeArguments, plan_resume


def _args(output_dir: Path, resume: str | bool | None) -> TrainingArguments:
    return TrainingArguments(output_dir=str(output_dir), resume_from_checkpoint=resume, report_to="none", use_cpu=True)


#: What a hand-made checkpoint's torch files hold: the smallest payloads the resume checks accept.
_PAYLOADS = {"optimizer.pt": {"state": {}, "param_groups": []}, "scheduler.pt": {}}


def _checkpoint(folder: Path, max_steps: int = 9, files=("optimizer.pt", "scheduler.pt"), complete=True) -> Path:
    folder.mkdir(parents=True)
    for name in files:
        torch.save(_PAYLOADS[name], folder / name)
    step = int(folder.name.split("-")[1])
    state = {"global_step": step, "max_steps": max_steps, "epoch": 0.5, "log_history": []}
    (folder / "trainer_state.json").write_text(json.dumps(state))
    if complete:
        write_complete_marker(folder, step, sorted(os.listdir(folder)))
    return folder


@pytest.mark.parametrize("resume", ["last", "true", "LAST", True])
def test_last_is_the_latest_complete_checkpoint_and_the_trainer_sees_its_path(tmp_path, resume):
    _checkpoint(tmp_path / "checkpoint-5")
    latest = _checkpoint(tmp_path / "checkpoint-10", max_steps=85)
    _checkpoint(tmp_path / "checkpoint-15", complete=False)  # killed while saving
    args = _args(tmp_path, resume)
    plan = plan_resume(args, ResumeArguments(), needs_data_state=False)
    assert plan.continues and plan.checkpoint == latest and plan.max_steps == 85 and plan.clear == ()
    assert args.resume_from_checkpoint == str(latest)


@pytest.mark.parametrize("resume", [None, False, "false", ""])
def test_no_resume_in_an_empty_output_dir_is_a_new_run(tmp_path, resume):
    args = _args(tmp_path / "fresh", resume)
    plan = plan_resume(args, ResumeArguments(), needs_data_state=False)
    assert not plan.continues and plan.weights_from is None and args.resume_from_checkpoint is None


def test_last_in_an_empty_output_dir_is_refused_naming_it(tmp_path):
    with pytest.raises(ValueError, match=re.escape(f"--resume_from_checkpoint last: {tmp_path} holds no complete")):
        plan_resume(_args(tmp_path, "last"), ResumeArguments(), needs_data_state=False)


@pytest.mark.parametrize(
    "step,trained_to,max_steps,minutes,complete",
    [
        (4, 4, 4, None, True),  # the run reached its max_steps: nothing to train
        (4, 4, 50, 0.5, True),  # a budget chose 4 of 50 at the first start: still the target
        (4, 4, 6, None, False),  # a larger --max_steps without a budget trains further
        (2, 4, 4, None, False),  # preempted at step 2: continue
        (4, 4, -1, None, False),  # by epochs: the target needs the data (the trainer stops at it)
        (5, 4, 4, None, True),  # past it (a run trained one step beyond before the fix): nothing more
    ],
)
def test_a_checkpoint_at_the_steps_it_would_train_to_is_complete(
    tmp_path, step, trained_to, max_steps, minutes, complete
):
    _checkpoint(tmp_path / f"checkpoint-{step}", max_steps=trained_to)
    plan = plan_resume(_args(tmp_path, "last"), ResumeArguments(), needs_data_state=False)
    assert plan.step == step and plan.complete(max_steps, minutes) is complete


def test_streamed_data_needs_the_data_state(tmp_path):
    checkpoint = _checkpoint(tmp_path / "checkpoint-4")
    with pytest.raises(ValueError, match="has no data_state.json: the data pipeline's position"):
        plan_resume(_args(tmp_path, str(checkpoint)), ResumeArguments(), needs_data_state=True)


def test_a_missing_checkpoint_folder_is_refused(tmp_path):
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / 'checkpoint-3'} is not a folder")):
        plan_resume(_args(tmp_path / "out", str(tmp_path / "checkpoint-3")), ResumeArguments(), needs_data_state=False)


def test_overwrite_lists_the_old_checkpoints_to_delete(tmp_path):
    old = [_checkpoint(tmp_path / "checkpoint-2"), _checkpoint(tmp_path / "checkpoint-4", complete=False)]
    plan = plan_resume(_args(tmp_path, None), ResumeArguments(overwrite_output_dir=True), needs_data_state=False)
    assert plan.clear == tuple(old) and not plan.continues


def test_overwrite_and_a_continuation_together_are_refused(tmp_path):
    _checkpoint(tmp_path / "checkpoint-2")
    with pytest.raises(ValueError, match="--overwrite_output_dir true starts over and --resume_from_checkpoint"):
        plan_resume(_args(tmp_path, "last"), ResumeArguments(overwrite_output_dir=True), needs_data_state=False)


def test_weights_only_restart_needs_a_checkpoint_with_weights(tmp_path):
    with pytest.raises(ValueError, match="--weights_only_restart true needs --resume_from_checkpoint"):
        plan_resume(_args(tmp_path, None), ResumeArguments(weights_only_restart=True), needs_data_state=False)
    bare = _checkpoint(tmp_path / "elsewhere" / "checkpoint-2", files=())
    with pytest.raises(ValueError, match="holds no model weights"):
        plan_resume(_args(tmp_path, str(bare)), ResumeArguments(weights_only_restart=True), needs_data_state=True)
    (bare / "model.safetensors").write_bytes(b"")  # a save killed before its header
    with pytest.raises(ValueError, match="model.safetensors \\(model weights\\): the file is corrupt or cut short"):
        plan_resume(_args(tmp_path, str(bare)), ResumeArguments(weights_only_restart=True), needs_data_state=True)
    save_file({"w": torch.zeros(2)}, bare / "model.safetensors")
    plan = plan_resume(_args(tmp_path, str(bare)), ResumeArguments(weights_only_restart=True), needs_data_state=True)
    assert plan.weights_from == bare and not plan.continues  # no optimizer, scheduler or data state needed


def test_load_checkpoint_weights_restores_a_tied_model(tiny_gpt2, tmp_path):
    tiny_gpt2.save_pretrained(tmp_path)  # the tied output head is saved once
    torch.manual_seed(99)
    other = GPT2LMHeadModel(tiny_gpt2.config)
    load_checkpoint_weights(other, tmp_path)
    expected = tiny_gpt2.state_dict()
    for name, tensor in other.state_dict().items():
        torch.testing.assert_close(tensor, expected[name], rtol=0, atol=0, msg=name)
    assert other.lm_head.weight.data_ptr() == other.transformer.wte.weight.data_ptr()
    bigger = GPT2LMHeadModel(GPT2Config(**{**tiny_gpt2.config.to_dict(), "n_layer": 3}))
    with pytest.raises(ValueError, match="does not hold this model's weights: missing"):
        load_checkpoint_weights(bigger, tmp_path)
