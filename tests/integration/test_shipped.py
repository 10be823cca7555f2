"""hf_lmobj.shipped in a fresh interpreter: recipes/ found beside a copy of the package, laid out as the wheel or
the clone lays it, even with this checkout (the editable install) on the path (tests/test_shipped.py checks the
rest in-process)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hf_lmobj import shipped


def _copy_of_the_package(root: Path, layout: str) -> Path:
    """hf_lmobj/shipped.py alone, with recipes/ beside it as the wheel (``wheel``) or the clone (``clone``) lays it."""
    package = root / "hf_lmobj"
    package.mkdir(parents=True)
    shutil.copy(shipped.__file__, package / "shipped.py")
    (package / "__init__.py").write_text("")
    configs = (package if layout == "wheel" else root) / "recipes" / "configs"
    configs.mkdir(parents=True)
    return configs.parent


@pytest.mark.slow
@pytest.mark.parametrize("layout", ["wheel", "clone"])
def test_each_layout_is_found_even_with_another_checkout_on_the_path(tmp_path, layout):
    expected = _copy_of_the_package(tmp_path, layout)
    code = "from hf_lmobj.shipped import shipped_folder; print(shipped_folder('recipes'))"
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert Path(done.stdout.strip()) == expected  # not this checkout's, which the editable install maps
