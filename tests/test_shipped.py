"""hf_lmobj.shipped: recipes/ and model_cards/ found beside the package (the wheel's layout, then the clone's), an
import hook's mapping last; anything else refused by name."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hf_lmobj import shipped
from hf_lmobj.shipped import SHIPPED_FOLDERS, shipped_folder
from tests.testing_utils import REPO


@pytest.mark.parametrize("name", SHIPPED_FOLDERS)
def test_a_clone_reads_its_own_top_level_folders(name):
    assert shipped_folder(name) == REPO / name


def _copy_of_the_package(root: Path, layout: str) -> Path:
    """hf_lmobj/shipped.py alone, with recipes/ beside it as the wheel (``wheel``) or the clone (``clone``) lays it."""
    package = root / "hf_lmobj"
    package.mkdir(parents=True)
    shutil.copy(shipped.__file__, package / "shipped.py")
    (package / "__init__.py").write_text("")
    configs = (package if layout == "wheel" else root) / "recipes" / "configs"
    configs.mkdir(parents=True)
    return configs.parent


@pytest.mark.parametrize("layout", ["wheel", "clone"])
def test_each_layout_is_found_even_with_another_checkout_on_the_path(tmp_path, layout):
    expected = _copy_of_the_package(tmp_path, layout)
    code = "from hf_lmobj.shipped import shipped_folder; print(shipped_folder('recipes'))"
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, check=True)
    assert Path(done.stdout.strip()) == expected  # not this checkout's, which the editable install maps


def test_an_import_mapping_is_the_last_resort(tmp_path, monkeypatch):
    monkeypatch.setattr(shipped, "__file__", str(tmp_path / "hf_lmobj" / "shipped.py"))  # nothing beside it
    mapped = importlib.util.find_spec("hf_lmobj.recipes")
    if mapped is None:
        with pytest.raises(FileNotFoundError, match="hf_lmobj.recipes is not beside .* nor installed"):
            shipped_folder("recipes")
    else:
        assert shipped_folder("recipes") == Path(next(iter(mapped.submodule_search_locations)))


def test_a_folder_that_is_not_shipped_is_refused_by_name():
    with pytest.raises(ValueError, match="'tests' is not shipped with hf_lmobj; choose one of"):
        shipped_folder("tests")
