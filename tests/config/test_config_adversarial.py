"""Hostile config files and command lines, as a new user writes them: each is refused with a message naming
the file, the key and the fix, or taken to the exact values it means (issue 34).

The issue's own examples: ``--config a.yaml --config b.yaml`` dropped ``a.yaml`` silently; an emptied section
(``training:`` with every key commented out, YAML's ``null``) was refused; ``ngram_orders: '3 4'`` was refused
with the hint ``[3 4]``, which YAML reads as the same string.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import pytest
import yaml
from transformers import TrainingArguments

from hf_lmobj.config import parse_args_with_config, resolve_config
from tests.testing_utils import load_recipe

PRETRAIN = load_recipe("pretrain").ARGUMENT_CLASSES


@dataclass
class Data:
    SECTION: ClassVar[str] = "data"

    data_name: str = "corpus"
    max_length: int = 256
    orders: list[int] = field(default_factory=lambda: [3])
    tags: list[str] = field(default_factory=list)
    shuffle: bool = False
    limit: int | None = None


@dataclass
class Model:
    SECTION: ClassVar[str] = "model"

    model_type: str = "llama"
    hidden_size: int = 64


GROUPS = (Data, Model)


def _write(folder: Path, text: str | bytes, name: str = "run.yaml") -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


def _parse(path: Path | str, *flags: str, groups=GROUPS):
    return parse_args_with_config(groups, ["--config", str(path), *flags])


# ------------------------------------------------------------------------------------------ the examples


def test_config_given_twice_is_refused_naming_both_files_and_base(tmp_path):
    first, second = _write(tmp_path, "hidden_size: 8\n", "a.yaml"), _write(tmp_path, "max_length: 5\n", "b.yaml")
    with pytest.raises(ValueError, match=r"--config is given 2 times .*a\.yaml.*b\.yaml.*write base: .*a\.yaml in"):
        parse_args_with_config(GROUPS, ["--config", str(first), "--config", str(second)])
    with pytest.raises(ValueError, match=r"--config is given 2 times"):  # the = form counts too
        parse_args_with_config(GROUPS, [f"--config={first}", "--max_length", "3", "--config", str(second)])


def test_the_base_route_the_message_gives_combines_both_files(tmp_path):
    _write(tmp_path, "hidden_size: 8\nmax_length: 9\n", "a.yaml")
    second = _write(tmp_path, "base: a.yaml\nmax_length: 5\n", "b.yaml")
    assert _parse(second) == (Data(max_length=5), Model(hidden_size=8))


@pytest.mark.parametrize(
    "text",
    [
        "training:\n  # max_steps: 3\nmodel:\n  hidden_size: 8\n",  # every key commented out
        "training:\nmodel: {hidden_size: 8}\n",
        "training: ~\nmodel: {hidden_size: 8}\n",
        "training: {}\nmodel: {hidden_size: 8}\n",
    ],
)
def test_an_emptied_section_is_an_empty_section(tmp_path, text):
    data, model, train = _parse(_write(tmp_path, text), "--output_dir", "o", groups=(*GROUPS, TrainingArguments))
    assert (data, model, train.max_steps) == (Data(), Model(hidden_size=8), -1)


def test_an_emptied_section_keeps_the_bases_values(tmp_path):
    _write(tmp_path, "model: {hidden_size: 16}\ndata: {max_length: 32}\n", "base.yaml")
    run = _write(tmp_path, "base: base.yaml\nmodel:\n  # hidden_size: 8\ndata: {data_name: code}\n")
    assert _parse(run) == (Data(data_name="code", max_length=32), Model(hidden_size=16))


@pytest.mark.parametrize(("line", "hint"), [("ngram_orders: '3 4'", [3, 4]), ("ngram_orders: 3 4", [3, 4]),
                                            ("ngram_orders: '3,4'", [3, 4]), ("ngram_orders: 3", [3])])  # fmt: skip
def test_a_string_for_a_list_field_is_refused_with_a_hint_yaml_reads_as_a_list(tmp_path, line, hint):
    path = _write(tmp_path, f"{line}\noutput_dir: out\n")
    with pytest.raises(TypeError, match=r"ngram_orders: .* is not a list of int; write a YAML list, e\.g\. ") as no:
        parse_args_with_config(PRETRAIN, ["--config", str(path), "--use_cpu", "true"])
    written = str(no.value).rpartition("e.g. ")[2]
    assert yaml.safe_load(f"ngram_orders: {written}") == {"ngram_orders": hint}  # the hint means what it shows


@pytest.mark.parametrize(
    ("line", "words", "hint"),
    [
        ("tags: a b", r"tags: 'a b' \(a string\) is not a list of string", ["a", "b"]),
        ("tags: '7'", r"tags: '7' \(a string\) is not a list of string", ["7"]),  # a string stays a string
        ("orders: 3", r"orders: 3 \(an int\) is not a list of int", [3]),
        ("orders: 3 x", r"orders: '3 x' \(a string\) is not a list of int", [3, "x"]),  # shown, still refused
    ],
)
def test_the_list_hint_round_trips_through_yaml(tmp_path, line, words, hint):
    with pytest.raises(TypeError, match=words) as no:
        _parse(_write(tmp_path, line + "\n"))
    assert yaml.safe_load(str(no.value).rpartition("e.g. ")[2]) == hint


# ------------------------------------------------------------------------------------------ the file itself


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("", r"run\.yaml: the file is empty \(or all comments\).*leave out --config"),
        ("# max_steps: 3\n# nothing else\n", r"the file is empty \(or all comments\)"),
        ("- hidden_size: 8\n- max_length: 3\n", r"the top level must be a mapping .*got a list"),
        ("hidden_size\n", r"the top level must be a mapping .*got a string: 'hidden_size'"),
        ("42\n", r"the top level must be a mapping .*got an int: 42"),
        ("model:\n\thidden_size: 8\n", r"run\.yaml: line 2, column 1: not valid YAML: .*never tabs"),
        ("model: {hidden_size: 8\n", r"run\.yaml: line 2, column 1: not valid YAML: while parsing a flow mapping"),
        ("hidden_size: 8: 9\n", r"run\.yaml: line 1, column 15: not valid YAML: mapping values are not allowed"),
        ("hidden_size: 8\n---\nmax_length: 3\n", r"line 2, column 1: not valid YAML: .*single document"),
        ("hidden_size: !!python/object:os.system x\n", r"line 1, column 14: not valid YAML: .*constructor"),
        (b"data_name: caf\xe9\n", r"not UTF-8 text \(byte 14\); save it as UTF-8"),
        (b"hidden_size: 8\x00\n", r"character U\+0000 at position 14 is not allowed in YAML"),
        ("1: 8\n", r"keys must be field names \(strings\), got \[1\]"),
    ],
)
def test_a_file_that_is_no_yaml_mapping_is_refused_naming_it(tmp_path, text, words):
    path = _write(tmp_path, text)
    with pytest.raises(ValueError, match=words) as no:
        _parse(path)
    assert str(no.value).startswith(f"--config {path}")


def test_a_bom_and_windows_line_ends_are_read(tmp_path):
    assert _parse(_write(tmp_path, "\ufeffhidden_size: 8\r\nmax_length: 3\r\n")) == (
        Data(max_length=3),
        Model(hidden_size=8),
    )


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("hidden_size: 8\nhidden_size: 9\n", r"key 'hidden_size' is given twice \(lines 1 and 2\); keep one"),
        ("model:\n  hidden_size: 8\n  hidden_size: 9\n", r"key 'hidden_size' is given twice \(lines 2 and 3\)"),
        ("model: {}\nmodel: {hidden_size: 8}\n", r"key 'model' is given twice \(lines 1 and 2\)"),
        ("base: a.yaml\nbase: b.yaml\n", r"key 'base' is given twice"),
        (
            "model: {type: gpt2, model_type: llama}\n",
            r"model_type is given twice \(model\.type and model\.model_type\)",
        ),
    ],
)
def test_a_key_given_twice_is_refused_never_last_wins(tmp_path, text, words):
    with pytest.raises(ValueError, match=words):
        _parse(_write(tmp_path, text))


def test_yaml_anchors_and_merge_keys_work_and_own_keys_win(tmp_path):
    text = "data: &shared {max_length: 32, data_name: web}\nmodel: {hidden_size: 8}\n"
    assert _parse(_write(tmp_path, text)) == (Data(data_name="web", max_length=32), Model(hidden_size=8))
    merged = "model: &m {hidden_size: 8}\ndata:\n  <<: {max_length: 16, data_name: a}\n  data_name: b\n"
    assert _parse(_write(tmp_path, merged)) == (Data(data_name="b", max_length=16), Model(hidden_size=8))


# ------------------------------------------------------------------------------------------ keys and sections


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("hiden_size: 8\n", r"unknown keys \['hiden_size'\]; hiden_size: did you mean hidden_size\?"),
        ("Max_Length: 8\n", r"Max_Length: did you mean max_length\?"),
        ("modle: {hidden_size: 8}\n", r"modle: did you mean model\?"),
        ("zzz: 1\n", r"unknown keys \['zzz'\]; zzz: no field of that name; each key must be a field of \['Data', "),
        ("config: other.yaml\n", r"config: a config names the file it overrides with base: FILE_OR_NAME"),
        ("extends: other.yaml\n", r"extends: a config names the file it overrides with base:"),
        ("overrides: {hidden_size: 8}\n", r"overrides: a file's own keys override its base: write them at the top"),
        ("overrides: 3\n", r"unknown keys \['overrides'\]"),
    ],
)
def test_an_unknown_top_level_key_is_named_with_the_closest_known_one(tmp_path, text, words):
    path = _write(tmp_path, text)
    with pytest.raises(ValueError, match=words) as no:
        _parse(path)
    assert str(path) in str(no.value)


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("model: {hiden_size: 8}\n", r"model: 'hiden_size' is not a field of the model section \(Model\); "
         r"did you mean hidden_size\?; its fields: \['model_type', 'hidden_size'\]"),
        ("model: {max_length: 8}\n", r"model: 'max_length' is not a field of the model section \(Model\); it belongs "
         r"in the data section \(data: \{max_length: \.\.\.\}\) or at the top level"),
        ("data: {base: x.yaml}\n", r"data: 'base' is not a field of the data section"),
        ("model: [hidden_size, 8]\n", r"model is a section \(Model\): its value must be a mapping of its fields, such "
         r"as model: \{model_type: \.\.\.\}; got \['hidden_size', 8\]"),
        ("model: 8\n", r"model is a section \(Model\): its value must be a mapping"),
    ],
)  # fmt: skip
def test_a_key_in_the_wrong_section_or_a_section_of_the_wrong_shape_is_refused(tmp_path, text, words):
    with pytest.raises(ValueError, match=words):
        _parse(_write(tmp_path, text))


# ------------------------------------------------------------------------------------------ base:


@pytest.mark.parametrize(
    ("files", "words"),
    [
        ({"run.yaml": "base: run.yaml\n"}, r"bases form a cycle: .*run\.yaml -> .*run\.yaml \(run\.yaml names itself"),
        ({"run.yaml": "base: a.yaml\n", "a.yaml": "base: b.yaml\n", "b.yaml": "base: run.yaml\nhidden_size: 8\n"},
         r"bases form a cycle: .*run\.yaml -> .*a\.yaml -> .*b\.yaml -> .*run\.yaml; break it"),
        ({"run.yaml": "base: nothere.yaml\n"}, r"run\.yaml: base: --config nothere\.yaml: no such file, nor a shipped "
         r"config \(a relative path is looked up in "),
        ({"run.yaml": "base: causal/dem\n"}, r"base: --config causal/dem: no such file.*did you mean causal/demo"),
        ({"run.yaml": "base:\nhidden_size: 8\n"}, r"base must be a config name or path, got None; name one .* or drop"),
        ({"run.yaml": "base: [a.yaml, b.yaml]\n"}, r"base must be a config name or path, got \['a\.yaml', 'b\.yaml'\]"),
        ({"run.yaml": "base: {a: 1}\n"}, r"base must be a config name or path, got \{'a': 1\}"),
        ({"run.yaml": "base: sub\n", "sub/x.yaml": "hidden_size: 8\n"}, r"base: --config sub: a folder, not a YAML "
         r"file; name one file in it \(x\.yaml\)"),
        ({"run.yaml": "base: empty.yaml\n", "empty.yaml": "# all commented\n"}, r"empty\.yaml: the file is empty"),
    ],
)  # fmt: skip
def test_a_bad_base_is_refused_naming_the_file(tmp_path, files, words):
    for name, text in files.items():
        _write(tmp_path, text, name)
    with pytest.raises(ValueError, match=words):
        _parse(tmp_path / "run.yaml")


def test_a_relative_base_is_never_taken_from_the_working_directory(tmp_path, monkeypatch):
    (tmp_path / "cwd").mkdir()
    _write(tmp_path / "cwd", "hidden_size: 99\n", "other.yaml")  # a stray file where the run starts
    run = _write(tmp_path / "configs", "base: other.yaml\nmax_length: 3\n")
    monkeypatch.chdir(tmp_path / "cwd")
    with pytest.raises(ValueError, match=r"no such file, nor a shipped config \(a relative path is looked up in "):
        _parse(run)
    _write(tmp_path / "configs", "hidden_size: 7\n", "other.yaml")  # beside the file: taken
    assert _parse(run) == (Data(max_length=3), Model(hidden_size=7))


# ------------------------------------------------------------------------------------------ values


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("shuffle: 'yes'", Data(shuffle=True)),  # as --shuffle yes on the command line
        ("shuffle: 'no'", Data(shuffle=False)),
        ("shuffle: yes", Data(shuffle=True)),  # YAML 1.1 reads unquoted yes as true
        ("max_length: '7'", Data(max_length=7)),  # as --max_length 7
        ("limit: null", Data(limit=None)),  # an optional field takes null
        ("limit: 'null'", Data(limit=None)),  # as --limit null
        ("orders: []", Data(orders=[])),
    ],
)
def test_values_the_command_line_would_take_are_taken_exactly(tmp_path, line, expected):
    assert _parse(_write(tmp_path, line + "\n"))[0] == expected


@pytest.mark.parametrize(
    ("line", "error", "words"),
    [
        ("shuffle: maybe", ValueError, r"shuffle: 'maybe' is not true or false"),
        ("shuffle: 1", TypeError, r"shuffle: 1 \(an int\) is not true or false"),
        ("max_length: 3.5", TypeError, r"max_length: 3\.5 \(a float\) is not an int"),
        ("max_length: '3.5'", ValueError, r"max_length: '3\.5' is not an int"),
        ("max_length: 3.0", TypeError, r"max_length: 3\.0 \(a float\) is not an int"),
        ("max_length:", TypeError, r"max_length: null is not an int \(YAML reads an empty value or ~ as null\); give "
         r"a value, or drop the key to keep the default"),
        ("data_name: ~", TypeError, r"data_name: null is not a string"),
        ("shuffle:", TypeError, r"shuffle: null is not true or false"),
        ("orders: null", TypeError, r"orders: null is not a list of int"),
        ("data_name: 2024-01-01", TypeError, r"data_name: datetime\.date\(2024, 1, 1\) \(date\) is not a string; "
         r"quote it \('2024-01-01'\)"),
        ("data_name: no", TypeError, r"data_name: False \(a bool\) is not a string; YAML reads unquoted yes / no"),
        ("orders: [3, true]", TypeError, r"orders: \[3, True\] \(a list\) is not a list of int"),
        ("limit: 2.5", TypeError, r"limit: 2\.5 \(a float\) is not an int or null"),
    ],
)  # fmt: skip
def test_a_value_of_the_wrong_type_is_refused_naming_file_key_and_fix(tmp_path, line, error, words):
    path = _write(tmp_path, line + "\n")
    with pytest.raises(error, match=words) as no:
        _parse(path)
    assert str(no.value).startswith(f"--config {path}: ")


# ------------------------------------------------------------------------------------------ the command line


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--hiden_size", "8"], r"unknown command-line arguments \['--hiden_size', '8'\]; --hiden_size: did you mean "
         r"--hidden_size\?; each flag must be a field of \['Data', 'Model'\] or --config"),
        (["--max_lenght=8"], r"\['--max_lenght=8'\]; --max_lenght: did you mean --max_length\?"),
        (["--model.hidden_size", "8"], r"--model\.hidden_size: did you mean --hidden_size\?"),
        (["--zzz"], r"--zzz: no such flag"),
        (["stray"], r"unknown command-line arguments \['stray'\]"),
        (["--conf", "run.yaml"], r"--conf: did you mean --config\?"),  # --config is never abbreviated
        (["--config"], r"--config needs a value: a YAML file or a shipped config name"),
        (["--config", ""], r"--config '': empty; give a YAML file or a shipped config name"),
        (["--config="], r"--config '': empty"),
    ],
)  # fmt: skip
def test_a_bad_command_line_is_refused_naming_the_flag_and_the_closest_one(flags, words):
    with pytest.raises(ValueError, match=words):
        parse_args_with_config(GROUPS, flags)


def test_the_command_line_still_overrides_the_file(tmp_path):
    path = _write(tmp_path, "model: {hidden_size: 8}\ndata: {max_length: 3}\n")
    assert _parse(path, "--hidden_size", "16") == (Data(max_length=3), Model(hidden_size=16))


# ------------------------------------------------------------------------------------------ config names


@pytest.mark.parametrize(
    ("name", "words"),
    [
        ("causal/dem", r"--config causal/dem: no such file, nor a shipped config; shipped: .*; did you mean "
         r"causal/demo"),
        ("masked/bert_tiny.yml", r"did you mean masked/bert_tiny"),
        ("span/t5", r"no such file, nor a shipped config; shipped: .*span/t5_tiny"),
        ("  ", r"--config '  ': empty"),
    ],
)  # fmt: skip
def test_a_name_that_is_no_shipped_config_names_the_closest(name, words):
    with pytest.raises(ValueError, match=words):
        resolve_config(name)


def test_a_missing_file_or_a_folder_is_refused_naming_it(tmp_path):
    with pytest.raises(ValueError, match=r"missing\.yaml: no such file, nor a shipped config"):
        _parse(tmp_path / "missing.yaml")
    _write(tmp_path, "hidden_size: 8\n", "a.yaml")
    with pytest.raises(ValueError, match=rf"--config {tmp_path}: a folder, not a YAML file; name one file in it "
                       r"\(a\.yaml\)"):  # fmt: skip
        _parse(tmp_path)
