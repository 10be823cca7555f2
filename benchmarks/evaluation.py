"""Evaluation per domain with intervals: its costs against the straightforward ways, side by side in one process.

Claims (targets):

a. ``bootstrap_intervals``: 1,000 stratified document-bootstrap resamples of 100k documents in 20 domains (two tag
   levels: every figure, micro and macro) in about a second on one core, against a per-resample loop: numpy
   (one gather and sum per domain per resample) and pure Python (a loop over documents per resample). The loops
   are timed on a few resamples and extrapolated linearly to 1,000 (their cost per resample is constant).
b. Per-domain figures cost <= 5% of an unsliced evaluation: a tiny stock GPT-2 (hidden 64, 2 layers, untrained)
   scores N stdlib text blocks through the ``perplexity`` and ``bits_per_byte`` evaluate metrics, without and
   with ``domains=`` (each block's top-level stdlib package; ``bootstrap_samples=0``). The added work is timed
   alone too (the table of sums and ``domain_figures``, median of many runs), as end-to-end differences of a
   few milliseconds drown in the scoring's own noise on a shared machine.
c. The contamination scan: ``benchmarks/contamination.py`` (its figures are quoted in ``benchmarks/evaluation.md``;
   ``--contamination`` runs it here at 2M tokens).

Run: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/evaluation.py`` (about a minute on one core).
"""

from __future__ import annotations

import os

for _name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "RAYON_NUM_THREADS"):
    os.environ.setdefault(_name, "1")  # one core: before numpy and torch start their pools
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import argparse  # noqa: E402
import math  # noqa: E402
import random  # noqa: E402
import runpy  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from hf_lmobj.metrics.slices import LN2, DocumentSums, domain_figures, domain_tree  # noqa: E402
from hf_lmobj.metrics.uncertainty import bootstrap_intervals  # noqa: E402

ROWS: list[dict[str, Any]] = []


def timed(run: Callable[[], Any]) -> tuple[Any, float, float]:
    """``(result, wall s, CPU s)`` of one call."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = run()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def row(section: str, what: str, size: str, wall: float, cpu: float, ratio: str = "", note: str = "") -> None:
    ROWS.append({"section": section, "what": what, "size": size, "wall": wall, "cpu": cpu, "ratio": ratio,
                 "note": note})  # fmt: skip


# ------------------------------------------------------------------------------------------------ (a) bootstrap
def synthetic_table(documents: int, seed: int = 0) -> DocumentSums:
    """``documents`` documents in 20 domains (4 sources x 5 sub-domains) of log-normal length, loss ~1 bit/byte."""
    rng = np.random.default_rng(seed)
    tokens = np.maximum(rng.lognormal(np.log(300), 0.8, documents).astype(np.int64), 1)
    nbytes = np.maximum((tokens * rng.uniform(3.0, 4.5, documents)).astype(np.int64), 1)
    nll = nbytes * LN2 * rng.gamma(20.0, 1 / 20.0, documents)  # (documents,) nats
    leaf = rng.integers(0, 20, documents)
    names = [f"src{j // 5}/part{j % 5}" for j in range(20)]
    return DocumentSums(nll=nll.tolist(), tokens=tokens.tolist(), bytes=nbytes.tolist(), words=[0] * documents,
                        doc_id=list(range(documents)), domain=[names[j] for j in leaf])  # fmt: skip


def _plan(table: DocumentSums) -> tuple[list[str], list[np.ndarray], dict[str, list[int]], dict[str, list[str]]]:
    """Leaves, their rows, each node's leaves (by index) and each parent's children: what a loop needs."""
    tree = domain_tree(table.domain)
    rows = {leaf: [] for leaf in tree.leaves}
    for i, domain in enumerate(table.domain):
        rows[domain].append(i)
    index = {leaf: k for k, leaf in enumerate(tree.leaves)}
    members = {node: [index[leaf] for leaf in tree.members[node]] for node in tree.nodes}
    return list(tree.leaves), [np.asarray(rows[leaf]) for leaf in tree.leaves], members, dict(tree.parents)


def _figures_of(leaf_sums: np.ndarray, members: dict, parents: dict, top: list[str]) -> dict[str, float]:
    """Every figure's log-loss rate of one resample from its per-leaf sums ``(leaves, [nll, tokens, bytes])``."""
    out = {}
    for name, column, scale in (("perplexity", 1, 1.0), ("bits_per_byte", 2, LN2), ("byte_perplexity", 2, 1.0)):
        rate = {node: leaf_sums[m, 0].sum() / leaf_sums[m, column].sum() / scale for node, m in members.items()}
        for node in members:
            out[f"{name}/{node}"] = rate[node]
            if node in parents:
                out[f"{name}/{node}/macro"] = sum(rate[c] for c in parents[node]) / len(parents[node])
        total = leaf_sums.sum(axis=0)
        out[f"{name}/micro"] = total[0] / total[column] / scale
        out[f"{name}/macro"] = sum(rate[t] for t in top) / len(top)
    return out


def naive_numpy(table: DocumentSums, samples: int, seed: int = 0) -> dict[str, tuple[float, float]]:
    """Per resample: per domain one ``rng.integers`` draw, a gather and a sum; figures per key; percentiles."""
    rng = np.random.default_rng(seed)
    leaves, rows, members, parents = _plan(table)
    top = sorted({leaf.split("/")[0] for leaf in leaves})
    columns = np.column_stack([table.nll, table.tokens, table.bytes]).astype(np.float64)
    replicates: dict[str, list[float]] = {}
    for _ in range(samples):
        leaf_sums = np.stack([columns[r[rng.integers(0, len(r), len(r))]].sum(axis=0) for r in rows])
        for key, value in _figures_of(leaf_sums, members, parents, top).items():
            replicates.setdefault(key, []).append(value)
    return {key: tuple(np.quantile(values, [0.025, 0.975])) for key, values in replicates.items()}


def naive_python(table: DocumentSums, samples: int, seed: int = 0) -> dict[str, tuple[float, float]]:
    """Per resample: a Python loop over every document of every domain (``random.randrange``), then as above."""
    rng = random.Random(seed)
    leaves, rows, members, parents = _plan(table)
    top = sorted({leaf.split("/")[0] for leaf in leaves})
    nll, tokens, nbytes = table.nll, table.tokens, table.bytes
    replicates: dict[str, list[float]] = {}
    for _ in range(samples):
        leaf_sums = np.zeros((len(leaves), 3))
        for k, leaf_rows in enumerate(rows):
            picks = [leaf_rows[rng.randrange(len(leaf_rows))] for _ in range(len(leaf_rows))]
            leaf_sums[k] = (math.fsum(nll[i] for i in picks), sum(tokens[i] for i in picks),
                            sum(nbytes[i] for i in picks))  # fmt: skip
        for key, value in _figures_of(leaf_sums, members, parents, top).items():
            replicates.setdefault(key, []).append(value)
    return {key: tuple(np.quantile(values, [0.025, 0.975])) for key, values in replicates.items()}


def section_a(args: argparse.Namespace) -> None:
    table = synthetic_table(args.documents)
    size = f"{args.documents:,} docs x {args.samples} resamples"
    keys = len(domain_figures(table))
    ours, wall, cpu = timed(lambda: bootstrap_intervals(table, args.samples, seed=0))
    row("a", "ours: bootstrap_intervals (chunked bincount x matrix product)", size, wall, cpu, "1.00x",
        f"{keys} keys (20 domains, 4 sources, micro, macros) x 3 figures")  # fmt: skip
    ours_cpu = cpu
    for label, naive, measured in (("numpy loop per resample", naive_numpy, args.naive_samples),
                                   ("pure Python loop per resample", naive_python, args.python_samples)):  # fmt: skip
        result, wall, cpu = timed(lambda naive=naive, measured=measured: naive(table, measured, seed=0))
        scale = args.samples / measured
        assert set(result) == set(ours), "the loop must give every key"
        row("a", f"naive: {label}", size, wall * scale, cpu * scale, f"{cpu * scale / ours_cpu:.1f}x",
            f"timed on {measured} resamples, extrapolated x{scale:g}")  # fmt: skip
    # the same estimator: the loop's 2.5 / 97.5% bounds from its few resamples land near ours
    check = naive_numpy(table, 200, seed=1)["bits_per_byte/micro"]
    low, high = ours["bits_per_byte/micro"]
    ROWS[-2]["note"] += f"; 200 resamples: micro bpb [{check[0]:.5f}, {check[1]:.5f}] vs ours [{low:.5f}, {high:.5f}]"


# ------------------------------------------------------------------------------------------- (b) domain overhead
def stdlib_blocks(tokenizer, count: int, max_tokens: int) -> tuple[list[str], list[str]]:
    """Blocks of the embedded corpus (split at blank lines) of 20..max_tokens tokens, each with its top package."""
    from hf_lmobj.corpus import load_stdlib_corpus

    texts, domains = [], []
    train = load_stdlib_corpus(max_documents=400)["train"]
    for doc, path in zip(train["text"], train["path"]):
        domain = path.split("/")[0].removesuffix(".py")
        for block in doc.split("\n\n"):
            if 20 <= len(tokenizer(block, add_special_tokens=False)["input_ids"]) < max_tokens:
                texts.append(block)
                domains.append(domain.lstrip("_") or "root")
            if len(texts) == count:
                return texts, domains
    return texts, domains


def section_b(args: argparse.Namespace) -> None:
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from _tiny import tiny_gpt2

    from hf_lmobj.corpus import build_tokenizer
    from hf_lmobj.metrics import load
    from hf_lmobj.metrics.scoring import score_texts

    tokenizer = build_tokenizer(vocab_size=1024, max_documents=300)
    model = tiny_gpt2(tokenizer, 64, 2, heads=2, positions=256, seed=0).eval()
    texts, domains = stdlib_blocks(tokenizer, args.texts, 255)
    size = f"{len(texts)} texts, {len(set(domains))} domains"
    common = dict(model=model, tokenizer=tokenizer, max_length=256, batch_size=16, progress=False)
    for name in ("perplexity", "bits_per_byte"):
        metric = load(name)
        metric.compute(predictions=texts[:16], **common)  # warm-up
        plain, sliced = [], []
        for _ in range(args.repeats):  # alternating, so drift hits both alike
            plain.append(timed(lambda m=metric: m.compute(predictions=texts, **common))[1:])
            sliced.append(timed(lambda m=metric: m.compute(predictions=texts, domains=domains, **common))[1:])
        p_wall, p_cpu = (statistics.median(t[i] for t in plain) for i in (0, 1))
        s_wall, s_cpu = (statistics.median(t[i] for t in sliced) for i in (0, 1))
        row("b", f"{name}.compute(predictions=texts): unsliced", size, p_wall, p_cpu, "1.000x",
            f"median of {args.repeats}")  # fmt: skip
        row("b", f"{name}.compute(..., domains=...)", size, s_wall, s_cpu, f"{s_cpu / p_cpu:.3f}x",
            f"end to end, median of {args.repeats}; noise of the scoring itself included")  # fmt: skip
    scores = score_texts(model, tokenizer, texts, max_length=256, batch_size=16, progress=False)

    def added() -> dict:
        table = DocumentSums.from_scores(scores, doc_id=list(range(len(texts))), domain=domains)
        return domain_figures(table)

    runs = [timed(added)[1:] for _ in range(args.repeats * 10)]
    a_wall, a_cpu = (statistics.median(t[i] for t in runs) for i in (0, 1))
    _, base_wall, base_cpu = timed(lambda: score_texts(model, tokenizer, texts, max_length=256, batch_size=16,
                                                       progress=False))  # fmt: skip
    row("b", "added work alone: DocumentSums + domain_figures", size, a_wall, a_cpu,
        f"{a_cpu / base_cpu * 100:.2f}% of scoring", f"median of {len(runs)}; scoring alone {base_cpu:.2f} CPU-s")  # fmt: skip
    table = DocumentSums.from_scores(scores, doc_id=list(range(len(texts))), domain=domains)
    _, wall, cpu = timed(lambda: bootstrap_intervals(table, 1000, seed=0))
    row("b", "bootstrap_samples=1000 on top (intervals for every key)", size, wall, cpu,
        f"{cpu / base_cpu * 100:.1f}% of scoring", "opt-in: bootstrap_samples > 0")  # fmt: skip


# -------------------------------------------------------------------------------------------- (c) contamination
def section_c() -> None:
    script = Path(__file__).resolve().with_name("contamination.py")
    argv = sys.argv
    sys.argv = [str(script), "--tokens", "2M", "--texts", "1000", "--eval_texts", "100"]
    try:
        runpy.run_path(str(script), run_name="__main__")
    finally:
        sys.argv = argv


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--documents", type=int, default=100_000, help="documents of the bootstrap table (a)")
    parser.add_argument("--samples", type=int, default=1000, help="bootstrap resamples (a)")
    parser.add_argument("--naive_samples", type=int, default=20, help="resamples the numpy loop is timed on (a)")
    parser.add_argument("--python_samples", type=int, default=2, help="resamples the Python loop is timed on (a)")
    parser.add_argument("--texts", type=int, default=400, help="texts scored (b)")
    parser.add_argument("--repeats", type=int, default=5, help="end-to-end repeats (b)")
    parser.add_argument("--sections", default="a,b", help="a, b and / or c (c: run benchmarks/contamination.py)")
    parser.add_argument("--contamination", action="store_true", help="same as adding c to --sections")
    args = parser.parse_args()
    torch.set_num_threads(1)
    sections = set(args.sections.split(",")) | ({"c"} if args.contamination else set())
    if "a" in sections:
        section_a(args)
    if "b" in sections:
        section_b(args)
    if ROWS:
        print(f"\n| section | what | size | wall s | CPU s | ratio | note |\n|{'---|' * 7}")
    for r in ROWS:
        print(f"| {r['section']} | {r['what']} | {r['size']} | {r['wall']:.3f} | {r['cpu']:.3f} | {r['ratio']} "
              f"| {r['note']} |")  # fmt: skip
    if "c" in sections:
        section_c()


if __name__ == "__main__":
    main()
