"""Every top-level name shows a runnable example in ``help(name)``: its own docstring holds it.

The examples themselves run under ``--doctest-modules`` (``pytest hf_lmobj/...``); these cases check that each
class and function of ``hf_lmobj.__all__`` carries one in its own docstring (not only in its module's), so a new
name without an example fails here by name, and that an example is not kept twice (in the object's docstring and
again in its module's).
"""

from __future__ import annotations

import doctest
import inspect
import sys

import pytest

import hf_lmobj

#: Names of ``__all__`` that are data values, not classes or functions (``help`` shows their type's docstring).
DATA_NAMES = {"OBJECTIVES"}


def _public(name: str) -> object:
    return getattr(hf_lmobj, name)


def _shown(doc: str | None) -> set[str]:
    """The source of every example of ``doc`` that shows an output (what a reader compares)."""
    return {e.source.strip() for e in doctest.DocTestParser().get_examples(doc or "") if e.want.strip()}


@pytest.mark.parametrize("name", hf_lmobj.__all__)
def test_help_shows_an_example(name):
    obj = _public(name)
    if not (inspect.isclass(obj) or inspect.isroutine(obj)):
        assert name in DATA_NAMES, f"{name} is neither a class nor a function: add it to DATA_NAMES"
        return
    doc = inspect.getdoc(obj) or ""
    assert ">>>" in doc, f"help({name}) shows no example: put one in {name}'s own docstring"
    assert _shown(doc), f"{name}'s example shows no output: assert a real value"


@pytest.mark.parametrize("name", sorted(set(hf_lmobj.__all__) - DATA_NAMES))
def test_example_is_not_kept_twice(name):
    obj = inspect.unwrap(_public(name))
    module = sys.modules[obj.__module__]
    twice = _shown(inspect.getdoc(obj)) & _shown(module.__doc__)
    assert not twice, f"{name}: {sorted(twice)} also in {module.__name__}'s docstring; keep the one in {name}'s"


def test_data_names_are_data():
    assert DATA_NAMES <= set(hf_lmobj.__all__)
    assert not any(inspect.isclass(_public(n)) or inspect.isroutine(_public(n)) for n in DATA_NAMES)


def test_objectives_are_shown_by_their_spec():
    """``OBJECTIVES`` is a mapping (``help`` shows the mapping type's); ``ObjectiveSpec``'s example reads it."""
    assert 'OBJECTIVES["causal"]' in inspect.getdoc(hf_lmobj.ObjectiveSpec)


@pytest.mark.parametrize("name", ["infill", "evaluate_infilling"])
def test_decorated_functions_keep_their_docstring(name):
    """``torch.inference_mode()`` wraps them: the wrapper must keep the docstring (``help`` reads the wrapper)."""
    obj = _public(name)
    assert obj.__doc__ == inspect.unwrap(obj).__doc__
    assert ">>>" in obj.__doc__
