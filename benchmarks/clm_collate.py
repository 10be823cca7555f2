"""Causal-LM collation: tokens/s and real-token fraction, ours vs what a transformers user would use.

Claim: ``DataCollatorForCausalLM`` keeps every token and, when packing a stream of documents,
fills >= 99% of the ``rows x max_length`` rectangle with real tokens. Its padding mode and its
flash-attention packing collate faster than transformers' collators; packing for eager/sdpa
pays for the 4D ``[B, 1, T, T]`` float mask (4 * T bytes per token, 1.3 GB per pass here), the
price of isolating documents on those kernels in train and eval mode.

Setup (one process, side by side):

* data: 64 documents of the embedded corpus's train split (every k-th file in path order, so short
  and long files both appear), tokenized with the default tokenizer (``build_tokenizer()``, vocab
  8192) plus EOS, ``max_length`` 1024. Most stdlib files are longer than 1024 tokens.
* a training batch is 8 rows (or, for collators that take documents, 8 documents).
* competitors: ``DataCollatorForLanguageModeling(mlm=False)`` fed the way its docs suggest
  (documents truncated to ``max_length`` by the tokenizer: the tokens past 1024 are lost), and the
  same collator fed 1024-token chunks of the documents (nothing lost; each chunk padded to the
  batch's longest); ``DataCollatorWithFlattening`` fed the same chunks (8 per batch, flattened
  into one row: no padding, but a row of up to 8 x 1024 tokens, and position_ids alone isolate
  documents only under flash-attention or train mode without a cache).
* ours: padding mode (documents split into 1024-chunk rows), packing mode per batch of 8 documents
  (4D sdpa mask, or flash-attention kwargs instead of the mask), and packing the *stream*: ``pack_documents`` (what ``pack_dataset`` maps) over
  all 64 documents, then the collator on 8-row batches (timing includes the packing). Packing
  only one small batch leaves each batch's last row part-empty; packing the stream leaves one.

``tokens/s`` counts real (non-padding) tokens delivered per second of collation; ``real`` is the
share of the returned ``input_ids`` rectangle that is real tokens; ``kept`` is the share of the
corpus tokens that reach the batch. Ratios are against ``DataCollatorForLanguageModeling``.
All collators run with one torch thread, as in DataLoader workers.
Run: ``python benchmarks/clm_collate.py`` (about a minute on 2 cores).
"""

from __future__ import annotations

import statistics
import time
from typing import Callable

import torch
from transformers import DataCollatorForLanguageModeling, DataCollatorWithFlattening

from hf_lmobj.collators.causal import DataCollatorForCausalLM
from hf_lmobj.collators.dataset_packing import pack_documents
from hf_lmobj.data import build_tokenizer, load_stdlib_corpus, tokenize_corpus

NUM_DOCUMENTS = 64
MAX_LENGTH = 1024
BATCH = 8
REPEATS = 3


def load_documents(tokenizer) -> list[list[int]]:
    """64 train documents spread over the corpus (every k-th path), tokenized with EOS."""
    train = load_stdlib_corpus()["train"]
    step = len(train) // NUM_DOCUMENTS
    picked = train.select(range(0, step * NUM_DOCUMENTS, step))
    return tokenize_corpus(picked, tokenizer)["input_ids"]


def batches(items: list, size: int) -> list[list]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def chunks(documents: list[list[int]]) -> list[list[int]]:
    return [doc[i : i + MAX_LENGTH] for doc in documents for i in range(0, len(doc), MAX_LENGTH)]


def measure(name: str, run: Callable[[], list[dict]], total_tokens: int, pad_id: int) -> dict:
    """Best-of-REPEATS seconds of ``run`` (which collates every batch) and its figures."""
    seconds = []
    for _ in range(REPEATS):
        start = time.perf_counter()
        out = run()
        seconds.append(time.perf_counter() - start)
        del out
    out = run()
    real = cells = 0
    for batch in out:
        ids = batch["input_ids"]  # (B, T)
        cells += ids.numel()
        if batch.get("attention_mask") is not None and batch["attention_mask"].dim() == 2:
            real += int(batch["attention_mask"].sum())
        elif "position_ids" in batch:  # packed: padding is the pad-id tail after the last document
            real += int((ids != pad_id).sum()) if pad_id is not None else ids.numel()
        else:
            real += ids.numel()
    best = min(seconds)
    return {
        "name": name, "seconds": best, "median": statistics.median(seconds), "real_tokens": real,
        "real": real / cells, "kept": real / total_tokens, "tokens_per_s": real / best,
    }


def main() -> None:
    # DataLoader workers collate with one torch thread; pin it here for every collator alike, so
    # that thread hand-offs on a busy 2-core machine do not distort the figures.
    torch.set_num_threads(1)
    tokenizer = build_tokenizer()  # vocab 8192, pad != eos
    documents = load_documents(tokenizer)
    total = sum(len(d) for d in documents)
    pad = tokenizer.pad_token_id
    assert all(pad not in d for d in documents), "pad id inside a document would skew the real count"
    doc_features = [{"input_ids": d} for d in documents]
    truncated = [{"input_ids": d[:MAX_LENGTH]} for d in documents]
    chunk_features = [{"input_ids": c} for c in chunks(documents)]

    hf_lm = DataCollatorForLanguageModeling(tokenizer, mlm=False)
    hf_flat = DataCollatorWithFlattening()
    ours_pad = DataCollatorForCausalLM(tokenizer, max_length=MAX_LENGTH)
    ours_pack = DataCollatorForCausalLM(tokenizer, max_length=MAX_LENGTH, packing=True)
    ours_flash = DataCollatorForCausalLM(
        tokenizer, max_length=MAX_LENGTH, packing=True, attn_implementation="flash_attention_2"
    )

    def stream_packed() -> list[dict]:
        rows = pack_documents(documents, MAX_LENGTH)
        features = [{"input_ids": i, "position_ids": p} for i, p in zip(rows["input_ids"], rows["position_ids"])]
        return [ours_pack(b) for b in batches(features, BATCH)]

    runs = [
        ("transformers LM collator, truncated docs", lambda: [hf_lm(b) for b in batches(truncated, BATCH)]),
        ("transformers LM collator, 1024-chunks", lambda: [hf_lm(b) for b in batches(chunk_features, BATCH)]),
        ("transformers WithFlattening, 1024-chunks", lambda: [hf_flat(b) for b in batches(chunk_features, BATCH)]),
        ("ours padding (chunk rows)", lambda: [ours_pad(b) for b in batches(doc_features, BATCH)]),
        ("ours packing, per 8-doc batch", lambda: [ours_pack(b) for b in batches(doc_features, BATCH)]),
        ("ours packing, per 8-doc batch, flash kwargs", lambda: [ours_flash(b) for b in batches(doc_features, BATCH)]),
        ("ours packing, whole stream", stream_packed),
    ]
    print(f"{NUM_DOCUMENTS} documents, {total} tokens, max_length {MAX_LENGTH}, "
          f"torch threads {torch.get_num_threads()}, best of {REPEATS}")
    results = [measure(name, run, total, pad) for name, run in runs]
    base = results[0]
    header = f"{'collator':44s} {'tokens/s':>11s} {'x':>6s} {'real':>7s} {'x':>6s} {'kept':>7s}"
    print(header)
    print("-" * len(header))
    for r in results:
        print(
            f"{r['name']:44s} {r['tokens_per_s']:11,.0f} {r['tokens_per_s'] / base['tokens_per_s']:6.2f} "
            f"{r['real']:7.2%} {r['real'] / base['real']:6.2f} {r['kept']:7.2%}"
        )
    stream = results[-1]
    print(f"packing efficiency of the stream: {stream['real']:.4%} (goal >= 99%): "
          f"{'met' if stream['real'] >= 0.99 else 'NOT met'}")


if __name__ == "__main__":
    main()
