"""The package faces: ``__all__`` is declared on faces only (``hf_lmobj/__init__.py`` and each package's
``__init__.py``), each face lists its names explicitly and resolves every one lazily from the module its
``if TYPE_CHECKING:`` block names, and the top face groups its names by package, each also in its package's face."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

import hf_lmobj
from tests.test_docs_layout import LAYOUT, layout_entries

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "hf_lmobj"
SPACES = (PACKAGE / "metrics" / "perplexity", PACKAGE / "metrics" / "bits_per_byte")  # standalone evaluate modules
LIBRARY = sorted(p for p in PACKAGE.rglob("*.py") if not any(space in p.parents for space in SPACES))
FACES = sorted(p for p in LIBRARY if p.name == "__init__.py")
FACE_NAMES = [".".join(p.parent.relative_to(ROOT).parts) for p in FACES]


def _all_bindings(source: str) -> list[int]:
    """Lines where ``source`` binds ``__all__`` (``=``, ``+=``, annotated), at any depth."""
    found = []
    for node in ast.walk(ast.parse(source)):
        targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            found += [node.lineno for t in targets if isinstance(t, ast.Name) and t.id == "__all__"]
    return found


def _face_faults(source: str) -> list[str]:
    """What keeps a face's names from being listed explicitly: ``import *``, an ``__all__`` not one literal list of
    strings, bound more than once."""
    tree = ast.parse(source)
    faults = [f"{n.lineno}: import *" for n in ast.walk(tree) if isinstance(n, ast.alias) and n.name == "*"]
    bindings = [n for n in tree.body if isinstance(n, ast.Assign) and _all_bindings(ast.unparse(n))]
    if len(_all_bindings(source)) != 1 or len(bindings) != 1:
        return [*faults, f"__all__ bound at lines {_all_bindings(source)}, not once at module level"]
    value = bindings[0].value
    if not (
        isinstance(value, ast.List)
        and all(isinstance(e, ast.Constant) and isinstance(e.value, str) for e in value.elts)
    ):
        faults.append(f"{bindings[0].lineno}: __all__ is not a literal list of strings")
    return faults


def test_only_faces_declare_all_and_faces_list_their_names():
    """One item for the rule: its failure lists every offending module."""
    assert len(LIBRARY) > 80 and len(FACES) > 10, "the rule must read the whole library"
    outside = {
        str(p.relative_to(ROOT)): lines for p in LIBRARY if p not in FACES and (lines := _all_bindings(p.read_text()))
    }
    faces = {str(p.relative_to(ROOT)): faults for p in FACES if (faults := _face_faults(p.read_text()))}
    assert not outside, f"only package faces declare __all__; delete it from {outside}"
    assert not faces, f"a face lists its names in one literal __all__, without import *: {faces}"


@pytest.mark.parametrize(
    ("source", "outside", "face"),
    [
        ('__all__ = ["x"]\n', [1], []),
        ('x = 1\nif x:\n    __all__ += ["y"]\n', [3], ["__all__ bound at lines [3], not once at module level"]),
        ("__all__: list[str] = []\n", [1], ["__all__ bound at lines [1], not once at module level"]),
        ('from m import *\n__all__ = ["a"]\n', [2], ["1: import *"]),
        ("__all__ = [*m.__all__]\n", [1], ["1: __all__ is not a literal list of strings"]),
        ("all_ = []\nALL = ['__all__']\n", [], ["__all__ bound at lines [], not once at module level"]),
    ],
)
def test_the_rule_catches_all_outside_a_face_and_implicit_faces(source, outside, face):
    assert _all_bindings(source) == outside
    assert _face_faults(source) == face


def _type_checking_imports(path: Path) -> dict[str, tuple[str, str]]:
    """``{name: (module, name there)}`` of the ``from ... import`` lines under the face's ``if TYPE_CHECKING:``."""
    homes = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for line in node.body:
                assert isinstance(line, ast.ImportFrom) and line.level == 0, (
                    f"{path}:{line.lineno}: one absolute from-import"
                )
                homes.update({a.asname or a.name: (line.module, a.name) for a in line.names})
    return homes


@pytest.mark.parametrize("path", FACES, ids=FACE_NAMES)
def test_every_name_of_a_face_resolves_to_its_type_checking_import(path):
    """The face's lazy lookup gives, for each name, the object its ``if TYPE_CHECKING:`` import names; ``dir`` lists it."""
    dotted = ".".join(path.parent.relative_to(ROOT).parts)
    face = importlib.import_module(dotted)
    homes = _type_checking_imports(path)
    defined = {n for n in face.__all__ if n in vars(face) and n not in homes}  # a face's own functions (metrics)
    assert len(set(face.__all__)) == len(face.__all__), f"{dotted}.__all__ repeats a name"
    assert set(homes) == set(face.__all__) - defined, f"{dotted}: TYPE_CHECKING imports and __all__ differ"
    for name, (module, there) in homes.items():
        assert getattr(face, name) is getattr(importlib.import_module(module), there), f"{dotted}.{name}"
    assert set(face.__all__) <= set(dir(face))


def _top_groups() -> list[tuple[str, list[str]]]:
    """``[(package, names)]`` of the top face's ``__all__``, one group per ``# hf_lmobj.<package>`` comment."""
    source = (PACKAGE / "__init__.py").read_text()
    node = next(n for n in ast.parse(source).body if isinstance(n, ast.Assign) and _all_bindings(ast.unparse(n)))
    groups: list[tuple[str, list[str]]] = []
    for line in source.splitlines()[node.lineno : node.end_lineno - 1]:
        if comment := re.fullmatch(r"\s*# (hf_lmobj\.\w+)", line):
            groups.append((comment.group(1), []))
        else:
            name = re.fullmatch(r'\s*"(\w+)",', line)
            assert name and groups, f"top face __all__: {line!r} is neither a '# hf_lmobj.<package>' comment nor a name"
            groups[-1][1].append(name.group(1))
    assert [n for _, names in groups for n in names] == hf_lmobj.__all__
    return groups


def test_the_top_face_is_grouped_by_package_each_name_also_in_its_package_face():
    groups = _top_groups()
    packages = [package for package, _ in groups]
    layout = [e.removesuffix("/").removesuffix(".py") for e in layout_entries(LAYOUT.read_text())]
    order = [e.replace("/", ".") for e in layout if e.count("/") == 1 and e.startswith("hf_lmobj/")]
    assert len(set(packages)) == len(packages), f"one group per package: {packages}"
    assert packages == [p for p in order if p in packages], f"groups in docs/layout.md's order {order}"
    homes = _type_checking_imports(PACKAGE / "__init__.py")
    for package, names in groups:
        home = importlib.import_module(package)
        for name in names:
            module, there = homes[name]
            assert module == package, f"{name} is imported from {module}, not from its group's {package}"
            listed = there in home.__all__ if hasattr(home, "__path__") else there in vars(home)
            assert listed, f"{name}: {package} does not give {there}"
            assert getattr(hf_lmobj, name) is getattr(home, there)


def test_an_unknown_name_is_an_attribute_error_naming_the_face():
    import hf_lmobj.collators as collators

    with pytest.raises(AttributeError, match="module 'hf_lmobj' has no attribute 'DataCollatorForCLM'"):
        hf_lmobj.DataCollatorForCLM  # noqa: B018
    with pytest.raises(AttributeError, match="module 'hf_lmobj.collators' has no attribute 'pack_dataset'"):
        collators.pack_dataset  # noqa: B018  (its home is hf_lmobj.packing)
    with pytest.raises(ImportError, match="cannot import name 'seq2seq_loss' from 'hf_lmobj'"):
        exec("from hf_lmobj import seq2seq_loss", {})  # a string, which the home rule (test_layout_rules) skips
    assert hf_lmobj.metrics.sums.__name__ == "hf_lmobj.metrics.sums"  # a submodule is an attribute, as once imported


def test_the_reference_table_of_names_follows_the_top_face():
    """The API reference's table of the top face's names (docs/reference/index.md): one row per group of
    ``hf_lmobj.__all__``, in its order, the same names."""
    page = (ROOT / "docs" / "reference" / "index.md").read_text()
    rows = re.findall(r"^\| \[`(hf_lmobj\.\w+)`\]\(\w+\.md\) \| (.+) \|$", page, flags=re.MULTILINE)
    table = [(package, re.findall(r"\[`(\w+)`(?: \(.*?\))?\]\[", names)) for package, names in rows]
    assert table == _top_groups()


def _public_definitions(source: str) -> list[str]:
    """The public names a module defines at its top level: functions, classes and UPPER_CASE constants."""
    names = []
    for node in ast.parse(source).body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.append(node.name)
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [t.id for t in targets if isinstance(t, ast.Name) and t.id.isupper()]
    return [n for n in names if not n.startswith("_")]


def test_every_public_name_is_defined_once():
    """One address per name: no two library modules define the same public name (the Space folders, standalone
    copies by design, are left out)."""
    homes: dict[str, list[str]] = {}
    for path in LIBRARY:
        for name in _public_definitions(path.read_text()):
            homes.setdefault(name, []).append(str(path.relative_to(ROOT)))
    twice = {name: where for name, where in homes.items() if len(where) > 1}
    assert not twice, f"public names defined in more than one module: {twice}"


def test_the_definition_rule_sees_functions_classes_and_constants():
    source = "def f(): pass\nclass C: pass\nLIMIT = 3\nlower = 4\n_PRIVATE = 5\ndef _g(): pass\n"
    assert _public_definitions(source) == ["f", "C", "LIMIT"]
