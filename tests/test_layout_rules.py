"""Static rules of the package's layout, read from the source: no module reaches into another package's privates."""

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
