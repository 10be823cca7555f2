"""Static rules of the package's layout, read from the source: no module reaches into another package's privates,
and no recipe reaches recipe code through ``hf_lmobj.recipes``, a name the packaging gives ``recipes/`` (no folder has it)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted([*(ROOT / "hf_lmobj").rglob("*.py"), *(ROOT / "recipes").rglob("*.py")])


def _package_of(path: Path) -> str:
    """``hf_lmobj.collators`` for hf_lmobj/collators/x.py; ``recipes`` for everything under recipes/."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return "recipes" if parts[0] == "recipes" else ".".join(parts[:-1])


def _is_module(dotted: str) -> bool:
    """True when ``dotted`` names a module or package of this tree (not a function or constant in one)."""
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _private_imports(source: str, own: str) -> list[tuple[int, str]]:
    """``(line, module)`` of each ``hf_lmobj.<package>._private`` that ``source`` (in package ``own``) imports."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = [node.module] if isinstance(node, ast.ImportFrom) and node.module else []
        if isinstance(node, ast.ImportFrom) and node.module:  # from hf_lmobj.pkg import _private (a module)
            names += [f"{node.module}.{a.name}" for a in node.names if _is_module(f"{node.module}.{a.name}")]
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        for name in names:
            parts = name.split(".")
            private = next((i for i, p in enumerate(parts) if p.startswith("_") and not p.startswith("__")), None)
            if parts[0] == "hf_lmobj" and private is not None and ".".join(parts[:private]) != own:
                found.append((node.lineno, name))
    return found


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_imports_another_packages_private_module(path):
    found = _private_imports(path.read_text(), _package_of(path))
    assert not found, f"{path.relative_to(ROOT)} imports another package's private module: {found}"


def test_the_rule_catches_a_cross_package_private_import():
    source = (
        "from hf_lmobj.collators._masking import x\n"  # another package's private module: caught
        "from hf_lmobj.collators import _noise\n"  # the same, imported by name: caught
        "from hf_lmobj.trainer.sharding import _dtensor_type\n"  # a private function, not a module: allowed
        "import hf_lmobj.data\n"
    )
    found = [name for _, name in _private_imports(source, "hf_lmobj.trainer")]
    assert found == ["hf_lmobj.collators._masking", "hf_lmobj.collators._noise"]
    assert _private_imports(source, "hf_lmobj.collators") == []  # inside collators/ its own privates are fine


RECIPE_SOURCES = sorted((ROOT / "recipes").rglob("*.py"))


def _remapped_recipe_imports(source: str) -> list[tuple[int, str]]:
    """``(line, module)`` of each import of ``hf_lmobj.recipes`` (or below) in ``source``: the name the wheel gives
    ``recipes/``, which names no folder of the clone; recipe code reaches recipe code by relative imports."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module, *(f"{node.module}.{a.name}" for a in node.names if node.module == "hf_lmobj")]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        else:
            continue
        found += [(node.lineno, n) for n in names if n == "hf_lmobj.recipes" or n.startswith("hf_lmobj.recipes.")]
    return found


@pytest.mark.parametrize("path", RECIPE_SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_recipe_module_imports_through_the_remapped_package_name(path):
    found = _remapped_recipe_imports(path.read_text())
    assert not found, (
        f"{path.relative_to(ROOT)} imports recipe code as hf_lmobj.recipes (use a relative import): {found}"
    )


def test_the_rule_catches_an_import_through_the_remapped_name():
    source = (
        "from hf_lmobj.recipes.support.models import ModelArguments\n"  # caught
        "import hf_lmobj.recipes.report.cards\n"  # caught
        "from hf_lmobj import recipes, collators\n"  # the package imported by name: caught
        "from hf_lmobj.recipes import pretrain\n"  # caught
        "from .support.models import ModelArguments\n"  # relative: allowed
        "from hf_lmobj.collators import DataCollatorForCausalLM\n"  # the library: allowed
        "import hf_lmobj.recipes_extra\n"  # another name that merely starts alike: allowed
    )
    found = _remapped_recipe_imports(source)
    assert found == [
        (1, "hf_lmobj.recipes.support.models"),
        (2, "hf_lmobj.recipes.report.cards"),
        (3, "hf_lmobj.recipes"),
        (4, "hf_lmobj.recipes"),
    ]
