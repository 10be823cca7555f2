"""Config values checked as the command line checks them: each YAML value against its field's type.

A YAML string goes through the flag's own argparse conversion and choices; any other value must
already be of the field's type (an int passes for a float). Errors name the key, the value and the type.
A list-of-numbers field takes the word ``none`` (:data:`NO_ITEMS`) for the empty list, as its flag does.

Example:
    >>> _describe(int | None), _admits(2.5, int), _admits(2, float)
    ('an int or null', False, True)
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import enum
import types
import typing
from collections.abc import Sequence
from typing import Any, Literal, Union

import yaml

#: The word that gives a list-of-numbers field no items (``--ngram_orders none``, ``ngram_orders: none``).
NO_ITEMS = "none"


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
    if value == NO_ITEMS and is_number_list(hint):
        return []
    if isinstance(value, str) and not _admits_list_only(hint):
        if action.type not in (None, str) and action.nargs not in ("+", "*"):  # as argparse converts the flag
            try:
                value = action.type(value)
            except (TypeError, ValueError, argparse.ArgumentTypeError):
                raise ValueError(f"{where} {value!r} is not {_describe(hint)}") from None
    elif not _admits(value, hint):
        shown = "null" if value is None else f"{value!r} ({_kind(value)})"
        raise TypeError(f"{where} {shown} is not {_describe(hint)}{_yaml_hint(value, hint)}")
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


def is_number_list(hint: Any) -> bool:
    """Whether ``hint`` is a list of ints or floats (``| None`` allowed): its field takes ``none`` for ``[]``.

    >>> is_number_list(list[int]), is_number_list(list[float] | None), is_number_list(list[str]), is_number_list(int)
    (True, True, False, False)
    """
    return _list_item_type(hint) in (int, float) and not _admits("", hint)


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
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _yaml_hint(value: Any, hint: Any) -> str:
    """How to write ``value`` so that YAML reads it as ``hint``: quote a string, write a list as a YAML list."""
    if value is None:
        none = f", [] or {NO_ITEMS} for no items" if is_number_list(hint) and not _admits(None, hint) else ""
        return f" (YAML reads an empty value or ~ as null); give a value{none}, or drop the key to keep the default"
    if isinstance(value, bool) and _admits("", hint):
        return "; YAML reads unquoted yes / no / on / off / true / false as a bool: quote it"
    if isinstance(value, (int, float, datetime.date)) and not isinstance(value, bool) and _admits("", hint):
        return f"; quote it ('{value}') if the string is meant"
    if not isinstance(value, list) and _admits([], hint):
        return f"; write a YAML list, e.g. {_as_yaml_list(value, hint)}"
    return ""


def _as_yaml_list(value: Any, hint: Any) -> str:
    """``value`` as the YAML flow list that a list field ``hint`` would take: ``'3 4'`` -> ``[3, 4]`` (never
    ``[3 4]``, which YAML reads as the one string ``'3 4'``).

    >>> _as_yaml_list("3 4", list[int]), _as_yaml_list("a,b", list[str] | None), _as_yaml_list(3, list[int])
    ('[3, 4]', '[a, b]', '[3]')
    """
    items = str(value).replace(",", " ").split() if isinstance(value, str) else [value]
    item_type = _list_item_type(hint)
    converted = []
    for item in items:
        if isinstance(item, str) and item_type in (int, float):
            try:
                item = item_type(item)
            except ValueError:
                pass
        converted.append(item)
    return yaml.safe_dump(converted, default_flow_style=True, width=1000).strip()


def _list_item_type(hint: Any) -> Any:
    """The item type of the list member of ``hint`` (``list[int] | None`` -> ``int``), ``Any`` when unstated."""
    for member in _union_args(hint) or (hint,):
        if member is list or typing.get_origin(member) is list:
            return (typing.get_args(member) or (Any,))[0]
    return Any
