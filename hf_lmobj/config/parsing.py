"""``--config NAME`` plus command-line overrides for argument dataclasses (TRL / torchtune style).

``NAME`` is a YAML file or the name of a shipped config (``causal/demo`` is
``hf_lmobj/recipes/configs/causal/demo.yaml``, found in a clone and in an installed wheel alike).
Every key of the YAML file must be a field of one of the dataclasses (``TrainingArguments``
included); a command-line flag wins over the file. Unknown keys and flags (named with the closest
known ones), keys given twice, and ``--config`` given twice (one file combines with another by naming
it as its ``base:``) are an error, never ignored. A required field may come from the file or the
command line.

Files, their ``base:`` chain and sections are read by :mod:`.files`; each YAML value is
checked against its field's type as the command line checks it, by :mod:`.values`. Order of
precedence: the base, then the file, then the command line.

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
    >>> _ = open(path, "w").write("steps: 2.5\\n")
    >>> parse_args_with_config((Args,), ["--config", path])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    TypeError: --config ...c.yaml: steps: 2.5 (a float) is not an int
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import typing
from collections.abc import Callable, Sequence
from typing import Any

from transformers import HfArgumentParser, TrainingArguments

from hf_lmobj.config.files import BASE_KEY, config_sections, load_yaml_config
from hf_lmobj.config.names import suggest
from hf_lmobj.config.values import NO_ITEMS, check_config_values, is_number_list

CONFIG_HELP = (
    "YAML file of defaults (any field below, and any TrainingArguments field, flat or in sections; base: another "
    "config it overrides), or the name of a shipped config such as causal/demo; given once (a file combines with "
    "another through base:); flags given on the command line win over the file"
)


def _parser(dataclass_types: Sequence[type], description: str | None = None) -> HfArgumentParser:
    parser = HfArgumentParser(
        list(dataclass_types), description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    nullable = _optional_number_fields(dataclass_types)
    number_lists = _number_list_fields(dataclass_types)
    for action in parser._actions:
        if action.dest in nullable and action.type in (int, float):
            action.type = _null_or(action.type)
        elif action.dest in number_lists and action.nargs in ("+", "*") and type(action) is argparse._StoreAction:
            action.type = _none_word_or(action.type)
            action.__class__ = _NumberListAction  # ``--name none``: the empty list
    return parser


def _number_list_fields(dataclass_types: Sequence[type]) -> set[str]:
    """Fields typed ``list[int]`` / ``list[float]`` (or ``| None``): ``--name none`` sets them to ``[]``."""
    return {
        f.name
        for cls in dataclass_types
        for f in dataclasses.fields(cls)
        if is_number_list(typing.get_type_hints(cls).get(f.name))
    }


class _NoneWord:
    """What the item conversion of a number-list flag gives for the word ``none`` (not an item)."""


def _none_word_or(convert: Callable[[str], Any]) -> Callable[[str], Any]:
    def parse(text: str) -> Any:
        return _NoneWord if text == NO_ITEMS else convert(text)

    parse.__name__ = convert.__name__  # argparse names the type in its error messages
    return parse


class _NumberListAction(argparse._StoreAction):
    """Stores a number-list flag's items; the word ``none`` alone stores ``[]`` (given beside items: an error)."""

    def __call__(self, parser, namespace, values, option_string=None) -> None:  # noqa: ANN001  (argparse's own)
        if any(value is _NoneWord for value in values):
            if len(values) > 1:
                raise argparse.ArgumentError(
                    self, f"{NO_ITEMS!r} means no items and stands alone; give {NO_ITEMS} or the items, not both"
                )
            values = []
        setattr(namespace, self.dest, values)


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
    """``--help``: ``description``, ``--config`` and the script's own fields; ``--help_all`` adds Trainer's."""
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

    ``--config FILE_OR_NAME`` (once) supplies defaults from YAML; any other flag overrides them. ``--help``
    prints ``description`` (e.g. the script's docstring), ``--config`` and the fields of ``dataclass_types`` other
    than ``TrainingArguments`` and exits (``--help_all``: every field).

    Raises:
        ValueError: ``--config`` given twice or without a value, a config file refused by
            :func:`~hf_lmobj.config.load_yaml_config`, an unknown key in it, a command-line argument no field
            takes (each named with the closest known key or flag), or a value its flag refuses.
        TypeError: a YAML value of another type than its field's (:func:`~hf_lmobj.config.check_config_values`).
    """
    args = list(sys.argv[1:] if args is None else args)
    return _parse(dataclass_types, args, description)


def _parse(dataclass_types: Sequence[type], args: list[str], description: str | None) -> tuple[Any, ...]:
    if {"-h", "--help", "--help_all"} & set(args):
        _print_help(dataclass_types, description, everything="--help_all" in args)
        raise SystemExit(0)
    config, rest = _config_flag(args)
    parser = _parser(dataclass_types)
    fields = {action.dest for action in parser._actions} - {"help"}
    if config is not None:
        values = load_yaml_config(config, dataclass_types)
        _check_known_keys(values, fields, dataclass_types, config)
        parser.set_defaults(**check_config_values(values, dataclass_types, parser, config))
        for action in parser._actions:  # a required field given by the file is no longer required on the command line
            if action.dest in values:
                action.required = False
    *groups, unused = parser.parse_args_into_dataclasses(
        args=rest, return_remaining_strings=True, look_for_args_file=False
    )
    if unused:
        raise ValueError(_unused_message(unused, fields, dataclass_types))
    return tuple(groups)


def _config_flag(args: list[str]) -> tuple[str | None, list[str]]:
    """The ``--config`` value (given at most once, never abbreviated) and the other arguments.

    Raises:
        ValueError: ``--config`` without a value, or given more than once (a second file would silently
            replace the first: one config names the other as its ``base:`` instead).
    """
    pre = argparse.ArgumentParser(add_help=False, allow_abbrev=False, exit_on_error=False)
    pre.add_argument("--config", action="append", default=None)
    try:
        known, rest = pre.parse_known_args(args)
    except argparse.ArgumentError as error:
        raise ValueError(
            f"--config needs a value: a YAML file or a shipped config name such as causal/demo ({error})"
        ) from None
    configs = known.config or []
    if len(configs) > 1:
        raise ValueError(
            f"--config is given {len(configs)} times ({', '.join(configs)}); give one: to combine two files, write "
            f"base: {configs[0]} in {configs[-1]} (its own keys win over its base's) and pass --config {configs[-1]}"
        )
    return (configs[0] if configs else None), rest


#: Top-level keys a user may reach for when they mean ``base:`` (another tool's word), and what to write instead.
_BASE_WORDS = ("config", "include", "includes", "extends", "inherit", "inherits", "defaults", "bases", "parent")
_OVERRIDES_WORDS = ("overrides", "override")


def _check_known_keys(values: dict[str, Any], fields: set[str], dataclass_types: Sequence[type], source: str) -> None:
    """Every key of a config is a field of ``dataclass_types``; an unknown one is named with the closest fields.

    Raises:
        ValueError: a key that is no field (the message suggests the closest field or section, or ``base:``).
    """
    unknown = sorted(set(values) - fields)
    if not unknown:
        return
    sections = sorted(config_sections(dataclass_types))
    hints = "".join(f"; {key}: {_key_hint(key, fields | set(sections))}" for key in unknown)
    raise ValueError(
        f"--config {source}: unknown keys {unknown}{hints}; each key must be a field of "
        f"{[t.__name__ for t in dataclass_types]}" + (f" or a section: {sections}" if sections else "")
    )


def _key_hint(key: str, names: set[str]) -> str:
    if key in _BASE_WORDS:
        return f"a config names the file it overrides with {BASE_KEY}: FILE_OR_NAME"
    if key in _OVERRIDES_WORDS:
        return f"a file's own keys override its {BASE_KEY}: write them at the top level or in their sections"
    return suggest(key, names).removeprefix("; ") or "no field of that name"


def _unused_message(unused: list[str], fields: set[str], dataclass_types: Sequence[type]) -> str:
    """Command-line arguments no field takes: each unknown flag named with the closest flags."""
    flags = [arg.partition("=")[0] for arg in unused if arg.startswith("-")]
    hints = "".join(
        f"; {flag}: {suggest(flag.lstrip('-'), fields | {'config'}, '--{}').removeprefix('; ') or 'no such flag'}"
        for flag in flags
    )
    return (
        f"unknown command-line arguments {unused}{hints}; each flag must be a field of "
        f"{[t.__name__ for t in dataclass_types]} or --config (--help lists them)"
    )


def cpu_aware_argv(argv: Sequence[str] | None = None) -> list[str]:
    """``argv`` (default ``sys.argv[1:]``) plus ``--use_cpu true`` when no CUDA device is visible.

    accelerate's multi-process launcher starts CPU workers that join one gloo group only when
    ``TrainingArguments.use_cpu`` is set; without it each process would train on its own.
    """
    import torch

    argv = list(sys.argv[1:] if argv is None else argv)
    return argv if torch.cuda.is_available() else [*argv, "--use_cpu", "true"]
