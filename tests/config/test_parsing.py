from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import pytest
from transformers import TrainingArguments

from hf_lmobj.config import (
    config_sections,
    load_yaml_config,
    parse_args_with_config,
    resolve_config,
    shipped_configs,
)
from tests.testing_utils import load_recipe

PRETRAIN = load_recipe("pretrain").ARGUMENT_CLASSES


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
    assert resolve_config("causal/demo") == resolve_config("causal/demo.yaml")
    assert resolve_config("causal/demo") == REPO_CONFIGS / "causal" / "demo.yaml"  # this checkout's, not another's
    names = shipped_configs()
    assert names == sorted(str(p.relative_to(REPO_CONFIGS).with_suffix("")) for p in REPO_CONFIGS.glob("*/*.yaml"))
    with pytest.raises(ValueError, match="nor a shipped config; shipped: .*causal/demo"):
        resolve_config("causal/nonexistent")


def test_an_existing_file_wins_over_a_shipped_name(tmp_path, monkeypatch):
    (tmp_path / "causal").mkdir()
    (tmp_path / "causal" / "demo.yaml").write_text("steps: 9\n")
    monkeypatch.chdir(tmp_path)
    assert parse_args_with_config((Args,), ["--config", "causal/demo.yaml"]) == (Args(steps=9),)


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


@pytest.mark.parametrize(
    "name, then",
    [
        ("clm/demo", "did you mean causal/demo"),
        ("mlm/bert_tiny.yaml", "did you mean masked/bert_tiny"),
        ("clm/nonexistent", "shipped: causal/demo, "),
    ],
)
def test_a_folder_name_of_no_shipped_config_is_refused_listing_the_shipped_ones(name, then):
    with pytest.raises(ValueError, match=rf"^--config {name}: no such file, nor a shipped config; .*{then}"):
        resolve_config(name)


# ------------------------------------------------------------------------------------------ base: and sections


@dataclass
class Data:
    """A stand-in for a recipe's argument group that names its config section."""

    SECTION: ClassVar[str] = "data"

    data_rate: float = 0.0
    data_name: str = "corpus"
    max_length: int = 256
    extra: dict = field(default_factory=dict)


@dataclass
class Model:
    SECTION: ClassVar[str] = "model"

    model_type: str = "llama"
    hidden_size: int = 64


GROUPS = (Data, Model, TrainingArguments)


def _files(tmp_path, **texts) -> Path:
    """Write ``name.yaml`` files (subfolders allowed: ``sub__a`` is ``sub/a.yaml``); the folder they sit in."""
    for name, text in texts.items():
        path = tmp_path / (name.replace("__", "/") + ".yaml")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def _parse(path, *flags):
    data, model, train = parse_args_with_config(GROUPS, ["--config", str(path), "--output_dir", "o", *flags])
    return data, model, train


def test_sections_come_from_the_dataclasses_and_training_is_trainings():
    assert config_sections(GROUPS) == {"data": Data, "model": Model, "training": TrainingArguments}
    assert config_sections((Args,)) == {}  # a class without SECTION has no section: its keys are flat


def test_a_section_holds_its_fields_by_name_or_without_the_sections_prefix(tmp_path):
    folder = _files(tmp_path, run="data: {rate: 0.5, data_name: code, max_length: 64}\nmodel:\n  type: gpt2\n"
                    "training: {max_steps: 7}\nhidden_size: 32\n")  # fmt: skip
    data, model, train = _parse(folder / "run.yaml")
    assert (data.data_rate, data.data_name, data.max_length) == (0.5, "code", 64)
    assert (model.model_type, model.hidden_size, train.max_steps) == ("gpt2", 32, 7)  # flat keys still work
    assert load_yaml_config(folder / "run.yaml", GROUPS) == {
        "data_rate": 0.5, "data_name": "code", "max_length": 64, "model_type": "gpt2", "max_steps": 7, "hidden_size": 32,
    }  # fmt: skip


def test_a_key_that_is_not_a_field_of_its_section_is_refused_listing_the_sections_fields(tmp_path):
    folder = _files(tmp_path, run="model:\n  hidden_size: 32\n  stepz: 3\n")
    with pytest.raises(ValueError, match=r"model: 'stepz' is not a field of the model section \(Model\); "
                       r"its fields: \['model_type', 'hidden_size'\]") as refused:  # fmt: skip
        _parse(folder / "run.yaml")
    assert str(folder / "run.yaml") in str(refused.value)


def test_a_field_of_another_section_is_refused_naming_its_section(tmp_path):
    folder = _files(tmp_path, run="model:\n  hidden_size: 32\n  max_steps: 3\n")  # a training field in model
    with pytest.raises(ValueError, match=r"model: 'max_steps' is not a field of the model section \(Model\); "
                       r"it belongs in the training section"):  # fmt: skip
        _parse(folder / "run.yaml")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        (
            "hidden_size: 32\nmodel: {hidden_size: 64}\n",
            r"hidden_size is given twice \(hidden_size and model.hidden_size\)",
        ),
        ("model: {type: gpt2, model_type: llama}\n", r"model_type is given twice \(model.type and model.model_type\)"),
        ("data: {rate: 0.5}\ndata_rate: 0.1\n", r"data_rate is given twice \(data.rate and data_rate\)"),
    ],
)
def test_a_field_given_twice_after_flattening_is_refused(tmp_path, text, words):
    folder = _files(tmp_path, run=text)
    with pytest.raises(ValueError, match=words):
        _parse(folder / "run.yaml")


def test_a_section_name_with_a_plain_value_or_a_foreign_section_is_refused(tmp_path):
    folder = _files(tmp_path, a="data: 3\n", b="fim: {rate: 0.5}\n")
    with pytest.raises(ValueError, match=r"data is a section \(Data\): its value must be a mapping of its fields"):
        _parse(folder / "a.yaml")
    with pytest.raises(ValueError, match=r"unknown keys \['fim'\]"):  # no dataclass of this recipe has section fim
        _parse(folder / "b.yaml")


def test_the_file_overrides_its_base_and_the_command_line_overrides_both(tmp_path):
    folder = _files(
        tmp_path,
        base="data: {data_name: base, max_length: 64}\nmodel: {hidden_size: 32}\ntraining: {max_steps: 5}\n",
        run="base: base.yaml\nmodel: {hidden_size: 48}\nmax_length: 128\n",  # flat in the file, in a section in the base
    )
    data, model, train = _parse(folder / "run.yaml", "--max_steps", "9")
    assert (data.data_name, data.max_length, model.hidden_size, train.max_steps) == ("base", 128, 48, 9)
    assert "base" not in load_yaml_config(folder / "run.yaml", GROUPS)


def test_bases_chain_and_each_resolves_beside_the_file_that_names_it(tmp_path, monkeypatch):
    folder = _files(
        tmp_path,
        root="data: {data_name: root, max_length: 32}\nmodel: {hidden_size: 16}\n",
        sub__middle="base: ../root.yaml\nmodel: {hidden_size: 24}\n",  # relative to sub/, not to the working directory
        sub__leaf="base: middle.yaml\ndata: {max_length: 48}\n",
    )
    (folder / "elsewhere").mkdir()
    monkeypatch.chdir(folder / "elsewhere")  # only the including file's folder can explain "../root.yaml"
    data, model, _ = _parse(folder / "sub" / "leaf.yaml")
    assert (data.data_name, data.max_length, model.hidden_size) == ("root", 48, 24)


def test_a_base_may_be_a_shipped_config_name(tmp_path):
    folder = _files(tmp_path, run="base: causal/demo\ntraining: {output_dir: out/mine, max_steps: 3}\n")
    groups = {type(g).__name__: g for g in parse_args_with_config(PRETRAIN, ["--config", str(folder / "run.yaml")])}
    assert (groups["TrainingArguments"].output_dir, groups["TrainingArguments"].max_steps) == ("out/mine", 3)
    demo = load_yaml_config("causal/demo", PRETRAIN)
    assert groups["OptimizerArguments"].optimizer == demo["optimizer"]  # the rest comes from the shipped demo
    assert groups["ModelArguments"].hidden_size == demo["hidden_size"]


def test_a_cycle_of_bases_is_refused_naming_the_files(tmp_path):
    folder = _files(tmp_path, a="base: b.yaml\nmodel: {hidden_size: 8}\n", b="base: a.yaml\n", c="base: c.yaml\n")
    with pytest.raises(ValueError, match=r"bases form a cycle: .*a\.yaml -> .*b\.yaml -> .*a\.yaml"):
        _parse(folder / "a.yaml")
    with pytest.raises(ValueError, match=r"bases form a cycle: .*c\.yaml -> .*c\.yaml"):
        _parse(folder / "c.yaml")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("base: missing.yaml\n", r"base: --config missing.yaml: no such file, nor a shipped config"),
        ("base: 3\n", r"base must be a config name or path, got 3"),
        ("base: ''\n", r"base must be a config name or path, got ''"),
    ],
)
def test_a_missing_or_odd_base_is_refused_naming_the_including_file(tmp_path, text, words):
    folder = _files(tmp_path, run=text)
    with pytest.raises(ValueError, match=words) as refused:
        _parse(folder / "run.yaml")
    assert str(folder / "run.yaml") in str(refused.value)


def test_values_from_a_base_are_type_checked_as_the_files_own(tmp_path):
    folder = _files(tmp_path, base="training: {max_steps: 2.5}\n", run="base: base.yaml\n")
    with pytest.raises(TypeError, match=r"max_steps: 2.5 \(a float\) is not an int"):
        _parse(folder / "run.yaml")


@pytest.mark.parametrize(
    "yaml_text, flags, message",
    [
        ("eval_stride: 3\n", [], r"unknown keys \['eval_stride'\]; eval_stride: did you mean .*score_stride"),
        ("report:\n  eval_stride: 3\n", [], r"'eval_stride' is not a field of the report section.*score_stride"),
        ("", ["--eval_stride", "3"], r"unknown command-line arguments.*--eval_stride: did you mean .*--score_stride"),
        ("", ["--eval_stride=3"], r"unknown command-line arguments \['--eval_stride=3'\].*--score_stride"),
    ],
)
def test_a_field_name_no_dataclass_has_is_refused_naming_the_closest(tmp_path, yaml_text, flags, message):
    path = tmp_path / "c.yaml"
    path.write_text(yaml_text + "output_dir: out\n")
    with pytest.raises(ValueError, match=message):
        parse_args_with_config(PRETRAIN, ["--config", str(path), "--use_cpu", "true", *flags])
