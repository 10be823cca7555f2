"""The exported Space folders run with evaluate, datasets, torch and transformers alone, from one source.

Here: the Space files themselves (their cores are the package's files, their imports, their requirements). The
acceptance test, which builds a virtual environment restricted to the dependency closure of evaluate, datasets,
torch and transformers and runs the exported Spaces there against the package's values, is
tests/integration/test_spaces.py.
"""

from __future__ import annotations

import ast
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import hf_lmobj.metrics
from hf_lmobj.losses.functional import token_nll
from hf_lmobj.metrics import CORE_NAMES, CORE_SOURCES, METRIC_NAMES, export_space, metric_path, space_core_text
from hf_lmobj.metrics.scoring import window_nll
from tests.testing_utils import SPACE_DEPENDENCIES, clean_env

CORE_MODULES = tuple(core.removesuffix(".py") for core in CORE_NAMES)


def test_the_cores_are_the_package_files():
    assert [source.name for source in CORE_SOURCES] == list(CORE_NAMES)
    assert all(source.parent == Path(hf_lmobj.metrics.__file__).parent for source in CORE_SOURCES)


@pytest.mark.parametrize("core", CORE_NAMES)
@pytest.mark.parametrize("name", METRIC_NAMES)
def test_the_committed_core_copy_is_the_package_source(name, core):
    copy = (metric_path(name) / core).read_text(encoding="utf-8")
    assert copy == space_core_text(core), "stale copy: run hf_lmobj.metrics.sync_space_copies()"
    source = CORE_SOURCES[CORE_NAMES.index(core)]
    assert space_core_text(core).endswith(source.read_text(encoding="utf-8"))
    assert space_core_text(core).startswith(f"# Generated from hf_lmobj/metrics/{core} ")


def test_space_core_text_refuses_a_file_that_is_no_core():
    with pytest.raises(ValueError, match="sums.py"):
        space_core_text("perplexity.py")


@pytest.mark.parametrize("name", METRIC_NAMES)
def test_export_writes_the_core_from_the_package_not_from_the_folder(name, tmp_path, monkeypatch):
    stale = tmp_path / "stale"
    (stale / name).mkdir(parents=True)
    for file in ("README.md", "app.py", "requirements.txt", f"{name}.py"):
        (stale / name / file).write_bytes((metric_path(name) / file).read_bytes())
    for core in CORE_NAMES:
        (stale / name / core).write_text("raise RuntimeError('hand-edited copy')\n")
    monkeypatch.setattr("hf_lmobj.metrics.METRICS_DIR", stale)
    folder = export_space(name, tmp_path / "out")
    for core in CORE_NAMES:
        assert (folder / core).read_text(encoding="utf-8") == space_core_text(core)


def _imports(source: str) -> tuple[set[str], set[str]]:
    """The top-level modules ``source`` imports absolutely, and the sibling modules it imports relatively."""
    absolute, relative = set(), set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            absolute |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level:
            assert node.level == 1 and node.module, "only `from .<sibling> import`: the folder is flat"
            relative.add(node.module)
        elif isinstance(node, ast.ImportFrom):
            absolute.add(node.module.split(".")[0])
    return absolute, relative


#: What each core may import besides the standard library and its sibling cores (numpy: a requirement of datasets).
CORE_THIRD_PARTY = {
    "sums.py": set(),
    "sums_metric.py": set(),
    "scoring.py": {"torch", "transformers", "tqdm"},
    "slices.py": set(),
    "domain_tags.py": set(),
    "uncertainty.py": {"numpy"},
    "domain_metric.py": set(),
}


def test_every_core_has_its_allowed_imports():
    assert set(CORE_THIRD_PARTY) == set(CORE_NAMES)


@pytest.mark.parametrize("core", CORE_NAMES)
def test_the_core_imports_only_the_stdlib_its_allowed_libraries_and_the_other_cores(core):
    absolute, relative = _imports(CORE_SOURCES[CORE_NAMES.index(core)].read_text(encoding="utf-8"))
    assert relative <= set(CORE_MODULES) - {core.removesuffix(".py")}, relative  # nothing else stands beside it
    third_party = absolute - set(sys.stdlib_module_names)
    assert third_party <= CORE_THIRD_PARTY[core], third_party


def test_sums_loads_and_computes_without_torch_and_reads_tensors_once_torch_is_there():
    run = r"""
import importlib.util, sys
spec = importlib.util.spec_from_file_location("sums", sys.argv[1])
sums = importlib.util.module_from_spec(spec)
spec.loader.exec_module(sums)
assert "torch" not in sys.modules, "sums.py imported torch"
print(round(sums.perplexity_from_sums([2.0, 4.5], (3, 7)), 6))
import torch
print(round(sums.perplexity_from_sums(torch.tensor([2.0, 4.5]), [torch.tensor(3), 7]), 6))
"""
    sums_py = CORE_SOURCES[CORE_NAMES.index("sums.py")]
    done = subprocess.run([sys.executable, "-c", run, str(sums_py)], env=clean_env(), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.split() == [str(round(math.exp(6.5 / 10), 6))] * 2


@pytest.mark.parametrize("name", METRIC_NAMES)
def test_the_scripts_import_the_sibling_core_and_the_space_needs_no_hf_lmobj(name):
    script = (metric_path(name) / f"{name}.py").read_text(encoding="utf-8")
    modules = {(n.level, n.module) for n in ast.walk(ast.parse(script)) if isinstance(n, ast.ImportFrom)}
    modules |= {(0, a.name) for n in ast.walk(ast.parse(script)) if isinstance(n, ast.Import) for a in n.names}
    assert (1, "scoring") in modules and not any(str(m).startswith("hf_lmobj") for _, m in modules)
    assert any(line.startswith("from .scoring import") for line in script.splitlines())  # evaluate copies it
    assert (1, "sums") in modules and any(line.startswith("from .sums import") for line in script.splitlines())
    lines = (metric_path(name) / "requirements.txt").read_text(encoding="utf-8").splitlines()
    requirements = {re.split(r"[<>=]", r)[0] for r in (line.split("#")[0].strip() for line in lines) if r}
    assert requirements == set(SPACE_DEPENDENCIES)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
def test_the_cores_nll_is_the_packages_token_nll(dtype):
    logits = torch.randn(3, 5, 11, generator=torch.Generator().manual_seed(0)).to(dtype)
    targets = torch.tensor([[1, 2, -100, 4, 5], [-100, -100, 3, 0, 10], [7, 7, 7, 7, -100]])
    torch.testing.assert_close(window_nll(logits, targets), token_nll(logits, targets), rtol=0, atol=0)


@pytest.mark.parametrize("name", METRIC_NAMES)
def test_evaluate_copies_every_core_along_with_each_script(name):
    """evaluate's own parser of a script's imports (it copies only these files, not their own imports)."""
    from evaluate.loading import get_imports

    imports = get_imports(str(metric_path(name) / f"{name}.py"))
    assert {(kind, module) for kind, module, *_ in imports if kind != "library"} == {
        ("internal", module) for module in CORE_MODULES
    }
