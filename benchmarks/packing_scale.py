"""``pack_dataset`` at corpus scale: time, peak memory and cache size vs TRL's ``pack_dataset``.

Claim: at 200M tokens ``pack_dataset(ds, 2048)`` takes no more time than TRL's
``pack_dataset(ds, 2048, strategy="bfd")`` and writes <= 6.5 bytes per token to its Arrow cache
(int32 ``input_ids``, int16 ``attention_mask`` document numbers and ``seq_lengths``), keeping every token.

Setup: synthetic tokenized corpora of 10M, 50M and 200M tokens, nothing downloaded. Document lengths
are log-normal (median ~290, mean ~600 tokens, like source files; clipped to [1, 100k]), ids uniform
in [0, 50k) as int32; the corpus is written once per size with ``Dataset.save_to_disk`` and read back
memory-mapped, so each map writes a real cache file next to it. Every (library, size) runs in a fresh
subprocess, the packers taking turns ``--repeats`` times (3; the machine may be shared): ``time`` is
the best wall time of the packing call, ``peak RSS`` the largest growth of the process's
resident memory over that call (sampled every 10 ms; it counts the memory-mapped pages read and
written), ``cache B/tok`` the bytes of the Arrow files
the map wrote per kept token, ``kept`` the share of input tokens in the output. TRL runs with its
defaults (map batches of 1000 documents, as ours); ``"bfd"`` truncates documents longer than the
row, ``"bfd_split"`` splits them (as ours does). ``ours/TRL`` is our time over TRL ``bfd``'s.

Run: ``.venv/bin/python benchmarks/packing_scale.py`` (sizes 10,50,200; 200M needs ~12 GB of RAM and
~10 GB of disk), ``--sizes 10,50`` for some, ``--quick`` for 1M only. TRL is a benchmark-only
dependency (``pip install trl``); without it only our rows are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np

MAX_LENGTH = 2048
MEAN_LENGTH = 600
SIGMA = 1.2  # log-normal spread of document lengths (code files: a heavy tail)


def corpus_lengths(tokens: int, seed: int = 0) -> np.ndarray:
    """Document lengths (D,) summing to about ``tokens``: log-normal with mean ~MEAN_LENGTH."""
    rng = np.random.default_rng(seed)
    mu = np.log(MEAN_LENGTH) - SIGMA**2 / 2
    lengths = np.clip(rng.lognormal(mu, SIGMA, int(tokens / MEAN_LENGTH * 1.3) + 10), 1, 100_000).astype(np.int64)
    return lengths[: int(np.searchsorted(np.cumsum(lengths), tokens)) + 1]  # (D,)


def write_corpus(tokens: int, directory: Path) -> None:
    """The corpus of ``tokens`` as a ``datasets.Dataset`` on disk (built with pyarrow directly)."""
    import datasets
    import pyarrow as pa

    lengths = corpus_lengths(tokens)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)  # (D + 1,)
    ids = np.random.default_rng(1).integers(0, 50_000, int(offsets[-1]), dtype=np.int32)  # (N,)
    column = pa.ListArray.from_arrays(pa.array(offsets), pa.array(ids))
    dataset = datasets.Dataset(pa.table({"input_ids": column}))
    dataset.save_to_disk(str(directory), max_shard_size="4GB")


class PeakRss:
    """Peak resident memory of this process while the block runs, sampled in a thread."""

    def __init__(self, every: float = 0.01) -> None:
        import psutil

        self._process, self._every, self._stop = psutil.Process(), every, threading.Event()
        self.start = self.peak = 0

    def _sample(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self._process.memory_info().rss)
            time.sleep(self._every)

    def __enter__(self) -> PeakRss:
        self.start = self.peak = self._process.memory_info().rss
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self._process.memory_info().rss)


def run_one(library: str, strategy: str, directory: Path) -> dict[str, Any]:
    """Pack the corpus in ``directory`` once (in this process) and measure it."""
    import datasets
    import pyarrow.compute as pc

    datasets.disable_progress_bars()
    for stale in directory.glob("cache-*.arrow"):  # never time a cache hit
        stale.unlink()
    dataset = datasets.load_from_disk(str(directory))
    tokens_in = int(pc.sum(pc.list_value_length(dataset.data.column("input_ids"))).as_py())
    if library == "ours":
        from hf_lmobj.packing.dataset import pack_dataset

        def pack() -> Any:
            return pack_dataset(dataset, MAX_LENGTH)
    else:
        from trl.data_utils import pack_dataset as trl_pack_dataset

        def pack() -> Any:
            return trl_pack_dataset(dataset, MAX_LENGTH, strategy=strategy)

    with PeakRss() as rss:
        start = time.perf_counter()
        packed = pack()
        seconds = time.perf_counter() - start
    files = [f["filename"] for f in packed.cache_files]
    written = sum(os.path.getsize(f) for f in files if Path(f).name.startswith("cache-"))
    kept = int(pc.sum(pc.list_value_length(packed.data.column("input_ids"))).as_py())
    result = {
        "seconds": seconds,
        "peak_rss_mb": (rss.peak - rss.start) / 2**20,
        "bytes_per_token": written / max(kept, 1),
        "kept": kept / tokens_in,
        "rows": len(packed),
        "columns": packed.column_names,
    }
    for stale in directory.glob("cache-*.arrow"):
        stale.unlink()
    return result


def measure(library: str, strategy: str, directory: Path) -> dict[str, Any]:
    """``run_one`` in a fresh subprocess (an honest peak RSS), its result read back as JSON."""
    command = [sys.executable, __file__, "--child", library, strategy, str(directory)]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{library} {strategy} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def best_of(runs: list[tuple[str, str]], directory: Path, repeats: int) -> dict[tuple[str, str], dict[str, Any]]:
    """Each run ``repeats`` times, taking turns; the best time and the largest peak RSS of each."""
    results: dict[tuple[str, str], dict[str, Any]] = {}
    for _ in range(repeats):
        for run in runs:
            r = measure(*run, directory)
            best = results.setdefault(run, r)
            best["peak_rss_mb"] = max(best["peak_rss_mb"], r["peak_rss_mb"])
            best["seconds"] = min(best["seconds"], r["seconds"])
    return results


def competitors() -> list[tuple[str, str]]:
    """(library, strategy) pairs to run: ours, then TRL's bfd (and bfd_split when it has it)."""
    runs = [("ours", "best_fit")]
    try:
        import inspect

        from trl.data_utils import pack_dataset as trl_pack_dataset
    except ImportError:
        print("(trl is not installed: `pip install trl` to time its pack_dataset side by side)")
        return runs
    runs.append(("trl", "bfd"))
    if "bfd_split" in inspect.getsource(trl_pack_dataset):
        runs.append(("trl", "bfd_split"))
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10,50,200", help="corpus sizes in millions of tokens")
    parser.add_argument("--quick", action="store_true", help="1M tokens only")
    parser.add_argument("--repeats", type=int, default=3, help="runs per cell, taking turns; the best time")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        library, strategy, directory = args.child
        print(json.dumps(run_one(library, strategy, Path(directory))))
        return
    sizes = [1.0] if args.quick else [float(s) for s in args.sizes.split(",")]
    import datasets

    datasets.disable_progress_bars()
    runs = competitors()
    version = ""
    if len(runs) > 1:
        import trl

        version = f" {trl.__version__}"
    print(f"rows of {MAX_LENGTH}, map batches of 1000 documents, one subprocess per run, best of {args.repeats}\n")
    header = "| tokens | packer | time s | ours/TRL bfd | peak RSS MB | cache B/tok | kept | rows |"
    print(header + "\n|" + "---|" * 8)
    root = Path(tempfile.mkdtemp(prefix="packing_scale_"))
    try:
        for size in sizes:
            directory = root / f"{size:g}M"
            write_corpus(int(size * 1e6), directory)
            results = best_of(runs, directory, args.repeats)
            reference = results.get(("trl", "bfd"))
            for (library, strategy), r in results.items():
                name = f"ours pack_dataset ({strategy})" if library == "ours" else f"TRL{version} {strategy}"
                ratio = f"{r['seconds'] / reference['seconds']:.2f}x" if reference and library == "ours" else ""
                print(
                    f"| {size:g}M | {name} | {r['seconds']:.2f} | {ratio} | {r['peak_rss_mb']:.0f} | "
                    f"{r['bytes_per_token']:.2f} | {r['kept']:.1%} | {r['rows']:,} |",
                    flush=True,
                )
            shutil.rmtree(directory)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
