"""The streaming pre-training data pipeline end to end: tokens/s and peak RSS, ours vs the bare tokenizer.

Claims (targets):

a. Raw text streamed from local JSONL files (``datasets.load_dataset("json", streaming=True)``) through
   ``TextStream`` -> ``PretrainingStream`` (packed rows of 2048, ``DataCollatorForCausalLM``, batches
   of 8) -> ``PipelineLoader`` delivers >= 0.8x the bare fast tokenizer's tokens/s at 1 worker, and
   scales with workers (0 = in-process, 1, 2).
b. From a token store (written once with ``tokenize_to_token_store``, timed), the same pipeline
   delivers >= 20M collated tokens/s per core.
c. ``pack_dataset`` vs TRL's ``pack_dataset(strategy="bfd")``: delegated to ``benchmarks/packing_scale.py``.
d. ``recipes/pretrain.py --streaming true`` holds its peak RSS flat in the corpus size: 1 GB of JSONL
   costs <= 1.2x the peak RSS of 30 MB.

Setup: a synthetic corpus of Python-like text (lines of words drawn with numpy from a fixed word list,
log-normal document lengths), written as ``--files`` JSONL files in a temp dir; nothing downloaded.
The tokenizer is the locally trained byte-level BPE ``build_tokenizer(vocab_size=8192)``. Every
configuration runs in a fresh subprocess: ``peak RSS`` is the largest sum of the resident memory of
that process and its DataLoader workers (psutil, sampled every 20 ms; shared pages count once per
process, so it over-counts a little), ``main`` the ``ru_maxrss`` of the process itself. ``CPU s`` is
user + system time of the process and its (joined) workers; ``tok / CPU-s`` is tokens per CPU
second, the honest "per core" figure on a shared 2-core machine. The bare tokenizer runs
``tok(texts, add_special_tokens=False)`` over batches of 1000 texts held in memory, once with the
Rust thread pool on (its default) and once with ``TOKENIZERS_PARALLELISM=false`` (one core).

Run: ``.venv/bin/python benchmarks/data_pipeline.py`` (20M tokens, all sections; ~15 minutes on 2
cores), ``--quick`` (2M tokens, small corpora for d; ~4 minutes, 2 of them section d), ``--sections a,b`` for some,
``--tokens 100M`` for another size.
"""

from __future__ import annotations

import argparse
import cProfile
import importlib.util
import io
import json
import os
import pstats
import re
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
MAX_LENGTH = 2048
BATCH = 8
VOCAB = 8192
WORDS = (
    "def class return self import from if elif else for while in not and or is None True False try except "
    "finally with as yield lambda pass break continue raise assert global async await print len range dict "
    "list tuple set str int float bool open read write value key name path data result items args kwargs "
    "index count total buffer stream token batch offset length size start stop step node parent child left "
    "right first last next prev config options state cache error message logger request response header "
    "= == != < > <= >= + - * / // % ** ( ) [ ] { } : , . -> # 0 1 2 3 10 100 'a' \"b\" x y z i j k n m"
).split()


# ------------------------------------------------------------------------------ helpers
def parse_tokens(text: str) -> int:
    """``20M`` -> 20_000_000, ``1B`` -> 1e9, ``500k`` -> 500_000, plain integers as they are."""
    match = re.fullmatch(r"\s*([0-9.]+)\s*([kKmMgGbB]?)\s*", text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 20M, 1B, 500k)")
    scale = {"": 1, "k": 1e3, "m": 1e6, "g": 1e9, "b": 1e9}[match.group(2).lower()]
    return int(float(match.group(1)) * scale)


def human(n: float) -> str:
    for unit, scale in (("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.3g}{unit}"
    return f"{n:.3g}"


class TreeRss:
    """Peak of the summed RSS of this process and all its descendants, sampled in a thread."""

    def __init__(self, pid: int | None = None, every: float = 0.02) -> None:
        import psutil

        self._process, self._every, self._stop = psutil.Process(pid), every, threading.Event()
        self.peak = 0

    def sample(self) -> int:
        import psutil

        total = 0
        try:
            procs = [self._process, *self._process.children(recursive=True)]
        except psutil.Error:
            return 0
        for proc in procs:
            try:
                total += proc.memory_info().rss
            except psutil.Error:
                pass
        return total

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.sample())
            time.sleep(self._every)

    def __enter__(self) -> TreeRss:
        self.peak = self.sample()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


def cpu_seconds() -> float:
    own, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def max_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def tokenizer():
    from hf_lmobj.corpus import build_tokenizer

    return build_tokenizer(vocab_size=VOCAB)


# ------------------------------------------------------------------------------ the corpus
def make_texts(rng: np.random.Generator, count: int, mean_chars: int = 2400) -> list[str]:
    """``count`` Python-like documents: lines of 3-12 words, log-normal length (mean ~``mean_chars``)."""
    words = np.array([w + " " for w in WORDS], dtype=object)
    sigma = 1.0
    mu = np.log(mean_chars / 6.0) - sigma**2 / 2  # ~6 chars per word with its space
    doc_words = np.clip(rng.lognormal(mu, sigma, count), 4, 200_000).astype(np.int64)
    picks = rng.integers(0, len(words), int(doc_words.sum()))
    line_breaks = rng.random(picks.size) < 1 / 7  # a line every ~7 words
    indent = rng.integers(0, 3, picks.size)
    tokens = words[picks].copy()  # words, some replaced by a line break and its indent
    tokens[line_breaks] = [f"\n{'    ' * k}" for k in indent[line_breaks].tolist()]
    flat = tokens.tolist()
    texts, start = [], 0
    for n in doc_words.tolist():
        texts.append("".join(flat[start : start + n]))
        start += n
    return texts


def write_corpus(folder: Path, tokens: int, files: int, seed: int = 0) -> dict[str, Any]:
    """JSONL files of about ``tokens`` tokens (calibrated on a sample with the tokenizer) in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    tok = tokenizer()
    sample = make_texts(rng, 500)
    tokens_per_char = sum(map(len, tok(sample, add_special_tokens=False)["input_ids"])) / sum(map(len, sample))
    chars_needed = tokens / tokens_per_char
    handles = [open(folder / f"train-{i:05d}.jsonl", "w") for i in range(files)]
    written = docs = 0
    start = time.perf_counter()
    try:
        while written < chars_needed:
            for text in make_texts(rng, 200):
                handles[docs % files].write(json.dumps({"text": text}) + "\n")
                written += len(text)
                docs += 1
    finally:
        for handle in handles:
            handle.close()
    return {
        "documents": docs,
        "chars": written,
        "bytes": sum(f.stat().st_size for f in folder.iterdir()),
        "est_tokens": int(written * tokens_per_char),
        "seconds": time.perf_counter() - start,
    }


def data_files(folder: Path) -> list[str]:
    return sorted(str(p) for p in folder.glob("*.jsonl"))


# ------------------------------------------------------------------------------ child runs
def child_bare(folder: Path, parallel: bool) -> dict[str, Any]:
    texts = []
    for name in data_files(folder):
        with open(name) as handle:
            texts.extend(json.loads(line)["text"] for line in handle)
    tok = tokenizer()
    tokens = 0
    with TreeRss() as rss:
        cpu0, start = cpu_seconds(), time.perf_counter()
        for i in range(0, len(texts), 1000):
            tokens += sum(map(len, tok(texts[i : i + 1000], add_special_tokens=False)["input_ids"]))
        seconds = time.perf_counter() - start
    return {"tokens": tokens, "seconds": seconds, "cpu": cpu_seconds() - cpu0, "rss": rss.peak, "main": max_rss_mb(),
            "documents": len(texts)}  # fmt: skip


def build_stream(kind: str, location: Path, limit_batches: int | None = None):
    import datasets

    from hf_lmobj.collators.causal import DataCollatorForCausalLM
    from hf_lmobj.data import PretrainingStream, RowFormat, TextStream
    from hf_lmobj.store import TokenStore

    datasets.disable_progress_bars()
    tok = tokenizer()
    if kind == "stream":
        stream = datasets.load_dataset("json", data_files=data_files(location), split="train", streaming=True)
        source = TextStream(stream, tok)
    else:
        source = TokenStore.open(location)
    collator = DataCollatorForCausalLM(tok, max_length=MAX_LENGTH, return_use_cache=False)
    return PretrainingStream([source], RowFormat("packed", MAX_LENGTH), collator, batch_size=BATCH)


def child_pipeline(kind: str, location: Path, workers: int) -> dict[str, Any]:
    from hf_lmobj.data import PipelineLoader

    stream = build_stream(kind, location)
    loader = PipelineLoader(stream, num_workers=workers)
    batches = positions = 0
    with TreeRss() as rss:
        cpu0, start = cpu_seconds(), time.perf_counter()
        first = None
        for batch in loader:
            if first is None:
                first = time.perf_counter() - start
            batches += 1
            positions += batch["input_ids"].numel()
        seconds = time.perf_counter() - start
    tokens = int(loader.tokens_by_source.sum())
    return {"tokens": tokens, "seconds": seconds, "cpu": cpu_seconds() - cpu0, "rss": rss.peak, "main": max_rss_mb(),
            "batches": batches, "fill": tokens / max(positions, 1), "first_batch_s": first}  # fmt: skip


def child_store_write(folder: Path, store: Path) -> dict[str, Any]:
    import datasets

    from hf_lmobj.store import tokenize_to_token_store

    datasets.disable_progress_bars()
    tok = tokenizer()
    with TreeRss() as rss:
        start = time.perf_counter()
        dataset = datasets.load_dataset("json", data_files=data_files(folder), split="train",
                                        cache_dir=str(store.parent / "hf_cache"))  # fmt: skip
        loaded = time.perf_counter() - start
        written = tokenize_to_token_store(dataset, tok, store, num_proc=2)
        seconds = time.perf_counter() - start
    return {"tokens": written.num_tokens, "documents": len(written), "load_s": loaded, "seconds": seconds,
            "rss": rss.peak, "main": max_rss_mb(), "bytes": (store / "tokens.bin").stat().st_size}  # fmt: skip


def child_profile(kind: str, location: Path, seconds: float, top: int) -> dict[str, Any]:
    """cProfile of the in-process (W=0) pipeline for about ``seconds``; the hot functions as text."""
    from hf_lmobj.data import PipelineLoader

    loader = PipelineLoader(build_stream(kind, location), num_workers=0)
    profile = cProfile.Profile()
    start = time.perf_counter()
    batches = 0
    profile.enable()
    for _ in loader:
        batches += 1
        if time.perf_counter() - start > seconds:
            break
    profile.disable()
    out = io.StringIO()
    stats = pstats.Stats(profile, stream=out)
    stats.sort_stats("tottime").print_stats(top)
    stats.sort_stats("cumulative").print_stats("hf_lmobj", top)
    return {"batches": batches, "tokens": int(loader.tokens_by_source.sum()), "text": out.getvalue()}


def run_child(*args: str, env: dict[str, str] | None = None, timeout: float | None = None) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", *args]
    done = subprocess.run(command, capture_output=True, text=True, check=False, cwd=ROOT, timeout=timeout,
                          env={**os.environ, **(env or {})})  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def child_main(args: list[str]) -> None:
    what = args[0]
    if what == "bare":
        result = child_bare(Path(args[1]), args[2] == "1")
    elif what == "pipeline":
        result = child_pipeline(args[1], Path(args[2]), int(args[3]))
    elif what == "store_write":
        result = child_store_write(Path(args[1]), Path(args[2]))
    elif what == "profile":
        result = child_profile(args[1], Path(args[2]), float(args[3]), int(args[4]))
    else:
        raise SystemExit(f"unknown child {what}")
    print(json.dumps(result))


# ------------------------------------------------------------------------------ sections
HEADER = "| section | configuration | tokens | time s | tokens/s | tok / CPU-s | CPU s | peak RSS MB (tree) | main MB | ratio |"


def row(section: str, name: str, r: dict[str, Any], ratio: str = "") -> None:
    rate = r["tokens"] / r["seconds"]
    per_cpu = f"{human(r['tokens'] / r['cpu'])}" if r.get("cpu") else ""
    cpu = f"{r['cpu']:.1f}" if r.get("cpu") else ""
    print(f"| {section} | {name} | {human(r['tokens'])} | {r['seconds']:.1f} | {human(rate)} | {per_cpu} | {cpu} | "
          f"{r['rss'] / 2**20:.0f} | {r['main']:.0f} | {ratio} |", flush=True)  # fmt: skip


def section_a(folder: Path, workers: list[int]) -> None:
    bare = run_child("bare", str(folder), "1")
    bare1 = run_child("bare", str(folder), "0", env={"TOKENIZERS_PARALLELISM": "false"})
    row("a", "bare tokenizer, Rust thread pool (default)", bare)
    row("a", "bare tokenizer, TOKENIZERS_PARALLELISM=false", bare1)
    reference, reference1 = bare["tokens"] / bare["seconds"], bare1["tokens"] / bare1["seconds"]
    for w in workers:
        r = run_child("pipeline", "stream", str(folder), str(w))
        rate = r["tokens"] / r["seconds"]
        ratio = f"{rate / reference:.2f}x bare / {rate / reference1:.2f}x bare-1-thread"
        row("a", f"TextStream -> PipelineLoader W={w} (fill {r['fill']:.1%}, 1st batch {r['first_batch_s']:.1f}s)",
            r, ratio)  # fmt: skip
    # Scaling with workers, each worker's tokenizer on one thread (else one worker's Rust pool already
    # takes every core of a small machine): W workers against W = 1.
    single = {}
    for w in [w for w in workers if w >= 1]:
        single[w] = run_child("pipeline", "stream", str(folder), str(w), env={"TOKENIZERS_PARALLELISM": "false"})
        rate = single[w]["tokens"] / single[w]["seconds"]
        base = single[min(single)]["tokens"] / single[min(single)]["seconds"]
        row("a", f"TextStream -> PipelineLoader W={w}, 1-thread tokenizer", single[w],
            f"{rate / base:.2f}x W={min(single)} / {rate / reference1:.2f}x bare-1-thread")  # fmt: skip


def section_b(folder: Path, store: Path, workers: list[int]) -> None:
    written = run_child("store_write", str(folder), str(store))
    print(f"| b | tokenize_to_token_store(num_proc=2) (load_dataset json {written['load_s']:.1f}s of it; "
          f"{written['bytes'] / 2**20:.0f} MB tokens.bin) | {human(written['tokens'])} | {written['seconds']:.1f} | "
          f"{human(written['tokens'] / written['seconds'])} |  |  | {written['rss'] / 2**20:.0f} | "
          f"{written['main']:.0f} |  |", flush=True)  # fmt: skip
    for w in workers:
        r = run_child("pipeline", "store", str(store), str(w))
        per_core = r["tokens"] / r["seconds"] / max(w, 1)
        row("b", f"TokenStore -> PipelineLoader W={w} (fill {r['fill']:.1%})", r,
            f"{per_core / 20e6:.2f}x of 20M tok/s/core ({human(per_core)}/core)")  # fmt: skip


def section_c(quick: bool, sizes: str | None) -> None:
    path = ROOT / "benchmarks" / "packing_scale.py"
    command = f".venv/bin/python benchmarks/packing_scale.py {'--quick' if quick else '--sizes ' + (sizes or '10')}"
    if not path.is_file():
        print(f"(c) benchmarks/packing_scale.py is missing; run it when it exists: {command}")
        return
    spec = importlib.util.spec_from_file_location("packing_scale", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if not all(hasattr(module, name) for name in ("competitors", "write_corpus", "best_of")):
        print(f"(c) packing_scale.py has no importable API; run: {command}")
        return
    import datasets

    datasets.disable_progress_bars()
    runs = module.competitors()
    print(f"\n(c) pack_dataset vs TRL, via benchmarks/packing_scale.py (same as `{command} --repeats 1`)\n")
    print("| tokens | packer | time s | ours/TRL bfd | peak RSS MB | cache B/tok | kept | rows |\n|" + "---|" * 8)
    root = Path(tempfile.mkdtemp(prefix="data_pipeline_c_"))
    try:
        for size in [1.0] if quick else [float(s) for s in (sizes or "10").split(",")]:
            directory = root / f"{size:g}M"
            module.write_corpus(int(size * 1e6), directory)
            results = module.best_of(runs, directory, 1)
            reference = results.get(("trl", "bfd"))
            for (library, strategy), r in results.items():
                ratio = f"{r['seconds'] / reference['seconds']:.2f}x" if reference and library == "ours" else ""
                print(f"| {size:g}M | {library} {strategy} | {r['seconds']:.2f} | {ratio} | {r['peak_rss_mb']:.0f} | "
                      f"{r['bytes_per_token']:.2f} | {r['kept']:.1%} | {r['rows']:,} |", flush=True)  # fmt: skip
            shutil.rmtree(directory)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def grow_corpus(source: Path, target: Path, megabytes: float) -> int:
    """``target``: the JSONL lines of ``source`` repeated until ``megabytes``, each copy perturbed."""
    target.mkdir(parents=True, exist_ok=True)
    lines = [line for name in data_files(source) for line in open(name)]
    files = max(1, len(data_files(source)))
    handles = [open(target / f"train-{i:05d}.jsonl", "w") for i in range(files)]
    written, copy = 0, 0
    try:
        while written < megabytes * 2**20:
            tag = f'{{"text": "# copy {copy}\\n'
            for i, line in enumerate(lines):
                out = tag + line[len('{"text": "') :]
                handles[i % files].write(out)
                written += len(out)
                if written >= megabytes * 2**20:
                    break
            copy += 1
    finally:
        for handle in handles:
            handle.close()
    return sum(f.stat().st_size for f in target.iterdir())


def pretrain_command(folder: Path, output: Path, ngram: bool, extra: str = "") -> list[str]:
    command = [sys.executable, "recipes/pretrain.py", "--config", "recipes/configs/causal/demo.yaml", "--dataset_name",
               str(folder), "--streaming", "true", "--max_steps", "20", "--max_train_minutes", "null",
               "--max_validation_documents", "20", "--torch_threads", "2", "--logging_steps", "1",
               "--output_dir", str(output)]  # fmt: skip
    return command + (["--ngram_orders", "3"] if ngram else []) + shlex.split(extra)


def run_pretrain(folder: Path, output: Path, ngram: bool, log: Path, extra: str = "") -> dict[str, Any]:
    """One ``recipes/pretrain.py`` run: wall time, ``ru_maxrss`` (wait4), tree-RSS peak, first logged step."""
    command = pretrain_command(folder, output, ngram, extra)
    start = time.perf_counter()
    first_step = None
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    with open(log, "w") as sink:
        process = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                   env=env)  # fmt: skip
        with TreeRss(process.pid) as rss:
            for line in process.stdout:
                sink.write(line)
                if first_step is None and re.search(r"['\"]loss['\"]\s*:", line):
                    first_step = time.perf_counter() - start
            _, status, usage = os.wait4(process.pid, 0)
            process.returncode = os.waitstatus_to_exitcode(status)
    return {"rc": process.returncode, "seconds": time.perf_counter() - start, "first_step_s": first_step,
            "maxrss_mb": usage.ru_maxrss / 1024, "rss": rss.peak, "command": command}  # fmt: skip


def section_d(root: Path, small_mb: float, large_mb: float, extra: str = "") -> None:
    small, large = root / "d_small", root / "d_large"
    info = write_corpus(small, int(small_mb * 2**20 / 2.95 / 1.05), files=8, seed=7)  # ~2.95 chars / token
    small_bytes = info["bytes"]
    start = time.perf_counter()
    large_bytes = grow_corpus(small, large, large_mb)
    print(f"\n(d) corpora: {small_bytes / 2**20:.0f} MB ({info['documents']:,} docs) and {large_bytes / 2**20:.0f} MB "
          f"(written in {time.perf_counter() - start:.0f}s)\n")  # fmt: skip
    ngram = True
    results = {}
    for name, folder in (("small", small), ("large", large)):
        log = root / f"pretrain_{name}.log"
        r = run_pretrain(folder, root / f"out_{name}", ngram, log, extra)
        if r["rc"] != 0 and ngram and "ngram" in log.read_text()[-3000:]:
            ngram = False
            r = run_pretrain(folder, root / f"out_{name}", ngram, log, extra)
        if r["rc"] != 0:
            print(f"(d) {name} run failed (rc {r['rc']}); log tail:\n{log.read_text()[-3000:]}")
            return
        results[name] = r
        shutil.copy(log, Path(tempfile.gettempdir()) / f"data_pipeline_pretrain_{name}.log")
    print("command: " + " ".join(results["small"]["command"]).replace(str(small), "<folder>").replace(
        str(root / "out_small"), "<tmp>"))  # fmt: skip
    print(
        "\n| corpus | wall s | first logged step s | phases | ru_maxrss MB | peak RSS MB (tree) | ratio |\n|"
        + "---|" * 7
    )
    for name, size in (("small", small_bytes), ("large", large_bytes)):
        r = results[name]
        phases = re.findall(
            r"^ +(data|n-gram|training) +([0-9.]+) s$", (root / f"pretrain_{name}.log").read_text(), re.M
        )
        r["phases"] = ", ".join(f"{k} {v}s" for k, v in phases)
        ratio = f"{r['maxrss_mb'] / results['small']['maxrss_mb']:.2f}x ru_maxrss, " \
                f"{r['rss'] / results['small']['rss']:.2f}x tree"  # fmt: skip
        first = f"{r['first_step_s']:.1f}" if r["first_step_s"] else "n/a"
        print(f"| {size / 2**20:.0f} MB JSONL | {r['seconds']:.0f} | {first} | {r['phases']} | {r['maxrss_mb']:.0f} | "
              f"{r['rss'] / 2**20:.0f} | {ratio if name == 'large' else ''} |", flush=True)  # fmt: skip
    shutil.rmtree(large, ignore_errors=True)


def profile_section(kind: str, location: Path, seconds: float) -> None:
    r = run_child("profile", kind, str(location), str(seconds), "25")
    print(f"\n(profile {kind}, W=0, {r['batches']} batches, {human(r['tokens'])} tokens in ~{seconds:g}s)\n")
    print(r["text"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=parse_tokens, default=parse_tokens("20M"), help="corpus size, e.g. 20M, 100M")
    parser.add_argument("--files", type=int, default=8, help="JSONL files (shards) of the corpus")
    parser.add_argument("--workers", default="0,1,2", help="PipelineLoader num_workers to measure")
    parser.add_argument("--sections", default="a,b,c,d", help="some of a,b,c,d")
    parser.add_argument("--quick", action="store_true", help="2M tokens, 1M packing, 4 MB / 60 MB corpora for d")
    parser.add_argument("--packing_sizes", default=None, help="(c) sizes in millions of tokens (default 10)")
    parser.add_argument("--small_mb", type=float, default=30.0, help="(d) small corpus in MB")
    parser.add_argument("--large_mb", type=float, default=1024.0, help="(d) large corpus in MB")
    parser.add_argument(
        "--pretrain_extra", default="", help="(d) extra pretrain.py arguments, e.g. '--report_sample_tokens 1000000'"
    )
    parser.add_argument("--profile", action="store_true", help="cProfile the W=0 pipeline of a and b")
    parser.add_argument("--profile_seconds", type=float, default=8.0)
    parser.add_argument("--corpus", default=None, help="sections a/b on this folder of JSONL files instead")
    parser.add_argument("--child", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_main(args.child)
        return
    if args.quick:
        args.tokens = min(args.tokens, 2_000_000)
        args.small_mb, args.large_mb = min(args.small_mb, 4.0), min(args.large_mb, 60.0)
    sections = set(args.sections.split(","))
    workers = [int(w) for w in args.workers.split(",")]
    import psutil

    print(f"machine: {os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB RAM, "
          f"python {sys.version.split()[0]}; rows of {MAX_LENGTH}, batches of {BATCH}, vocab {VOCAB}")  # fmt: skip
    root = Path(tempfile.mkdtemp(prefix="data_pipeline_"))
    try:
        if sections & {"a", "b"}:
            if args.corpus:  # a folder of JSONL files with a "text" column (e.g. the stdlib written out)
                corpus = Path(args.corpus)
                print(f"corpus: {len(data_files(corpus))} JSONL files in {corpus}\n")
            else:
                corpus = root / "corpus"
                info = write_corpus(corpus, args.tokens, args.files)
                print(f"corpus: {info['documents']:,} documents, {info['bytes'] / 2**20:.0f} MB JSONL in {args.files} "
                      f"files, ~{human(info['est_tokens'])} tokens (generated in {info['seconds']:.0f}s)\n")  # fmt: skip
            print(HEADER + "\n|" + "---|" * 10)
            if "a" in sections:
                section_a(corpus, workers)
            if "b" in sections:
                section_b(corpus, root / "store", workers)
            if args.profile:
                if "a" in sections:
                    profile_section("stream", corpus, args.profile_seconds)
                if "b" in sections:
                    profile_section("store", root / "store", args.profile_seconds)
        if "c" in sections:
            section_c(args.quick, args.packing_sizes)
        if "d" in sections:
            section_d(root, args.small_mb, args.large_mb, args.pretrain_extra)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
