"""The lazy faces, seen from a fresh interpreter: what ``import hf_lmobj`` and a collator's import load, that the
standard-library-only ``hf_lmobj.metrics.sums`` loads no torch, that every package face resolves all its names.

One interpreter runs every check in an order where each import adds to what the previous ones loaded (nothing
first, then ``metrics.sums``, then a collator, then every face); each test asserts one of its findings.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import importlib, json, sys
from pathlib import Path

def ours():
    return sorted(m for m in sys.modules if m.startswith("hf_lmobj"))

found = {}
import hf_lmobj
found["import hf_lmobj"] = [ours(), "torch" in sys.modules, "transformers.trainer" in sys.modules]
found["missing from dir"] = sorted(set(hf_lmobj.__all__) - set(dir(hf_lmobj)))
try:
    hf_lmobj.DataCollatorForCLM
except AttributeError as error:
    found["unknown name"] = str(error)

import hf_lmobj.metrics.sums
found["import hf_lmobj.metrics.sums"] = [ours(), "torch" in sys.modules, "numpy" in sys.modules]

from hf_lmobj import DataCollatorForCausalLM
found["from hf_lmobj import DataCollatorForCausalLM"] = [
    DataCollatorForCausalLM.__module__, "transformers.trainer" in sys.modules, "peft" in sys.modules
]

import hf_lmobj.losses.linear_cross_entropy  # a module named like the function its face gives
found["a name shared with its module"] = [type(hf_lmobj.losses.linear_cross_entropy).__name__,
                                          type(hf_lmobj.linear_cross_entropy).__name__]

spaces = ("perplexity", "bits_per_byte")
faces = sorted(".".join(p.parent.relative_to(Path(hf_lmobj.__file__).parents[1]).parts)
               for p in Path(hf_lmobj.__file__).parent.rglob("__init__.py") if p.parent.name not in spaces)
unresolved = {}
for name in faces:
    face = importlib.import_module(name)
    for attribute in face.__all__:
        try:
            getattr(face, attribute)
        except Exception as error:
            unresolved[f"{name}.{attribute}"] = repr(error)
found["faces"] = len(faces)
found["unresolved face names"] = unresolved
print(json.dumps(found))
"""


@pytest.fixture(scope="module")
def found() -> dict:
    """The script's findings, from one fresh interpreter."""
    run = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(run.stdout.splitlines()[-1])


def test_import_hf_lmobj_imports_no_submodule_no_torch_no_trainer(found):
    assert found["import hf_lmobj"] == [["hf_lmobj", "hf_lmobj.lazy_faces"], False, False]


def test_dir_lists_every_name_and_an_unknown_one_names_the_module(found):
    assert found["missing from dir"] == []
    assert found["unknown name"].startswith("module 'hf_lmobj' has no attribute 'DataCollatorForCLM'")


def test_metrics_sums_imports_the_standard_library_alone(found):
    modules = ["hf_lmobj", "hf_lmobj.files", "hf_lmobj.lazy_faces", "hf_lmobj.metrics", "hf_lmobj.metrics.sums"]
    assert found["import hf_lmobj.metrics.sums"] == [modules, False, False]


def test_the_causal_collator_imports_no_trainer(found):
    expected = ["hf_lmobj.collators.causal", False, False]
    assert found["from hf_lmobj import DataCollatorForCausalLM"] == expected


def test_a_face_name_shared_with_a_submodule_stays_the_name(found):
    assert found["a name shared with its module"] == ["function", "function"]


def test_every_package_face_resolves_all_its_names_in_one_interpreter(found):
    assert found["faces"] >= 14
    assert found["unresolved face names"] == {}


def test_each_package_face_imports_alone_in_a_fresh_interpreter():
    """An import cycle that only shows in one import order is caught: each face first, in its own interpreter (run
    side by side), resolves every name of its ``__all__``."""
    spaces = {"perplexity", "bits_per_byte"}
    faces = sorted(".".join(p.parent.relative_to(ROOT).parts) for p in (ROOT / "hf_lmobj").rglob("__init__.py")
                   if p.parent.name not in spaces)  # fmt: skip
    code = "import importlib, sys; f = importlib.import_module(sys.argv[1]); [getattr(f, n) for n in f.__all__]"
    runs = {face: subprocess.Popen([sys.executable, "-c", code, face], cwd=ROOT, stderr=subprocess.PIPE, text=True)
            for face in faces}  # fmt: skip
    failed = {face: run.communicate(timeout=900)[1][-2000:] for face, run in runs.items()}
    failed = {face: err for face, err in failed.items() if runs[face].returncode != 0}
    assert len(faces) >= 15 and not failed, failed
