"""hf_lmobj.shipped: recipes/ and model_cards/ found beside the package (the wheel's layout, then the clone's), an
import hook's mapping last; anything else refused by name. (tests/integration/test_shipped.py runs each layout in a
fresh interpreter.)"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from hf_lmobj import shipped
from hf_lmobj.shipped import SHIPPED_FOLDERS, shipped_folder
from tests.testing_utils import REPO


@pytest.mark.parametrize("name", SHIPPED_FOLDERS)
def test_a_clone_reads_its_own_top_level_folders(name):
    assert shipped_folder(name) == REPO / name


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
