"""ObjectiveTrainer refuses resumes that cannot be exact, naming what is wrong; a killed save is never 'latest'."""

from __future__ import annotations

import os

import datasets
import numpy as np
import pytest
from transformers import TrainingArguments

from hf_lmobj import DataCollatorForCausalLM, ObjectiveTrainer
from hf_lmobj.corpus import build_tokenizer
from hf_lmobj.data import PretrainingStream, RowFormat
from hf_lmobj.trainer.checkpoints import latest_complete_checkpoint
from hf_lmobj.trainer.state_files import COMPLETE_NAME, DATA_STATE_NAME
from tests.testing_utils import tiny_gpt2


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer(vocab_size=512, max_documents=20)


def _trainer(tok, out, seed=0, max_length=32, **kwargs) -> ObjectiveTrainer:
    rng = np.random.default_rng(0)
    docs = datasets.Dataset.from_dict(
        {"input_ids": [rng.integers(5, 400, int(n)).tolist() for n in rng.integers(2, 30, 80)]}
    )
    collator = DataCollatorForCausalLM(tok, max_length=max_length, return_use_cache=False)
    stream = PretrainingStream([docs], RowFormat("packed", max_length), collator, 2, seed=seed)
    model = tiny_gpt2(vocab_size=len(tok), width=16, layers=1)
    args = TrainingArguments(output_dir=str(out), per_device_train_batch_size=2, max_steps=4, save_strategy="steps",
                             save_steps=2, report_to=[], use_cpu=True, disable_tqdm=True, logging_steps=1)  # fmt: skip
    return ObjectiveTrainer(model=model, args=args, train_dataset=stream, **kwargs)


@pytest.fixture(scope="module")
def finished(tok, tmp_path_factory):
    out = tmp_path_factory.mktemp("run")
    _trainer(tok, out).train()
    return out


def test_every_checkpoint_holds_the_data_state_and_the_marker(finished):
    for step in (2, 4):
        folder = finished / f"checkpoint-{step}"
        assert (folder / DATA_STATE_NAME).is_file() and (folder / COMPLETE_NAME).is_file()


@pytest.mark.parametrize(("change", "words"), [({"seed": 1}, "seed"), ({"max_length": 16}, "rows")])
def test_a_changed_data_fingerprint_is_refused_by_name(tok, finished, tmp_path, change, words):
    with pytest.raises(ValueError, match=f"differs from the checkpoint's: .*{words}"):
        _trainer(tok, tmp_path, **change).train(resume_from_checkpoint=str(finished / "checkpoint-2"))


def test_ignore_data_fingerprint_resumes_anyway(tok, finished, tmp_path):
    trainer = _trainer(tok, tmp_path, seed=1, ignore_data_fingerprint=True)
    trainer.train(resume_from_checkpoint=str(finished / "checkpoint-2"))
    assert trainer.state.global_step == 4


@pytest.mark.parametrize("name", ["optimizer.pt", "scheduler.pt", DATA_STATE_NAME, "trainer_state.json"])
def test_a_checkpoint_missing_a_part_is_refused_naming_the_file(tok, finished, tmp_path, name):
    import shutil

    copy = tmp_path / "checkpoint-2"
    shutil.copytree(finished / "checkpoint-2", copy)
    os.remove(copy / name)
    with pytest.raises(ValueError, match=f"has no {name}"):
        _trainer(tok, tmp_path / "new").train(resume_from_checkpoint=str(copy))


def test_resume_true_takes_the_latest_complete_checkpoint_not_a_cut_short_save(tok, finished, tmp_path):
    import shutil

    out = tmp_path / "out"
    shutil.copytree(finished, out)
    os.remove(out / "checkpoint-4" / COMPLETE_NAME)  # the save of step 4 was killed half way
    assert latest_complete_checkpoint(out).name == "checkpoint-2"
    trainer = _trainer(tok, out)
    trainer.train(resume_from_checkpoint=True)
    assert trainer.state.global_step == 4 and (out / "checkpoint-4" / COMPLETE_NAME).is_file()
    with pytest.raises(ValueError, match="no complete checkpoint"):
        _trainer(tok, tmp_path / "empty").train(resume_from_checkpoint=True)
