"""recipes/generate.py end to end on a tiny GPT-2 saved with save_pretrained."""

from __future__ import annotations

import runpy
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import GPT2Config, GPT2LMHeadModel

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def saved_model(tmp_path_factory, tokenizer):
    """A tiny GPT-2 and the test tokenizer, saved as the pretrain recipe saves its output_dir."""
    folder = tmp_path_factory.mktemp("causal")
    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_embd=32,
        n_layer=2,
        n_head=2,
        n_positions=128,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = GPT2LMHeadModel(config).eval()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder, model


def recipe_main():
    """``main`` of recipes/generate.py, a script rather than a package module."""
    return runpy.run_path(str(ROOT / "recipes" / "generate.py"), run_name="generate_recipe")["main"]


def test_recipe_greedy_matches_generate(saved_model, tokenizer, capsys):
    folder, model = saved_model
    samples = recipe_main()(
        [
            "--model_dir",
            str(folder),
            "--prompts",
            "def f(x):",
            "--max_new_tokens",
            "6",
            "--temperature",
            "0",
        ]
    )
    prompt = tokenizer(tokenizer.bos_token + "def f(x):", return_tensors="pt")["input_ids"]
    assert prompt[0, 0] == tokenizer.bos_token_id  # the recipe prepends BOS by default
    greedy = model.generate(prompt, do_sample=False, max_new_tokens=6, pad_token_id=tokenizer.pad_token_id)
    expected = tokenizer.decode(greedy[0, prompt.shape[1] :], skip_special_tokens=True)
    assert samples == [[expected]]
    assert f"=== prompt 'def f(x):', sample 0 ===\ndef f(x):{expected}" in capsys.readouterr().out


def test_recipe_sampling_is_seeded(saved_model):
    folder, _ = saved_model
    argv = [
        "--model_dir",
        str(folder),
        "--prompts",
        "import ",
        "class A",
        "--num_samples",
        "2",
        "--max_new_tokens",
        "8",
        "--top_p",
        "0.95",
        "--top_k",
        "50",
        "--temperature",
        "1.2",
    ]
    main = recipe_main()
    first, again = main(argv + ["--seed", "1"]), main(argv + ["--seed", "1"])
    assert first == again and len(first) == 2 and all(len(s) == 2 for s in first)
    assert first != main(argv + ["--seed", "2"])


def test_recipe_rejects_bad_arguments(saved_model):
    folder, _ = saved_model
    with pytest.raises(ValueError, match="top_p must be in"):
        recipe_main()(["--model_dir", str(folder), "--top_p", "0"])
    with pytest.raises(ValueError, match="num_samples must be >= 1"):
        recipe_main()(["--model_dir", str(folder), "--num_samples", "0"])


@pytest.mark.slow
def test_recipe_command_line(saved_model):
    folder, _ = saved_model
    result = subprocess.run(
        [
            sys.executable,
            "recipes/generate.py",
            "--model_dir",
            str(folder),
            "--prompts",
            "def ",
            "--max_new_tokens",
            "4",
            "--temperature",
            "0",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr
    assert "=== prompt 'def ', sample 0 ===" in result.stdout
