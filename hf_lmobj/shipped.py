"""The folders the wheel ships inside the package, ``recipes/`` and ``model_cards/``, wherever hf_lmobj runs from.

The repository keeps them at the top level and the wheel (or an editable install) maps them to
``hf_lmobj.recipes`` and ``hf_lmobj.model_cards``; a clone put on ``sys.path`` without installing has
only the top-level folders. The library reads their files (shipped configs, card templates) and
never imports their code.

Example:
    >>> (shipped_folder("recipes") / "configs" / "causal" / "demo.yaml").is_file()
    True
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

__all__ = ["SHIPPED_FOLDERS", "shipped_folder"]

SHIPPED_FOLDERS = ("recipes", "model_cards")


def shipped_folder(name: str) -> Path:
    """``hf_lmobj.<name>``'s folder when installed (found, not imported), else the clone's top-level ``<name>/``."""
    if name not in SHIPPED_FOLDERS:
        raise ValueError(f"shipped_folder: {name!r} is not shipped with hf_lmobj; choose one of {SHIPPED_FOLDERS}")
    spec = importlib.util.find_spec(f"hf_lmobj.{name}")
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    clone = Path(__file__).resolve().parent.parent / name
    if not clone.is_dir():
        raise FileNotFoundError(f"hf_lmobj.{name} is not installed and {clone} does not exist; reinstall hf_lmobj")
    return clone
