"""One training step at TP = 1 vs TP = 2: the ``tp`` row of ``gpu_check.py`` (and its worker under torchrun).

A Llama's ``lm_head`` is split over the vocabulary with torch's ``parallelize_module`` (``ColwiseParallel``);
``ObjectiveTrainer.compute_loss`` captures the head and runs the package's vocabulary-parallel chunked loss,
then an SGD step. The same step on the unsharded model is the reference. Printed per setting: the loss and
update differences (fp32, TF32 off), the step time and the peak memory of each. Needs 2 GPUs (NCCL); with
``--device cpu`` the same code runs on 2 gloo processes as a dry run.

Example (the worker; ``gpu_check.py --only tp`` launches it):
    torchrun --nproc_per_node 2 benchmarks/tp_step.py OUT_DIR cuda
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))  # run from a clone without installing

Row = tuple[str, str, str, str]
LR = 0.1


def _sizes(quick: bool) -> dict:
    if quick:
        return {"vocab": 4096, "hidden": 128, "layers": 2, "batch": 2, "seq": 64}
    return {"vocab": 128256, "hidden": 1024, "layers": 4, "batch": 4, "seq": 2048}


def _model(sizes: dict, device: str):
    from _tiny import tiny_llama

    model = tiny_llama(sizes["vocab"], sizes["hidden"], sizes["layers"], positions=sizes["seq"],
                       tie_word_embeddings=False)  # fmt: skip
    return model.to(device)


def _step(trainer, model, batch: dict, device: str) -> tuple[float, float, float]:
    """(loss, seconds, peak MiB) of compute_loss + backward; gradients are left on the parameters."""
    model.zero_grad(set_to_none=True)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    loss = trainer.compute_loss(model, dict(batch))
    loss.backward()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated() / 2**20 if device.startswith("cuda") else float("nan")
    return loss.item(), seconds, peak


def _updated(model) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        for p in model.parameters():
            p.add_(p.grad, alpha=-LR)
    full = {n: p.full_tensor() if hasattr(p, "full_tensor") else p for n, p in model.named_parameters()}
    return {n: p.detach().float().cpu() for n, p in full.items()}


def worker(out_dir: str, device_kind: str, quick: bool) -> None:
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, parallelize_module
    from transformers import TrainingArguments

    from hf_lmobj.trainer.objective_trainer import ObjectiveTrainer
    from hf_lmobj.trainer.teardown import close_distributed

    cuda = device_kind == "cuda"
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    device = f"cuda:{rank}" if cuda else "cpu"
    if cuda:
        torch.cuda.set_device(rank)
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    sizes = _sizes(quick)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, sizes["vocab"], (sizes["batch"], sizes["seq"]), generator=g).to(device)
    batch = {"input_ids": ids, "labels": ids}
    args = TrainingArguments(output_dir=tempfile.mkdtemp(), report_to=[], use_cpu=not cuda, disable_tqdm=True)
    ref = _model(sizes, device)
    tp = copy.deepcopy(ref)
    mesh = init_device_mesh(device_kind, (dist.get_world_size(),), mesh_dim_names=("tp",))
    parallelize_module(tp, mesh, {"lm_head": ColwiseParallel(output_layouts=Replicate())})
    result = {}
    for name, model in (("tp1", ref), ("tp2", tp)):
        trainer = ObjectiveTrainer(model=model, args=args)
        _step(trainer, model, batch, device)  # warm-up
        result[name] = dict(zip(("loss", "seconds", "peak_mib"), _step(trainer, model, batch, device)))
        result[name]["params"] = _updated(model)
    want, got = result["tp1"].pop("params"), result["tp2"].pop("params")
    result["loss_diff"] = abs(result["tp1"]["loss"] - result["tp2"]["loss"])
    result["update_diff"] = max((got[n] - want[n]).abs().max().item() for n in want)
    if rank == 0:
        Path(out_dir, "tp_step.json").write_text(json.dumps(result))
    close_distributed()


def check_tp(device: str, quick: bool) -> list[Row]:
    """The TP = 1 vs TP = 2 step on 2 GPUs (2 gloo processes with ``--device cpu``); SKIP with fewer GPUs."""
    gpus = torch.cuda.device_count() if device == "cuda" else 2
    if gpus < 2:
        return [("tp", "TP=1 vs TP=2 step", f"needs 2 GPUs, this machine has {gpus}", "SKIP")]
    sizes = _sizes(quick)
    with tempfile.TemporaryDirectory() as out:
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                   __file__, out, device, "quick" if quick else "full"]  # fmt: skip
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
        if done.returncode != 0:
            return [("tp", "TP=1 vs TP=2 step", done.stderr.strip()[-300:], "FAIL")]
        r = json.loads(Path(out, "tp_step.json").read_text())
    setting = f"Llama {sizes['layers']}x{sizes['hidden']}, V={sizes['vocab']}, {sizes['batch']}x{sizes['seq']} fp32"
    figure = (
        f"TP=1 {r['tp1']['seconds'] * 1e3:.0f} ms / {r['tp1']['peak_mib']:,.0f} MiB, "
        f"TP=2 {r['tp2']['seconds'] * 1e3:.0f} ms / {r['tp2']['peak_mib']:,.0f} MiB, "
        f"|dloss| {r['loss_diff']:.1e}, |dupdate| {r['update_diff']:.1e}"
    )
    ok = r["loss_diff"] <= 1e-5 * max(1.0, abs(r["tp1"]["loss"])) and r["update_diff"] <= 1e-5
    return [("tp", setting, figure, "PASS" if ok else "FAIL")]


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    worker(sys.argv[1], sys.argv[2], sys.argv[3] == "quick")
