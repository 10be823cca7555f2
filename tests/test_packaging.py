"""The package as users install it, read from the sources: the core never imports the recipes, nor their extras on
import (tests/integration/test_packaging.py builds the venvs and the wheel and runs them)."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.testing_utils import RECIPE_EXTRA, REPO


def _imported_modules(path: Path, module_level: bool = False) -> set[str]:
    """Absolute imports of ``path``: all of them, or those run on import (``module_level``), not a function's."""
    tree = ast.parse(path.read_text())
    names = set()
    for node in tree.body if module_level else ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_the_core_never_imports_the_recipes_or_their_extras():
    for path in (REPO / "hf_lmobj").rglob("*.py"):
        for name in _imported_modules(path):
            assert not name.startswith("hf_lmobj.recipes"), f"{path.relative_to(REPO)} imports {name}"
        for name in _imported_modules(path, module_level=True):  # an extra only inside the function that needs it
            assert name.split(".")[0] not in RECIPE_EXTRA, f"{path.relative_to(REPO)} imports {name} on import"


def test_the_extras_rule_reads_module_level_imports_only(tmp_path):
    source = tmp_path / "m.py"
    source.write_text("import matplotlib\n\ndef plot():\n    from jinja2 import Template\n")
    assert _imported_modules(source, module_level=True) == {"matplotlib"}
    assert _imported_modules(source) == {"matplotlib", "jinja2"}
