"""The recipes guide's "The recipes' parts in your own script" (docs/guides/recipes.md) runs as printed: it trains, writes its card, refuses a
rerun over its checkpoints, and continues with ``--resume_from_checkpoint last``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.testing_utils import REPO

HEADING = "## The recipes' parts in your own script"
PAGE = REPO / "docs" / "guides" / "recipes.md"


def own_script() -> str:
    """The first ``python`` block after :data:`HEADING` in :data:`PAGE`."""
    text = PAGE.read_text(encoding="utf-8")
    section = text[text.index(HEADING) :]
    start = section.index("```python\n") + len("```python\n")
    return section[start : section.index("```\n", start)]


def _run(script: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    return subprocess.run(
        [sys.executable, str(script), *args], cwd=script.parent, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.mark.slow  # three runs of the script (~25 s)
def test_the_own_script_trains_refuses_a_rerun_and_resumes(tmp_path):
    script = tmp_path / "own.py"
    script.write_text(own_script(), encoding="utf-8")
    flags = [
        "--output_dir",
        "out",
        "--max_steps",
        "4",
        "--save_steps",
        "2",
        "--torch_threads",
        "1",
        "--report_to",
        "none",
    ]
    first = _run(script, *flags)
    assert first.returncode == 0, first.stderr[-3000:]
    out = tmp_path / "out"
    assert {"README.md", "loss_curve.png", "run_decisions.json", "checkpoint-4"} <= {p.name for p in out.iterdir()}
    assert json.loads((out / "run_decisions.json").read_text())["max_steps"] == 4
    rerun = _run(script, *flags)
    assert rerun.returncode != 0 and "holds checkpoints of an earlier run" in rerun.stderr
    resumed = _run(script, *flags, "--max_steps", "6", "--resume_from_checkpoint", "last")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert (out / "checkpoint-6").is_dir()
