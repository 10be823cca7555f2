"""Launch to the first resumed step: ObjectiveTrainer's O(1) data reposition vs the stock Trainer's replay.

Claim (targets): resuming a streamed, packed causal-LM run from a checkpoint that has consumed >= 50M
tokens takes ``ObjectiveTrainer`` (``PretrainingStream`` + ``data_state.json``) within 1.2x of resuming
it at step 20, while the stock Trainer (a plain ``datasets.IterableDataset``: the stream tokenized by
``.map(batched=True)`` and packed by ``pack_dataset``), which replays the skipped batches through
``skip_first_batches``, takes >= 3x as long.

Setup (nothing downloaded): the stdlib corpus's train split (``load_stdlib_corpus``, 30.9 MB, 8.5M tokens)
written ``--copies`` times as ``--files`` JSONL files, read with ``datasets.load_dataset("json",
streaming=True)``; tokenizer ``build_tokenizer(vocab_size=8192)``; a Llama of width 32, 1 layer, 2 heads;
8 packed rows of 2048 tokens per step (16,384 tokens). Both sides train 20 real steps and save
``checkpoint-20``. The checkpoints at the larger steps are *positioned*, not trained (3,060 steps of
this model on 2 shared cores would take most of an hour):

* ours: a fresh ``PretrainingStream`` (built by the same function) is read by ``PipelineLoader`` -- the
  loader ``ObjectiveTrainer`` trains through, rows tokenized, packed and collated exactly as in training
  -- to batch K; ``loader.state_dict()`` is the state ``ObjectiveTrainer._save_checkpoint`` would write
  at step K (the same call, on the same loader class, world size 1, 0 workers). ``checkpoint-K`` is
  ``checkpoint-20`` with that state in ``data_state.json`` (the fingerprint kept), ``global_step`` K in
  ``trainer_state.json`` and the completion marker rewritten. Checked: the positioned state at 20
  equals the real ``checkpoint-20``'s, and the first batch each resume trains is the positioning run's
  batch K+1 (a hash of its ``input_ids``).
* stock: ``checkpoint-20`` with ``global_step`` K. The stock resume cost depends on the checkpoint only
  through ``global_step`` (the batches ``skip_first_batches`` replays) and the file sizes, which are the
  same at any step; the weights, optimizer moments and scheduler step loaded are step 20's.

Each resume runs in a fresh process (``resume`` sub-command) with ``max_steps = K + 1``; a callback's
``on_step_end`` records ``time.monotonic()`` minus the parent's ``time.monotonic()`` just before it
started the process (both ``CLOCK_MONOTONIC``): interpreter start, imports, tokenizer, model, data
setup, checkpoint load, data reposition / replay and the one training step. ``setup`` is the part
before ``trainer.train`` is called. Torch runs on 1 thread; tokenizers without their thread pool.

Run: ``.venv/bin/python benchmarks/resume.py`` (~10 minutes on 2 shared cores; ``--steps 20,3060``,
``--copies 8``; the corpus and checkpoints are kept in ``--work``, ``out/bench_resume`` by default).
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
ROW, BATCH, TRAIN_STEPS = 2048, 8, 20


# ---- the corpus and the two training sets -----------------------------------------------------
def write_corpus(folder: Path, copies: int, files: int) -> list[str]:
    from hf_lmobj.corpus import load_stdlib_corpus

    paths = [folder / f"part{i:03d}.jsonl" for i in range(files)]
    done = folder / "done.json"
    if done.exists() and json.loads(done.read_text()) == {"copies": copies, "files": files}:
        return [str(p) for p in paths]
    folder.mkdir(parents=True, exist_ok=True)
    texts = load_stdlib_corpus()["train"]["text"]
    handles = [open(p, "w") for p in paths]
    for i, text in enumerate(t for _ in range(copies) for t in texts):
        handles[i % files].write(json.dumps({"text": text}) + "\n")
    for h in handles:
        h.close()
    done.write_text(json.dumps({"copies": copies, "files": files}))
    return [str(p) for p in paths]


def text_stream(files: list[str]):
    import datasets

    return datasets.load_dataset("json", data_files=files, split="train", streaming=True)


def tokenizer():
    from hf_lmobj.corpus import build_tokenizer

    return build_tokenizer(vocab_size=8192)


def collator(tok):
    from hf_lmobj import DataCollatorForCausalLM

    return DataCollatorForCausalLM(tok, max_length=ROW, return_use_cache=False)


def ours_dataset(files: list[str], tok):
    from hf_lmobj.data import PretrainingStream, RowFormat, TextStream

    return PretrainingStream([TextStream(text_stream(files), tok)], RowFormat("packed", ROW), collator(tok), BATCH)


def stock_dataset(files: list[str], tok):
    from hf_lmobj import pack_dataset
    from hf_lmobj.plain_text import encode_texts_as_documents

    def tokenize(batch):
        return {"input_ids": [d.tolist() for d in encode_texts_as_documents(tok, batch["text"], True, True)]}

    return pack_dataset(text_stream(files).map(tokenize, batched=True, remove_columns=["text"]), ROW)


def build_model(tok):
    from _tiny import tiny_llama

    return tiny_llama(len(tok), 32, 1, heads=2, ffn=64, positions=ROW, bos_token_id=tok.bos_token_id,
                      eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)  # fmt: skip


def trainer_for(kind: str, files: list[str], out: Path, max_steps: int, save: bool, callbacks=()):
    from transformers import TrainingArguments

    from hf_lmobj import ObjectiveTrainer

    tok = tokenizer()
    data = ours_dataset(files, tok) if kind == "ours" else stock_dataset(files, tok)
    args = TrainingArguments(
        output_dir=str(out), max_steps=max_steps, per_device_train_batch_size=BATCH, learning_rate=1e-3,
        save_strategy="steps" if save else "no", save_steps=TRAIN_STEPS, logging_steps=10, report_to="none",
        use_cpu=True, disable_tqdm=True, seed=0, remove_unused_columns=False, dataloader_num_workers=0,
    )  # fmt: skip
    return ObjectiveTrainer(model=build_model(tok), args=args, train_dataset=data, data_collator=collator(tok),
                            callbacks=list(callbacks))  # fmt: skip


def batch_hash(input_ids) -> str:
    return hashlib.blake2b(input_ids.contiguous().numpy().tobytes(), digest_size=8).hexdigest()


# ---- positioning the big checkpoints -----------------------------------------------------------
def position_ours(files: list[str], steps: list[int]) -> tuple[dict[int, dict], dict[int, str], float]:
    """PipelineLoader alone to each step of ``steps``: its state there and the hash of the batch after it."""
    from hf_lmobj.data import PipelineLoader

    loader = PipelineLoader(ours_dataset(files, tokenizer()).shard(0, 1))
    states, hashes, started = {}, {}, time.perf_counter()
    for index, batch in enumerate(loader, start=1):  # index = batches consumed, this one included
        if index - 1 in states:
            hashes[index - 1] = batch_hash(batch["input_ids"])
        if index in steps:
            states[index] = copy.deepcopy(loader.state_dict())
        if index > max(steps):
            break
    return states, hashes, time.perf_counter() - started


def stock_hash_after(files: list[str], step: int) -> str:
    tok = tokenizer()
    rows = iter(stock_dataset(files, tok))
    for _ in range(step * BATCH):
        next(rows)
    return batch_hash(collator(tok)([next(rows) for _ in range(BATCH)])["input_ids"])


def positioned_checkpoint(source: Path, step: int, data_state: dict | None) -> Path:
    from hf_lmobj.trainer.checkpoints import write_complete_marker, write_data_state
    from hf_lmobj.trainer.state_files import read_data_state

    target = source.parent / f"checkpoint-{step}"
    if target == source:
        return target
    shutil.rmtree(target, ignore_errors=True)
    shutil.copytree(source, target)
    state = json.loads((target / "trainer_state.json").read_text())
    state["global_step"] = step
    (target / "trainer_state.json").write_text(json.dumps(state, indent=2))
    if data_state is not None:
        write_data_state(target, [data_state], read_data_state(source)["fingerprint"])
    write_complete_marker(
        target, step, sorted(p.name for p in target.iterdir() if not p.name.startswith("checkpoint_"))
    )
    return target


# ---- one resume, in a fresh process ----------------------------------------------------------
def resume_main(kind: str, files: list[str], checkpoint: Path, step: int) -> None:
    import torch
    from transformers import TrainerCallback

    t0 = float(os.environ["BENCH_T0"])
    torch.set_num_threads(1)
    seen: dict[str, float | str] = {}

    class FirstStep(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if "first_step_s" not in seen:
                seen["first_step_s"] = time.monotonic() - t0
                seen["first_step_cpu_s"] = time.process_time()  # this process's CPU time (all its threads)
                seen["global_step"] = state.global_step

    trainer = trainer_for(kind, files, checkpoint.parent / "resumed", step + 1, save=False, callbacks=[FirstStep()])
    stock_step = trainer.training_step

    def training_step(model, inputs, *args, **kwargs):
        seen.setdefault("first_batch", batch_hash(inputs["input_ids"].cpu()))
        return stock_step(model, inputs, *args, **kwargs)

    trainer.training_step = training_step
    seen["setup_s"] = time.monotonic() - t0
    trainer.train(resume_from_checkpoint=str(checkpoint))
    print("RESULT " + json.dumps(seen), flush=True)


def run_resume(kind: str, files_arg: str, checkpoint: Path, step: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
           "HF_DATASETS_OFFLINE": "1"}  # fmt: skip
    command = [sys.executable, __file__, "resume", "--kind", kind, "--corpus", files_arg,
               "--checkpoint", str(checkpoint), "--step", str(step)]  # fmt: skip
    env["BENCH_T0"] = repr(time.monotonic())
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"{kind} resume at {step} failed:\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    line = next(line for line in done.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line[len("RESULT ") :])


# ---- the benchmark -----------------------------------------------------------------------------
def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("command", nargs="?", default="bench", choices=["bench", "resume"])
    parser.add_argument("--work", default=str(REPO / "out" / "bench_resume"))
    parser.add_argument("--copies", type=int, default=8)
    parser.add_argument("--files", type=int, default=64)
    parser.add_argument("--steps", default=f"{TRAIN_STEPS},3060")
    parser.add_argument("--kind", choices=["ours", "stock"])
    parser.add_argument("--corpus")
    parser.add_argument("--checkpoint")
    parser.add_argument("--step", type=int)
    args = parser.parse_args()
    if args.command == "resume":
        files = sorted(str(p) for p in Path(args.corpus).glob("*.jsonl"))
        return resume_main(args.kind, files, Path(args.checkpoint), args.step)

    import torch

    torch.set_num_threads(1)
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    work, steps = Path(args.work), sorted(int(s) for s in args.steps.split(","))
    assert steps[0] == TRAIN_STEPS, f"the first step must be {TRAIN_STEPS} (the trained checkpoint)"
    corpus = work / "corpus"
    started = time.perf_counter()
    files = write_corpus(corpus, args.copies, args.files)
    print(f"corpus: {len(files)} files, {sum(os.path.getsize(f) for f in files) / 1e6:.0f} MB "
          f"({time.perf_counter() - started:.0f} s)", flush=True)  # fmt: skip
    real = {}
    for kind in ("ours", "stock"):
        out = work / kind
        shutil.rmtree(out, ignore_errors=True)
        started = time.perf_counter()
        trainer_for(kind, files, out, TRAIN_STEPS, save=True).train()
        real[kind] = out / f"checkpoint-{TRAIN_STEPS}"
        print(f"{kind}: trained {TRAIN_STEPS} steps ({time.perf_counter() - started:.0f} s)", flush=True)
    states, hashes, seconds = position_ours(files, steps)
    print(f"ours: PipelineLoader positioned to step {steps[-1]} in {seconds:.0f} s", flush=True)
    saved = json.loads((real["ours"] / "data_state.json").read_text())["ranks"][0]
    assert saved == json.loads(json.dumps(states[TRAIN_STEPS])), "positioned state at 20 != the trained checkpoint's"
    expected_stock_20 = stock_hash_after(files, TRAIN_STEPS)

    rows = []
    for step in steps:
        ckpt_ours = positioned_checkpoint(real["ours"], step, states[step])
        ckpt_stock = positioned_checkpoint(real["stock"], step, None)
        ours = run_resume("ours", str(corpus), ckpt_ours, step)
        stock = run_resume("stock", str(corpus), ckpt_stock, step)
        assert ours["global_step"] == stock["global_step"] == step + 1, (ours, stock)
        assert ours["first_batch"] == hashes[step], f"ours resumed at {step} on another batch"
        if step == TRAIN_STEPS:
            assert stock["first_batch"] == expected_stock_20, "stock resumed at 20 on another batch"
        tokens = sum(states[step]["tokens_by_source"])
        rows.append((step, tokens, ours, stock, (ckpt_ours / "data_state.json").stat().st_size))
        print(f"step {step}: ours {ours['first_step_s']:.1f} s, stock {stock['first_step_s']:.1f} s", flush=True)

    print()
    print(table(rows))


def table(rows) -> str:
    """``rows``: (step, tokens, ours result, stock result, data_state.json bytes); the first is step 20."""
    base, base_cpu = rows[0][2]["first_step_s"], rows[0][2]["first_step_cpu_s"]
    lines = [
        "| checkpoint step | tokens consumed | ours wall s (setup) | ours CPU s | stock wall s (setup) | stock CPU s "
        "| stock / ours (wall, CPU) | ours / ours@20 (wall, CPU) | data_state.json |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for step, tokens, ours, stock, size in rows:
        lines.append(
            f"| {step:,} | {tokens / 1e6:.1f}M | {ours['first_step_s']:.1f} ({ours['setup_s']:.1f}) "
            f"| {ours['first_step_cpu_s']:.1f} | {stock['first_step_s']:.1f} ({stock['setup_s']:.1f}) "
            f"| {stock['first_step_cpu_s']:.1f} | {stock['first_step_s'] / ours['first_step_s']:.1f}x, "
            f"{stock['first_step_cpu_s'] / ours['first_step_cpu_s']:.1f}x | {ours['first_step_s'] / base:.2f}x, "
            f"{ours['first_step_cpu_s'] / base_cpu:.2f}x | {size:,} B |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    main()
