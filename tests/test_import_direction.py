"""No import climbs back up, read from the source: the models never import the trainer (targets, counts and head
capture sit below them), no library module imports the top package's names (the registry names its collators by
import path), and the collators do not import fill-in-the-middle where a module's import runs it (their face once
re-exported ``fim/``)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = sorted((ROOT / "hf_lmobj").rglob("*.py"))


def _package(path: str) -> str:
    """The package a relative import in the file ``path`` (``hf_lmobj/data/prepare.py``) starts from."""
    return ".".join(Path(path).parts[:-1])  # a face's own package is its folder too


def _is_module(dotted: str) -> bool:
    """True when ``dotted`` names a module or package of this tree (not a function or class in one)."""
    folder = ROOT.joinpath(*dotted.split("."))
    return folder.with_suffix(".py").is_file() or (folder / "__init__.py").is_file()


def _imports(tree: ast.Module, path: str) -> list[tuple[int, str, list[str], bool]]:
    """``(line, module, names, at module level)`` of each import; ``names`` are a ``from`` import's, relative resolved.

    Module level is any statement outside a ``def`` / ``class`` body (an ``if TYPE_CHECKING:`` block included): it
    runs, or a lazy face reads it, when the module is imported.
    """
    found = []

    def visit(node: ast.AST, top: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.Import):
                found.extend((child.lineno, alias.name, [], top) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                package = _package(path).split(".")
                base = package[: len(package) - child.level + 1] if child.level else []
                module = ".".join([*base, *([child.module] if child.module else [])])
                found.append((child.lineno, module, [alias.name for alias in child.names], top))
            nested = top and not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda))
            visit(child, nested)

    visit(tree, True)
    return found


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(f"{package}.")


def climbing_imports(source: str, path: str) -> list[str]:
    """``"line: module (the rule)"`` for each import of the library file ``path`` that climbs back up."""
    found = []
    for line, module, names, top in _imports(ast.parse(source), path):
        targets = [module, *(f"{module}.{name}" for name in names)]
        if path.startswith("hf_lmobj/models/") and any(_within(t, "hf_lmobj.trainer") for t in targets):
            found.append(f"{line}: {module} (models/ imports trainer/)")
        if path != "hf_lmobj/__init__.py" and module == "hf_lmobj":
            face_names = [n for n in names if not n.startswith("_") and not _is_module(f"hf_lmobj.{n}")]
            if not names or face_names:
                found.append(f"{line}: hf_lmobj{f' {face_names}' if face_names else ''} (the top package)")
        if path.startswith("hf_lmobj/collators/") and top and any(_within(t, "hf_lmobj.fim") for t in targets):
            found.append(f"{line}: {module} (collators/ imports fim/ at module level)")
    return found


def test_no_library_import_climbs_back_up():
    """One item for the rule: its failure lists every offending file."""
    assert len(LIBRARY) > 80, "the rule must read the whole library"
    found = {
        rel: hits
        for path in LIBRARY
        if (hits := climbing_imports(path.read_text(encoding="utf-8"), rel := path.relative_to(ROOT).as_posix()))
    }
    assert not found, f"imports that climb back up (move the name below its user): {found}"


def test_the_rule_catches_each_climb_and_passes_the_downward_imports():
    cases = [  # (file, source, what the rule reports)
        ("hf_lmobj/models/mtp_targets.py", "def f():\n    from hf_lmobj.trainer.objective_trainer import x\n",
         ["2: hf_lmobj.trainer.objective_trainer (models/ imports trainer/)"]),  # inside a function too
        ("hf_lmobj/models/electra.py", "from hf_lmobj import trainer\nimport hf_lmobj.trainer.auxiliary as a\n",
         ["1: hf_lmobj (models/ imports trainer/)", "2: hf_lmobj.trainer.auxiliary (models/ imports trainer/)"]),
        ("hf_lmobj/models/electra.py", "from ..trainer import auxiliary\n",
         ["1: hf_lmobj.trainer (models/ imports trainer/)"]),  # relative, resolved from the file's package
        ("hf_lmobj/data/prepare.py", "import hf_lmobj\n", ["1: hf_lmobj (the top package)"]),
        ("hf_lmobj/data/prepare.py", "from hf_lmobj import DataCollatorForCausalLM, files\n",
         ["1: hf_lmobj ['DataCollatorForCausalLM'] (the top package)"]),
        ("hf_lmobj/data/prepare.py", "from .. import ObjectiveTrainer\n", ["1: hf_lmobj ['ObjectiveTrainer'] (the top package)"]),
        ("hf_lmobj/collators/__init__.py", "if TYPE_CHECKING:\n    from hf_lmobj.fim.collator import FimTokens\n",
         ["2: hf_lmobj.fim.collator (collators/ imports fim/ at module level)"]),  # a lazy face's table re-exports
        ("hf_lmobj/collators/causal.py", "from hf_lmobj import fim\n",
         ["1: hf_lmobj (collators/ imports fim/ at module level)"]),
        # allowed: downward imports, a submodule or the faces' private machinery from the top, fim/ inside a function
        ("hf_lmobj/trainer/auxiliary.py", "from hf_lmobj.models.head import capture_head\nimport hf_lmobj.trainer.x\n", []),
        ("hf_lmobj/data/__init__.py", "from hf_lmobj.lazy_faces import lazy_face\nfrom hf_lmobj import checks, files\n", []),
        ("hf_lmobj/collators/causal.py", "def f():\n    from hf_lmobj.fim.format import fim_layout\n", []),
        ("hf_lmobj/models/mtp.py", "from hf_lmobj.losses.targets import objective_targets\n", []),
        ("hf_lmobj/__init__.py", "from hf_lmobj import x\n", []),  # the top face itself
    ]  # fmt: skip
    assert [climbing_imports(source, path) for path, source, _ in cases] == [expected for *_, expected in cases]
