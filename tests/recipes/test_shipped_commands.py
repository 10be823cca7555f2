"""Shipped pieces agree and short runs are short (issue 35, point 7).

Every shipped config's header command that names a model another shipped config trains asks at most that model's
positions (``finetune_lora.yaml`` asked 512 of the demo's 256); the report's costly baselines can be cut from the
command line (``--ngram_orders none`` was "expected at least one argument", ``'[]'`` "invalid int").
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from pathlib import Path

import pytest
from transformers import TrainingArguments

from hf_lmobj.config import parse_args_with_config
from hf_lmobj.evaluation.baseline_figures import baseline_bits_per_byte, baselines_not_run
from hf_lmobj.recipes.report.report_arguments import ReportArguments, check_ngram_orders
from hf_lmobj.recipes.runtime.phase_timer import PhaseTimer
from tests.testing_utils import CONFIGS, QUICK_PRETRAIN, REPO, load_recipe

PRETRAIN = load_recipe()


def _groups(script: str) -> tuple[type, ...]:
    """The argument classes ``recipes/<script>.py`` parses (its own ``parse_args_with_config`` call)."""
    if script == "pretrain":
        return PRETRAIN.ARGUMENT_CLASSES
    module = load_recipe(script)
    own = {"finetune_lora": ("LoraArguments",), "finetune_classifier": ("ClassifierArguments",)}
    if script == "score":
        return (module.EvalArguments,)
    return (module.ModelArguments, *(getattr(module, name) for name in own[script]), TrainingArguments)


def _header_commands(config: Path) -> list[tuple[str, list[str]]]:
    """``(script, argv)`` of each command in ``config``'s header comment (continuation lines joined), plus the
    config alone (its own keys, no override)."""
    header, lines = [], config.read_text().splitlines()
    for line in lines:
        if not line.startswith("#"):
            break
        header.append(line.lstrip("#").strip())
    commands, pending = [], ""
    for line in header:
        pending = f"{pending} {line}".strip()
        if pending.endswith("\\"):
            pending = pending[:-1]
            continue
        command, pending = pending, ""
        if " --config " not in command or not command.startswith(("python ", "accelerate ")):
            continue  # prose
        words = shlex.split(command, comments=True)
        scripts = [i for i, w in enumerate(words) if w.startswith("recipes/") and w.endswith(".py")]
        if scripts and "--config" in words:
            commands.append((Path(words[scripts[0]]).stem, words[scripts[0] + 1 :]))
    own = next((script for script, argv in commands if str(config.relative_to(REPO)) in argv), None)
    return commands + ([(own, ["--config", str(config)])] if own else [])


def _parsed(script: str, argv: list[str]) -> dict[str, object]:
    """Every field of ``script``'s argument groups after parsing ``argv`` (no data, no model, no training)."""
    groups = parse_args_with_config(_groups(script), argv)
    return {f.name: getattr(g, f.name) for g in groups for f in dataclasses.fields(g)}


def _produced_models() -> dict[str, int | None]:
    """``output_dir`` -> position limit of the model each shipped pre-training config trains (None: relative)."""
    out = {}
    for config in CONFIGS:
        if ("pretrain", ["--config", str(config)]) in _header_commands(config):
            fields = _parsed("pretrain", ["--config", str(config)])
            out[fields["output_dir"]] = None if fields["model_type"] == "t5" else fields["max_position_embeddings"]
    return out


def _consumers() -> list[tuple[str, str, list[str], str, int]]:
    """(config, script, argv, model, max_length) of each shipped command whose model a shipped config trains."""
    produced, out = _produced_models(), []
    for config in CONFIGS:
        for script, argv in _header_commands(config):
            fields = _parsed(script, argv)
            model, length = fields.get("model_name_or_path"), fields.get("max_length")
            if script != "pretrain" and model in produced and length is not None:
                out.append((config.name, script, argv, model, length))
    return out


CONSUMERS = _consumers()
PRODUCED = _produced_models()


def test_the_shipped_commands_that_load_a_shipped_model_are_found():
    found = {(name, model) for name, _, _, model, _ in CONSUMERS}
    assert ("finetune_lora.yaml", "out/causal-demo") in found
    assert PRODUCED["out/causal-demo"] == 256 and PRODUCED["out/span-t5-tiny"] is None


@pytest.mark.parametrize(
    ("name", "script", "argv", "model", "length"), CONSUMERS, ids=[f"{c[0]}-{i}" for i, c in enumerate(CONSUMERS)]
)
def test_each_shipped_command_fits_the_model_it_names(name, script, argv, model, length):
    limit = PRODUCED[model]
    assert limit is None or length <= limit, (
        f"{name}: {script}.py {' '.join(argv)} asks max_length {length} of {model}, which has {limit} positions"
    )


def test_the_lora_config_alone_fits_the_demo_model():
    fields = _parsed("finetune_lora", ["--config", "causal/finetune_lora"])
    assert fields["model_name_or_path"] == "out/causal-demo" and fields["max_length"] == 256


# ------------------------------------------------------------------ the report's phases, cut from the command line
DEMO = ["--config", "causal/demo"]


@pytest.mark.parametrize(
    ("flags", "orders", "compressors"),
    [
        (["--ngram_orders", "none"], [], True),
        (["--ngram_orders=none"], [], True),
        (["--ngram_orders", "5", "3"], [5, 3], True),
        ([], [3, 4, 5], True),
        (["--compressor_baselines", "false"], [3, 4, 5], False),
        (["--ngram_orders", "none", "--no_compressor_baselines"], [], False),
    ],
)
def test_the_report_flags_parse_through_the_recipe_groups(flags, orders, compressors):
    report = next(g for g in parse_args_with_config(PRETRAIN.ARGUMENT_CLASSES, [*DEMO, *flags])
                  if isinstance(g, ReportArguments))  # fmt: skip
    assert (report.ngram_orders, report.compressor_baselines) == (orders, compressors)


@pytest.mark.parametrize(
    ("flags", "word"),
    [
        (["--ngram_orders", "3", "none"], "stands alone"),
        (["--ngram_orders", "none", "3"], "stands alone"),
        (["--ngram_orders", "[]"], "invalid int"),
        (["--ngram_orders", "None"], "invalid int"),  # the word is lower case, as in YAML
        (["--ngram_orders"], "expected at least one argument"),
    ],
)
def test_bad_ngram_orders_flags_are_refused_by_name(flags, word, capsys):
    with pytest.raises(SystemExit):
        parse_args_with_config(PRETRAIN.ARGUMENT_CLASSES, [*DEMO, *flags])
    err = capsys.readouterr().err
    assert "--ngram_orders" in err and word in err


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("ngram_orders: none", []),
        ("ngram_orders: []", []),
        ("ngram_orders: [2]", [2]),
        ("report: {ngram_orders: none}", []),
    ],
)
def test_ngram_orders_none_in_yaml(tmp_path, line, expected):
    path = tmp_path / "c.yaml"
    path.write_text(f"base: causal/demo\n{line}\n")
    report = next(g for g in parse_args_with_config(PRETRAIN.ARGUMENT_CLASSES, ["--config", str(path)])
                  if isinstance(g, ReportArguments))  # fmt: skip
    assert report.ngram_orders == expected


def test_ngram_orders_null_in_yaml_says_how_to_write_none(tmp_path):
    path = tmp_path / "c.yaml"
    path.write_text("base: causal/demo\nngram_orders: null\n")
    with pytest.raises(TypeError, match=r"ngram_orders: null is not a list of int .*\[\] or none for no items"):
        parse_args_with_config(PRETRAIN.ARGUMENT_CLASSES, ["--config", str(path)])


@dataclasses.dataclass
class _Lists:
    rates: list[float] = dataclasses.field(default_factory=lambda: [0.5])
    words: list[str] = dataclasses.field(default_factory=lambda: ["a"])


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--rates", "none"], _Lists(rates=[], words=["a"])),
        (["--words", "none"], _Lists(rates=[0.5], words=["none"])),  # a list of strings keeps the word
        (["--rates", "0.1", "2"], _Lists(rates=[0.1, 2.0], words=["a"])),
    ],
)
def test_a_number_list_flag_takes_none_and_a_string_list_keeps_it(argv, expected):
    assert parse_args_with_config((_Lists,), argv) == (expected,)


@pytest.mark.parametrize(
    ("value", "error", "word"),
    [
        ("none", TypeError, "--ngram_orders none"),
        (None, TypeError, "for no n-gram baseline"),
        ([2, 2], ValueError, "twice"),
    ],
)
def test_check_ngram_orders_refuses_what_is_no_list_of_orders(value, error, word):
    with pytest.raises(error, match=word):
        check_ngram_orders(value)


def test_compressor_baselines_must_be_a_bool():
    with pytest.raises(TypeError, match="compressor_baselines must be True or False"):
        ReportArguments(compressor_baselines="false")


class _Untouchable:
    """Training documents the report must not read when no n-gram order is asked."""

    @property
    def train_documents(self):
        raise AssertionError("the n-gram baseline ran with ngram_orders []")


@pytest.mark.parametrize(
    ("report", "keys", "phases"),
    [
        (ReportArguments(ngram_orders=[], compressor_baselines=False), [], []),
        (ReportArguments(ngram_orders=[]), ["zlib -9", "bz2 -9", "xz -9e"], ["compressors"]),
    ],
)
def test_the_baselines_skip_the_phases_switched_off(report, keys, phases):
    timer = PhaseTimer()
    out = baseline_bits_per_byte(_Untouchable(), None, ["def f():\n    return 1\n"], report, timer)
    assert sorted(out) == sorted(keys) and list(timer.seconds) == phases


@pytest.mark.parametrize(
    ("report", "baselines", "expected"),
    [
        (ReportArguments(ngram_orders=[]), {"xz -9e": 2.0}, {"Kneser-Ney n-gram": "not run (ngram_orders none)"}),
        (ReportArguments(), {"Kneser-Ney 3-gram": 2.0, "xz -9e": 2.0}, {}),
        (ReportArguments(), {"xz -9e": 2.0}, {"Kneser-Ney n-gram": "not run (no in-memory training tokens to count)"}),
        (ReportArguments(compressor_baselines=False), {"Kneser-Ney 3-gram": 2.0},
         {"compressors": "not run (compressor_baselines false)"}),
    ],
)  # fmt: skip
def test_the_report_names_the_baselines_not_run(report, baselines, expected):
    assert baselines_not_run(report, baselines) == expected


def test_a_short_run_without_baselines_writes_no_baseline_keys(tmp_path, capsys):
    out = tmp_path / "run"
    argv = [*QUICK_PRETRAIN, "--max_documents", "60", "--validation_fraction", "0.1", "--max_train_minutes", "null", "--disable_tqdm", "true",
            "--torch_threads", "1", "--ngram_orders", "none", "--compressor_baselines", "false",
            "--output_dir", str(out)]  # fmt: skip
    load_recipe().main(argv)
    metrics = json.loads((out / "metrics.json").read_text())
    assert "validation_bits_per_byte" in metrics and not [k for k in metrics if k.startswith("baseline_")]
    printed = capsys.readouterr().out
    assert re.search(r"Kneser-Ney n-gram +not run \(ngram_orders none\)", printed)
    assert re.search(r"compressors +not run \(compressor_baselines false\)", printed)
    card = (out / "README.md").read_text()
    assert "not run (ngram_orders none)" in card and "not run (compressor_baselines false)" in card
