"""Static rules of the package's layout, read from the source: no module reaches into another package's privates,
no recipe reaches recipe code through ``hf_lmobj.recipes``, a name the packaging gives ``recipes/`` (no folder has it),
every import names a name's one home, and there is no compatibility layer (nothing has been released)."""

from __future__ import annotations

import ast
import functools
import importlib
import sys
from pathlib import Path

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


def test_no_module_imports_another_packages_private_module():
    """One item for the rule: its failure lists every offending file."""
    assert len(SOURCES) > 50, "the rule must read the package and the recipes"
    found = {
        str(path.relative_to(ROOT)): hits
        for path in SOURCES
        if (hits := _private_imports(path.read_text(), _package_of(path)))
    }
    assert not found, f"modules that import another package's private module: {found}"


def test_the_rule_catches_a_cross_package_private_import():
    source = (
        "from hf_lmobj.collators._masking import x\n"  # another package's private module: caught
        "from hf_lmobj.collators import _noise\n"  # the same, imported by name: caught
        "from hf_lmobj.models.sharding import _dtensor_type\n"  # a private function, not a module: allowed
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


def test_no_recipe_module_imports_through_the_remapped_package_name():
    """One item for the rule: its failure lists every offending file."""
    assert RECIPE_SOURCES, "the rule must read the recipes"
    found = {
        str(path.relative_to(ROOT)): hits
        for path in RECIPE_SOURCES
        if (hits := _remapped_recipe_imports(path.read_text()))
    }
    assert not found, f"recipe modules that import recipe code as hf_lmobj.recipes (use a relative import): {found}"


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


# ------------------------------------------------------------------------------------------ one home per name
IMPORTERS = sorted(
    path for folder in ("hf_lmobj", "recipes", "tests", "benchmarks") for path in (ROOT / folder).rglob("*.py")
)


def _module_file(dotted: str) -> Path | None:
    """The file of module ``dotted`` of this tree (``hf_lmobj.recipes.x`` and ``recipes.x`` are ``recipes/x``), or None."""
    parts = dotted.split(".")
    if parts[:2] == ["hf_lmobj", "recipes"]:
        parts = parts[1:]
    if parts[0] not in ("hf_lmobj", "recipes"):
        return None
    folder = ROOT.joinpath(*parts)
    return next((p for p in (folder / "__init__.py", folder.with_suffix(".py")) if p.is_file()), None)


@functools.cache
def _defined_names(path: Path) -> frozenset[str]:
    """The names the module at ``path`` defines itself (def, class, assignment, in ``if`` / ``try`` too), not imports."""

    def defined(body: list[ast.stmt]) -> set[str]:
        names: set[str] = set()
        for node in body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                names |= {n.id for target in targets for n in ast.walk(target) if isinstance(n, ast.Name)}
            elif isinstance(node, (ast.If, ast.Try)):
                handlers = [h.body for h in getattr(node, "handlers", [])]
                for block in (node.body, node.orelse, getattr(node, "finalbody", []), *handlers):
                    names |= defined(block)
        return names

    return frozenset(defined(ast.parse(path.read_text(encoding="utf-8")).body))


def _imported_module(node: ast.ImportFrom, path: Path | None) -> str:
    """The dotted module a ``from ... import`` names, its relative form resolved from ``path``'s package."""
    if not node.level:
        return node.module or ""
    package = list(path.relative_to(ROOT).parts[:-1]) if path is not None else []
    package = package[: len(package) - node.level + 1]
    return ".".join([*package, *([node.module] if node.module else [])])


def _not_at_home(source: str, faces: dict[str, tuple[str, ...]], path: Path | None = None) -> list[str]:
    """``line: name from module`` for each ``from <ours> import name`` whose module neither defines ``name`` nor is a
    package face listing it in ``__all__`` (``faces``), and ``line: no module X`` for each module the tree lacks."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            ours = [a.name for a in node.names if a.name == "hf_lmobj" or a.name.startswith("hf_lmobj.")]
            found += [f"{node.lineno}: no module {name}" for name in ours if _module_file(name) is None]
            continue
        if not isinstance(node, ast.ImportFrom):
            continue
        module = _imported_module(node, path)
        ours = module == "hf_lmobj" or module.startswith("hf_lmobj.") or (node.level and module.startswith("recipes"))
        if not ours:
            continue
        file = _module_file(module)
        if file is None:
            found.append(f"{node.lineno}: no module {module}")
            continue
        exported = faces.get(module.removeprefix("hf_lmobj.") if module.startswith("hf_lmobj.recipes") else module, ())
        for alias in node.names:
            if alias.name == "*" and path is not None and path.name == "__init__.py":
                continue  # a face gathers its modules' names
            if alias.name in _defined_names(file) or alias.name in exported or _module_file(f"{module}.{alias.name}"):
                continue
            found.append(f"{node.lineno}: {alias.name} from {module}")
    return found


def _face_exports() -> dict[str, tuple[str, ...]]:
    """Each package face of the library and the recipes (``recipes.report``) -> its ``__all__``, read once imported."""
    faces = {}
    for init in [*(ROOT / "hf_lmobj").rglob("__init__.py"), *(ROOT / "recipes").rglob("__init__.py")]:
        dotted = ".".join(init.parent.relative_to(ROOT).parts)
        face = importlib.import_module(f"hf_lmobj.{dotted}" if dotted.startswith("recipes") else dotted)
        faces[dotted] = tuple(getattr(face, "__all__", ()))
    return faces


def test_every_import_names_the_home_of_the_name():
    faces = _face_exports()
    found = {}
    for path in IMPORTERS:
        wrong = _not_at_home(path.read_text(encoding="utf-8"), faces, path)
        if wrong:
            found[str(path.relative_to(ROOT))] = wrong
    assert not found, f"import each name from the module defining it or a package face listing it in __all__: {found}"


def test_the_home_rule_catches_a_name_imported_through_another_module():
    source = (
        "from hf_lmobj.metrics.scoring import count_words\n"  # defined in metrics.sums: caught
        "from hf_lmobj.metrics.sums import count_words\n"  # its home: allowed
        "from hf_lmobj.collators import DataCollatorForCausalLM, pack_dataset\n"  # not in the face's __all__: caught
        "from hf_lmobj.metrics import scoring\n"  # a module: allowed
        "import hf_lmobj.trainer.mtp\n"  # no such module (MTP lives in models/): caught
    )
    assert _not_at_home(source, _face_exports()) == [
        "1: count_words from hf_lmobj.metrics.scoring",
        "3: pack_dataset from hf_lmobj.collators",
        "5: no module hf_lmobj.trainer.mtp",
    ]
    report = ROOT / "recipes" / "report" / "pretrain_report.py"  # relative imports resolve from the file's package
    assert _not_at_home("from .report_arguments import ReportArguments, x", _face_exports(), report) == [
        "1: x from recipes.report.report_arguments"
    ]
    assert len(IMPORTERS) > 200, "the rule must read the library, the recipes, the tests and the benchmarks"


# ------------------------------------------------------------------------------------------ no compatibility layer
def test_nothing_is_deprecated_and_no_import_hook_is_installed():
    """Nothing has been released: a renamed name is renamed (no DeprecationWarning), and no old module path is served."""
    import hf_lmobj  # noqa: F401

    warned = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in SOURCES
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Name) and node.id in ("DeprecationWarning", "PendingDeprecationWarning")
    ]
    assert not warned, f"the package deprecates names of no release: {warned}; rename them outright"
    hooks = [finder for finder in sys.meta_path if type(finder).__module__.startswith("hf_lmobj")]
    assert not hooks, f"import hf_lmobj installed import hooks: {hooks}"
