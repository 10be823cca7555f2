"""The exported Space folders run with evaluate, datasets, torch and transformers alone, from one source.

The acceptance test builds a virtual environment whose only site directory is a view of this
environment restricted to the dependency closure of evaluate, datasets, torch and transformers
(symlinks, no download; the mechanism of tests/test_packaging.py with an allow-list instead of a
deny-list), exports each Space folder and compares ``evaluate.load(<folder>).compute(...)`` there,
from sums and from a tiny model saved to disk, with the package's values.
"""

from __future__ import annotations

import ast
import json
import math
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
import torch

import hf_lmobj.metrics
from hf_lmobj.losses.functional import token_nll
from hf_lmobj.metrics import CORE_NAMES, CORE_SOURCES, METRIC_NAMES, export_space, load, metric_path, space_core_text
from hf_lmobj.metrics.scoring import window_nll
from tests.testing_utils import see_site_view

SPACE_DEPENDENCIES = ("evaluate", "datasets", "torch", "transformers")


def _closure(roots: tuple[str, ...]) -> set[str]:
    """Installed distributions reachable from ``roots`` through their unconditional requirements."""
    from packaging.requirements import Requirement

    seen, todo = set(), list(roots)
    while todo:
        name = re.sub(r"[-_.]+", "-", todo.pop()).lower()
        if name in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # an optional platform package (e.g. triton on CPU)
        seen.add(name)
        for line in dist.requires or ():
            requirement = Requirement(line)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                todo.append(requirement.name)
    return seen


def _space_venv(root: Path) -> Path:
    """A venv that sees only the closure of :data:`SPACE_DEPENDENCIES` (hf_lmobj not among it)."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    view = root / "site_view"
    view.mkdir()
    for name in sorted(_closure(SPACE_DEPENDENCIES)):
        dist = metadata.distribution(name)
        base = Path(dist.locate_file(""))
        tops = {Path(str(f)).parts[0] for f in dist.files or () if not str(f).startswith("..")}
        for top in tops:
            source = base / top
            if top.endswith(".pth") or top == "__pycache__" or not source.exists() or (view / top).exists():
                continue
            (view / top).symlink_to(source)
    return see_site_view(root, view)


SPACE_RUN = r"""
import json, sys
import evaluate

try:
    import hf_lmobj
except ImportError:
    pass
else:
    raise SystemExit("hf_lmobj is importable: the venv is not Space-only")
spaces, model, texts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
out = {}
for name, count in (("perplexity", "num_tokens"), ("bits_per_byte", "num_bytes")):
    metric = evaluate.load(f"{spaces}/{name}")
    out[name] = {
        "sums": metric.compute(nll=[2.0, 4.5], **{count: [3, 7]}),
        "strided": metric.compute(predictions=texts, model_id=model, max_length=16, stride=8, progress=False),
        "lm_eval": metric.compute(predictions=texts, model_id=model, max_length=16, windows="lm_eval", progress=False),
    }
print("RESULT" + json.dumps(out))
"""


def _clean_env() -> dict[str, str]:
    """No PYTHONPATH (it could put this clone on the path), no Hub access."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return {**env, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}


def test_exported_spaces_run_without_hf_lmobj_and_equal_the_package(tmp_path, tiny_gpt2, tokenizer, corpus):
    model = tmp_path / "tiny_gpt2"
    tiny_gpt2.save_pretrained(model)
    tokenizer.save_pretrained(model)
    texts = [corpus["validation"]["text"][0][:300], "x = 1  # é\n"]
    spaces = tmp_path / "spaces"
    for name in METRIC_NAMES:
        export_space(name, spaces)
    python = _space_venv(tmp_path / "venv")
    done = subprocess.run(
        [str(python), "-c", SPACE_RUN, str(spaces), str(model), json.dumps(texts)],
        cwd=tmp_path, env=_clean_env(), capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    there = json.loads(done.stdout.split("RESULT", 1)[1])
    for name, count in (("perplexity", "num_tokens"), ("bits_per_byte", "num_bytes")):
        metric = load(name)
        here = {
            "sums": metric.compute(nll=[2.0, 4.5], **{count: [3, 7]}),
            "strided": metric.compute(predictions=texts, model_id=str(model), max_length=16, stride=8, progress=False),
            "lm_eval": metric.compute(
                predictions=texts, model_id=str(model), max_length=16, windows="lm_eval", progress=False
            ),
        }
        for way, result in here.items():
            assert sorted(there[name][way]) == sorted(result), (name, way)
            for key, value in result.items():
                assert there[name][way][key] == pytest.approx(value, rel=1e-6, abs=1e-6), (name, way, key)
    assert "word_perplexity" in there["perplexity"]["lm_eval"] and "byte_perplexity" in there["bits_per_byte"]["sums"]


CORE_MODULES = tuple(core.removesuffix(".py") for core in CORE_NAMES)


def test_the_cores_are_the_package_files():
    assert [source.name for source in CORE_SOURCES] == list(CORE_NAMES)
    assert all(source.parent == Path(hf_lmobj.metrics.__file__).parent for source in CORE_SOURCES)


def test_the_single_core_names_of_the_first_release_warn():
    with pytest.warns(DeprecationWarning, match="CORE_NAMES"):
        assert hf_lmobj.metrics.CORE_NAME == "scoring.py"
    with pytest.warns(DeprecationWarning, match="CORE_SOURCES"):
        assert hf_lmobj.metrics.CORE_SOURCE == Path(hf_lmobj.metrics.__file__).parent / "scoring.py"
    assert space_core_text() == space_core_text("scoring.py")


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


@pytest.mark.parametrize("core", CORE_NAMES)
def test_the_core_imports_only_stdlib_torch_transformers_tqdm_and_the_other_core(core):
    absolute, relative = _imports(CORE_SOURCES[CORE_NAMES.index(core)].read_text(encoding="utf-8"))
    assert relative <= set(CORE_MODULES) - {core.removesuffix(".py")}, relative  # nothing else stands beside it
    third_party = absolute - set(sys.stdlib_module_names)
    allowed = set() if core == "sums.py" else {"torch", "transformers", "tqdm"}  # sums: the standard library
    assert third_party <= allowed, third_party


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
    done = subprocess.run([sys.executable, "-c", run, str(sums_py)], env=_clean_env(), capture_output=True, text=True)
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
def test_evaluate_copies_both_cores_along_with_each_script(name):
    """evaluate's own parser of a script's imports (it copies only these files, not their own imports)."""
    from evaluate.loading import get_imports

    imports = get_imports(str(metric_path(name) / f"{name}.py"))
    assert {(kind, module) for kind, module, *_ in imports if kind != "library"} == {
        ("internal", module) for module in CORE_MODULES
    }
