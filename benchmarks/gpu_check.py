"""The prepared GPU check: what the CPU test tier can only imitate, run on a real GPU in one go.

Run it whenever a GPU is at hand (one H200: well under 8 minutes) and quote the table it prints:

    python benchmarks/gpu_check.py                 # every check
    python benchmarks/gpu_check.py --only loss     # one of: packing, recipes, loss, tp
    python benchmarks/gpu_check.py --device cpu --quick   # a dry run of the same code on the CPU

Checks (each prints one or more rows: check, setting, figure, verdict):

1. **packing** -- document isolation of a packed bf16 batch on the GPU attention kernels: a tiny
   Llama's logits for each document inside packed rows vs the document alone, for every packed
   form the collator emits (``cu_seq_lens`` for flash-attention when ``flash_attn`` imports,
   ``position_ids`` for sdpa and flex attention). Pass: max |logit difference| < 1e-2.
2. **recipes** -- one 2-step ``recipes/pretrain.py`` run through ``accelerate launch`` per shipped
   single-node config (cpu, single_gpu, multi_gpu, fsdp2 and, if DeepSpeed imports, zero2/zero3)
   with as many processes as there are GPUs. Pass: exit 0 and a loadable ``model.safetensors``.
3. **loss** -- ``linear_cross_entropy`` under bf16 autocast vs transformers' causal-LM loss on the
   full logits (and Liger's / cut-cross-entropy's fused losses when they import): forward +
   backward time and peak GPU memory at N tokens x H x V (default 16384 x 4096 x 128256, Llama 3),
   and the loss difference. Pass: same loss within 1e-3 relative, less peak memory.
4. **tp** -- one step at TP = 1 vs TP = 2 (``benchmarks/tp_step.py``: the head split over the vocabulary
   with ``ColwiseParallel``, ``ObjectiveTrainer.compute_loss`` + backward + SGD, fp32): step time, peak
   memory, loss and update differences. Needs 2 GPUs (SKIP with fewer, and the row says so); pass:
   differences <= 1e-5. With ``--device cpu`` it runs on 2 gloo processes.

Nothing downloads: the tokenizer is trained locally from the standard library, models are built
from config. The GPU machine needs the package's own dependencies (``pip install -e .``, or wheels
carried there: the lent H200 image has torch, transformers, accelerate and tokenizers but not
datasets or evaluate); flash-attn, Liger and cut-cross-entropy rows appear only where they import.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a clone without installing
sys.path.insert(0, str(REPO / "benchmarks"))
from tp_step import check_tp  # noqa: E402  (after the path above)

Row = tuple[str, str, str, str]


def _llama(vocab: int, device: str, attn: str, hidden: int = 256, layers: int = 4):
    from _tiny import tiny_llama

    return tiny_llama(vocab, hidden, layers, attn_implementation=attn).to(device=device, dtype=torch.bfloat16).eval()


def _attention_cases(device: str) -> list[str]:
    cases = ["sdpa"]
    if device == "cuda":
        cases.append("flex_attention")
        try:
            import flash_attn  # noqa: F401

            cases.append("flash_attention_2")
        except ImportError:
            pass
    return cases


def check_packing(device: str, quick: bool) -> list[Row]:
    """Packed-vs-alone logits of random documents for each attention implementation (bf16)."""
    from hf_lmobj import DataCollatorForCausalLM
    from hf_lmobj.corpus import build_tokenizer

    tokenizer = build_tokenizer(vocab_size=1024, max_documents=50)
    length = 512 if quick else 4096
    g = torch.Generator().manual_seed(0)
    docs = [
        torch.randint(5, len(tokenizer), (int(n),), generator=g).tolist()
        for n in torch.randint(20, length // 3, (12,), generator=g)
    ]
    rows = []
    for attn in _attention_cases(device):
        model = _llama(len(tokenizer), device, attn)
        collator = DataCollatorForCausalLM(
            tokenizer,
            max_length=length,
            packing=True,
            attn_implementation=attn,
            add_bos=False,
            add_eos=False,
            model=model,
        )
        batch = collator([{"input_ids": d} for d in docs])
        inputs = {
            k: v.to(device) if isinstance(v, torch.Tensor) else v
            for k, v in batch.items()
            if k not in ("labels", "shift_labels")
        }
        with torch.no_grad():
            packed = model(**inputs).logits.float()  # (B, T, V)
            worst = 0.0
            for doc in docs:
                alone = model(torch.tensor([doc], device=device)).logits.float()[0]  # (L, V)
                row, start = _locate(batch["input_ids"], doc)
                worst = max(worst, (packed[row, start : start + len(doc)] - alone).abs().max().item())
        form = "cu_seq_lens" if "flash" in attn else ("position_ids" if "attention_mask" not in batch else "4d mask")
        rows.append(
            (
                "packing",
                f"{attn} ({form}), T={length}, bf16",
                f"max |dlogit| {worst:.2e}",
                "PASS" if worst < 1e-2 else "FAIL",
            )
        )
    return rows


def _locate(input_ids: torch.Tensor, doc: list[int]) -> tuple[int, int]:
    """(row, start) of a document's tokens inside the packed rows."""
    target = torch.tensor(doc)
    for r, row in enumerate(input_ids):
        for start in range(0, row.numel() - len(doc) + 1):
            if row[start] == target[0] and torch.equal(row[start : start + len(doc)], target):
                return r, start
    raise AssertionError("a document is missing from the packed rows")


def check_recipes(device: str, quick: bool) -> list[Row]:
    """A 2-step pretrain run per shipped single-node accelerate config."""
    configs = ["cpu.yaml"] if device == "cpu" else ["cpu.yaml", "single_gpu.yaml", "multi_gpu.yaml", "fsdp2.yaml"]
    try:
        import deepspeed  # noqa: F401

        configs += [] if device == "cpu" else ["deepspeed_zero2.yaml", "deepspeed_zero3.yaml"]
    except ImportError:
        pass
    gpus = max(torch.cuda.device_count(), 1)
    rows = []
    for name in configs:
        processes = 1 if name in ("cpu.yaml", "single_gpu.yaml") else gpus
        with tempfile.TemporaryDirectory() as out:
            command = [
                sys.executable,
                "-m",
                "accelerate.commands.launch",
                "--config_file",
                str(REPO / "recipes/accelerate_configs" / name),
                "--num_processes",
                str(processes),
                str(REPO / "recipes/pretrain.py"),
                "--config",
                str(REPO / "recipes/configs/causal/demo.yaml"),
                "--max_steps",
                "2",
                "--max_documents",
                "200",
                "--max_eval_rows",
                "8",
                "--sample_max_new_tokens",
                "8",
                "--output_dir",
                out,
            ]
            start = time.perf_counter()
            done = subprocess.run(
                command,
                cwd=REPO,
                capture_output=True,
                text=True,
                timeout=300,
                env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
            )
            seconds = time.perf_counter() - start
            ok = done.returncode == 0 and Path(out, "model.safetensors").exists()
        detail = f"{processes} process(es), {seconds:.0f} s" + ("" if ok else f": {done.stderr.strip()[-300:]}")
        rows.append(("recipes", name, detail, "PASS" if ok else "FAIL"))
    return rows


def _measure(fn, device: str, repeats: int) -> tuple[float, float, float]:
    """(loss, seconds per forward + backward, peak MiB above the start) of ``fn``."""
    fn()  # warm-up (kernels, allocator)
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    start = time.perf_counter()
    for _ in range(repeats):
        loss = fn()
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / repeats
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20 if device == "cuda" else float("nan")
    return loss, seconds, peak


def _loss_methods(hidden, weight, targets, vocab: int) -> dict:
    from transformers.loss.loss_utils import ForCausalLMLoss

    from hf_lmobj import linear_cross_entropy

    methods = {
        "transformers ForCausalLMLoss(h @ W.T)": lambda: ForCausalLMLoss(
            (hidden @ weight.T)[None], None, vocab, shift_labels=targets[None]
        ),
        "hf_lmobj linear_cross_entropy": lambda: linear_cross_entropy(hidden, weight, targets),
    }
    try:
        from liger_kernel.transformers import LigerFusedLinearCrossEntropyLoss

        liger = LigerFusedLinearCrossEntropyLoss()
        methods["Liger fused linear cross-entropy"] = lambda: liger(weight, hidden, targets)
    except ImportError:
        pass
    try:
        from cut_cross_entropy import linear_cross_entropy as cce

        methods["cut-cross-entropy"] = lambda: cce(hidden, weight, targets)
    except ImportError:
        pass
    return methods


def check_loss(device: str, quick: bool) -> list[Row]:
    """Fused/chunked losses vs the full-logits loss under bf16 autocast: time, peak memory, value."""
    n, h, v = (256, 128, 4096) if quick else (16384, 4096, 128256)
    torch.manual_seed(0)
    hidden = torch.randn(n, h, device=device, requires_grad=True)  # (N, H)
    weight = (0.02 * torch.randn(v, h, device=device)).requires_grad_()  # (V, H)
    targets = torch.randint(0, v, (n,), device=device)  # (N,)
    rows, reference = [], None
    for name, loss_fn in _loss_methods(hidden, weight, targets, v).items():

        def step(loss_fn=loss_fn):
            hidden.grad = weight.grad = None
            with torch.autocast(device, dtype=torch.bfloat16):
                loss = loss_fn()
            loss.backward()
            return loss.item()

        try:
            loss, seconds, peak = _measure(step, device, repeats=2 if quick else 5)
        except Exception as error:  # an optional kernel that does not run here
            rows.append(("loss", name, f"{type(error).__name__}: {str(error)[:80]}", "SKIP"))
            continue
        reference = loss if reference is None else reference
        verdict = "PASS" if abs(loss - reference) <= 1e-3 * abs(reference) else "FAIL"
        rows.append(
            (
                "loss",
                f"{name}, {n}x{h}x{v} bf16",
                f"{seconds * 1e3:.1f} ms, peak {peak:,.0f} MiB, loss {loss:.5f}",
                verdict,
            )
        )
    return rows


CHECKS = {"packing": check_packing, "recipes": check_recipes, "loss": check_loss, "tp": check_tp}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--only", choices=sorted(CHECKS), action="append")
    parser.add_argument("--quick", action="store_true", help="small sizes: a dry run of the code paths")
    args = parser.parse_args(argv)
    name = torch.cuda.get_device_name() if args.device == "cuda" else "CPU"
    print(f"gpu_check on {name}, torch {torch.__version__}")
    rows = []
    for check in args.only or list(CHECKS):
        start = time.perf_counter()
        rows += CHECKS[check](args.device, args.quick)
        print(f"  {check} done in {time.perf_counter() - start:.0f} s", flush=True)
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)))
    return 0 if all(r[3] != "FAIL" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
