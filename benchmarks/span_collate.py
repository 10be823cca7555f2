"""Span-corruption collation speed, and its share of one tiny-T5 training step.

Claim: ``DataCollatorForSpanCorruption`` collates T5-style batches (64 examples of 568 raw tokens
-> 512 input / 114 target tokens) fast enough to be a small share (goal < 5%) of one training
step of even a tiny T5 on CPU. No PyTorch span-corruption collator exists to compare against
(transformers keeps none), so the reference figure is the training step itself.

Run: ``python benchmarks/span_collate.py`` (about a minute on 2 cores; default tokenizer).
Tiny T5: vocab 8192, d_model 128, d_ff 512, 2 encoder + 2 decoder layers, 4 heads of 32.
"""

from __future__ import annotations

import argparse
import time

import torch
from _tiny import tiny_t5

from hf_lmobj.collators.span import DataCollatorForSpanCorruption
from hf_lmobj.corpus import build_tokenizer, load_stdlib_corpus


def examples(tokenizer, raw_length: int, count: int) -> list[dict[str, list[int]]]:
    """``count`` chunks of ``raw_length`` tokens from the embedded corpus, one stream."""
    stream: list[int] = []
    for text in load_stdlib_corpus(max_documents=400)["train"]["text"]:
        stream += tokenizer(text)["input_ids"]
        if len(stream) >= raw_length * count:
            break
    return [{"input_ids": stream[i * raw_length : (i + 1) * raw_length]} for i in range(count)]


def seconds_per_call(fn, repeats: int) -> float:
    fn()  # warm-up
    start = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - start) / repeats


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch_size", type=int, default=64)
    parser.add_argument("--input_length", type=int, default=512)
    parser.add_argument("--collate_repeats", type=int, default=20)
    parser.add_argument("--step_repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    args = parser.parse_args()

    tokenizer = build_tokenizer()
    collator = DataCollatorForSpanCorruption(tokenizer, input_length=args.input_length, seed=0)
    features = examples(tokenizer, collator.raw_tokens_length, args.batch_size)
    torch.set_num_threads(args.threads)  # 1: as in a DataLoader worker; same for the step
    collate = seconds_per_call(lambda: collator(features), args.collate_repeats)
    batch = collator(features)

    model = tiny_t5(tokenizer, 128, 2, heads=4).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def train_step() -> None:
        model(**batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    step = seconds_per_call(train_step, args.step_repeats)
    print(
        f"batch: {args.batch_size} x {collator.raw_tokens_length} raw tokens -> "
        f"input {tuple(batch['input_ids'].shape)}, labels {tuple(batch['labels'].shape)}; "
        f"collation and step on {args.threads} torch thread(s)"
    )
    print(f"tiny T5 training step (reference)  : {step * 1e3:9.1f} ms")
    print(
        f"hf_lmobj span collation            : {collate * 1e3:9.1f} ms/batch "
        f"= {args.batch_size / collate:,.0f} examples/s"
    )
    print(f"ratio collation / step             : {collate / step:9.3f}")
    print(f"collation share of step + collation: {100 * collate / (collate + step):8.2f} % (goal < 5%)")


if __name__ == "__main__":
    main()
