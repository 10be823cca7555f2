"""Train a PretrainingStream for 12 steps, whole or stopped and resumed from a checkpoint, and record it.

Run on N ranks forked by ``tests.distributed.run_ranks(main, N, OUT_DIR, OBJECTIVE, SOURCE, WORKERS, PLAN)`` (the
tests) or as ``torchrun --nproc_per_node N tests/scripts/pipeline_resume.py OUT_DIR OBJECTIVE SOURCE WORKERS PLAN``
with OBJECTIVE ``causal`` / ``masked`` / ``span``, SOURCE ``dataset`` / ``stream`` / ``store`` / ``mix`` and
PLAN a comma list of segments: ``12`` trains to step 12 at once; ``4,8,12`` stops at step 4 and at step 8 and
resumes each time from the checkpoint just written (in fresh Trainers, as a requeued job does);
``resume:6,12`` first resumes from the folder's checkpoint-6 (written by an earlier launch, maybe on
another number of processes). The output
folder keeps the checkpoints; rank 0 writes ``OUT_DIR/record.pt``: each step's loss and grad norm, and the
final parameters. ``per_device_train_batch_size`` is ``4 // N`` with accumulation 2, so 1 and 2 processes
take the same global batches (a planned source resumes across them).

Example:
    >>> plan_segments("4,8,12"), plan_segments("resume:6,12")
    ((None, [4, 8, 12]), (6, [12]))
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import datasets
import torch
from pipeline_epoch import ROW, texts
from transformers import TrainerCallback, TrainingArguments

from hf_lmobj import DataCollatorForCausalLM, DataCollatorForMaskedLM, DataCollatorForSpanCorruption, ObjectiveTrainer
from hf_lmobj.corpus import build_tokenizer
from hf_lmobj.data import DatasetSource, PretrainingStream, RowFormat, TextStream
from hf_lmobj.plain_text import encode_texts_as_documents
from hf_lmobj.store import TokenStore, write_token_store
from hf_lmobj.trainer.teardown import close_distributed

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: the clone's root, for tests.testing_utils
from tests.testing_utils import tiny_bert, tiny_gpt2, tiny_t5  # noqa: E402

STEPS = 12


def plan_segments(plan: str) -> tuple[int | None, list[int]]:
    """``(step to resume from first, or None; the steps each segment stops at)``; ``resume:6,12`` resumes at once."""
    first = None
    if plan.startswith("resume:"):
        first, plan = int(plan.split(":")[1].split(",")[0]), plan.split(",", 1)[1]
    return first, [int(step) for step in plan.split(",")]


def build_model(objective: str, tokenizer):
    """The objective's tiny model (width 16, 1 layer), seeded 0, with dropout (the RNG must resume too)."""
    tiny = dict(width=16, layers=1, dropout=float(os.environ.get("PIPELINE_DROPOUT", 0.1)))
    if objective == "causal":
        return tiny_gpt2(tokenizer, positions=ROW, pad_token_id=None, **tiny)
    if objective == "masked":
        return tiny_bert(tokenizer, positions=ROW + 8, **tiny)
    return tiny_t5(tokenizer, **tiny)


def build_stream(objective: str, kind: str, tokenizer, where: str, batch: int, model):
    bos, eos = objective == "causal", objective != "span"
    corpus = texts() * 3
    docs = [d.tolist() for d in encode_texts_as_documents(tokenizer, corpus, bos, eos)]
    if objective == "causal":
        collator, fmt = (
            DataCollatorForCausalLM(tokenizer, max_length=ROW, return_use_cache=False),
            RowFormat("packed", ROW),
        )
    elif objective == "masked":
        collator, fmt = DataCollatorForMaskedLM(tokenizer, seed=5, pad_to_multiple_of=8), RowFormat("pieces", ROW)
    else:
        collator = DataCollatorForSpanCorruption(tokenizer, input_length=ROW, model=model, seed=5)
        fmt = RowFormat("pieces", collator.raw_tokens_length)

    def store() -> object:
        path = os.path.join(where, f"store-rank{os.environ.get('RANK', 0)}")  # the same bytes on every rank
        return TokenStore.open(path) if os.path.exists(path) else write_token_store(path, docs, len(tokenizer))

    def stream() -> TextStream:
        text = datasets.Dataset.from_dict({"text": corpus}).to_iterable_dataset(num_shards=4)
        return TextStream(text, tokenizer, add_bos=bos, add_eos=eos, batch_size=7)

    if kind == "mix":
        sources, weights = [store(), stream()], [0.6, 0.4]
    else:
        sources, weights = [{"dataset": lambda: DatasetSource(datasets.Dataset.from_dict({"input_ids": docs})),
                             "stream": stream, "store": store}[kind]()], None  # fmt: skip
    return PretrainingStream(sources, fmt, collator, batch, weights=weights, seed=3, block_documents=16)


def train_segment(objective, kind, workers, out_dir, stop_at, resume, where):
    tokenizer = build_tokenizer(vocab_size=512, max_documents=20)
    world = int(os.environ.get("WORLD_SIZE", 1))
    model = build_model(objective, tokenizer)
    stream = build_stream(objective, kind, tokenizer, where, 4 // world, model)

    class StopAt(TrainerCallback):  # a preemption right after the checkpoint of step stop_at
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == stop_at:
                control.should_save, control.should_training_stop = True, True

    args = TrainingArguments(
        output_dir=out_dir, per_device_train_batch_size=4 // world, max_steps=STEPS,
        gradient_accumulation_steps=int(os.environ.get("PIPELINE_GA", 2)),
        learning_rate=3e-3, warmup_steps=2, lr_scheduler_type="cosine", logging_steps=1, save_strategy="steps",
        save_steps=100, dataloader_num_workers=workers, report_to=[], use_cpu=True, disable_tqdm=True, seed=11,
        ddp_find_unused_parameters=False,
    )  # fmt: skip
    trainer = ObjectiveTrainer(model=model, args=args, train_dataset=stream, callbacks=[StopAt()])
    trainer.train(resume_from_checkpoint=resume)
    return trainer


def main(out_dir: str, objective: str, kind: str, workers: int, plan: str) -> None:
    torch.set_num_threads(1)
    where = os.path.join(out_dir, "data")
    os.makedirs(where, exist_ok=True)
    first, segments = plan_segments(plan)
    resume = None if first is None else os.path.join(out_dir, "run", f"checkpoint-{first}")
    for stop_at in segments:
        trainer = train_segment(objective, kind, workers, os.path.join(out_dir, "run"), stop_at, resume, where)
        resume = os.path.join(out_dir, "run", f"checkpoint-{stop_at}")
    if trainer.is_world_process_zero():
        history = [h for h in trainer.state.log_history if "loss" in h]
        record = {
            "losses": {h["step"]: h["loss"] for h in history},
            "grad_norms": {h["step"]: h["grad_norm"] for h in history},
            "parameters": {k: v.detach().clone() for k, v in trainer.model.state_dict().items()},
            "steps": trainer.state.global_step,
        }
        torch.save(record, os.path.join(out_dir, "record.pt"))
    close_distributed(trainer)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5])
