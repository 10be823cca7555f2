"""One epoch of a PretrainingStream through ObjectiveTrainer; every rank records the rows it trained.

Run on N ranks forked by ``tests.distributed.run_ranks(main, N, OUT_DIR, SOURCE, WORKERS)`` (the tests) or as
``torchrun --nproc_per_node N tests/scripts/pipeline_epoch.py OUT_DIR SOURCE WORKERS``, with SOURCE
``dataset`` (tokenized in-memory Dataset), ``stream`` (streamed text) or ``store`` (a token store);
rank r writes ``OUT_DIR/rank{r}.pt``: the documents of every trained row (runs of tokens between
position-id restarts that hold a target), the steps taken and the micro-batches seen. The documents
are ``documents(tokenizer)``: 61 distinct ones, all shorter than a row, so each must come back whole.

Example:
    >>> from hf_lmobj.corpus import build_tokenizer
    >>> docs = documents(build_tokenizer(vocab_size=512, max_documents=20))
    >>> len(docs), len({tuple(d) for d in docs}), max(map(len, docs)) <= ROW
    (61, 61, True)
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import datasets
import numpy as np
import torch
from transformers import TrainerCallback, TrainingArguments

from hf_lmobj import DataCollatorForCausalLM, ObjectiveTrainer, pack_dataset
from hf_lmobj.corpus import build_tokenizer
from hf_lmobj.data import DatasetSource, PretrainingStream, RowFormat, TextStream
from hf_lmobj.plain_text import encode_texts_as_documents
from hf_lmobj.store.write import write_token_store
from hf_lmobj.trainer.teardown import close_distributed

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: the clone's root, for tests.testing_utils
from tests.testing_utils import tiny_gpt2  # noqa: E402

ROW, BATCH, NUM_DOCS = 32, 2, 61


def texts() -> list[str]:
    rng = np.random.default_rng(0)
    words = ["def", "return", "self", "import", "class", "for", "in", "if", "x", "y", "0", "1", "(", ")", ":"]
    return [" ".join(rng.choice(words, size=int(rng.integers(1, 12)))) + f" # {i}" for i in range(NUM_DOCS)]


def documents(tokenizer) -> list[list[int]]:
    return [d.tolist() for d in encode_texts_as_documents(tokenizer, texts(), add_bos=True, add_eos=True)]


def build_source(kind: str, tokenizer, where: str):
    if kind == "dataset":
        return DatasetSource(datasets.Dataset.from_dict({"input_ids": documents(tokenizer)}))
    if kind == "stream":
        text = datasets.Dataset.from_dict({"text": texts()})
        return TextStream(text.to_iterable_dataset(num_shards=4), tokenizer, batch_size=7)
    return write_token_store(os.path.join(where, "store"), documents(tokenizer), len(tokenizer))


def trained_documents(batch: dict) -> list[tuple[int, ...]]:
    """Runs of real tokens between position restarts that carry a target (padding and ghosts carry none)."""
    out = []
    targets = batch["shift_labels"] if "shift_labels" in batch else batch["labels"]
    for ids, pos, tgt in zip(batch["input_ids"].tolist(), batch["position_ids"].tolist(), targets.tolist()):
        starts = [i for i, p in enumerate(pos) if p == 0] + [len(pos)]
        for a, b in zip(starts, starts[1:]):
            if any(t != -100 for t in tgt[a:b]):
                out.append(tuple(ids[a:b]))
    return out


def main(out_dir: str, kind: str, workers: int) -> None:
    torch.set_num_threads(1)
    tokenizer = build_tokenizer(vocab_size=512, max_documents=20)
    rank = int(os.environ.get("RANK", 0))
    with tempfile.TemporaryDirectory() as where:
        if kind == "dispatch":  # pack_dataset on a stream + the collator's defaults, through accelerate's dispatcher
            docs = datasets.Dataset.from_dict({"input_ids": documents(tokenizer)}).to_iterable_dataset(num_shards=2)
            stream = pack_dataset(docs, max_length=ROW)
            collator = DataCollatorForCausalLM(tokenizer, max_length=ROW, packing=True)
        else:
            source = build_source(kind, tokenizer, os.path.join(where, f"r{rank}"))
            collator = DataCollatorForCausalLM(tokenizer, max_length=ROW, return_use_cache=False)
            stream = PretrainingStream([source], RowFormat("packed", ROW), collator, BATCH, seed=3, block_documents=16)
        model = tiny_gpt2(tokenizer, positions=ROW, width=16, layers=1, pad_token_id=None)
        seen: list[tuple[int, ...]] = []
        micro_batches = [0]

        class Recording(ObjectiveTrainer):
            def training_step(self, model, inputs, num_items_in_batch=None):
                seen.extend(trained_documents(inputs))
                micro_batches[0] += 1
                return super().training_step(model, inputs, num_items_in_batch)

        class OneEpoch(TrainerCallback):
            def on_epoch_end(self, args, state, control, **kwargs):
                control.should_training_stop = True

        args = TrainingArguments(
            output_dir=os.path.join(where, "out"),
            per_device_train_batch_size=BATCH,
            gradient_accumulation_steps=2,
            max_steps={"stream": 1000, "dispatch": 3}.get(kind, -1),
            num_train_epochs=1,
            dataloader_num_workers=workers,
            save_strategy="no",
            report_to=[],
            use_cpu=True,
            disable_tqdm=True,
            learning_rate=1e-3,
        )
        trainer = Recording(
            model=model, args=args, train_dataset=stream, callbacks=[OneEpoch()],
            data_collator=collator,
        )  # fmt: skip
        trainer.train()
        record = {"documents": seen, "steps": trainer.state.global_step, "micro_batches": micro_batches[0]}
        torch.save(record, os.path.join(out_dir, f"rank{rank}.pt"))
        close_distributed(trainer)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))
