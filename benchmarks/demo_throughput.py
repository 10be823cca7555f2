"""Training tokens per second of small causal LMs on this machine: the demo's speed levers.

Each case builds a model with ``hf_lmobj.models.stock.build_model``, packs synthetic documents (lengths
drawn like the stdlib corpus's files, about 5,000 tokens on average) with
``DataCollatorForCausalLM(packing=True)`` and times optimizer steps of the loss the demo trains
(``ObjectiveTrainer.compute_loss``: chunked linear cross-entropy) plus AdamW (or Muon + AdamW: the ``_muon``
cases), after warm-up steps.

    python benchmarks/demo_throughput.py                         # the default cases
    python benchmarks/demo_throughput.py --cases w128_t256 w128_t1024 --threads 1 2 --steps 6

Tokens/s are wall-clock on whatever else the machine is doing: run it idle for figures to quote.
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from dataclasses import dataclass

import numpy as np
import torch
from transformers import TrainingArguments

from hf_lmobj.collators.causal import DataCollatorForCausalLM
from hf_lmobj.corpus import build_tokenizer
from hf_lmobj.models.stock import ModelArguments, build_model
from hf_lmobj.optim.muon import MuonAdamW, muon_param_groups
from hf_lmobj.trainer.objective_trainer import ObjectiveTrainer


@dataclass(frozen=True)
class Case:
    """One model shape and batch: ``rows`` packed rows of ``length`` tokens per step."""

    width: int
    layers: int
    heads: int
    length: int
    rows: int
    vocab: int = 4096
    attn: str = "sdpa"
    packing: bool = True  # False: rows are plain causal windows (no per-document mask)
    compile: bool = False
    bf16: bool = False
    muon: bool = False  # Muon for the blocks' matrices + AdamW for the rest (hf_lmobj.optim.muon)


CASES = {
    "w128_t256": Case(128, 4, 2, 256, 32),
    "w128_l2_t256": Case(128, 2, 2, 256, 32),
    "w96_t256": Case(96, 4, 2, 256, 32),
    "w96_l3_t256": Case(96, 3, 2, 256, 32),
    "w64_t256": Case(64, 4, 2, 256, 32),
    "w64_t256_r8": Case(64, 4, 2, 256, 8),  # the clm demo since session 3
    "w64_t256_r8_muon": Case(64, 4, 2, 256, 8, muon=True),
    "w96_t256_r8_muon": Case(96, 4, 2, 256, 8, muon=True),
    "w64_t256_r8_v2048": Case(64, 4, 2, 256, 8, vocab=2048),
    "w64_t256_r8_v3072": Case(64, 4, 2, 256, 8, vocab=3072),
    "w96_t256_r8": Case(96, 4, 2, 256, 8),
    "w96_t256_r8_v2048": Case(96, 4, 2, 256, 8, vocab=2048),
    "w64_l6_t256_r8_v2048": Case(64, 6, 2, 256, 8, vocab=2048),
    "w128_t512": Case(128, 4, 2, 512, 16),
    "w128_t1024": Case(128, 4, 2, 1024, 8),
    "w128_t1024_nomask": Case(128, 4, 2, 1024, 8, packing=False),
    "w128_t1024_eager": Case(128, 4, 2, 1024, 8, attn="eager"),
    "w128_t512_nomask": Case(128, 4, 2, 512, 16, packing=False),
    "w192_t512": Case(192, 4, 3, 512, 16),
    "w256_t512": Case(256, 4, 4, 512, 16),
    "w128_l6_t512": Case(128, 6, 2, 512, 16),
    "w128_t512_v2048": Case(128, 4, 2, 512, 16, vocab=2048),
    "w128_t512_v8192": Case(128, 4, 2, 512, 16, vocab=8192),
    "w128_t512_compile": Case(128, 4, 2, 512, 16, compile=True),
    "w128_t1024_compile": Case(128, 4, 2, 1024, 8, compile=True),
    "w128_t512_bf16": Case(128, 4, 2, 512, 16, bf16=True),
}


def synthetic_features(vocab: int, tokens: int, seed: int = 0) -> list[dict[str, list[int]]]:
    """Documents of about ``tokens`` tokens in all, lengths exponential with mean 5,000."""
    rng = np.random.default_rng(seed)
    features, total = [], 0
    while total < tokens:
        length = int(rng.exponential(5000)) + 2
        features.append({"input_ids": rng.integers(400, vocab, length).tolist()})
        total += length
    return features


def time_case(case: Case, threads: int, steps: int, warmup: int) -> tuple[float, float, float]:
    """Tokens/s by the wall clock, by this process's CPU time, and seconds of the first (warm-up) step.

    CPU-time tokens/s times the thread count estimates what an idle machine gives when the
    machine is shared (exact for 1 thread; spinning threads make it pessimistic above).
    """
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    tokenizer = build_tokenizer(case.vocab)
    model = build_model(
        "causal",
        tokenizer,
        ModelArguments(
            model_type="llama",
            hidden_size=case.width,
            num_hidden_layers=case.layers,
            num_attention_heads=case.heads,
            max_position_embeddings=case.length,
            attn_implementation=case.attn,
        ),
    )
    collator = DataCollatorForCausalLM(
        tokenizer, max_length=case.length, packing=case.packing, attn_implementation=case.attn
    )
    per_step = case.rows * case.length
    stream = np.concatenate([f["input_ids"] for f in synthetic_features(case.vocab, per_step * (steps + warmup))])
    with tempfile.TemporaryDirectory() as tmp:
        args = TrainingArguments(output_dir=tmp, use_cpu=True, report_to="none")
        trainer = ObjectiveTrainer(model=model, args=args, data_collator=collator)
    forward = torch.compile(model) if case.compile else model
    if case.muon:
        optimizer = MuonAdamW(muon_param_groups(model, 0.1), lr=1e-3)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=False)
    documents = synthetic_features(case.vocab, max(per_step * 4, 40_000), seed=1)
    autocast = torch.autocast("cpu", dtype=torch.bfloat16) if case.bf16 else contextlib.nullcontext()
    elapsed = cpu = first = 0.0
    for step in range(warmup + steps):
        start, start_cpu = time.perf_counter(), time.process_time()
        if case.packing:
            batch = collator(documents[step % 2 :: 2][: case.rows * 2])
            batch = {k: (v[: case.rows] if torch.is_tensor(v) and v.dim() else v) for k, v in batch.items()}
        else:  # contiguous windows of the token stream: a causal mask only
            rows = stream[step * per_step : (step + 1) * per_step].reshape(case.rows, case.length)
            batch = collator([{"input_ids": r.tolist()} for r in rows])
        count = int((batch["shift_labels"] != -100).sum())
        with autocast:
            loss = trainer.compute_loss(forward, batch, num_items_in_batch=count)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step == 0:
            first = time.perf_counter() - start
        if step >= warmup:
            elapsed += time.perf_counter() - start
            cpu += time.process_time() - start_cpu
    return per_step * steps / elapsed, per_step * steps / cpu, first


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=["w128_t256", "w128_t512", "w128_t1024", "w128_t1024_nomask"])
    parser.add_argument("--threads", nargs="+", type=int, default=[torch.get_num_threads()])
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {args.steps} timed steps after {args.warmup} warm-up steps")
    print(f"{'case':24s} {'threads':>7s} {'tokens/s':>10s} {'per CPU s':>10s} {'1st step s':>10s}")
    for name in args.cases:
        for threads in args.threads:
            wall, cpu, first = time_case(CASES[name], threads, args.steps, args.warmup)
            print(f"{name:24s} {threads:7d} {wall:10,.0f} {cpu:10,.0f} {first:10.1f}", flush=True)


if __name__ == "__main__":
    main()
