"""Checks every training recipe makes before any data: the ``TrainingArguments`` it will meet and its output folder.

``TrainingArguments`` accepts a NaN learning rate, a batch of 0 rows, ``max_steps: 0`` (which then
trains by epochs), a negative seed and more; each fails, or trains something else, only after the
data is ready or the model has trained. :func:`check_training_arguments` refuses them by name when
the arguments are parsed; :func:`check_output_dir` refuses a folder the run could not write its model
and card into (a file, the root, a read-only place), so no trained model is lost at the save.

Example:
    >>> from transformers import TrainingArguments
    >>> args = TrainingArguments(output_dir="out/x", learning_rate=float("nan"), report_to="none", use_cpu=True)
    >>> check_training_arguments(args)
    Traceback (most recent call last):
    ...
    ValueError: learning_rate must be a finite number in [0, inf), got nan; the peak learning rate
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hf_lmobj.checks import SEED_LIMIT, check_length, check_number


def check_training_arguments(args: Any, needs_max_steps: str | None = None) -> None:
    """The ``TrainingArguments`` fields a recipe relies on, in their ranges; ``needs_max_steps`` says why the
    run needs ``max_steps > 0`` (a stream has no epoch length, a time budget lowers a step count), None if not."""
    for name, low, hint in (
        ("learning_rate", 0.0, "the peak learning rate"),
        ("weight_decay", 0.0, "decoupled weight decay; 0 = none"),
        ("adam_epsilon", 0.0, "AdamW's epsilon (1e-8)"),
    ):
        check_number(getattr(args, name), name, low, hint=hint)
    for name in ("adam_beta1", "adam_beta2"):
        check_number(getattr(args, name), name, 0.0, 1.0, high_open=True, hint="AdamW's moment decay (0.9, 0.999)")
    check_number(args.max_grad_norm, "max_grad_norm", 0.0, optional=True, hint="gradient clipping; 0 or None = none")
    check_number(args.label_smoothing_factor, "label_smoothing_factor", 0.0, 1.0, high_open=True)
    for name in ("per_device_train_batch_size", "per_device_eval_batch_size", "gradient_accumulation_steps"):
        check_length(getattr(args, name), name, 1)
    check_length(args.dataloader_num_workers, "dataloader_num_workers", 0, "0 = load in the main process")
    for name in ("seed", "data_seed"):
        value = check_length(getattr(args, name), name, 0, "a seed", optional=name == "data_seed")
        if value is not None and value >= SEED_LIMIT:
            raise ValueError(f"{name} must be an int in [0, 2**32) (numpy's seed range), got {value}")
    _check_steps(args, needs_max_steps)
    check_output_dir(args.output_dir)


def _check_steps(args: Any, needs_max_steps: str | None) -> None:
    steps = check_length(args.max_steps, "max_steps", -1, "-1 = train num_train_epochs")
    if steps == 0:
        raise ValueError("max_steps must be -1 (train num_train_epochs) or a number of steps >= 1, got 0")
    if steps == -1 and needs_max_steps:
        raise ValueError(f"max_steps must be >= 1: {needs_max_steps}; set --max_steps N")
    if steps == -1:
        check_number(args.num_train_epochs, "num_train_epochs", 0.0, low_open=True, hint="with max_steps -1")
    for name in ("logging", "eval", "save"):
        strategy = getattr(args, f"{name}_strategy", None)
        if str(getattr(strategy, "value", strategy)) == "steps" and getattr(args, f"{name}_steps") is not None:
            check_number(getattr(args, f"{name}_steps"), f"{name}_steps", 0.0, low_open=True,
                         hint=f"every N steps (a float < 1: a share of max_steps) with {name}_strategy steps")  # fmt: skip


def check_output_dir(output_dir: Any) -> Path:
    """A folder the run can write into: not a file, not the file-system root, under a writable existing folder.

    Example:
        >>> check_output_dir("/")
        Traceback (most recent call last):
        ...
        ValueError: output_dir '/' names no folder (the model card is named after it); give a folder such as out/run
    """
    if not isinstance(output_dir, (str, os.PathLike)) or not str(output_dir).strip():
        raise ValueError(f"output_dir must be a folder path such as out/run, got {output_dir!r}")
    path = Path(output_dir).expanduser().resolve()
    if not path.name:
        raise ValueError(
            f"output_dir {str(output_dir)!r} names no folder (the model card is named after it); give a folder "
            "such as out/run"
        )
    if path.exists() and not path.is_dir():
        raise ValueError(f"output_dir {output_dir} is a file, not a folder; give another --output_dir")
    existing = next(parent for parent in (path, *path.parents) if parent.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise ValueError(f"output_dir {output_dir}: {existing} is not a folder this process may write into")
    return path
