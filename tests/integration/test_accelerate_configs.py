"""The shipped accelerate configs under a real ``accelerate launch``: multi_process.yaml starts 2 communicating CPU
processes, and every config that can run on this CPU-only machine launches a two-step pretrain run (the configs'
parsing, resolution and documentation are checked without launching in tests/recipes/test_accelerate_configs.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from tests.testing_utils import CONFIG_DIR, QUICK_PRETRAIN, REPO, SCRIPTS, launch_env

GLOO_SCRIPT = SCRIPTS / "allreduce_gloo.py"


def _launch(*script_args: str) -> list[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [
        sys.executable, "-m", "accelerate.commands.launch",
        "--config_file", str(CONFIG_DIR / "multi_process.yaml"),
        str(GLOO_SCRIPT), *script_args,
    ]  # fmt: skip
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return sorted(re.findall(r"rank=\d+ world_size=\d+ backend=\w+ (?:sum|type)=\w+", done.stdout))


@pytest.mark.slow
def test_multi_process_config_all_reduces_over_two_gloo_processes():
    assert _launch() == [
        "rank=0 world_size=2 backend=gloo sum=3",
        "rank=1 world_size=2 backend=gloo sum=3",
    ]


@pytest.mark.slow
def test_multi_process_config_gives_trainer_a_two_rank_cpu_group():
    # What the recipes rely on: TrainingArguments(use_cpu=True) under this config is data parallel.
    assert _launch("--training-arguments") == [
        "rank=0 world_size=2 backend=gloo type=MULTI_CPU",
        "rank=1 world_size=2 backend=gloo type=MULTI_CPU",
    ]


# What each shipped config does when launched on this CPU-only machine: (extra launch flags, world
# size, mixed precision), or why it cannot run here. GPU configs run with their own mixed precision
# on CPU autocast; accelerate maps FSDP to CPU data parallelism (FSDP2 itself is tested with
# fully_shard in tests/trainer/test_fsdp2.py).
CPU_RUNS = {
    "cpu.yaml": ([], 1, "no"),
    "multi_process.yaml": ([], 2, "no"),
    "single_gpu.yaml": ([], 1, "bf16"),
    "multi_gpu.yaml": (["--num_processes", "2"], 2, "bf16"),
    "fsdp2.yaml": (["--num_processes", "2"], 2, "bf16"),
}
NOT_ON_CPU = {
    "fsdp2_tp.yaml": "accelerate refuses a ParallelismConfig (the TP mesh) for CPU processes (MULTI_CPU); "
    "tests/trainer/test_tensor_parallel.py proves TP and FSDP2 x TP on gloo without it",
    "multi_node.yaml": "one launch per machine, two launches in all: tests/integration/test_multi_node.py runs both "
    "on loopback",
    "deepspeed_zero2.yaml": "DeepSpeed is an optional extra that needs a CUDA toolchain; its ZeRO engine does not run on this CPU",
    "deepspeed_zero3.yaml": "DeepSpeed is an optional extra that needs a CUDA toolchain; its ZeRO engine does not run on this CPU",
}


def test_every_shipped_config_is_either_run_on_cpu_or_says_why_not():
    """Every shipped config (tests/recipes/test_accelerate_configs.py holds the set to the expected one)."""
    assert set(CPU_RUNS) | set(NOT_ON_CPU) == {path.name for path in CONFIG_DIR.glob("*.yaml")}
    assert not set(CPU_RUNS) & set(NOT_ON_CPU)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(CPU_RUNS))
def test_shipped_config_launches_a_two_step_pretrain_run_on_cpu(name, tmp_path):
    import torch
    from safetensors.torch import load_file

    flags, world_size, mixed_precision = CPU_RUNS[name]
    env = launch_env()
    command = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(CONFIG_DIR / name),
        *flags,
        str(REPO / "recipes" / "pretrain.py"),
        *QUICK_PRETRAIN,
        "--output_dir",
        str(tmp_path),
    ]
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert done.stdout.count("== causal run written to") == 1  # written and printed by the main process only
    args = torch.load(tmp_path / "training_args.bin", weights_only=False)
    assert (args.world_size, args.mixed_precision) == (world_size, mixed_precision)
    weights = load_file(tmp_path / "model.safetensors")
    assert weights and all(torch.isfinite(t).all() for t in weights.values())
    assert (tmp_path / "README.md").exists() and (tmp_path / "metrics.json").exists()
