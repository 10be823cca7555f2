"""``--config NAME`` plus command-line overrides for argument dataclasses (TRL / torchtune style).

``NAME`` is a YAML file or the name of a shipped config (``causal/demo`` is
``hf_lmobj/recipes/configs/causal/demo.yaml``, found in a clone and in an installed wheel alike; the
first release's folder names, ``clm/`` and ``mlm/``, still resolve with a DeprecationWarning).
Every key of the YAML file must be a field of one of the dataclasses (``TrainingArguments``
included); a command-line flag wins over the file. Unknown keys, and keys given twice, are an
error, never ignored. A required field may come from the file or the command line.

A file may group its keys in sections: a top-level key naming a dataclass's ``SECTION`` (``data``,
``model``, ``fim``, ...; ``training`` for ``TrainingArguments``) whose value is a mapping holds that
dataclass's fields, each by its name or without the section's prefix (``fim: {rate: 0.5}`` is
``fim_rate``); a key that is not a field of its section is refused, and so is a field given twice
(flat and in a section, or by both of its names). ``base: NAME`` names a config this file
overrides (resolved as ``--config``, a relative path against the file's folder first; bases chain,
a cycle is refused). Order of precedence: the base, then the file, then the command line.

Each YAML value is checked against its field's type when the file is read, as a command-line
string is by argparse: a YAML string goes through the flag's own conversion and choices (so
``learning_rate: 1e-3``, which YAML reads as a string, is the float it is on the command line);
any other value must already be of the field's type (``int``, ``float``, ``bool``, ``str``,
``Optional[...]``, ``Literal`` / enum choices, ``list[...]``, ``dict``). An int is a float; a bool
is never an int, a float never an int (``max_steps: 2.5``), a list never a number. A dataclass
may let a field take more from YAML than its annotation says (``DataArguments.sources``: a list
or its JSON string) through a ``YAML_TYPES`` class attribute mapping field names to types.

Example:
    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class Args:
    ...     steps: int = 1
    ...     name: str = "x"
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "c.yaml")
    >>> _ = open(path, "w").write("steps: 5\\nname: from_file\\n")
    >>> parse_args_with_config((Args,), ["--config", path, "--name", "cli"])
    (Args(steps=5, name='cli'),)
    >>> Args.SECTION = "run"  # its keys may sit in a section run: {...}
    >>> _ = open(path.replace("c.yaml", "d.yaml"), "w").write("base: c.yaml\\nrun: {steps: 7}\\n")
    >>> parse_args_with_config((Args,), ["--config", path.replace("c.yaml", "d.yaml")])
    (Args(steps=7, name='from_file'),)
    >>> resolve_config("causal/demo").parent.name
    'causal'
    >>> _ = open(path, "w").write("steps: 2.5\\n")
    >>> parse_args_with_config((Args,), ["--config", path])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    TypeError: --config ...c.yaml: steps: 2.5 (a float) is not an int
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import sys
import types
import typing
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Literal, Union

import yaml
from transformers import HfArgumentParser, TrainingArguments

from hf_lmobj.objectives import DEPRECATED_NAMES

__all__ = [
    "renamed_folders",
    "shipped_configs",
    "resolve_config",
    "config_sections",
    "load_yaml_config",
    "check_config_values",
    "parse_args_with_config",
    "cpu_aware_argv",
]

CONFIG_HELP = (
    "YAML file of defaults (any field below, and any TrainingArguments field, flat or in sections; base: another "
    "config it overrides), or the name of a shipped config such as causal/demo; flags given on the command line "
    "win over the file"
)

#: The section of ``TrainingArguments``, which cannot carry a ``SECTION`` attribute of its own here.
TRAINING_SECTION = "training"
#: The top-level key naming the config a file overrides.
BASE_KEY = "base"

#: Deprecations a recipe's user must see (a renamed config or objective name), shown unless -W options say otherwise.
USER_DEPRECATIONS = r"--\S+.* is now |objective '.*' is deprecated"


def _configs_root() -> Path:
    """``configs/`` beside the recipes: ``recipes/configs`` in a clone, ``hf_lmobj/recipes/configs`` installed."""
    return Path(__file__).resolve().parent.parent / "configs"


def shipped_configs() -> list[str]:
    """Names of the configs shipped with the recipes, e.g. ``['causal/demo', 'masked/bert_tiny', ...]``."""
    root = _configs_root()
    return sorted(str(p.relative_to(root).with_suffix("")) for p in root.glob("*/*.yaml"))


def renamed_folders() -> dict[str, str]:
    """Shipped config folders renamed after their objective word: the first release's name -> today's
    (``clm`` -> ``causal``, ``mlm`` -> ``masked``), read from the registry's old names and the shipped tree."""
    return {old: new for old, new in DEPRECATED_NAMES.items() if (_configs_root() / new).is_dir()}


def resolve_config(name: str | Path) -> Path:
    """A path to an existing file, else a shipped config name (``causal/demo`` or ``causal/demo.yaml``).

    A name or a path through a renamed folder (:func:`renamed_folders`: ``clm/demo``,
    ``recipes/configs/mlm/bert_tiny.yaml``) resolves to its new home with a ``DeprecationWarning``
    naming the new one.

    Raises:
        ValueError: neither a file nor a shipped config; the message lists the shipped names.
    """
    path = Path(name)
    if path.is_file():
        return path
    relative = path if path.suffix == ".yaml" else path.with_suffix(".yaml")
    if (_configs_root() / relative).is_file():
        return _configs_root() / relative
    moved = _through_renamed_folder(path)
    if moved is not None:
        warnings.warn(
            f"--config {name} is now {moved} (the shipped config folders are named by objective: "
            f"{', '.join(f'{old}/ -> {new}/' for old, new in renamed_folders().items())})",
            DeprecationWarning,
            stacklevel=2,
        )
        return resolve_config(moved)
    raise ValueError(f"--config {name}: no such file, nor a shipped config; shipped: {', '.join(shipped_configs())}")


def _through_renamed_folder(path: Path) -> str | None:
    """``path`` with its renamed folder (the last part that is one) renamed, when that names a config."""
    renamed = renamed_folders()
    for index in reversed(range(len(path.parts) - 1)):
        if path.parts[index] in renamed:
            moved = Path(*path.parts[:index], renamed[path.parts[index]], *path.parts[index + 1 :])
            with_suffix = moved if moved.suffix == ".yaml" else moved.with_suffix(".yaml")
            if moved.is_file() or (_configs_root() / with_suffix).is_file():
                return moved.as_posix()
    return None


def config_sections(dataclass_types: Sequence[type]) -> dict[str, type]:
    """Section name -> the dataclass whose fields it holds: each class's ``SECTION`` attribute
    (``TrainingArguments``: ``training``); a class without one has no section.

    Raises:
        ValueError: two of the classes claim one section.
    """
    sections: dict[str, type] = {}
    for cls in dataclass_types:
        name = getattr(cls, "SECTION", None)
        if name is None and isinstance(cls, type) and issubclass(cls, TrainingArguments):
            name = TRAINING_SECTION
        if name is None:
            continue
        if name in sections:
            raise ValueError(f"{sections[name].__name__} and {cls.__name__} both claim the config section {name!r}")
        sections[name] = cls
    return sections


class _UniqueKeyLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses a key given twice in one mapping (PyYAML keeps the last silently)."""


def _construct_unique_mapping(loader: _UniqueKeyLoader, node: yaml.MappingNode, deep: bool = False) -> dict:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=deep)
        if isinstance(key, typing.Hashable) and key in seen:
            raise ValueError(
                f"key {key!r} is given twice (lines {seen[key] + 1} and {key_node.start_mark.line + 1}); keep one"
            )
        if isinstance(key, typing.Hashable):
            seen[key] = key_node.start_mark.line
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)


def load_yaml_config(path: str | Path, dataclass_types: Sequence[type] = ()) -> dict[str, Any]:
    """Read a YAML config (a path or a shipped config name) into one flat mapping of field name -> value.

    A top-level ``base: NAME`` names a config this file overrides, resolved as ``--config`` is (a relative
    path against this file's folder first); bases chain, a cycle is refused. A top-level key naming a
    section of ``dataclass_types`` (:func:`config_sections`) whose value is a mapping holds that class's
    fields, each by its name or without the section's prefix (``fim: {rate: 0.5}`` is ``fim_rate``).
    The base's keys, flattened, give way to this file's, flattened.

    Raises:
        ValueError: a non-mapping top level, a key given twice (in one mapping, or after flattening: a
            field in a section and flat, or by both of its names), a key that is not a string, a key in
            a section that is not one of its fields (the message lists them), a missing base, a cycle of
            bases, or a file that is not YAML.
    """
    return _load(path, _Schema(config_sections(dataclass_types), renamed_fields(dataclass_types)), ())


def renamed_fields(dataclass_types: Sequence[type]) -> dict[str, str]:
    """Old field name -> its new name, from each class's ``RENAMED_FIELDS``: the old name still works, with a
    DeprecationWarning, for one release (in a config file and on the command line)."""
    return {old: new for cls in dataclass_types for old, new in getattr(cls, "RENAMED_FIELDS", {}).items()}


def _warn_renamed(old: str, new: str, where: str) -> None:
    warnings.warn(
        f"{where}{old} is now {new} (the old name goes in the next release)", DeprecationWarning, stacklevel=4
    )


@dataclasses.dataclass(frozen=True)
class _Schema:
    sections: dict[str, type]
    renames: dict[str, str]


def _load(name: str | Path, schema: _Schema, chain: tuple[Path, ...], beside: Path | None = None) -> dict:
    path = _resolve_base(name, beside, chain[-1]) if beside is not None else resolve_config(name)
    if path.resolve() in chain:
        cycle = " -> ".join(str(p) for p in (*chain[chain.index(path.resolve()) :], path.resolve()))
        raise ValueError(f"--config {chain[0]}: its bases form a cycle: {cycle}")
    data = _read_mapping(path)
    base = data.pop(BASE_KEY, None)
    own = _flatten(data, schema, path)
    if base is None:
        return own
    if not isinstance(base, str) or not base:
        raise ValueError(f"--config {path}: base must be a config name or path, got {base!r}")
    return {**_load(base, schema, (*chain, path.resolve()), beside=path.parent), **own}


def _resolve_base(name: str, folder: Path, including: Path) -> Path:
    """``base: name``: a path relative to the including file's folder first, else as ``--config`` resolves it."""
    near = folder / name
    if near.is_file():
        return near
    try:
        return resolve_config(name)
    except ValueError as error:
        raise ValueError(f"--config {including}: base: {error}") from None


def _read_mapping(path: Path) -> dict[str, Any]:
    try:
        data = yaml.load(path.read_text(), Loader=_UniqueKeyLoader) or {}
    except (yaml.YAMLError, ValueError) as error:
        raise ValueError(f"--config {path}: {error}") from None
    if not isinstance(data, dict):
        raise ValueError(f"--config {path}: the top level must be a mapping of argument: value")
    odd = [key for key in data if not isinstance(key, str)]
    if odd:
        raise ValueError(f"--config {path}: keys must be field names (strings), got {odd!r}")
    return data


def _flatten(data: dict[str, Any], schema: _Schema, path: Path) -> dict[str, Any]:
    """One file's keys as field name -> value: each section's keys lifted out, under their field names."""
    flat: dict[str, Any] = {}
    given: dict[str, str] = {}  # field name -> how the file spelled it (``fim.rate``, ``max_steps``)
    sections = schema.sections
    for key, value in data.items():
        if key in sections and isinstance(value, dict):
            renamed = {inner: schema.renames.get(inner, inner) for inner in value}
            entries = [
                (_section_field(key, sections[key], renamed[inner], path), f"{key}.{inner}", v)
                for inner, v in value.items()
            ]
        else:
            entries = [(schema.renames.get(key, key), key, value)]
        for field_name, spelled, v in entries:
            if spelled.rpartition(".")[2] in schema.renames:
                _warn_renamed(spelled.rpartition(".")[2], field_name, f"--config {path}: ")
            if field_name in flat:
                raise ValueError(
                    f"--config {path}: {field_name} is given twice ({given[field_name]} and {spelled}); keep one"
                )
            flat[field_name], given[field_name] = v, spelled
    return flat


def _section_field(section: str, cls: type, key: Any, path: Path) -> str:
    """The field of ``cls`` that ``key`` names inside ``section``: its own name, or the name less ``<section>_``."""
    names = [f.name for f in dataclasses.fields(cls)]
    if isinstance(key, str) and key in names:
        return key
    if isinstance(key, str) and f"{section}_{key}" in names:
        return f"{section}_{key}"
    raise ValueError(
        f"--config {path}: {section}: {key!r} is not a field of the {section} section ({cls.__name__}); "
        f"its fields: {names}"
    )


def _parser(dataclass_types: Sequence[type], description: str | None = None) -> HfArgumentParser:
    parser = HfArgumentParser(
        list(dataclass_types), description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    nullable = _optional_number_fields(dataclass_types)
    for action in parser._actions:
        if action.dest in nullable and action.type in (int, float):
            action.type = _null_or(action.type)
    return parser


def _optional_number_fields(dataclass_types: Sequence[type]) -> set[str]:
    """Fields typed ``int | None`` / ``float | None``: ``--name null`` sets them to None, as ``name: null`` in YAML."""
    names = set()
    for cls in dataclass_types:
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            args = typing.get_args(hints.get(f.name))
            if type(None) in args and {int, float} & set(args):
                names.add(f.name)
    return names


def _null_or(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        return None if text == "null" else convert(text)

    parse.__name__ = convert.__name__  # argparse names the type in its error messages
    return parse


def _print_help(dataclass_types: Sequence[type], description: str | None, everything: bool) -> None:
    """``--help``: the recipe's docstring, ``--config`` and the recipe's own fields; ``--help_all`` adds Trainer's."""
    own = [t for t in dataclass_types if everything or not issubclass(t, TrainingArguments)]
    parser = _parser(own, description)
    parser.add_argument("--config", default=None, metavar="FILE_OR_NAME", help=CONFIG_HELP)
    if not everything and len(own) < len(dataclass_types):
        parser.epilog = "Every transformers.TrainingArguments field is accepted too (--help_all lists them)."
    parser.print_help()


def parse_args_with_config(
    dataclass_types: Sequence[type], args: Sequence[str] | None = None, description: str | None = None
) -> tuple[Any, ...]:
    """Parse ``args`` (default: ``sys.argv[1:]``) into instances of ``dataclass_types``.

    ``--config FILE_OR_NAME`` supplies defaults from YAML; any other flag overrides them. ``--help``
    prints ``description`` (the recipe's docstring), ``--config`` and the recipe's own fields and exits.
    """
    args = list(sys.argv[1:] if args is None else args)
    with warnings.catch_warnings():  # this call's scope only: a renamed name is the user's to see
        if not sys.warnoptions:
            warnings.filterwarnings("default", message=USER_DEPRECATIONS, category=DeprecationWarning)
        return _parse(dataclass_types, _renamed_flags(args, renamed_fields(dataclass_types)), description)


def _renamed_flags(args: list[str], renames: dict[str, str]) -> list[str]:
    """``--old value`` / ``--old=value`` as ``--new ...`` for each renamed field, with a DeprecationWarning."""
    out = []
    for arg in args:
        flag, equals, value = arg.partition("=")
        old = flag[2:] if flag.startswith("--") else None
        if old in renames:
            _warn_renamed(flag, f"--{renames[old]}", "")
            arg = f"--{renames[old]}{equals}{value}"
        out.append(arg)
    return out


def _parse(dataclass_types: Sequence[type], args: list[str], description: str | None) -> tuple[Any, ...]:
    if {"-h", "--help", "--help_all"} & set(args):
        _print_help(dataclass_types, description, everything="--help_all" in args)
        raise SystemExit(0)
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config", default=None)
    known, rest = pre.parse_known_args(args)
    parser = _parser(dataclass_types)
    if known.config is not None:
        config = load_yaml_config(known.config, dataclass_types)
        fields = {action.dest for action in parser._actions} - {"help"}
        unknown = sorted(set(config) - fields)
        if unknown:
            sections = sorted(config_sections(dataclass_types))
            raise ValueError(
                f"--config {known.config}: unknown keys {unknown}; each key must be a field of "
                f"{[t.__name__ for t in dataclass_types]}" + (f" or a section: {sections}" if sections else "")
            )
        parser.set_defaults(**check_config_values(config, dataclass_types, parser, known.config))
        for action in parser._actions:  # a required field given by the file is no longer required on the command line
            if action.dest in config:
                action.required = False
    return tuple(parser.parse_args_into_dataclasses(args=rest, look_for_args_file=False))


def check_config_values(
    config: dict[str, Any], dataclass_types: Sequence[type], parser: argparse.ArgumentParser, source: str
) -> dict[str, Any]:
    """``config`` (YAML key -> value) checked against each key's field type; the values in their normal form.

    A string goes through the flag's argparse conversion and choices, exactly as on the command line;
    any other value must be of the field's type (an int passes for a float and becomes one).
    ``source`` (the config's name) opens every error, which names the key, the value and the type.

    Raises:
        TypeError: a value of another type (``max_steps: 2.5``, ``seed: true``, ``learning_rate: [0.1]``).
        ValueError: a string the flag's conversion refuses, or a value outside the flag's choices.
    """
    hints = _field_hints(dataclass_types)
    actions = {}
    for action in parser._actions:
        actions.setdefault(action.dest, action)  # the flag itself, not a bool's --no_<name> twin
    return {key: _check_value(value, key, hints.get(key, Any), actions[key], source) for key, value in config.items()}


def _field_hints(dataclass_types: Sequence[type]) -> dict[str, Any]:
    """Field name -> the types a YAML value may have (the annotation, or ``YAML_TYPES``'s wider one)."""
    hints: dict[str, Any] = {}
    for cls in dataclass_types:
        annotations = typing.get_type_hints(cls)
        wider = getattr(cls, "YAML_TYPES", {})
        for f in dataclasses.fields(cls):
            hints[f.name] = wider.get(f.name, annotations.get(f.name, Any))
            if f.default is None and not _admits(None, hints[f.name]):
                hints[f.name] = Union[hints[f.name], None]  # noqa: UP007  (a None default may be given back)
    return hints


def _check_value(value: Any, key: str, hint: Any, action: argparse.Action, source: str) -> Any:
    where = f"--config {source}: {key}:"
    if isinstance(value, str) and not _admits_list_only(hint):
        if action.type not in (None, str) and action.nargs not in ("+", "*"):  # as argparse converts the flag
            try:
                value = action.type(value)
            except (TypeError, ValueError, argparse.ArgumentTypeError):
                raise ValueError(f"{where} {value!r} is not {_describe(hint)}") from None
    elif not _admits(value, hint):
        raise TypeError(f"{where} {value!r} ({_kind(value)}) is not {_describe(hint)}{_yaml_hint(value, hint)}")
    elif _admits(value, int) and not _admits(value, hint, without=float):  # an int given for a float
        value = float(value)
    if action.choices is not None and value is not None and not isinstance(value, list) and value not in action.choices:
        raise ValueError(f"{where} {value!r} is not one of {list(action.choices)}")
    return value


def _union_args(hint: Any) -> tuple | None:
    origin = typing.get_origin(hint)
    return typing.get_args(hint) if origin is Union or origin is types.UnionType else None


def _admits(value: Any, hint: Any, without: Any = None) -> bool:
    """Whether ``value`` (as YAML gives it) is of type ``hint``; ``without``: that type (or union member) does not count."""
    if without is not None and hint is without:
        return False
    members = _union_args(hint)
    if members is not None:
        return any(_admits(value, member, without) for member in members)
    if hint is Any or hint is object:
        return True
    if hint is type(None) or hint is None:
        return value is None
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        return any(value == choice and type(value) is type(choice) for choice in args)
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str:
        return isinstance(value, str)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return isinstance(value, hint) or any(value == member.value for member in hint)
    if hint is list or origin is list:
        return isinstance(value, list) and (not args or all(_admits(item, args[0]) for item in value))
    if hint is dict or origin is dict:
        return isinstance(value, dict) and (
            not args or all(_admits(k, args[0]) and _admits(v, args[1]) for k, v in value.items())
        )
    return True  # a type YAML cannot spell (e.g. ParallelismConfig): left to the dataclass


def _admits_list_only(hint: Any) -> bool:
    """A list field that takes no plain string (``ngram_orders: list[int]``)."""
    return _admits([], hint) and not _admits("", hint)


def _describe(hint: Any) -> str:
    """``int``, ``a float``, ``an int or null``, ``a list of int``, ``one of ['no', 'steps']``."""
    members = _union_args(hint)
    if members is not None:
        if any(isinstance(m, type) and issubclass(m, enum.Enum) for m in members):
            members = tuple(m for m in members if m is not str)  # Enum | str: the string must be a choice anyway
        names = [_describe(m) for m in members if m is not type(None)]
        return " or ".join(dict.fromkeys(names)) + (" or null" if type(None) in members else "")
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin is Literal:
        return f"one of {list(args)}"
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return f"one of {[member.value for member in hint]}"
    if hint is list or origin is list:
        return f"a list of {_describe(args[0]).removeprefix('an ').removeprefix('a ')}" if args else "a list"
    if hint is dict or origin is dict:
        return "a mapping"
    names = {int: "an int", float: "a float (or an int)", bool: "true or false", str: "a string"}
    return names.get(hint, getattr(hint, "__name__", str(hint)))


def _kind(value: Any) -> str:
    names = {bool: "a bool", int: "an int", float: "a float", str: "a string", list: "a list", dict: "a mapping"}
    return names.get(type(value), type(value).__name__)


def _yaml_hint(value: Any, hint: Any) -> str:
    if isinstance(value, bool) and _admits("", hint):
        return "; YAML reads unquoted yes / no / on / off / true / false as a bool: quote it"
    if isinstance(value, (int, float)) and not isinstance(value, bool) and _admits("", hint):
        return f"; quote it ('{value}') if the string is meant"
    if not isinstance(value, list) and _admits([], hint):
        return f"; write a YAML list, e.g. [{value}]"
    return ""


def cpu_aware_argv(argv: Sequence[str] | None = None) -> list[str]:
    """``argv`` (default ``sys.argv[1:]``) plus ``--use_cpu true`` when no CUDA device is visible.

    accelerate's multi-process launcher starts CPU workers that join one gloo group only when
    ``TrainingArguments.use_cpu`` is set; without it each process would train on its own.
    """
    import torch

    argv = list(sys.argv[1:] if argv is None else argv)
    return argv if torch.cuda.is_available() else [*argv, "--use_cpu", "true"]
