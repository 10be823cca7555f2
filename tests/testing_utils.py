"""Helpers shared by several test modules (import them from here, never from another test module)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import torch
from distributed_step import build_model, build_rows, stack_rows

REPO = Path(__file__).resolve().parents[1]
ROOT = REPO
RECIPES = REPO / "recipes"
SCRIPTS = REPO / "tests" / "scripts"


def load_recipe(name: str = "pretrain"):
    """``recipes/<name>.py`` loaded from the clone as a module (its ``main(argv)`` runs the recipe in-process).

    A fresh module each call, named inside ``hf_lmobj.recipes`` so that its relative imports resolve.
    """
    spec = importlib.util.spec_from_file_location(f"hf_lmobj.recipes.{name}_recipe", ROOT / "recipes" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve string annotations through sys.modules
    spec.loader.exec_module(module)
    return module


QUICK = [
    "--max_documents", "200", "--vocab_size", "1024", "--hidden_size", "32", "--num_hidden_layers", "2",
    "--num_attention_heads", "2", "--max_length", "64", "--max_position_embeddings", "64",
    "--per_device_train_batch_size", "4", "--per_device_eval_batch_size", "4", "--max_eval_rows", "8",
    "--logging_steps", "1", "--eval_steps", "2", "--learning_rate", "1e-3",
]  # fmt: skip


CONFIGS = sorted((ROOT / "recipes" / "configs").glob("*/*.yaml"))


def see_site_view(root: Path, view: Path) -> Path:
    """The python of the venv at ``root``, made to see the packages linked into ``view`` (a ``.pth`` file)."""
    python = root / "bin" / "python"
    own_site = subprocess.run(
        [python, "-c", "import site; print(site.getsitepackages()[0])"], capture_output=True, text=True, check=True
    ).stdout.strip()
    (Path(own_site) / "deps_view.pth").write_text(f"{view}\n")
    return python


def write_stdlib_jsonl(folder: Path, documents: int, files: int = 3) -> Path:
    """The first ``documents`` stdlib training files as ``files`` JSONL files in ``folder`` (a local
    dataset with no validation split, streamed by the pipeline tests)."""
    import json

    from hf_lmobj.corpus import load_stdlib_corpus

    texts = load_stdlib_corpus(max_documents=documents)["train"]["text"]
    for part in range(files):
        with open(folder / f"part{part}.jsonl", "w") as f:
            for text in texts[part::files]:
                f.write(json.dumps({"text": text}) + "\n")
    return folder


def tiny_gpt2(tokenizer, vocab_size: int | None = None, positions: int = 64, width: int = 16, layers: int = 1):
    """A tiny GPT-2 from config for ``tokenizer`` (its BOS / EOS / pad ids), seeded 0, in eval mode."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(vocab_size=vocab_size or len(tokenizer), n_embd=width, n_layer=layers, n_head=2,
                        n_positions=positions, bos_token_id=tokenizer.bos_token_id,
                        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)  # fmt: skip
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return GPT2LMHeadModel(config).eval()


def real(row: torch.Tensor, mask: torch.Tensor | None = None) -> list[int]:
    return row[mask.bool()].tolist() if mask is not None else row[row != -100].tolist()


def reconstruct(input_ids: list[int], labels: list[int], sentinels: set[int], eos: int) -> list[int]:
    """Put every span of ``labels`` back at its sentinel in ``input_ids``."""
    spans: dict[int, list[int]] = {}
    current = None
    for token in labels:
        if token == -100:
            break
        if token in sentinels:
            assert token not in spans, "a sentinel appears twice in one row"
            current = spans.setdefault(token, [])
        elif token == eos:
            current = None
        else:
            current.append(token)
    out: list[int] = []
    for token in input_ids:
        out.extend(spans.pop(token) if token in sentinels else [token])
    assert not spans, "a target span has no sentinel in the input"
    return out


def reference_update(objective: str) -> torch.Tensor:
    """-lr * grad of the stock model's own loss on the full batch of 8 (lr 1, plain SGD)."""
    model = build_model(objective)
    model(**stack_rows(build_rows(objective))).loss.backward()
    return torch.cat([-p.grad.reshape(-1) for p in model.parameters()])


OBJECTIVES = ["causal", "masked", "span"]


QUICK_PRETRAIN = [
    "--config", str(REPO / "recipes/configs/causal/demo.yaml"), "--max_documents", "200", "--vocab_size", "512",
    "--hidden_size", "32", "--num_hidden_layers", "2", "--num_attention_heads", "2", "--max_length", "64",
    "--max_position_embeddings", "128", "--per_device_train_batch_size", "4", "--per_device_eval_batch_size", "4",
    "--max_eval_rows", "8", "--logging_steps", "1", "--max_steps", "2", "--sample_max_new_tokens", "8",
]  # fmt: skip


CONFIG_DIR = REPO / "recipes" / "accelerate_configs"


def torchrun(script: Path, nproc: int, *args: str, timeout: int = 600) -> None:
    """Run ``script`` under ``torch.distributed.run`` with ``nproc`` gloo processes; fail with its output."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1"}
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc_per_node={nproc}",
        str(script),
        *args,
    ]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
