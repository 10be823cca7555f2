"""Causal-LM collation: tokens/s, batch size and real-token fraction, ours vs what a transformers user would use.

Claims:

1. ``DataCollatorForCausalLM`` keeps every token and, packing a stream of documents, fills >= 99%
   of the ``rows x max_length`` rectangle with real tokens, faster than transformers' collators.
2. Long context: at T = 1k, 4k and 8k the packing collator (best-fit bin packing, documents
   isolated on eager / sdpa) delivers at least the tokens/s of ``DataCollatorWithFlattening``, in a
   batch of <= 48 bytes per position (no ``[B, 1, T, T]`` mask).
3. ``pack_dataset`` is at least as fast as TRL's ``pack_dataset`` (best-fit decreasing).
4. The model side is no worse: one forward + backward of a tiny Llama (sdpa) on our 4096-token
   rows costs no more time or memory than the same documents through transformers' flattening.

Setup (one process, side by side, one torch thread as in DataLoader workers):

* section 1: 64 documents of the embedded corpus's train split (every k-th file in path order),
  tokenized with the default tokenizer (vocab 8192) plus EOS, ``max_length`` 1024, batches of 8.
  Competitors: ``DataCollatorForLanguageModeling(mlm=False)`` on documents truncated to 1024
  (tokens past 1024 are lost) and on 1024-token chunks (nothing lost), ``DataCollatorWithFlattening``
  on the chunks (one row of up to 8 x 1024 tokens). Ours: padding mode, packing per batch of 8
  documents (sdpa form: ``position_ids`` + ``use_cache=False``; flash form: ``cu_seq_lens``), and
  packing the whole stream with ``pack_documents`` (what ``pack_dataset`` maps) then collating 8 rows.
* section 2: for each T, random documents of 50 to 2,000 tokens (uniform), enough for 8 rows of T;
  ``DataCollatorWithFlattening`` gets the same features (one row of every token: no bin packing, no
  padding). ``batch MiB`` counts every tensor returned; ``real`` is the real-token share of the
  returned ``input_ids``; the old 4D form (``packed_attention="4d_mask"``) is shown at 1k and 4k.
* section 3: 20,000 documents with log-normal lengths (median 500 tokens, mean about 800, like
  the functions and classes of stdlib files; random ids), packed into rows of 2048, batches of 1000
  documents, best of 3. TRL's ``pack_dataset`` is timed when ``import trl`` works (install it with
  ``pip install trl``: it resolves with transformers 5 without changing other packages), both
  ``"bfd"`` (its default: truncates documents longer than the row, tokens lost) and ``"bfd_split"``
  (splits them, like ours). Without trl the row says so and only our figure is printed.
* section 4: a Llama of hidden 64, 2 layers, 4 heads, vocab 8192, sdpa, train mode. The same
  documents (50 to 2,000 tokens, 95% of 2 x 4096) as our 2 packed rows of 4096, and as transformers'
  one flattened row (``DataCollatorWithFlattening`` + ``use_cache=False``; without it the model
  builds a cache and mixes documents). Each runs in a fresh process; peak memory is the growth of
  the process's peak RSS over the forward + backward passes, time the best of 2.

Run: ``python benchmarks/clm_collate.py`` (about 2 minutes on 2 cores); ``--sections 2 3`` runs some.
"""

from __future__ import annotations

import argparse
import multiprocessing
import resource
import statistics
import time
from collections.abc import Callable
from typing import Any

import datasets
import numpy as np
import pyarrow as pa
import torch
from transformers import DataCollatorForLanguageModeling, DataCollatorWithFlattening

from hf_lmobj.collators.causal import DataCollatorForCausalLM
from hf_lmobj.corpus import build_tokenizer, load_stdlib_corpus, tokenize_corpus
from hf_lmobj.packing.dataset import pack_dataset, pack_documents

NUM_DOCUMENTS = 64
MAX_LENGTH = 1024
BATCH = 8
REPEATS = 3
LONG_ROWS = (1024, 4096, 8192)


def load_documents(tokenizer) -> list[list[int]]:
    """64 train documents spread over the corpus (every k-th path), tokenized with EOS."""
    train = load_stdlib_corpus()["train"]
    step = len(train) // NUM_DOCUMENTS
    picked = train.select(range(0, step * NUM_DOCUMENTS, step))
    return list(tokenize_corpus(picked, tokenizer)["input_ids"])  # plain lists, as a Dataset row gives


def batches(items: list, size: int) -> list[list]:
    return [items[i : i + size] for i in range(0, len(items), size)]


def chunks(documents: list[list[int]]) -> list[list[int]]:
    return [doc[i : i + MAX_LENGTH] for doc in documents for i in range(0, len(doc), MAX_LENGTH)]


def timings(run: Callable[[], Any], repeats: int = REPEATS) -> list[float]:
    """Seconds of each of ``repeats`` calls of ``run`` (each output dropped before the next call)."""
    seconds = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = run()
        seconds.append(time.perf_counter() - start)
        del out
    return seconds


def best_seconds(run: Callable[[], Any], repeats: int = REPEATS) -> float:
    return min(timings(run, repeats))


def batch_bytes(batch: dict) -> int:
    return sum(v.numel() * v.element_size() for v in batch.values() if isinstance(v, torch.Tensor))


# ------------------------------------------------------------------------------ section 1
def measure(name: str, run: Callable[[], list[dict]], total_tokens: int, pad_id: int) -> dict:
    """Best-of-REPEATS seconds of ``run`` (which collates every batch) and its figures."""
    seconds = timings(run)
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
        "name": name,
        "seconds": best,
        "median": statistics.median(seconds),
        "real_tokens": real,
        "real": real / cells,
        "kept": real / total_tokens,
        "tokens_per_s": real / best,
    }


def corpus_table(tokenizer) -> None:
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
        features = [{"input_ids": i, "seq_lengths": s} for i, s in zip(rows["input_ids"], rows["seq_lengths"])]
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
    print(f"\n## 1. corpus: {NUM_DOCUMENTS} documents, {total} tokens, max_length {MAX_LENGTH}, best of {REPEATS}")
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
    print(
        f"packing efficiency of the stream: {stream['real']:.4%} (goal >= 99%): "
        f"{'met' if stream['real'] >= 0.99 else 'NOT met'}"
    )


# ------------------------------------------------------------------------------ section 2
def random_features(rows: int, width: int, vocab: int, seed: int, fill: float = 0.98) -> list[dict]:
    """Documents of 50 to 2,000 random tokens, about ``fill`` of ``rows x width`` tokens in all."""
    rng = np.random.default_rng(seed)
    features, total = [], 0
    while total < fill * rows * width:
        n = int(rng.integers(50, 2001))
        features.append({"input_ids": rng.integers(5, vocab, n).tolist()})
        total += n
    return features


def long_context_table(tokenizer) -> None:
    print(f"\n## 2. long context: 8 rows of random documents (50 to 2,000 tokens), best of {REPEATS + 2}")
    header = (
        f"{'T':>6s}  {'collator':34s} {'tokens/s':>11s} {'x transformers':>15s} {'batch MiB':>10s} "
        f"{'bytes/pos':>10s} {'real':>7s}  shape"
    )
    print(header)
    print("-" * len(header))
    flattening = DataCollatorWithFlattening()
    for width in LONG_ROWS:
        features = random_features(BATCH, width, len(tokenizer), seed=width)
        tokens = sum(len(f["input_ids"]) for f in features)
        collators = [
            ("transformers WithFlattening", flattening),
            ("ours, eager/sdpa (position_ids)", DataCollatorForCausalLM(tokenizer, max_length=width, packing=True)),
            (
                "ours, flash (cu_seq_lens)",
                DataCollatorForCausalLM(
                    tokenizer, max_length=width, packing=True, attn_implementation="flash_attention_2"
                ),
            ),
        ]
        if width <= 4096:
            collators.append(
                (
                    "ours, 4d_mask (as before)",
                    DataCollatorForCausalLM(tokenizer, max_length=width, packing=True, packed_attention="4d_mask"),
                )
            )
        base = None
        for name, collator in collators:
            seconds = best_seconds(lambda collator=collator, features=features: collator(features), REPEATS + 2)
            batch = collator(features)
            ids = batch["input_ids"]
            rate = tokens / seconds
            base = base or rate
            size = batch_bytes(batch)
            print(
                f"{width:6d}  {name:34s} {rate:11,.0f} {rate / base:15.2f} {size / 2**20:10.1f} "
                f"{size / ids.numel():10.1f} {tokens / ids.numel():7.2%}  {tuple(ids.shape)}"
            )
            del batch


# ------------------------------------------------------------------------------ section 3
def lognormal_dataset(count: int, vocab: int, seed: int = 0) -> datasets.Dataset:
    """``count`` documents of log-normal length (median 500, clipped to [20, 20000]), random ids."""
    rng = np.random.default_rng(seed)
    lengths = np.clip(rng.lognormal(np.log(500), 1.0, count), 20, 20_000).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    values = rng.integers(5, vocab, int(lengths.sum()), dtype=np.int32)
    table = pa.table({"input_ids": pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))})
    return datasets.Dataset(datasets.table.InMemoryTable(table))


def pack_dataset_table(tokenizer) -> None:
    width, count = 2048, 20_000
    dataset = lognormal_dataset(count, len(tokenizer))
    tokens = int(sum(dataset.data.column("input_ids").combine_chunks().value_lengths().to_numpy()))
    print(f"\n## 3. pack_dataset: {count} documents, {tokens:,} tokens, rows of {width}, best of {REPEATS}")
    datasets.disable_progress_bars()
    runs: list[tuple[str, Callable[[], datasets.Dataset]]] = [
        ("ours pack_dataset (best_fit)", lambda: pack_dataset(dataset, width, buffer_size=1000)),
    ]
    try:
        import trl

        for strategy in ("bfd", "bfd_split"):
            runs.append(
                (
                    f"TRL {trl.__version__} pack_dataset ({strategy})",
                    lambda s=strategy: trl.pack_dataset(dataset, width, strategy=s, map_kwargs={"batch_size": 1000}),
                )
            )
    except ImportError:
        print("(trl is not installed: `pip install trl` to time its pack_dataset side by side)")
    header = f"{'packer':40s} {'seconds':>8s} {'tokens/s':>13s} {'x ours':>7s} {'rows':>7s} {'kept':>7s} {'real':>7s}"
    print(header)
    print("-" * len(header))
    ours = None
    for name, run in runs:
        seconds = best_seconds(run)
        packed = run()
        kept = int(sum(packed.data.column("input_ids").combine_chunks().value_lengths().to_numpy()))
        ours = ours or seconds
        print(
            f"{name:40s} {seconds:8.2f} {tokens / seconds:13,.0f} {ours / seconds:7.2f} {packed.num_rows:7d} "
            f"{kept / tokens:7.2%} {kept / (packed.num_rows * width):7.2%}"
        )
    datasets.enable_progress_bars()


# ------------------------------------------------------------------------------ section 4
def _forward_backward(kind: str, queue) -> None:
    """Runs in a fresh process: one forward + backward of a tiny Llama on ``kind``'s batch."""
    from _tiny import tiny_llama

    torch.set_num_threads(1)
    tokenizer = build_tokenizer()
    features = random_features(2, 4096, len(tokenizer), seed=7, fill=0.95)  # best fit closes 2 rows
    if kind == "ours":
        batch = DataCollatorForCausalLM(tokenizer, max_length=4096, packing=True, return_shift_labels=False)(features)
    else:
        batch = {**DataCollatorWithFlattening()(features), "use_cache": False}
    model = tiny_llama(len(tokenizer), 64, 2, heads=4, ffn=128, attn_implementation="sdpa").train()
    seconds = []
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    for _ in range(2):
        model.zero_grad(set_to_none=True)
        start = time.perf_counter()
        model(**batch).loss.backward()
        seconds.append(time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before  # KiB on Linux
    queue.put((min(seconds), peak / 1024, tuple(batch["input_ids"].shape)))


def forward_table() -> None:
    print("\n## 4. one forward + backward, tiny Llama (sdpa, train), the same 2 x 4096 tokens of documents")
    header = f"{'batch':40s} {'seconds':>8s} {'x':>6s} {'peak MiB':>9s} {'x':>6s}  shape"
    print(header)
    print("-" * len(header))
    context = multiprocessing.get_context("spawn")
    base = None
    for kind, name in (("flattening", "transformers WithFlattening (1 row)"), ("ours", "ours, 2 packed rows of 4096")):
        queue = context.Queue()
        process = context.Process(target=_forward_backward, args=(kind, queue))
        process.start()
        seconds, peak, shape = queue.get()
        process.join()
        base = base or (seconds, peak)
        print(f"{name:40s} {seconds:8.2f} {seconds / base[0]:6.2f} {peak:9.0f} {peak / base[1]:6.2f}  {shape}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sections", type=int, nargs="*", default=[1, 2, 3, 4])
    sections = parser.parse_args().sections
    # DataLoader workers collate with one torch thread; pin it here for every collator alike, so
    # that thread hand-offs on a busy 2-core machine do not distort the figures.
    torch.set_num_threads(1)
    tokenizer = build_tokenizer()  # vocab 8192, pad != eos
    print(f"torch threads {torch.get_num_threads()}")
    if 1 in sections:
        corpus_table(tokenizer)
    if 2 in sections:
        long_context_table(tokenizer)
    if 3 in sections:
        pack_dataset_table(tokenizer)
    if 4 in sections:
        forward_table()


if __name__ == "__main__":
    main()
