"""One masked-LM training step of a tiny BERT: stock head on all tokens vs hf_lmobj on the selected ones.

Claim: ``ObjectiveTrainer``'s loss (the MLM head's vocabulary projection only at the ~15% selected
positions, via ``linear_cross_entropy``) makes a forward + backward step <= 0.6x the time of the
stock ``BertForMaskedLM(labels=...)`` loss, which projects every position onto the vocabulary.

Tiny BERT: vocab 30522 (bert-base's), hidden 128, 2 layers, batch 16 x 128 tokens, float32 CPU.
Both paths run in this process on the same batch, alternating, median of the repeats.

    python benchmarks/mlm_step.py
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import torch
from _tiny import tiny_bert
from transformers import TrainingArguments

from hf_lmobj.trainer.objective_trainer import ObjectiveTrainer


def build(batch: int, length: int, vocab: int, seed: int = 0):
    """A tiny BERT and a batch with ~15% of positions selected (labels -100 elsewhere)."""
    model = tiny_bert(vocab, 128, 2, dropout=0.0, seed=seed)
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(1000, vocab, (batch, length), generator=g)  # (B, T)
    selected = torch.rand(batch, length, generator=g) < 0.15  # (B, T)
    inputs = {
        "input_ids": ids.masked_fill(selected, 103),
        "attention_mask": torch.ones_like(ids),
        "labels": ids.masked_fill(~selected, -100),
    }
    return model, inputs


def step_seconds(model, loss_fn) -> float:
    model.zero_grad(set_to_none=True)
    start = time.perf_counter()
    loss_fn().backward()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--vocab", type=int, default=30522)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    model, inputs = build(args.batch, args.length, args.vocab)
    with tempfile.TemporaryDirectory() as tmp:
        targs = TrainingArguments(output_dir=tmp, report_to=[], use_cpu=True, disable_tqdm=True)
        trainer = ObjectiveTrainer(model=model, args=targs)
        stock = lambda: model(**inputs).loss  # noqa: E731
        ours = lambda: trainer.compute_loss(model, dict(inputs))  # noqa: E731
        print(
            f"loss stock {stock().item():.6f}  ours {ours().item():.6f}  "
            f"({int((inputs['labels'] != -100).sum())} of {inputs['labels'].numel()} positions selected)"
        )
        times = {"stock": [], "ours": []}
        step_seconds(model, stock), step_seconds(model, ours)  # warm-up
        for _ in range(args.repeats):
            times["stock"].append(step_seconds(model, stock))
            times["ours"].append(step_seconds(model, ours))
    s, o = statistics.median(times["stock"]), statistics.median(times["ours"])
    print(f"BertForMaskedLM(labels=...) stock head, all tokens : {s * 1000:8.1f} ms / step")
    print(f"hf_lmobj ObjectiveTrainer, selected positions only : {o * 1000:8.1f} ms / step")
    print(f"ratio ours / stock: {o / s:.2f}x (goal <= 0.6x)")


if __name__ == "__main__":
    main()
