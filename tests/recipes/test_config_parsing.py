from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from transformers import TrainingArguments

from hf_lmobj.recipes.support.config_parsing import parse_args_with_config, resolve_config, shipped_configs


@dataclass
class Args:
    steps: int = 1
    name: str = "default"


def write(tmp_path, text):
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return str(path)


def test_yaml_sets_defaults_and_cli_overrides(tmp_path):
    config = write(tmp_path, "steps: 5\nname: file\nmax_steps: 7\nlearning_rate: 0.003\n")
    args, train = parse_args_with_config(
        (Args, TrainingArguments), ["--config", config, "--max_steps", "3", "--output_dir", str(tmp_path)]
    )
    assert (args.steps, args.name) == (5, "file")
    assert (train.max_steps, train.learning_rate, train.output_dir) == (3, 0.003, str(tmp_path))


@dataclass
class Optionals:
    minutes: float | None = 7.0
    rows: int | None = 3
    tag: str | None = "x"


def test_null_on_the_command_line_clears_an_optional_number_as_in_yaml(tmp_path):
    parsed = parse_args_with_config((Optionals,), ["--minutes", "null", "--rows", "null", "--tag", "null"])
    assert parsed == (Optionals(minutes=None, rows=None, tag="null"),)  # a string stays the string it was given
    from_file = parse_args_with_config((Optionals,), ["--config", write(tmp_path, "minutes: null\n"), "--rows", "4"])
    assert from_file == (Optionals(minutes=None, rows=4),)
    with pytest.raises(SystemExit):  # argparse's own error for a bad number
        parse_args_with_config((Optionals,), ["--minutes", "soon"])
    train = parse_args_with_config((TrainingArguments,), ["--output_dir", str(tmp_path), "--report_to", "none"])[0]
    assert train.report_to == []  # "none" keeps its Trainer meaning


def test_no_config_uses_dataclass_defaults():
    assert parse_args_with_config((Args,), ["--steps", "2"]) == (Args(steps=2),)


def test_unknown_key_missing_file_and_bad_top_level(tmp_path):
    with pytest.raises(ValueError, match=r"unknown keys \['stepz'\]"):
        parse_args_with_config((Args,), ["--config", write(tmp_path, "stepz: 5\n")])
    with pytest.raises(ValueError, match="no such file"):
        parse_args_with_config((Args,), ["--config", str(tmp_path / "missing.yaml")])
    with pytest.raises(ValueError, match="mapping"):
        parse_args_with_config((Args,), ["--config", write(tmp_path, "- 1\n- 2\n")])


@dataclass
class Needs:
    """A recipe whose first field has no default."""

    model: str
    steps: int = 1


REPO_CONFIGS = Path(__file__).resolve().parents[2] / "recipes" / "configs"


def test_a_shipped_config_is_found_by_name_with_or_without_suffix():
    assert resolve_config("clm/demo") == resolve_config("clm/demo.yaml")
    assert resolve_config("clm/demo").read_text() == (REPO_CONFIGS / "clm" / "demo.yaml").read_text()
    names = shipped_configs()
    assert names == sorted(str(p.relative_to(REPO_CONFIGS).with_suffix("")) for p in REPO_CONFIGS.glob("*/*.yaml"))
    with pytest.raises(ValueError, match="nor a shipped config; shipped: .*clm/demo"):
        resolve_config("clm/nonexistent")


def test_an_existing_file_wins_over_a_shipped_name(tmp_path, monkeypatch):
    (tmp_path / "clm").mkdir()
    (tmp_path / "clm" / "demo.yaml").write_text("steps: 9\n")
    monkeypatch.chdir(tmp_path)
    assert parse_args_with_config((Args,), ["--config", "clm/demo.yaml"]) == (Args(steps=9),)


def test_a_required_field_may_come_from_the_file(tmp_path):
    assert parse_args_with_config((Needs,), ["--config", write(tmp_path, "model: tiny\n")]) == (Needs("tiny"),)
    assert parse_args_with_config((Needs,), ["--model", "cli"]) == (Needs("cli"),)


def test_help_shows_the_recipe_config_and_own_fields_and_help_all_adds_trainer_fields(capsys):
    for flag, trainer_fields in (("--help", False), ("--help_all", True)):
        with pytest.raises(SystemExit) as done:
            parse_args_with_config((Needs, TrainingArguments), [flag], description="Pre-train a tiny model.")
        assert done.value.code == 0
        shown = capsys.readouterr().out
        assert "Pre-train a tiny model." in shown and "--config FILE_OR_NAME" in shown and "--model" in shown
        assert ("--adam_beta1" in shown) is trainer_fields
        assert ("--help_all lists them" in shown) is not trainer_fields
