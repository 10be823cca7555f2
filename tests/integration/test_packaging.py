"""The package as users install it: a core without the recipe extras, and a wheel that runs the recipes.

Each test builds a fresh virtual environment whose only site directory is a filtered view of this
environment's (symlinks, no download): the wheel test installs the freshly built wheel into it and
runs the recipes from an empty directory by config name, launched by accelerate and by the installed
``hf-lmobj`` script; the core test leaves out the ``[recipes]`` extra (peft, jinja2, matplotlib) and
imports and uses the core. (tests/test_packaging.py reads the sources: the
core never imports the recipes nor, on import, their extras.)
"""

from __future__ import annotations

import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from hf_lmobj.cli import COMMANDS
from tests.test_cli import SHORT_RUN
from tests.testing_utils import QUICK, RECIPE_EXTRA, REPO, clean_env, see_site_view


def _distribution(entry: str) -> str:
    """``peft-0.21.dist-info`` / ``peft`` / ``pylab.py`` -> ``peft`` (lower case, ``-`` as ``_``)."""
    return entry.split("-")[0].split(".")[0].lower().replace("-", "_")


def _venv(root: Path, leave_out: tuple[str, ...]) -> Path:
    """A venv seeing this environment's site-packages minus ``leave_out`` and minus hf_lmobj itself."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    view = root / "site_view"
    view.mkdir()
    skip = {*leave_out, "hf_lmobj", "__editable__", "__editable___hf_lmobj_0_1_0_finder"}
    for source in (Path(p) for p in site.getsitepackages()):
        for entry in source.iterdir():
            name = _distribution(entry.name)
            if name in skip or entry.name.startswith("__editable__") or entry.suffix == ".pth":
                continue
            if not (view / entry.name).exists():
                (view / entry.name).symlink_to(entry)
    return see_site_view(root, view)


def _run(program: Path, args: list[str], cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    """``program`` (a venv's python, or a script it installed) on ``args`` in ``cwd``; it must exit 0."""
    done = subprocess.run(
        [str(program), *args], cwd=cwd, env=clean_env(), capture_output=True, text=True, timeout=timeout
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return done


CORE_USE = """
import sys
import torch
import hf_lmobj
from hf_lmobj import DataCollatorForCausalLM, DataCollatorForMaskedLM, ObjectiveTrainer, build_tokenizer
from hf_lmobj import linear_cross_entropy, load_metric, pack_dataset, sampling_generate_kwargs
for name in ("peft", "jinja2", "matplotlib"):
    try:
        __import__(name)
    except ImportError:
        continue
    raise SystemExit(f"{name} is importable: the venv is not core-only")
tokenizer = build_tokenizer(vocab_size=512, max_documents=50)
a, b = (tokenizer(text, add_special_tokens=False)["input_ids"] for text in ("def f(x):", "return x"))
batch = DataCollatorForCausalLM(tokenizer, max_length=64, packing=True)([{"input_ids": a}, {"input_ids": b}])
real = batch["position_ids"][0, : len(a) + len(b)]
assert batch["position_ids"].shape[0] == 1 and int((real == 0).sum()) == 2, batch  # one row, two documents
masked = DataCollatorForMaskedLM(tokenizer, seed=0)([{"input_ids": a * 8}])
assert masked["labels"].shape == (1, len(a) * 8)
print("ppl", round(load_metric("perplexity").compute(nll=[3.912], num_tokens=[3])["perplexity"], 2))
import importlib, pkgutil
for info in pkgutil.walk_packages(hf_lmobj.__path__, "hf_lmobj."):  # every core module imports without the extras
    importlib.import_module(info.name)
from hf_lmobj.config import resolve_config
print("config", resolve_config("causal/demo").parent.name)  # found beside the recipes, which stay unimported
print("modules", sorted(m for m in sys.modules if m.startswith("hf_lmobj.recipes")))
"""


@pytest.mark.slow
def test_core_imports_and_works_without_the_recipe_extras(tmp_path):
    python = _venv(tmp_path / "venv", RECIPE_EXTRA)
    done = _run(python, ["-c", f"import sys; sys.path.insert(0, {str(REPO)!r}); exec({CORE_USE!r})"], tmp_path)
    assert "ppl 3.68" in done.stdout and "config causal" in done.stdout
    assert "modules []" in done.stdout, "the core imported the recipes"


def _build_wheel(out: Path) -> Path:
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(REPO)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (wheel,) = out.glob("hf_lmobj-*.whl")
    return wheel


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The wheel of the clone as it is now, built once for this module."""
    return _build_wheel(tmp_path_factory.mktemp("dist"))


#: Repository folder -> where it lands in the wheel (recipes/ and model_cards/ ship inside the package).
WHEEL_HOMES = {"hf_lmobj": "hf_lmobj", "recipes": "hf_lmobj/recipes", "model_cards": "hf_lmobj/model_cards"}
#: The files a package folder ships: modules, recipe configs, metric cards and requirements, card templates.
SHIPPED_SUFFIXES = (".py", ".yaml", ".md", ".txt")


@pytest.mark.slow
def test_every_folder_of_the_package_lands_in_the_wheel(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    missing, folders = [], set()
    for folder, home in WHEEL_HOMES.items():
        for path in sorted((REPO / folder).rglob("*")):
            if path.is_file() and path.suffix in SHIPPED_SUFFIXES and "__pycache__" not in path.parts:
                relative = path.relative_to(REPO / folder).as_posix()
                folders.add(path.parent)
                if f"{home}/{relative}" not in names:
                    missing.append(str(path.relative_to(REPO)))
    assert not missing, f"not in the wheel: {missing}"
    assert {REPO / "recipes" / "runtime", REPO / "recipes" / "configs" / "span", REPO / "model_cards"} <= folders
    outside = sorted(name for name in names if not name.startswith(("hf_lmobj/", "hf_lmobj-")))
    assert not outside, f"the wheel ships files outside the package: {outside}"


@pytest.mark.slow
def test_the_wheel_ships_recipes_configs_and_cards_and_runs_them_by_config_name(wheel, tmp_path):
    python = _venv(tmp_path / "venv", ())
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
        env=clean_env(),
    )
    empty = tmp_path / "work"
    empty.mkdir()
    for config in ("causal/demo", "masked/bert_tiny", "span/t5_tiny"):
        out = empty / config.replace("/", "_")
        _run(
            python,
            [
                "-m",
                "accelerate.commands.launch",
                "--num_processes",
                "1",
                "--num_machines",
                "1",
                "--mixed_precision",
                "no",
                "--dynamo_backend",
                "no",
                "-m",
                "hf_lmobj.recipes.pretrain",
                "--config",
                config,
                "--max_steps",
                "2",
                *QUICK,
                "--output_dir",
                str(out),
            ],
            empty,
        )
        for produced in ("model.safetensors", "metrics.json", "loss_curve.png", "README.md"):
            assert (out / produced).is_file(), f"{config}: no {produced}"
        assert "hf_lmobj" in (out / "README.md").read_text()
    location = _run(python, ["-c", "import hf_lmobj; print(hf_lmobj.__file__)"], empty).stdout
    assert str(REPO) not in location, "the test ran the clone, not the wheel"
    _the_installed_command_line_trains_by_config_name(python.parent / "hf-lmobj", tmp_path)


def _the_installed_command_line_trains_by_config_name(script: Path, tmp_path: Path) -> None:
    """The wheel's console script, from an empty directory: ``--help`` lists the commands, ``pretrain`` trains."""
    empty = tmp_path / "cli_work"
    empty.mkdir()
    listing = _run(script, ["--help"], empty).stdout
    assert all(f"\n    {command} " in listing for command in COMMANDS), listing
    out = tmp_path / "cli_run"
    _run(script, ["pretrain", "--config", "causal/demo", *SHORT_RUN, "--output_dir", str(out)], empty)
    for produced in ("model.safetensors", "metrics.json", "README.md"):
        assert (out / produced).is_file(), f"hf-lmobj pretrain: no {produced}"
    assert "hf_lmobj" in (out / "README.md").read_text() and not any(empty.iterdir()), "it wrote outside --output_dir"
