"""The exported Space folders run with evaluate, datasets, torch and transformers alone, from one source.

The acceptance test builds a virtual environment whose only site directory is a view of this
environment restricted to the dependency closure of evaluate, datasets, torch and transformers
(symlinks, no download; the mechanism of tests/integration/test_packaging.py with an allow-list instead of a
deny-list), exports each Space folder and compares ``evaluate.load(<folder>).compute(...)`` there,
from sums and from a tiny model saved to disk, with the package's values. (tests/metrics/test_spaces.py checks the
Space files themselves without a venv.)
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from hf_lmobj.metrics import METRIC_NAMES, export_space, load
from tests.testing_utils import SPACE_DEPENDENCIES, clean_env, see_site_view


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


@pytest.mark.slow
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
        cwd=tmp_path, env=clean_env(), capture_output=True, text=True, timeout=600,
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
