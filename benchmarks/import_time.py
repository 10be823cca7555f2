"""Import time of the lazy face, side by side with what it stands on, in fresh interpreters.

Claims (issue 37): ``import hf_lmobj`` takes at most 1.3x ``import torch, transformers``, and ``from hf_lmobj
import ObjectiveTrainer`` at most 1.1x ``from transformers import Trainer``. Each command runs as
``python -c "<command>"`` in a fresh subprocess (interpreter start included) and is timed from the parent
(``time.perf_counter`` around ``subprocess.run``). The two commands of a pair run back to back, their order
alternating from one repeat to the next, so that a drift of the machine's speed falls on both; a pair's ratio
is taken per repeat (ours / theirs) and the median of those ratios is reported beside each side's median.

    python benchmarks/import_time.py               # 7 repeats of each pair
    python benchmarks/import_time.py --repeats 11
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

PAIRS = (
    ("import hf_lmobj", "import torch, transformers", 1.3),
    ("from hf_lmobj import ObjectiveTrainer", "from transformers import Trainer", 1.1),
)


def seconds(command: str) -> float:
    """Wall seconds of ``python -c command`` in a fresh interpreter (it must succeed)."""
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", command], check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - start


def paired_times(ours: str, theirs: str, repeats: int) -> tuple[list[float], list[float]]:
    """``repeats`` timings of each command, run in turn: ours first on even repeats, theirs first on odd ones."""
    seconds(ours), seconds(theirs)  # warm-up: the file cache, not counted
    mine, other = [], []
    for repeat in range(repeats):
        if repeat % 2:
            other.append(seconds(theirs))
            mine.append(seconds(ours))
        else:
            mine.append(seconds(ours))
            other.append(seconds(theirs))
    return mine, other


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7, help="timed runs of each command (median reported)")
    repeats = parser.parse_args().repeats
    if repeats < 1:
        raise SystemExit(f"--repeats must be >= 1, got {repeats}")
    print(f"python {sys.version.split()[0]}, {repeats} repeats per command, medians in seconds")
    print(f"{'ours':<40} {'s':>6}   {'theirs':<34} {'s':>6}   {'ratio':>5}  target")
    for ours, theirs, target in PAIRS:
        mine, other = paired_times(ours, theirs, repeats)
        ratio = statistics.median(m / o for m, o in zip(mine, other))
        verdict = "ok" if ratio <= target else "OVER"
        print(
            f"{ours:<40} {statistics.median(mine):6.2f}   {theirs:<34} {statistics.median(other):6.2f}   "
            f"{ratio:5.2f}  <= {target} {verdict}"
        )


if __name__ == "__main__":
    main()
