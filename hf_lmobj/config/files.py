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
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from transformers import TrainingArguments

from hf_lmobj.config.names import resolve_config, suggest
from hf_lmobj.config.values import _kind

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
        if key_node.tag == "tag:yaml.org,2002:merge":  # ``<<: *anchor``: its keys give way to the mapping's own
            continue
        key = loader.construct_object(key_node, deep=deep)
        if isinstance(key, typing.Hashable) and key in seen:
            raise ValueError(
                f"key {key!r} is given twice (lines {seen[key] + 1} and {key_node.start_mark.line + 1}); keep one "
                "(YAML would keep the last silently)"
            )
        if isinstance(key, typing.Hashable):
            seen[key] = key_node.start_mark.line
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


_UniqueKeyLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_unique_mapping)


def load_yaml_config(path: str | Path, dataclass_types: Sequence[type] = ()) -> dict[str, Any]:
    """Read a YAML config (a path or a shipped config name) into one flat mapping of field name -> value.

    A top-level ``base: NAME`` names a config this file overrides: a path relative to this file's folder
    (never the working directory's), else a shipped config name; bases chain. A top-level key naming a
    section of ``dataclass_types`` (:func:`config_sections`) whose value is a mapping holds that class's
    fields, each by its name or without the section's prefix (``fim: {rate: 0.5}`` is ``fim_rate``); a
    section left empty (``training:`` with every key commented out, YAML's ``null``) sets nothing.
    The base's keys, flattened, give way to this file's, flattened.

    Raises:
        ValueError: an unreadable, empty, non-UTF-8 or non-YAML file (its line and column named), a
            non-mapping top level, a key given twice (in one mapping, or after flattening: a field in a
            section and flat, or by both of its names), a key that is not a string, a section that is not
            a mapping, a key in a section that is not one of its fields (the message names the section it
            belongs to, or the closest fields), a missing or empty base, a base naming its own file, a
            cycle of bases.
    """
    fields = frozenset(f.name for cls in dataclass_types for f in dataclasses.fields(cls))
    return _load(path, _Schema(config_sections(dataclass_types), fields), ())


@dataclasses.dataclass(frozen=True)
class _Schema:
    sections: dict[str, type]
    fields: frozenset[str] = frozenset()  # every field name (a section's name may be a field's too: optimizer)


def _load(name: str | Path, schema: _Schema, chain: tuple[Path, ...], beside: Path | None = None) -> dict:
    path = _resolve_base(name, beside, chain[-1]) if beside is not None else resolve_config(name)
    if path.resolve() in chain:
        cycle = " -> ".join(str(p) for p in (*chain[chain.index(path.resolve()) :], path.resolve()))
        itself = f" ({chain[-1].name} names itself as its base)" if path.resolve() == chain[-1] else ""
        raise ValueError(f"--config {chain[0]}: its bases form a cycle: {cycle}{itself}; break it by removing one base")
    data = _read_mapping(path)
    has_base, base = BASE_KEY in data, data.pop(BASE_KEY, None)
    own = _flatten(data, schema, path)
    if not has_base:
        return own
    if not isinstance(base, str) or not base.strip():
        raise ValueError(
            f"--config {path}: base must be a config name or path, got {base!r}; name one (such as causal/demo or "
            "other.yaml, beside this file), or drop the base key"
        )
    return {**_load(base, schema, (*chain, path.resolve()), beside=path.parent), **own}


def _resolve_base(name: str, folder: Path, including: Path) -> Path:
    """``base: name``: a path relative to the including file's folder, else a shipped config name."""
    try:
        return resolve_config(name, beside=folder)
    except ValueError as error:
        raise ValueError(f"--config {including}: base: {error}") from None


def _read_mapping(path: Path) -> dict[str, Any]:
    """The YAML mapping in ``path``; an unreadable, empty, non-YAML or non-mapping file is refused, naming it."""
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"--config {path}: not UTF-8 text (byte {error.start}); save it as UTF-8 YAML") from None
    except OSError as error:
        raise ValueError(f"--config {path}: cannot be read ({error.strerror or error})") from None
    try:
        data = yaml.load(text, Loader=_UniqueKeyLoader)
    except yaml.MarkedYAMLError as error:
        raise ValueError(f"--config {_yaml_error(path, error)}") from None
    except yaml.reader.ReaderError as error:
        raise ValueError(
            f"--config {path}: character U+{error.character:04X} at position {error.position} is not allowed in "
            "YAML; is it a text file?"
        ) from None
    except (yaml.YAMLError, ValueError) as error:
        raise ValueError(f"--config {path}: {error}") from None
    if data is None:
        raise ValueError(
            f"--config {path}: the file is empty (or all comments): it sets nothing; write its keys "
            "(field: value), or leave out --config to run on the defaults"
        )
    if not isinstance(data, dict):
        raise ValueError(
            f"--config {path}: the top level must be a mapping of argument: value (such as max_steps: 10), "
            f"got {_kind(data)}: {data!r:.60}"
        )
    odd = [key for key in data if not isinstance(key, str)]
    if odd:
        raise ValueError(f"--config {path}: keys must be field names (strings), got {odd!r}; quote them or rename them")
    return data


def _yaml_error(path: Path, error: yaml.MarkedYAMLError) -> str:
    """``path: line L, column C: not valid YAML: what YAML found`` (1-based), with the fix for a tab."""
    mark = error.problem_mark or error.context_mark
    where = f"{path}: line {mark.line + 1}, column {mark.column + 1}" if mark is not None else str(path)
    found = " ".join(part for part in (error.context, error.problem) if part)
    fix = "; YAML indents with spaces, never tabs" if "'\\t'" in found else ""
    return f"{where}: not valid YAML: {found}{fix}"


def _flatten(data: dict[str, Any], schema: _Schema, path: Path) -> dict[str, Any]:
    """One file's keys as field name -> value: each section's keys lifted out, under their field names.

    A section left empty (every key commented out, which YAML reads as ``null``) sets nothing.
    """
    flat: dict[str, Any] = {}
    given: dict[str, str] = {}  # field name -> how the file spelled it (``fim.rate``, ``max_steps``)
    sections = schema.sections
    for key, value in data.items():
        if key in sections and (isinstance(value, dict) or value is None):
            value = value or {}
            entries = [(_section_field(key, inner, schema, path), f"{key}.{inner}", v) for inner, v in value.items()]
        elif key in sections and key not in schema.fields:
            raise ValueError(
                f"--config {path}: {key} is a section ({sections[key].__name__}): its value must be a mapping of "
                f"its fields, such as {key}: {{{_field_names(sections[key])[0]}: ...}}; got {value!r:.60}"
            )
        else:
            entries = [(key, key, value)]
        for field_name, spelled, v in entries:
            if field_name in flat:
                raise ValueError(
                    f"--config {path}: {field_name} is given twice ({given[field_name]} and {spelled}); keep one"
                )
            flat[field_name], given[field_name] = v, spelled
    return flat


def _field_names(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


def _section_field(section: str, key: Any, schema: _Schema, path: Path) -> str:
    """The field that ``key`` names inside ``section``: its own name, or the name less ``<section>_``.

    Raises:
        ValueError: not a field of the section; the message names the section it belongs to, or the closest fields.
    """
    cls = schema.sections[section]
    names = _field_names(cls)
    if isinstance(key, str) and key in names:
        return key
    if isinstance(key, str) and f"{section}_{key}" in names:
        return f"{section}_{key}"
    where = f"--config {path}: {section}: {key!r} is not a field of the {section} section ({cls.__name__})"
    home = [other for other, owner in schema.sections.items() if other != section and key in _field_names(owner)]
    if home:
        raise ValueError(
            f"{where}; it belongs in the {home[0]} section ({home[0]}: {{{key}: ...}}) or at the top level"
        )
    short = [name.removeprefix(f"{section}_") for name in names]
    raise ValueError(f"{where}{suggest(str(key), names + short)}; its fields: {names}")
