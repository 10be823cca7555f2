"""The folders the wheel ships inside the package, ``recipes/`` and ``model_cards/``, wherever hf_lmobj runs from.

The repository keeps them at the top level and the wheel ships them as ``hf_lmobj/recipes`` and
``hf_lmobj/model_cards``. They are looked up beside this package's own files first (the wheel's, then
the clone's top-level folders), so a clone always reads its own, even with another checkout installed
in editable mode; an import hook's mapping is the last resort. The library reads their files
(shipped configs, card templates) and never imports their code.

Example:
    >>> (shipped_folder("recipes") / "configs" / "causal" / "demo.yaml").is_file()
    True
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

SHIPPED_FOLDERS = ("recipes", "model_cards")


def shipped_folder(name: str) -> Path:
    """``<name>/`` beside this package: ``hf_lmobj/<name>`` in a wheel, ``<clone>/<name>`` in a clone."""
    if name not in SHIPPED_FOLDERS:
        raise ValueError(f"shipped_folder: {name!r} is not shipped with hf_lmobj; choose one of {SHIPPED_FOLDERS}")
    package = Path(__file__).resolve().parent
    for folder in (package / name, package.parent / name):  # the wheel's layout, then the clone's
        if folder.is_dir():
            return folder
    spec = importlib.util.find_spec(f"hf_lmobj.{name}")  # found, not imported: an install mapping it elsewhere
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    raise FileNotFoundError(f"hf_lmobj.{name} is not beside {package} nor installed; reinstall hf_lmobj")
