"""YAML values are checked against their field's type when the config is read, as command-line strings are.

Before, ``max_steps: 2.5`` or ``learning_rate: [0.001, 0.002]`` passed the parser and failed later
with a TypeError inside the Trainer, numpy or the optimizer. Each case here writes one YAML file and
parses it with the pre-training recipe's argument groups (``TrainingArguments`` included).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Literal

import pytest
from transformers import TrainingArguments

from hf_lmobj.config import parse_args_with_config
from tests.testing_utils import load_recipe

PRETRAIN = load_recipe("pretrain").ARGUMENT_CLASSES


def _parse(tmp_path, text: str, types=PRETRAIN, *flags: str):
    path = tmp_path / "run.yaml"
    path.write_text(text + "\n")
    cli = ["--output_dir", str(tmp_path / "out"), "--use_cpu", "true"] if TrainingArguments in types else []
    return {
        type(group).__name__: group for group in parse_args_with_config(types, ["--config", str(path), *cli, *flags])
    }


# (YAML line, error, words): a wrong type is a TypeError, a string the flag refuses a ValueError
REFUSED = [
    ("max_steps: 2.5", TypeError, r"max_steps: 2.5 \(a float\) is not an int"),
    ("learning_rate: [0.001, 0.002]", TypeError, r"learning_rate: \[0.001, 0.002\] \(a list\) is not a float"),
    ("seed: 1.7", TypeError, r"seed: 1.7 \(a float\) is not an int"),
    ("max_steps: true", TypeError, r"max_steps: True \(a bool\) is not an int"),
    ("hidden_size: false", TypeError, r"hidden_size: False \(a bool\) is not an int"),
    ("use_cpu: 1", TypeError, r"use_cpu: 1 \(an int\) is not true or false"),
    ("whole_word_mask: 'maybe'", ValueError, r"whole_word_mask: 'maybe' is not true or false"),
    ("save_strategy: no", TypeError, r"save_strategy: False \(a bool\) .*quote it"),
    ("save_strategy: sometimes", ValueError, r"save_strategy: 'sometimes' is not one of \['no', 'steps'"),
    ("lr_scheduler_type: 3", TypeError, r"lr_scheduler_type: 3 \(an int\)"),
    ("ngram_orders: 3", TypeError, r"ngram_orders: 3 \(an int\) is not a list of int; write a YAML list, e\.g\. \[3\]"),
    ("ngram_orders: [3, x]", TypeError, r"ngram_orders: \[3, 'x'\] \(a list\) is not a list of int"),
    ("ngram_orders: [3.5]", TypeError, r"is not a list of int"),
    ("max_steps: abc", ValueError, r"max_steps: 'abc' is not an int"),
    ("max_steps: '2.5'", ValueError, r"max_steps: '2.5' is not an int"),
    ("output_dir: 5", TypeError, r"output_dir: 5 \(an int\) is not a string or null; quote it \('5'\)"),
    ("objective: [clm]", TypeError, r"objective: \['clm'\] \(a list\) is not a string"),
    ("score_stride: .nan", TypeError, r"score_stride: nan \(a float\) is not an int or null"),
    ("max_train_minutes: [7]", TypeError, r"max_train_minutes: \[7\] \(a list\) is not a float \(or an int\) or null"),
    ("sources: 5", TypeError, r"sources: 5 \(an int\)"),
    ("sources: [[1, 2]]", TypeError, r"sources: \[\[1, 2\]\] \(a list\)"),
    ("fim_rate: {a: 1}", TypeError, r"fim_rate: \{'a': 1\} \(a mapping\) is not a float"),
    ("report_to: 7", TypeError, r"report_to: 7 \(an int\)"),
    ("include_for_metrics: inputs", TypeError, r"include_for_metrics: 'inputs' \(a string\) is not a list of string"),
]


@pytest.mark.parametrize(("line", "error", "words"), REFUSED, ids=[case[0] for case in REFUSED])
def test_a_value_of_the_wrong_type_is_refused_when_the_file_is_read(tmp_path, line, error, words):
    with pytest.raises(error, match=words) as refused:
        _parse(tmp_path, line)
    assert str(refused.value).startswith(f"--config {tmp_path / 'run.yaml'}: ")  # names the file first


def test_a_command_line_override_does_not_hide_a_wrong_value_in_the_file(tmp_path):
    with pytest.raises(TypeError, match=r"max_steps: 2.5"):
        _parse(tmp_path, "max_steps: 2.5", PRETRAIN, "--max_steps", "3")


@pytest.mark.parametrize(
    ("line", "group", "name", "value"),
    [
        ("learning_rate: 3", "TrainingArguments", "learning_rate", 3.0),  # an int is a float
        ("learning_rate: 1e-3", "TrainingArguments", "learning_rate", 0.001),  # YAML reads 1e-3 as a string
        ("max_train_minutes: null", "RuntimeArguments", "max_train_minutes", None),
        ("max_train_minutes: 'null'", "RuntimeArguments", "max_train_minutes", None),  # as --max_train_minutes null
        ("use_cpu: 'yes'", "TrainingArguments", "use_cpu", True),  # as --use_cpu yes
        ("save_strategy: 'no'", "TrainingArguments", "save_strategy", "no"),
        ("ngram_orders: []", "ReportArguments", "ngram_orders", []),
        ("max_steps: '7'", "TrainingArguments", "max_steps", 7),  # as --max_steps 7
        ("fsdp_config: {min_num_params: 1}", "TrainingArguments", "fsdp_config", None),
        ("report_to: [none]", "TrainingArguments", "report_to", []),
    ],
)
def test_values_of_the_fields_type_are_taken_in_their_normal_form(tmp_path, line, group, name, value):
    parsed = getattr(_parse(tmp_path, line)[group], name)
    if name == "fsdp_config":
        assert parsed["min_num_params"] == 1
    elif name == "save_strategy":
        assert parsed.value == value
    else:
        assert parsed == value and type(parsed) is type(value)


def test_sources_take_a_yaml_list_as_documented(tmp_path):
    data = _parse(tmp_path, "sources:\n  - {token_store: a, weight: 3}\n  - {dataset_name: b, weight: 1}")
    assert data["DataArguments"].sources == [{"token_store": "a", "weight": 3}, {"dataset_name": "b", "weight": 1}]


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("max_steps: 3\nmax_steps: 4", r"key 'max_steps' is given twice \(lines 1 and 2\); keep one"),
        ("1: 2", r"keys must be field names \(strings\), got \[1\]"),
        ("max_steps: [", r"while parsing a flow node"),
        ("max_step: 3", r"unknown keys \['max_step'\]"),
        ("config: other.yaml", r"unknown keys \['config'\]"),
    ],
)
def test_duplicate_odd_unknown_keys_and_broken_yaml_are_refused_naming_the_file(tmp_path, text, words):
    with pytest.raises(ValueError, match=words) as refused:
        _parse(tmp_path, text)
    assert str(tmp_path / "run.yaml") in str(refused.value)


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclass
class Typed:
    mode: Literal["fast", "exact"] = "fast"
    color: Color = Color.RED
    names: list[str] = field(default_factory=lambda: ["a"])
    weights: dict[str, int] = field(default_factory=dict)
    rows: int | None = 3


@pytest.mark.parametrize(
    ("line", "error", "words"),
    [
        ("mode: slow", ValueError, r"mode: 'slow' is not one of \['fast', 'exact'\]"),
        ("mode: 1", TypeError, r"mode: 1 \(an int\) is not one of \['fast', 'exact'\]"),
        ("color: green", ValueError, r"color: 'green' is not one of \['red', 'blue'\]"),
        ("names: a", TypeError, r"names: 'a' \(a string\) is not a list of string"),
        ("names: [a, 2]", TypeError, r"names: \['a', 2\] \(a list\) is not a list of string"),
        ("weights: {a: x}", TypeError, r"weights: \{'a': 'x'\} \(a mapping\) is not a mapping"),
        ("rows: 2.0", TypeError, r"rows: 2.0 \(a float\) is not an int or null"),
    ],
)
def test_literals_enums_lists_and_mappings_are_checked_member_by_member(tmp_path, line, error, words):
    with pytest.raises(error, match=words):
        _parse(tmp_path, line, (Typed,))


def test_literals_enums_lists_and_mappings_of_the_right_type_pass(tmp_path):
    (typed,) = _parse(
        tmp_path, "mode: exact\ncolor: blue\nnames: [x, y]\nweights: {a: 1}\nrows: null", (Typed,)
    ).values()
    assert (typed.mode, typed.color, typed.names, typed.weights, typed.rows) == ("exact", "blue", ["x", "y"], {"a": 1},
                                                                                   None)  # fmt: skip


def test_the_message_names_file_key_value_and_expected_type(tmp_path):
    with pytest.raises(TypeError) as refused:
        _parse(tmp_path, "seed: 1.7")
    message = str(refused.value)
    for part in (str(tmp_path / "run.yaml"), "seed", "1.7", "a float", "an int"):
        assert part in message, (part, message)
    assert re.fullmatch(r"--config .*run\.yaml: seed: 1\.7 \(a float\) is not an int", message)
