"""Peak memory and time of a causal-LM loss forward + backward: transformers vs torch vs hf_lmobj.

Claim: ``linear_cross_entropy`` needs <= 10% of the peak memory of transformers' ``ForCausalLMLoss``
on ``hidden @ W.T`` at <= 1.0x its time (N=8192 tokens, H=768, V=50257, float32, CPU).

Each method runs in a fresh subprocess; its peak is ``ru_maxrss`` after forward + backward minus
the resident size just before the forward (inputs and weights already allocated), so the figure
is what the loss itself adds. The floor is the gradient buffers alone: grad of W (V x H) plus
grad of the hidden states (N x H).

    python benchmarks/loss_memory.py            # all methods, about 2-4 minutes on 2 cores
    python benchmarks/loss_memory.py --tokens 2048
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time

METHODS = {
    "transformers ForCausalLMLoss(hidden @ W.T)": "transformers",
    "torch F.linear_cross_entropy (chunked, auto options)": "torch_chunked",
    "hf_lmobj linear_cross_entropy": "ours",
}


def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def run_one(method: str, n: int, h: int, v: int) -> dict:
    """Forward + backward of one method in this process; returns MiB and seconds."""
    import torch
    import torch.nn.functional as F

    torch.manual_seed(0)
    hidden = torch.randn(n, h, requires_grad=True)  # (N, H)
    weight = (torch.randn(v, h) * 0.02).requires_grad_()  # (V, H)
    targets = torch.randint(0, v, (n,))  # (N,)
    if method == "transformers":
        from transformers.loss.loss_utils import ForCausalLMLoss

        def loss_fn():  # the stock path: full logits, then the loss (targets already shifted)
            logits = (hidden @ weight.T)[None]  # (1, N, V)
            return ForCausalLMLoss(logits, None, v, shift_labels=targets[None])
    elif method == "torch_chunked":
        options = torch.nn.LinearCrossEntropyOptions()

        def loss_fn():
            return F.linear_cross_entropy(hidden, weight, targets, options=options)
    else:
        from hf_lmobj.losses.linear_cross_entropy import linear_cross_entropy

        def loss_fn():
            return linear_cross_entropy(hidden, weight, targets)

    baseline = _rss_mib()
    start = time.perf_counter()
    loss = loss_fn()
    loss.backward()
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"seconds": seconds, "peak_mib": peak, "added_mib": peak - baseline, "loss": loss.item()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokens", type=int, default=8192)
    parser.add_argument("--hidden", type=int, default=768)
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--timeout", type=int, default=150, help="seconds allowed per method")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_one(args.child, args.tokens, args.hidden, args.vocab)))
        return
    n, h, v = args.tokens, args.hidden, args.vocab
    floor = (v * h + n * h) * 4 / 2**20
    print(
        f"N={n} H={h} V={v} float32 CPU; full logits would be {n * v * 4 / 2**20:.0f} MiB; "
        f"floor (grad W + grad hidden) {floor:.0f} MiB"
    )
    results = {}
    for label, method in METHODS.items():
        cmd = [sys.executable, __file__, "--child", method, "--tokens", str(n), "--hidden", str(h), "--vocab", str(v)]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, check=True)
            results[method] = json.loads(done.stdout.strip().splitlines()[-1])
        except subprocess.TimeoutExpired:
            results[method] = None
        r = results[method]
        figure = (
            "timed out"
            if r is None
            else (
                f"added {r['added_mib']:7.0f} MiB  (ru_maxrss {r['peak_mib']:6.0f} MiB)  {r['seconds']:6.1f} s  loss {r['loss']:.5f}"
            )
        )
        print(f"{label:55s} {figure}", flush=True)
    base, ours = results["transformers"], results["ours"]
    for method, r in results.items():
        if r is None or method == "transformers":
            continue
        print(
            f"{method:14s} / transformers: memory {r['added_mib'] / base['added_mib']:.3f}x, "
            f"time {r['seconds'] / base['seconds']:.2f}x"
        )
    print(
        f"ours vs floor: {ours['added_mib']:.0f} MiB added vs {floor:.0f} MiB of gradient buffers "
        f"({ours['added_mib'] / floor:.2f}x the floor)"
    )


if __name__ == "__main__":
    main()
