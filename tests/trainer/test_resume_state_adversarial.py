"""A checkpoint whose state files are cut short, corrupt or of the wrong shape is refused by name before training.

One real checkpoint (a 2-step tiny GPT-2 ``ObjectiveTrainer`` run on a streamed ``PretrainingStream``, saved at
every step) is built once; each case copies ``checkpoint-1``, damages one file and resumes from the copy. The
refusal must name the file and happen before the first step (no checkpoint written, step still 0). The
tokenizer is identified by its content: the same one under another path spelling resumes, another is refused.
"""

from __future__ import annotations

import io
import json
import re
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path

import datasets
import pytest
import torch
from transformers import AutoTokenizer, TrainingArguments

from hf_lmobj import DataCollatorForCausalLM, ObjectiveTrainer
from hf_lmobj.corpus import build_tokenizer
from hf_lmobj.data import PretrainingStream, RowFormat
from hf_lmobj.data.sources import TextStream
from hf_lmobj.trainer.checkpoints import check_fingerprint
from hf_lmobj.trainer.resume import RUN_DECISIONS_NAME, ResumeArguments, plan_resume
from tests.testing_utils import tiny_gpt2

TEXTS = [f"def f{i}(x):\n    return x * {i} + {i % 7}\n" for i in range(60)]


class Unlisted:
    """An object torch's ``weights_only`` loading does not allow (a valid archive it refuses)."""


def _trainer(tokenizer, out: Path, model_vocab: int | None = None) -> ObjectiveTrainer:
    source = TextStream(datasets.Dataset.from_dict({"text": TEXTS}), tokenizer, batch_size=16)
    collator = DataCollatorForCausalLM(tokenizer, max_length=32, return_use_cache=False)
    stream = PretrainingStream([source], RowFormat("packed", 32), collator, 2, seed=0)
    model = tiny_gpt2(vocab_size=model_vocab or len(tokenizer), width=16, layers=1)
    args = TrainingArguments(output_dir=str(out), per_device_train_batch_size=2, max_steps=2, save_strategy="steps",
                             save_steps=1, report_to=[], use_cpu=True, disable_tqdm=True, logging_steps=1)  # fmt: skip
    return ObjectiveTrainer(model=model, args=args, train_dataset=stream)


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """A folder with ``tok/`` (the tokenizer) and ``run/checkpoint-{1,2}``, trained with the tokenizer loaded as ``tok``."""
    folder = tmp_path_factory.mktemp("resume_state")
    build_tokenizer(vocab_size=512, max_documents=20).save_pretrained(folder / "tok")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        tokenizer = AutoTokenizer.from_pretrained("tok")
        _trainer(tokenizer, folder / "run").train()
    return folder


@pytest.fixture(scope="module")
def tokenizer(base):
    return AutoTokenizer.from_pretrained(base / "tok")


def _copy(base: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(base / "run" / "checkpoint-1", tmp_path / "checkpoint-1"))


# ---- corruptions: each takes the checkpoint folder and damages one file --------------------------------
def _cut(name: str, keep: float | int) -> Callable[[Path], None]:
    """Keep the first ``keep`` bytes (an int) or that share of the file (a float)."""

    def corrupt(folder: Path) -> None:
        data = (folder / name).read_bytes()
        (folder / name).write_bytes(data[: keep if isinstance(keep, int) else int(len(data) * keep)])

    return corrupt


def _raw(name: str, data: bytes) -> Callable[[Path], None]:
    return lambda folder: (folder / name).write_bytes(data)


def _edit(name: str, change: Callable[[dict], object]) -> Callable[[Path], None]:
    """Rewrite a JSON file after ``change(value)`` edited its value in place (what ``change`` returns is dropped)."""

    def corrupt(folder: Path) -> None:
        value = json.loads((folder / name).read_text())
        change(value)
        (folder / name).write_text(json.dumps(value))

    return corrupt


def _torch(name: str, value: object) -> Callable[[Path], None]:
    return lambda folder: torch.save(value, folder / name)


def _zip_of_text(name: str) -> Callable[[Path], None]:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("hello.txt", "not a checkpoint")
    return _raw(name, buffer.getvalue())


def _set(key: str, value: object) -> Callable[[dict], None]:
    return lambda state: state.__setitem__(key, value)


def _set_rank(key: str, value: object) -> Callable[[dict], None]:
    return lambda state: state["ranks"][0].__setitem__(key, value)


def _two_saves(state: dict) -> None:
    """Two ranks that disagree on the batch size: positions of two different saves."""
    first = {**state["ranks"][0], "world_size": 2}
    state["ranks"] = [first, {**first, "rank": 1, "batch_size": 3}]


GARBAGE = bytes(range(256)) * 4
DATA, TRAINER, MARKER = "data_state.json", "trainer_state.json", "checkpoint_complete.json"
NOT_JSON = "is not valid JSON \\(cut short or corrupt"
CORRUPT_PT = "is corrupt or truncated: not a torch zip archive"

CORRUPTIONS = {
    # data_state.json: cut short, not JSON, the wrong shape, each key missing or of the wrong type
    "data-empty": (_raw(DATA, b""), f"{DATA} \\(the data position\\) {NOT_JSON}"),
    "data-cut-10-bytes": (_cut(DATA, 10), f"{DATA} \\(the data position\\) {NOT_JSON}"),
    "data-cut-half": (_cut(DATA, 0.5), f"{DATA} \\(the data position\\) {NOT_JSON}"),
    "data-cut-last-byte": (_cut(DATA, -1), f"{DATA} \\(the data position\\) {NOT_JSON}"),
    "data-not-json": (_raw(DATA, b"ranks: 1\n"), f"{DATA} \\(the data position\\) {NOT_JSON}"),
    "data-not-utf8": (_raw(DATA, b"\xff\xfe{}"), f"{DATA} \\(the data position\\) is not UTF-8 text"),
    "data-a-list": (_raw(DATA, b"[]"), f"{DATA} \\(the data position\\) holds a list, expected a JSON object"),
    "data-no-fingerprint": (_edit(DATA, lambda s: s.pop("fingerprint")), "has no 'fingerprint'; resume from an"),
    "data-no-ranks": (_edit(DATA, lambda s: s.pop("ranks")), "has no 'ranks'; resume from an earlier checkpoint"),
    "data-fingerprint-a-string": (_edit(DATA, _set("fingerprint", "abc")), "fingerprint must be an object, got 'abc'"),
    "data-ranks-empty": (_edit(DATA, _set("ranks", [])), "ranks must be a non-empty list of objects"),
    "data-ranks-too-many": (
        _edit(DATA, lambda s: s["ranks"].append({**s["ranks"][0], "rank": 1})),
        "ranks holds 2 positions for a world_size of 1",
    ),  # fmt: skip
    "data-two-saves-mixed": (_edit(DATA, _two_saves), "ranks\\[1\\] and ranks\\[0\\] differ in batch_size"),
    "data-rank-not-in-order": (_edit(DATA, _set_rank("rank", 1)), "ranks\\[0\\].rank is 1: the positions are not"),
    "data-no-batches-in-epoch": (
        _edit(DATA, lambda s: s["ranks"][0].pop("batches_in_epoch")),
        "ranks\\[0\\] has no 'batches_in_epoch'",
    ),  # fmt: skip
    "data-no-units": (_edit(DATA, lambda s: s["ranks"][0].pop("units")), "ranks\\[0\\] has no 'units'"),
    "data-epoch-a-string": (_edit(DATA, _set_rank("epoch", "0")), "ranks\\[0\\].epoch must be an int >= 0, got '0'"),
    "data-world-size-a-float": (_edit(DATA, _set_rank("world_size", 1.0)), "world_size must be an int >= 1, got 1.0"),
    "data-batch-size-zero": (_edit(DATA, _set_rank("batch_size", 0)), "batch_size must be an int >= 1, got 0"),
    "data-regime-unknown": (_edit(DATA, _set_rank("regime", "sideways")), "regime must be 'planned' or 'streamed'"),
    "data-tokens-negative": (_edit(DATA, _set_rank("tokens_by_source", [-5])), "tokens_by_source must be a list of"),
    "data-units-a-list": (_edit(DATA, _set_rank("units", [])), "units must be an object from unit number"),
    "data-next-unit-a-string": (_edit(DATA, _set_rank("next_unit", "0")), "next_unit must be an int >= 0 or null"),
    # trainer_state.json
    "trainer-empty": (_raw(TRAINER, b""), f"{TRAINER} \\(the trainer state\\) {NOT_JSON}"),
    "trainer-cut-half": (_cut(TRAINER, 0.5), f"{TRAINER} \\(the trainer state\\) {NOT_JSON}"),
    "trainer-a-list": (_raw(TRAINER, b"[1]"), f"{TRAINER} \\(the trainer state\\) holds a list"),
    "trainer-no-global-step": (_edit(TRAINER, lambda s: s.pop("global_step")), "has no 'global_step'"),
    "trainer-no-max-steps": (_edit(TRAINER, lambda s: s.pop("max_steps")), "has no 'max_steps'"),
    "trainer-no-log-history": (_edit(TRAINER, lambda s: s.pop("log_history")), "has no 'log_history'"),
    "trainer-step-a-string": (_edit(TRAINER, _set("global_step", "5")), "global_step must be an int >= 0, got '5'"),
    "trainer-step-negative": (_edit(TRAINER, _set("global_step", -1)), "global_step must be an int >= 0, got -1"),
    "trainer-step-a-bool": (_edit(TRAINER, _set("global_step", True)), "global_step must be an int >= 0, got True"),
    "trainer-max-steps-zero": (_edit(TRAINER, _set("max_steps", 0)), "max_steps must be an int >= 1, got 0"),
    "trainer-epoch-nan": (_edit(TRAINER, _set("epoch", float("nan"))), "epoch must be a finite number >= 0, got nan"),
    "trainer-log-history-object": (_edit(TRAINER, _set("log_history", {})), "log_history must be a list of objects"),
    "trainer-callbacks-not-states": (
        _edit(TRAINER, _set("stateful_callbacks", {"TrainerControl": 3})),
        "stateful_callbacks must be an object of callback states",
    ),  # fmt: skip
    "trainer-unknown-key": (_edit(TRAINER, _set("steps_done", 1)), "does not know \\('steps_done'\\): written by"),
    "trainer-step-not-the-markers": (
        _edit(TRAINER, _set("global_step", 7)),
        f"{MARKER} \\(the completion marker\\): it marks step 1 but {TRAINER} holds",
    ),  # fmt: skip
    # checkpoint_complete.json
    "marker-cut-half": (_cut(MARKER, 0.5), f"{MARKER} \\(the completion marker\\) {NOT_JSON}"),
    "marker-a-list": (_raw(MARKER, b"[]"), f"{MARKER} \\(the completion marker\\) holds a list"),
    "marker-no-files": (_edit(MARKER, lambda s: s.pop("files")), "has no 'files'"),
    "marker-step-a-string": (_edit(MARKER, _set("global_step", "1")), "global_step must be an int >= 0, got '1'"),
    "marker-files-a-string": (_edit(MARKER, _set("files", "all")), "files must be a list of file names, got 'all'"),
    "marker-lists-a-deleted-file": (
        lambda folder: (folder / "rng_state.pth").unlink(),
        "it lists rng_state.pth, which the folder no longer holds",
    ),  # fmt: skip
    # the torch files: garbage, empty, cut short, a zip that is not torch's, a torch archive of the wrong payload
    "optimizer-garbage": (
        _raw("optimizer.pt", GARBAGE),
        f"optimizer.pt \\(the optimizer state\\) {CORRUPT_PT} \\(1024",
    ),
    "optimizer-zero-bytes": (
        _raw("optimizer.pt", b""),
        f"optimizer.pt \\(the optimizer state\\) {CORRUPT_PT} \\(empty",
    ),
    "optimizer-cut-half": (_cut("optimizer.pt", 0.5), f"optimizer.pt \\(the optimizer state\\) {CORRUPT_PT}"),
    "optimizer-cut-last-byte": (_cut("optimizer.pt", -1), f"optimizer.pt \\(the optimizer state\\) {CORRUPT_PT}"),
    "optimizer-json": (_raw("optimizer.pt", b'{"state": {}}'), f"optimizer.pt \\(the optimizer state\\) {CORRUPT_PT}"),
    "optimizer-zip-of-text": (_zip_of_text("optimizer.pt"), "optimizer.pt \\(the optimizer state\\) is corrupt: a zip"),
    "optimizer-a-list": (_torch("optimizer.pt", [1, 2, 3]), "it holds a list, not a dict with 'state', 'param_groups'"),
    "optimizer-no-param-groups": (
        _torch("optimizer.pt", {"state": {}}),
        "holds a dict with keys \\['state'\\], not a dict with 'state', 'param_groups'",
    ),  # fmt: skip
    "scheduler-garbage": (_raw("scheduler.pt", GARBAGE), f"scheduler.pt \\(the learning-rate schedule\\) {CORRUPT_PT}"),
    "scheduler-cut-half": (_cut("scheduler.pt", 0.5), f"scheduler.pt \\(the learning-rate schedule\\) {CORRUPT_PT}"),
    "scheduler-a-tensor": (_torch("scheduler.pt", torch.zeros(2)), "scheduler.pt .*it holds a Tensor, not a dict"),
    "rng-garbage": (_raw("rng_state.pth", GARBAGE), f"rng_state.pth \\(the random generators' state\\) {CORRUPT_PT}"),
    "rng-zero-bytes": (_raw("rng_state.pth", b""), f"rng_state.pth \\(the random generators' state\\) {CORRUPT_PT}"),
    "rng-no-cpu-state": (
        _torch("rng_state.pth", {"python": 1, "numpy": 2}),
        "not a dict with 'python', 'numpy', 'cpu'",
    ),
    "weights-cut-half": (_cut("model.safetensors", 0.5), "model.safetensors \\(model weights\\): the file is corrupt"),
}


@pytest.mark.parametrize("case", list(CORRUPTIONS))
def test_a_damaged_state_file_is_refused_by_name_before_training(base, tokenizer, tmp_path, case):
    corrupt, message = CORRUPTIONS[case]
    folder = _copy(base, tmp_path)
    corrupt(folder)
    trainer = _trainer(tokenizer, tmp_path / "out")
    with pytest.raises(ValueError, match=message) as refused:
        trainer.train(resume_from_checkpoint=str(folder))
    assert trainer.state.global_step == 0 and not list((tmp_path / "out").glob("checkpoint-*"))  # before any step
    assert "weights_only" not in str(refused.value)  # never torch's advice for a damaged file


def test_a_valid_archive_refused_by_weights_only_keeps_torchs_message(base, tokenizer, tmp_path):
    folder = _copy(base, tmp_path)
    torch.save({"state": {}, "param_groups": [], "extra": Unlisted()}, folder / "optimizer.pt")
    with pytest.raises(ValueError, match="optimizer.pt \\(the optimizer state\\) is a torch archive that") as refused:
        _trainer(tokenizer, tmp_path / "out").train(resume_from_checkpoint=str(folder))
    assert "Unsupported global" in str(refused.value) and "Unlisted" in str(refused.value)  # torch's own words
    assert "corrupt or truncated" not in str(refused.value)


@pytest.mark.parametrize("case", ["data-cut-half", "trainer-step-a-string", "marker-cut-half", "optimizer-garbage"])
def test_the_recipes_resume_plan_refuses_a_damaged_checkpoint_before_any_data(base, tmp_path, case):
    corrupt, message = CORRUPTIONS[case]
    folder = _copy(base, tmp_path)
    corrupt(folder)
    args = TrainingArguments(output_dir=str(tmp_path / "out"), resume_from_checkpoint=str(folder), report_to="none")
    with pytest.raises(ValueError, match=message):
        plan_resume(args, ResumeArguments(), needs_data_state=True)


DECISIONS = {"max_steps": 2, "budget": {"minutes": 0.5, "seconds_per_step": 0.1, "requested": 50, "steps": 2},
             "weights_from": None}  # fmt: skip
BAD_DECISIONS = {
    "cut-short": ('{"max_steps": 2, "bud', "is not valid JSON \\(cut short or corrupt"),
    "no-budget": ('{"max_steps": 2, "weights_from": null}', "has no 'budget'; restore it, or delete it"),
    "max-steps-a-string": (json.dumps({**DECISIONS, "max_steps": "2"}), "max_steps must be a whole number, got '2'"),
    "budget-a-list": (json.dumps({**DECISIONS, "budget": [0.5]}), "budget must be null or an object with minutes"),
    "budget-negative-minutes": (
        json.dumps({**DECISIONS, "budget": {**DECISIONS["budget"], "minutes": -1}}),
        "budget.minutes must be a finite number in \\(0, inf\\), got -1",
    ),  # fmt: skip
    "weights-from-a-number": (json.dumps({**DECISIONS, "weights_from": 5}), "weights_from must be a path or null"),
}


@pytest.mark.parametrize("case", list(BAD_DECISIONS))
def test_a_damaged_run_decisions_file_is_refused_when_the_run_continues(base, tmp_path, case):
    text, message = BAD_DECISIONS[case]
    shutil.copytree(base / "run" / "checkpoint-1", tmp_path / "checkpoint-1")
    (tmp_path / RUN_DECISIONS_NAME).write_text(text)
    args = TrainingArguments(output_dir=str(tmp_path), resume_from_checkpoint="last", report_to="none")
    with pytest.raises(ValueError, match=f"{RUN_DECISIONS_NAME} \\(what the run's first start decided\\).*{message}"):
        plan_resume(args, ResumeArguments(), needs_data_state=True)


def test_a_whole_checkpoint_and_its_run_decisions_are_accepted(base, tmp_path):
    shutil.copytree(base / "run" / "checkpoint-1", tmp_path / "checkpoint-1")
    (tmp_path / RUN_DECISIONS_NAME).write_text(json.dumps(DECISIONS))
    args = TrainingArguments(output_dir=str(tmp_path), resume_from_checkpoint="last", report_to="none")
    plan = plan_resume(args, ResumeArguments(), needs_data_state=True)
    assert plan.checkpoint == tmp_path / "checkpoint-1" and plan.max_steps == 2 and plan.decisions == DECISIONS


# ---- the tokenizer is fingerprinted by content, not by the path it was loaded from ---------------------
@pytest.mark.parametrize("spelling", ["./tok/", "copy"])
def test_the_same_tokenizer_under_another_path_resumes(base, tmp_path, monkeypatch, spelling):
    monkeypatch.chdir(base)  # the run was trained with the tokenizer loaded as "tok"
    if spelling == "copy":
        spelling = str(shutil.copytree(base / "tok", tmp_path / "elsewhere" / "tokenizer"))
    trainer = _trainer(AutoTokenizer.from_pretrained(spelling), tmp_path / "out")
    trainer.train(resume_from_checkpoint=str(_copy(base, tmp_path)))
    assert trainer.state.global_step == 2 and (tmp_path / "out" / "checkpoint-2").is_dir()


@pytest.mark.parametrize(("vocab_size", "documents"), [(512, 10), (600, 20)], ids=["other-merges", "other-vocab-size"])
def test_another_tokenizer_is_refused_naming_it(base, tmp_path, vocab_size, documents):
    other = build_tokenizer(vocab_size=vocab_size, max_documents=documents)
    trainer = _trainer(other, tmp_path / "out")
    with pytest.raises(
        ValueError, match="differs from the checkpoint's: collator.tokenizer \\('[0-9a-f]{16}' -> "
    ) as e:
        trainer.train(resume_from_checkpoint=str(_copy(base, tmp_path)))
    assert "sources[0] ('stream:" in str(e.value) and trainer.state.global_step == 0  # the text stream's tokenizer too


@pytest.mark.parametrize(
    ("saved", "current", "named"),
    [
        ({"rows": ["packed", 32]}, {"rows": ["packed", 16]}, "rows[1] (32 -> 16)"),
        ({"seed": 0}, {"seed": 0, "objective": "causal"}, "objective (absent -> 'causal')"),
        ({"sources": ["a", "b"]}, {"sources": ["a"]}, "sources (['a', 'b'] -> ['a'])"),
        ({"collator": "C([('max_length', '32'), ('seed', 'None')])"},
         {"collator": "C([('max_length', '16'), ('seed', 'None')])"}, "collator.max_length (32 -> 16)"),
        ({"collator": "C([('max_length', '32')])"}, {"collator": "D([('max_length', '32')])"},
         "collator (\"C([('max_length', '32')])\" -> \"D([('max_length', '32')])\")"),
    ],
    ids=["list-item", "key-added", "list-length", "collator-field", "collator-class"],
)  # fmt: skip
def test_check_fingerprint_names_the_key_that_differs(saved, current, named):
    with pytest.raises(ValueError, match=f"differs from the checkpoint's: {re.escape(named)}; resume with the same"):
        check_fingerprint(saved, current)
    check_fingerprint(saved, current, ignore=True)  # ignore_data_fingerprint: no refusal
