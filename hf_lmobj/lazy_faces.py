"""The machinery of the package's lazy faces (PEP 562): a face imports a name's home module on first use.

Each face (``hf_lmobj/__init__.py`` and ``hf_lmobj/<package>/__init__.py``) lists its names in ``__all__``, imports
them under ``if TYPE_CHECKING:`` (what type checkers and IDEs read) and ends with
``__getattr__, __dir__ = lazy_face(__name__, __all__)``. Why: ``import hf_lmobj`` then pays for what the caller
touches, not for ``transformers.Trainer``.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from collections.abc import Callable, Sequence


def _type_checking_imports(face: str) -> dict[str, tuple[str, str]]:
    """``{name: (module, name there)}`` of the ``from ... import`` lines under ``if TYPE_CHECKING:`` in face ``face``.

    Read from the face's source (the way ``lazy_loader.attach_stub`` reads a stub), so that the lines type checkers
    and IDEs follow are the one table the face resolves its names by.
    """
    import ast

    loader = sys.modules[face].__loader__
    source = loader.get_source(face) if loader is not None else None
    if source is None:
        raise ImportError(f"{face}: its source is needed to find its names' homes; reinstall hf_lmobj with .py files")
    homes = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            for line in node.body:
                if isinstance(line, ast.ImportFrom):
                    home = importlib.util.resolve_name("." * line.level + (line.module or ""), face)
                    homes.update({alias.asname or alias.name: (home, alias.name) for alias in line.names})
    return homes


class _Face(types.ModuleType):
    """A lazy face's module type: a name of its ``__all__`` that is also a submodule's (``hf_lmobj.losses`` gives the
    function ``linear_cross_entropy`` of the module ``linear_cross_entropy``) stays the name when that submodule is
    imported, where the import system would make it the module (the face's ``__getattr__`` then finds the name)."""

    def __setattr__(self, name: str, value: object) -> None:
        submodule = isinstance(value, types.ModuleType) and value.__name__ == f"{self.__name__}.{name}"
        if not (submodule and name in vars(self).get("__all__", ())):
            super().__setattr__(name, value)


def lazy_face(face: str, names: Sequence[str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """``__getattr__`` and ``__dir__`` (PEP 562) of the package face ``face``, whose ``__all__`` is ``names``.

    A name of ``names`` is imported on first use from the module its face's ``if TYPE_CHECKING:`` block imports
    it from, then kept in the face's namespace; any other name is a submodule of the face (imported on first use,
    as ``import face.name`` would) or an ``AttributeError`` naming the face. The face's module becomes a
    :class:`_Face`, so that a submodule named like one of ``names`` does not shadow it.

    Example:
        >>> import hf_lmobj.packing as packing
        >>> packing.pack_dataset.__module__, "pack_dataset" in dir(packing)
        ('hf_lmobj.packing.dataset', True)
    """
    sys.modules[face].__class__ = _Face
    homes: dict[str, tuple[str, str]] = {}  # read on the first lookup: a face that is only passed through reads nothing

    def __getattr__(name: str) -> object:
        if name in names:
            if not homes:
                homes.update(_type_checking_imports(face))
            if name not in homes:
                raise ImportError(f"{face}.__all__ names {name!r}, which its `if TYPE_CHECKING:` block does not import")
            home, there = homes[name]
            value = getattr(importlib.import_module(home), there)
            setattr(sys.modules[face], name, value)  # found once: later lookups skip __getattr__
            return value
        if not name.startswith("__"):
            try:
                return importlib.import_module(f"{face}.{name}")
            except ModuleNotFoundError as error:
                if error.name != f"{face}.{name}":
                    raise  # a submodule that exists but lacks a dependency says so
        message = f"module {face!r} has no attribute {name!r}; its public names are in {face}.__all__"
        raise AttributeError(message, name=name, obj=sys.modules[face])

    def __dir__() -> list[str]:
        return sorted({*vars(sys.modules[face]), *names})

    return __getattr__, __dir__
