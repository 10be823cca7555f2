"""``--config NAME`` plus command-line overrides for argument dataclasses (TRL / torchtune style).

``NAME`` is a YAML file or the name of a shipped config (``clm/demo`` is
``hf_lmobj/recipes/configs/clm/demo.yaml``, found in a clone and in an installed wheel alike).
Every key of the YAML file must be a field of one of the dataclasses (``TrainingArguments``
included); a command-line flag wins over the file. Unknown keys are an error, never ignored. A
required field may come from the file or the command line.

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
    >>> resolve_config("clm/demo").name
    'demo.yaml'
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib.resources
import sys
import typing
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml
from transformers import HfArgumentParser, TrainingArguments

__all__ = ["shipped_configs", "resolve_config", "load_yaml_config", "parse_args_with_config", "cpu_aware_argv"]

CONFIG_HELP = (
    "YAML file of defaults (any field below, and any TrainingArguments field), or the name of a shipped "
    "config such as clm/demo; flags given on the command line win over the file"
)


def _configs_root() -> Path:
    return Path(str(importlib.resources.files("hf_lmobj.recipes") / "configs"))


def shipped_configs() -> list[str]:
    """Names of the configs shipped with the recipes, e.g. ``['clm/demo', 'mlm/bert_tiny', ...]``."""
    root = _configs_root()
    return sorted(str(p.relative_to(root).with_suffix("")) for p in root.glob("*/*.yaml"))


def resolve_config(name: str | Path) -> Path:
    """A path to an existing file, else a shipped config name (``clm/demo`` or ``clm/demo.yaml``).

    Raises:
        ValueError: neither a file nor a shipped config; the message lists the shipped names.
    """
    path = Path(name)
    if path.is_file():
        return path
    shipped = _configs_root() / (path if path.suffix == ".yaml" else path.with_suffix(".yaml"))
    if shipped.is_file():
        return shipped
    raise ValueError(f"--config {name}: no such file, nor a shipped config; shipped: {', '.join(shipped_configs())}")


def load_yaml_config(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping (a path or a shipped config name); a non-mapping top level is a clear error."""
    path = resolve_config(path)
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"--config {path}: the top level must be a mapping of argument: value")
    return data


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
    if {"-h", "--help", "--help_all"} & set(args):
        _print_help(dataclass_types, description, everything="--help_all" in args)
        raise SystemExit(0)
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config", default=None)
    known, rest = pre.parse_known_args(args)
    parser = _parser(dataclass_types)
    if known.config is not None:
        config = load_yaml_config(known.config)
        fields = {action.dest for action in parser._actions} - {"help"}
        unknown = sorted(set(config) - fields)
        if unknown:
            raise ValueError(
                f"--config {known.config}: unknown keys {unknown}; each key must be a field of "
                f"{[t.__name__ for t in dataclass_types]}"
            )
        parser.set_defaults(**config)
        for action in parser._actions:  # a required field given by the file is no longer required on the command line
            if action.dest in config:
                action.required = False
    return tuple(parser.parse_args_into_dataclasses(args=rest, look_for_args_file=False))


def cpu_aware_argv(argv: Sequence[str] | None = None) -> list[str]:
    """``argv`` (default ``sys.argv[1:]``) plus ``--use_cpu true`` when no CUDA device is visible.

    accelerate's multi-process launcher starts CPU workers that join one gloo group only when
    ``TrainingArguments.use_cpu`` is set; without it each process would train on its own.
    """
    import torch

    argv = list(sys.argv[1:] if argv is None else argv)
    return argv if torch.cuda.is_available() else [*argv, "--use_cpu", "true"]
