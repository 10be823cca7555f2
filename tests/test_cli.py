"""The ``hf-lmobj`` command line (hf_lmobj/cli.py), in-process: the listing, the refusals, the dispatch to each recipe
with its arguments unchanged, and one real tiny pre-training run by config name from another directory.
(tests/integration/test_packaging.py runs the installed script from an empty directory.)"""

from __future__ import annotations

import importlib
import json
import sys

import pytest

from hf_lmobj import cli

#: A two-step pre-training run with every report phase cut to the least the recipe allows.
SHORT_RUN = [
    "--max_steps", "2", "--max_documents", "60", "--validation_fraction", "0.1", "--vocab_size", "512",
    "--hidden_size", "32", "--num_hidden_layers", "2", "--num_attention_heads", "2", "--max_length", "64",
    "--max_position_embeddings", "64", "--per_device_train_batch_size", "4", "--per_device_eval_batch_size", "4",
    "--max_eval_rows", "8", "--logging_steps", "1", "--max_train_minutes", "null", "--eval_strategy", "no",
    "--ngram_orders", "none", "--compressor_baselines", "false", "--bootstrap_samples", "0",
    "--contamination_scan", "false", "--sample_max_new_tokens", "1", "--disable_tqdm", "true", "--torch_threads", "1",
]  # fmt: skip

RECIPES = {
    "pretrain": "pretrain",
    "tokenize": "tokenize_corpus",
    "score": "score",
    "generate": "generate",
    "finetune": "finetune_lora",
    "classify": "finetune_classifier",
}


@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_help_lists_every_command_with_its_recipe_summary(flag, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main([flag])
    out = " ".join(capsys.readouterr().out.split())  # argparse wraps the descriptions
    assert exit_.value.code == 0
    assert cli.COMMANDS == RECIPES
    for command, module in RECIPES.items():
        first = importlib.import_module(f"hf_lmobj.recipes.{module}").__doc__.split("\n\n")[0]
        assert f"{command} {' '.join(first.split())}" in out, command
    assert "accelerate launch -m hf_lmobj.cli" in out


@pytest.mark.parametrize(
    "argv, message",
    [
        ([], "no command given; choose from pretrain, tokenize, score, generate, finetune, classify"),
        (["pretrian", "--config", "causal/demo"], "unknown command 'pretrian' (did you mean pretrain?); choose from"),
        (["sft"], "unknown command 'sft'; choose from pretrain, tokenize"),
        (["--config", "causal/demo", "pretrain"], "--config comes before the command; give the command first"),
        (["Pretrain"], "unknown command 'Pretrain' (did you mean pretrain?)"),
        (["pretrain.py"], "unknown command 'pretrain.py' (did you mean pretrain?)"),
    ],
)
def test_a_missing_or_unknown_command_exits_2_naming_the_valid_ones(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert err.startswith("usage: hf-lmobj") and f"hf-lmobj: error: {message}" in err
    assert "classify ('hf-lmobj --help' describes each)" in err


@pytest.mark.parametrize("command, module", RECIPES.items())
def test_each_command_runs_its_recipe_main_with_the_rest_unchanged(command, module, monkeypatch):
    seen = []

    def fake_main(argv):
        seen.append((argv, sys.argv[0]))
        return {"ran": command}

    recipe = importlib.import_module(f"hf_lmobj.recipes.{module}")
    monkeypatch.setattr(recipe, "main", fake_main)
    before = sys.argv[0]
    rest = ["--config", "causal/demo", "--max_steps", "2", "--help_all", "--", "-h", "x y", "--output_dir=ü"]
    assert cli.main([command, *rest]) == 0
    assert seen == [(rest, f"hf-lmobj {command}")]  # the recipe's usage line names the command
    assert sys.argv[0] == before


def test_a_command_alone_runs_its_recipe_with_no_arguments(monkeypatch):
    seen = []
    monkeypatch.setattr(importlib.import_module("hf_lmobj.recipes.generate"), "main", seen.append)
    assert cli.main(["generate"]) == 0 and seen == [[]]


def test_sys_argv_is_restored_when_the_recipe_fails(monkeypatch):
    def failing(argv):
        raise ValueError("--max_steps must be an int >= 1")

    monkeypatch.setattr(importlib.import_module("hf_lmobj.recipes.score"), "main", failing)
    before = sys.argv[0]
    with pytest.raises(ValueError, match="max_steps"):
        cli.main(["score", "--max_steps", "0"])
    assert sys.argv[0] == before


@pytest.mark.parametrize(
    "command, flag", [("pretrain", "--max_train_minutes"), ("generate", "--model_dir"), ("score", "--compare_model")]
)
def test_command_help_is_the_recipes_own(command, flag, capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main([command, "--help"])
    out = capsys.readouterr().out
    assert exit_.value.code == 0
    assert out.startswith(f"usage: hf-lmobj {command} [-h]") and flag in out


def test_a_missing_recipe_extra_names_the_install_command(monkeypatch):
    def missing(name):
        raise ModuleNotFoundError("No module named 'peft'", name="peft")

    monkeypatch.setattr(cli.importlib, "import_module", missing)
    with pytest.raises(
        ModuleNotFoundError, match=r"'hf-lmobj finetune' needs 'peft'.*pip install 'hf_lmobj\[recipes\]'"
    ):
        cli.main(["finetune", "--max_steps", "1"])


def test_a_broken_package_module_is_not_blamed_on_the_extras(monkeypatch):
    def broken(name):
        raise ModuleNotFoundError("No module named 'hf_lmobj.gone'", name="hf_lmobj.gone")

    monkeypatch.setattr(cli.importlib, "import_module", broken)
    with pytest.raises(ModuleNotFoundError, match=r"^No module named 'hf_lmobj.gone'$"):
        cli.main(["pretrain"])


def test_pretrain_by_config_name_from_another_directory_writes_the_card(tmp_path, monkeypatch, capsys):
    work = tmp_path / "elsewhere"
    work.mkdir()
    monkeypatch.chdir(work)  # causal/demo is found among the shipped configs, not in the working directory
    assert cli.main(["pretrain", "--config", "causal/demo", *SHORT_RUN, "--output_dir", "run"]) == 0
    metrics = json.loads((work / "run" / "metrics.json").read_text())
    assert metrics["train_tokens_seen"] == 2 * 4 * 64  # 2 steps of 4 rows of 64 tokens
    card = (work / "run" / "README.md").read_text()
    assert "hf_lmobj" in card and "validation_bits_per_byte" in metrics
    assert "bits per byte on the same validation text" in capsys.readouterr().out


def test_a_recipe_without_a_docstring_is_refused_by_name(tmp_path, monkeypatch):
    bare = tmp_path / "bare.py"
    bare.write_text("def main(argv):\n    return {}\n")
    monkeypatch.setitem(cli.COMMANDS, "bare", "bare")
    monkeypatch.setattr(
        cli.importlib.util, "find_spec", lambda name: importlib.util.spec_from_file_location(name, bare)
    )
    with pytest.raises(ValueError, match="hf_lmobj.recipes.bare has no docstring"):
        cli.summary("bare")
