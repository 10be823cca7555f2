"""``--config x.yaml`` plus command-line overrides for argument dataclasses (TRL style).

Every key of the YAML file must be a field of one of the dataclasses (``TrainingArguments``
included); a command-line flag wins over the file. Unknown keys are an error, never ignored.

Example:
    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class Args:
    ...     steps: int = 1
    ...     name: str = "x"
    >>> import tempfile, os
    >>> path = os.path.join(tempfile.mkdtemp(), "c.yaml")
    >>> _ = open(path, "w").write("steps: 5\\nname: from_file\\n")
    >>> parse_args_with_config((Args,), ["--config", path, "--name", "cli"])
    (Args(steps=5, name='cli'),)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Sequence

import yaml
from transformers import HfArgumentParser


def load_yaml_config(path: str | Path) -> dict[str, Any]:
    """Read a YAML mapping; a missing file or a non-mapping top level is a clear error."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"--config {path}: no such file")
    data = yaml.safe_load(path.read_text()) or {}
    if not isinstance(data, dict):
        raise ValueError(f"--config {path}: the top level must be a mapping of argument: value")
    return data


def parse_args_with_config(
    dataclass_types: Sequence[type], args: Sequence[str] | None = None
) -> tuple[Any, ...]:
    """Parse ``args`` (default: ``sys.argv[1:]``) into instances of ``dataclass_types``.

    ``--config FILE`` supplies defaults from YAML; any other flag overrides them.
    """
    pre = argparse.ArgumentParser(add_help=False)
    pre.add_argument("--config", default=None)
    known, rest = pre.parse_known_args(args)
    parser = HfArgumentParser(list(dataclass_types))
    if known.config is not None:
        config = load_yaml_config(known.config)
        fields = {action.dest for action in parser._actions}
        unknown = sorted(set(config) - fields)
        if unknown:
            raise ValueError(
                f"--config {known.config}: unknown keys {unknown}; each key must be a field of "
                f"{[t.__name__ for t in dataclass_types]}"
            )
        parser.set_defaults(**config)
    return tuple(parser.parse_args_into_dataclasses(args=rest, look_for_args_file=False))


def cpu_aware_argv(argv: Sequence[str] | None = None) -> list[str]:
    """``argv`` (default ``sys.argv[1:]``) plus ``--use_cpu true`` when no CUDA device is visible.

    accelerate's multi-process launcher starts CPU workers that join one gloo group only when
    ``TrainingArguments.use_cpu`` is set; without it each process would train on its own.
    """
    import torch

    argv = list(sys.argv[1:] if argv is None else argv)
    return argv if torch.cuda.is_available() else [*argv, "--use_cpu", "true"]
