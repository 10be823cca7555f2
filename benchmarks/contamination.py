"""The contamination scan vs a straightforward Python set of n-gram tuples, side by side in one process.

Claims (targets):

a. From a token store of >= 20M tokens, :meth:`ContaminationIndex.scan` reads >= 10M training tokens per second
   per core (one thread: ``OMP_NUM_THREADS=1``), with a peak of traced memory bounded by the evaluation set:
   the same for a store 4x smaller, growing with the evaluation set.
b. From a text stream (``TextStream`` over a streamed ``IterableDataset``), the scan costs little beyond the
   tokenizer it must run anyway (token unit), and the word unit beats a Python set of word 13-grams.

Setup (nothing downloaded): token ids drawn from a Zipf-like law (``p(rank) ~ 1 / rank**1.1``, 50,257 ids:
uint16) in documents of log-normal length (median ~700 tokens), written with ``write_token_store`` in a temp
dir. The evaluation set: ``--eval_documents`` documents of ~1,000 tokens, half of them copies of store
documents ("planted", expected rate 1.0), half fresh draws ("fresh", expected 0.0). The naive baseline
keeps ``set(tuple(ids[i:i + 13]))`` of the evaluation documents and tests every window of each training
document as a tuple: it runs on the first ``--naive_tokens`` tokens only (it is ~100x slower), timed and
extrapolated to the whole store, and its per-document fractions on that slice are checked equal to ours.
Time: wall seconds and CPU seconds of this process (``tok / CPU-s`` is the per-core figure). Memory:
``tracemalloc`` peak during the scan (numpy reports its buffers to it; the store's memory-mapped pages are
the page cache, not the process's allocations), beside the index's own bytes.

Run: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/contamination.py`` (20M tokens, ~2 minutes on one core);
``--tokens 2M --quick`` for a smoke run.
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "RAYON_NUM_THREADS"):
    os.environ.setdefault(_name, "1")  # one core: before numpy and tokenizers start their pools
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse  # noqa: E402
import re  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import tracemalloc  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

N = 13
VOCAB = 50257
ROWS: list[dict[str, Any]] = []


def _count(text: str) -> int:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmM]?)", text)
    if not match:
        raise argparse.ArgumentTypeError(f"a count such as 20M or 500k, got {text!r}")
    return int(float(match[1]) * {"": 1, "k": 1e3, "m": 1e6}[match[2].lower()])


def _human(value: float) -> str:
    return f"{value / 1e6:.2f}M" if value >= 1e6 else f"{value / 1e3:.0f}k" if value >= 1e3 else f"{value:.0f}"


def timed(label: str, section: str, tokens: int, run: Callable[[], Any], note: str = "") -> tuple[Any, float]:
    """Run ``run`` once for time (wall and CPU), once more under tracemalloc for the peak; record a row."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = run()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    tracemalloc.start()
    run()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    ROWS.append(
        {"section": section, "what": label, "tokens": tokens, "wall": wall, "cpu": cpu, "peak": peak, "note": note}
    )
    return result, cpu


def zipf_ids(rng: np.random.Generator, count: int) -> np.ndarray:
    ranks = np.arange(1, VOCAB + 1, dtype=np.float64)
    cumulative = np.cumsum(1 / ranks**1.1)
    cumulative /= cumulative[-1]
    return np.searchsorted(cumulative, rng.random(count)).astype(np.uint16)  # (count,) ids, rank 0 most frequent


def documents(rng: np.random.Generator, tokens: int) -> list[np.ndarray]:
    lengths = np.maximum(rng.lognormal(np.log(700), 0.6, tokens // 500 + 10).astype(np.int64), 20)
    lengths = lengths[: int(np.searchsorted(np.cumsum(lengths), tokens)) + 1]
    flat = zipf_ids(rng, int(lengths.sum()))
    return np.split(flat, np.cumsum(lengths)[:-1])


def eval_set(rng: np.random.Generator, train: list[np.ndarray], count: int) -> tuple[list[np.ndarray], list[str]]:
    planted = [train[i][:1000] for i in rng.choice(len(train), count // 2, replace=False)]
    fresh = [zipf_ids(rng, 1000) for _ in range(count - count // 2)]
    return planted + fresh, ["planted"] * len(planted) + ["fresh"] * len(fresh)


def naive_scan(eval_docs: list[list[int]], train_docs: list[list[int]]) -> np.ndarray:
    """The straightforward way: a set of n-gram tuples; per evaluation document, the share of its n-grams seen."""
    index = {tuple(doc[i : i + N]) for doc in eval_docs for i in range(len(doc) - N + 1)}
    seen = set()
    for doc in train_docs:
        for i in range(len(doc) - N + 1):
            gram = tuple(doc[i : i + N])
            if gram in index:
                seen.add(gram)
    return np.array(
        [
            np.mean([tuple(doc[i : i + N]) in seen for i in range(len(doc) - N + 1)]) if len(doc) >= N else np.nan
            for doc in eval_docs
        ]
    )


def section_a(args: argparse.Namespace, folder: Path) -> None:
    from hf_lmobj.contamination.index import ContaminationIndex
    from hf_lmobj.store import write_token_store

    rng = np.random.default_rng(0)
    train = documents(rng, args.tokens)
    start = time.perf_counter()
    store = write_token_store(folder / "store", train, VOCAB)
    print(
        f"wrote {store.num_tokens:,} tokens in {store.num_documents:,} documents ({time.perf_counter() - start:.1f}s)"
    )
    quarter = write_token_store(folder / "quarter", train[: len(train) // 4], VOCAB)
    docs, domains = eval_set(rng, train, args.eval_documents)
    eval_tokens = sum(d.size for d in docs)
    index, _ = timed(f"ours: build the index of {len(docs)} eval docs", "a", eval_tokens,
                     lambda: ContaminationIndex.from_token_ids(docs, domains, n=N))  # fmt: skip
    ROWS[-1]["note"] = f"{index.table.num_ngrams:,} distinct 13-grams; {index.table.nbytes / 2**20:.1f} MiB held"
    small = ContaminationIndex.from_token_ids(docs[::4], domains[::4], n=N)
    (report, cpu) = timed(f"ours: scan, {len(docs)} eval docs", "a", store.num_tokens, lambda: index.scan(store))
    rates = report.domain_rates
    assert rates == {"fresh": 0.0, "planted": 1.0}, rates
    ROWS[-1]["note"] = f"rates {rates}; index {index.table.nbytes / 2**20:.1f} MiB"
    timed(f"ours: scan, {len(docs) // 4} eval docs", "a", store.num_tokens, lambda: small.scan(store),
          f"index {small.table.nbytes / 2**20:.1f} MiB")  # fmt: skip
    timed(f"ours: scan of a 4x smaller store, {len(docs)} eval docs", "a", quarter.num_tokens,
          lambda: index.scan(quarter))  # fmt: skip
    # the naive set on a bounded slice, extrapolated; its fractions checked against ours on that slice
    count = int(np.searchsorted(np.cumsum([d.size for d in train]), args.naive_tokens)) + 1
    sliced = write_token_store(folder / "slice", train[:count], VOCAB)
    eval_lists, train_lists = [d.tolist() for d in docs], [d.tolist() for d in train[:count]]
    naive, naive_cpu = timed(f"naive set of tuples, first {_human(sliced.num_tokens)} tokens", "a",
                             sliced.num_tokens, lambda: naive_scan(eval_lists, train_lists))  # fmt: skip
    np.testing.assert_allclose(naive, index.scan(sliced).fractions)  # the same answer on the same data
    extrapolated = naive_cpu * store.num_tokens / sliced.num_tokens
    ROWS[-1]["note"] = (f"fractions equal ours on the slice; extrapolated to {_human(store.num_tokens)}: {extrapolated:.0f} "
                        f"CPU-s = {extrapolated / cpu:.0f}x ours")  # fmt: skip


def prose(rng: np.random.Generator, words: list[str], count: int) -> str:
    ranks = np.arange(1, len(words) + 1, dtype=np.float64)
    cumulative = np.cumsum(1 / ranks)
    cumulative /= cumulative[-1]
    return " ".join(words[i] for i in np.searchsorted(cumulative, rng.random(count)))


def section_b(args: argparse.Namespace) -> None:
    import datasets

    from hf_lmobj.contamination.index import ContaminationIndex, normalized_words
    from hf_lmobj.corpus import build_tokenizer
    from hf_lmobj.data import TextStream
    from hf_lmobj.plain_text import encode_plain

    rng = np.random.default_rng(1)
    syllables = [a + b for a in "bcdfghklmnprstvz" for b in "aeiou"]
    words = sorted({"".join(rng.choice(syllables, rng.integers(1, 4))) for _ in range(30000)})
    rng.shuffle(words)
    texts = [prose(rng, words, int(rng.integers(100, 600))) for _ in range(args.texts)]
    evals = [texts[i] for i in range(0, 2 * args.eval_texts, 4)]  # planted copies
    evals += [prose(rng, words, 350) for _ in range(args.eval_texts - len(evals))]
    domains = ["planted" if i < args.eval_texts // 2 else "fresh" for i in range(len(evals))]
    tok = build_tokenizer(vocab_size=8192)
    stream = TextStream(datasets.Dataset.from_dict({"text": texts}).to_iterable_dataset(num_shards=4), tok)
    tokens = sum(map(len, encode_plain(tok, texts)))
    timed(
        "bare tokenizer (encode_plain), 1 thread",
        "b",
        tokens,
        lambda: [None for _ in stream.iter_documents(stream.dataset)],
    )
    index = ContaminationIndex.build(evals, domains, tok)
    (report, cpu) = timed("ours, tokens unit: scan of the TextStream", "b", tokens, lambda: index.scan(stream))
    assert report.domain_rates["planted"] == 1.0, report.domain_rates
    ROWS[-1]["note"] = f"rates {report.domain_rates}"
    eval_ids = encode_plain(tok, evals)
    naive, naive_cpu = timed("naive set, tokens unit (same tokenizer)", "b", tokens,
                             lambda: naive_scan(eval_ids, [d.tolist() for d in stream.iter_documents(stream.dataset)]))  # fmt: skip
    ROWS[-1]["note"] = f"{naive_cpu / cpu:.2f}x ours"
    words_index = ContaminationIndex.build(evals, domains, tok, unit="words")
    (report, cpu) = timed("ours, words unit: scan of the TextStream", "b", tokens, lambda: words_index.scan(stream))
    ROWS[-1]["note"] = f"rates {report.domain_rates}; {_human(report.sources[0].units)} words"
    eval_words = [normalized_words(text) for text in evals]
    naive, naive_cpu = timed("naive set, words unit", "b", tokens,
                             lambda: naive_scan(eval_words, [normalized_words(t) for t in texts]))  # fmt: skip
    np.testing.assert_allclose(naive, report.fractions)
    ROWS[-1]["note"] = f"fractions equal ours; {naive_cpu / cpu:.2f}x ours"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=_count, default=_count("20M"), help="tokens in the store (section a)")
    parser.add_argument("--eval_documents", type=_count, default=1000, help="evaluation documents (~1,000 tokens)")
    parser.add_argument("--naive_tokens", type=_count, default=_count("1M"), help="tokens the naive set scans")
    parser.add_argument("--texts", type=_count, default=5000, help="training texts of the stream (section b)")
    parser.add_argument("--eval_texts", type=_count, default=200, help="evaluation texts (section b)")
    parser.add_argument("--sections", default="a,b")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        if "a" in args.sections:
            section_a(args, Path(folder))
        if "b" in args.sections:
            section_b(args)
    print("| section | what | tokens | wall s | CPU s | tok / CPU-s | peak traced MiB | note |")
    print("|---|---|---|---|---|---|---|---|")
    for row in ROWS:
        rate = _human(row["tokens"] / row["cpu"]) if row["cpu"] else "-"
        print(f"| {row['section']} | {row['what']} | {_human(row['tokens'])} | {row['wall']:.2f} | {row['cpu']:.2f} | "
              f"{rate} | {row['peak'] / 2**20:.1f} | {row['note']} |")  # fmt: skip


if __name__ == "__main__":
    main()
