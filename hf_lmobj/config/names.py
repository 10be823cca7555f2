"""Config names: ``causal/demo`` is ``configs/causal/demo.yaml`` beside the recipes (a clone or a wheel alike).

Example:
    >>> resolve_config("causal/demo").parent.name
    'causal'
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from pathlib import Path

from hf_lmobj.shipped import shipped_folder


def suggest(word: str, choices: Iterable[str], what: str = "") -> str:
    """``"; did you mean X?"`` naming the choices closest to ``word`` (difflib), or ``""`` when none is close.

    ``what`` words each choice (``"--{}"`` gives ``--max_steps``).

    Example:
        >>> suggest("hiden_size", ["hidden_size", "max_steps"]), suggest("zzz", ["hidden_size"])
        ('; did you mean hidden_size?', '')
    """
    close = difflib.get_close_matches(str(word), sorted(set(choices)), n=3, cutoff=0.6)
    if not close:
        return ""
    return f"; did you mean {' or '.join((what or '{}').format(name) for name in close)}?"


def _configs_root() -> Path:
    """``configs/`` beside the recipes: ``recipes/configs`` in a clone, ``hf_lmobj/recipes/configs`` installed."""
    return shipped_folder("recipes") / "configs"


def shipped_configs() -> list[str]:
    """Names of the configs shipped with the recipes, e.g. ``['causal/demo', 'masked/bert_tiny', ...]``."""
    root = _configs_root()
    return sorted(str(p.relative_to(root).with_suffix("")) for p in root.glob("*/*.yaml"))


def resolve_config(name: str | Path, beside: Path | None = None) -> Path:
    """A path to an existing file, else a shipped config name (``causal/demo`` or ``causal/demo.yaml``).

    A relative path is looked up in the working directory, or in ``beside`` when given (a ``base:``
    resolves beside the file naming it, never in whatever folder the run happens to start from).

    Raises:
        ValueError: an empty name, a folder, or neither a file nor a shipped config; the message names the
            closest shipped configs and lists them all.
    """
    if not str(name).strip():
        raise ValueError(
            f"--config {str(name)!r}: empty; give a YAML file or a shipped config name such as causal/demo"
        )
    path = Path(name)
    local = path if beside is None else beside / path
    if local.is_file():
        return local
    relative = path if path.suffix == ".yaml" else Path(f"{path}.yaml")
    if not path.is_absolute() and (_configs_root() / relative).is_file():
        return _configs_root() / relative
    if local.is_dir():
        yamls = sorted(p.name for p in local.glob("*.yaml"))
        listed = ", ".join(yamls[:8]) + (", ..." if len(yamls) > 8 else "")
        raise ValueError(
            f"--config {name}: a folder, not a YAML file; name one file" + (f" in it ({listed})" if yamls else "")
        )
    shipped = shipped_configs()
    raise ValueError(
        f"--config {name}: no such file, nor a shipped config"
        + (f" (a relative path is looked up in {beside})" if beside is not None and not path.is_absolute() else "")
        + f"; shipped: {', '.join(shipped)}"
        + suggest(relative.with_suffix("").as_posix(), shipped)
    )
