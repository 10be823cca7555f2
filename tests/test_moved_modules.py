"""Old module paths of moved modules (``hf_lmobj._moved_modules``): each imports, warns naming its new home, and is
the new module itself; names outside the table are left to the ordinary finders."""

from __future__ import annotations

import ast
import importlib
import importlib.util
import subprocess
import sys
import warnings

import pytest

from hf_lmobj._moved_modules import MOVED, MovedModuleFinder, install
from tests.testing_utils import REPO


def _forget(name: str) -> None:
    """Drop ``name`` from ``sys.modules`` and from its parent package, so that the next import runs the finder."""
    sys.modules.pop(name, None)
    parent, _, child = name.rpartition(".")
    if parent in sys.modules and child in vars(sys.modules[parent]):
        delattr(sys.modules[parent], child)


@pytest.fixture
def fresh(request):
    """The old path ``request.param`` imported afresh; ``sys.modules`` and the parent package restored after."""
    name = request.param
    saved = sys.modules.get(name)
    parent, _, child = name.rpartition(".")
    saved_attribute = vars(importlib.import_module(parent)).get(child)
    _forget(name)
    yield name
    _forget(name)
    if saved is not None:
        sys.modules[name] = saved
    if saved_attribute is not None:
        setattr(sys.modules[parent], child, saved_attribute)


@pytest.mark.parametrize("fresh", sorted(MOVED), indirect=True)
def test_an_old_path_warns_and_is_the_new_module(fresh):
    new = importlib.import_module(MOVED[fresh])
    with pytest.warns(DeprecationWarning, match=rf"^{fresh} moved to {MOVED[fresh]}; import it from there") as caught:
        old = importlib.import_module(fresh)
    assert old is new and sys.modules[fresh] is new
    assert caught[0].filename == __file__, "the warning points at the import, not at the import machinery"
    parent, _, child = fresh.rpartition(".")
    assert getattr(sys.modules[parent], child) is new  # ``import a.b.old; a.b.old.X`` works too
    for name in getattr(new, "__all__", ()):
        assert getattr(old, name) is getattr(new, name)


@pytest.mark.parametrize("fresh", ["hf_lmobj.trainer.mtp"], indirect=True)
def test_the_import_statement_forms_of_an_old_path(fresh):
    from hf_lmobj.models import mtp

    with pytest.warns(DeprecationWarning, match="hf_lmobj.trainer.mtp moved to hf_lmobj.models.mtp"):
        from hf_lmobj.trainer.mtp import MTPConfig
    assert MTPConfig is mtp.MTPConfig
    import hf_lmobj.trainer.mtp  # cached now: no second warning, the same module

    assert hf_lmobj.trainer.mtp is mtp
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        from hf_lmobj.trainer import mtp as again
    assert again is mtp


@pytest.mark.parametrize("fresh", ["hf_lmobj.collators.packing"], indirect=True)
def test_monkeypatching_through_an_old_path_patches_the_new_module(fresh, monkeypatch):
    with pytest.warns(DeprecationWarning):
        old = importlib.import_module(fresh)
    monkeypatch.setattr(old, "STRATEGIES", ("patched",))
    assert importlib.import_module("hf_lmobj.packing").STRATEGIES == ("patched",)


def test_the_targets_exist_and_the_old_files_are_gone():
    for old, new in MOVED.items():
        assert importlib.util.find_spec(new) is not None, f"{old} -> {new}: no module {new}"
        assert old not in MOVED.values(), f"{old} is both an old path and a target"
        relative = old.replace(".", "/")
        assert not (REPO / f"{relative}.py").exists() and not (REPO / relative).is_dir(), f"{old} still exists"


@pytest.mark.parametrize(
    "name", ["hf_lmobj.collators.causal", "hf_lmobj.trainer.objectives", "hf_lmobj.fim", "hf_lmobj.trainer.mtp2"]
)
def test_names_outside_the_table_are_not_intercepted(name):
    assert MovedModuleFinder().find_spec(name, None) is None


def test_an_unknown_old_looking_name_still_fails_as_usual():
    with pytest.raises(ModuleNotFoundError, match="hf_lmobj.trainer.no_such_module"):
        importlib.import_module("hf_lmobj.trainer.no_such_module")


def test_the_finder_is_installed_once():
    assert install() is install()
    ours = [f for f in sys.meta_path if isinstance(f, MovedModuleFinder)]
    assert len(ours) == 1 and sys.meta_path.index(ours[0]) == 0


def test_each_new_package_imports_alone():
    code = (
        "import sys, importlib\n"
        "importlib.import_module(sys.argv[1])\n"
        "from hf_lmobj._moved_modules import MovedModuleFinder\n"
        "assert sum(isinstance(f, MovedModuleFinder) for f in sys.meta_path) == 1\n"
    )
    for name in ("hf_lmobj.models", "hf_lmobj.optim", "hf_lmobj.fim", "hf_lmobj.packing", "hf_lmobj.trainer"):
        done = subprocess.run([sys.executable, "-c", code, name], cwd=REPO, capture_output=True, text=True)
        assert done.returncode == 0, f"import {name} alone: {done.stderr[-3000:]}"


SCANNED = sorted(
    path
    for root in ("hf_lmobj", "recipes", "tests", "benchmarks")
    for path in (REPO / root).rglob("*.py")
    if path.name != "test_moved_modules.py"
)


def _old_imports(source: str) -> list[tuple[int, str]]:
    """``(line, old path)`` of each import of a moved module's old path in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
        else:
            continue
        found += [(node.lineno, n) for n in names if n in MOVED]
    return found


@pytest.mark.parametrize("path", SCANNED, ids=lambda p: str(p.relative_to(REPO)))
def test_the_library_tests_and_benchmarks_import_the_new_paths(path):
    found = _old_imports(path.read_text(encoding="utf-8"))
    assert not found, f"{path.relative_to(REPO)} imports old paths: {[(line, n, MOVED[n]) for line, n in found]}"


def test_the_scan_catches_each_import_form():
    source = "import hf_lmobj.trainer.mtp\nfrom hf_lmobj.collators.bart import x\nfrom hf_lmobj.collators import fim, causal\n"
    assert _old_imports(source) == [
        (1, "hf_lmobj.trainer.mtp"),
        (2, "hf_lmobj.collators.bart"),
        (3, "hf_lmobj.collators.fim"),
    ]
