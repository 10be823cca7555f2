"""Config files: a YAML file (or a config name, :mod:`.names`), its ``base:`` chain and
sections, flattened.

A file may name a ``base:`` it overrides and group its keys in sections, one per argument dataclass
(its ``SECTION``); :func:`load_yaml_config` returns one flat mapping of field name -> value.

Example:
    >>> sorted(config_sections([TrainingArguments]))
    ['training']
"""

from __future__ import annotations

import dataclasses
import typing
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from transformers import TrainingArguments

from hf_lmobj.config.names import resolve_config

__all__ = [
    "TRAINING_SECTION",
    "BASE_KEY",
    "config_sections",
    "load_yaml_config",
    "renamed_fields",
    "warn_renamed",
]

#: The section of ``TrainingArguments``, which cannot carry a ``SECTION`` attribute of its own here.
TRAINING_SECTION = "training"
#: The top-level key naming the config a file overrides.
BASE_KEY = "base"


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


def warn_renamed(old: str, new: str, where: str) -> None:
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
                warn_renamed(spelled.rpartition(".")[2], field_name, f"--config {path}: ")
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
