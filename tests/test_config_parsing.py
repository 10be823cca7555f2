from __future__ import annotations

from dataclasses import dataclass

import pytest
from transformers import TrainingArguments

from hf_lmobj.config_parsing import parse_args_with_config


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


def test_no_config_uses_dataclass_defaults():
    assert parse_args_with_config((Args,), ["--steps", "2"]) == (Args(steps=2),)


def test_unknown_key_missing_file_and_bad_top_level(tmp_path):
    with pytest.raises(ValueError, match=r"unknown keys \['stepz'\]"):
        parse_args_with_config((Args,), ["--config", write(tmp_path, "stepz: 5\n")])
    with pytest.raises(ValueError, match="no such file"):
        parse_args_with_config((Args,), ["--config", str(tmp_path / "missing.yaml")])
    with pytest.raises(ValueError, match="mapping"):
        parse_args_with_config((Args,), ["--config", write(tmp_path, "- 1\n- 2\n")])
