"""Leave ``torch.distributed`` at the end of a run in the one order that cannot hang a gloo process.

Why: a DDP reducer that holds the last reference to a gloo process group destroys it with the GIL held,
while a gloo worker thread may still need the GIL to free the tensors of the last collective; the process
then hangs at exit (pytorch/pytorch#56297), and one left to the interpreter's finalizer can abort instead.
Freed models first, the group is destroyed from Python, which releases the GIL while gloo's threads join.

Example:
    >>> close_distributed()  # no trainer, no process group: nothing to do
"""

from __future__ import annotations

import gc
import weakref
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from transformers import Trainer


def close_distributed(trainer: Trainer | None = None) -> None:
    """Free ``trainer``'s wrapped model and prepared objects, then destroy the default process group.

    The trainer cannot train again afterwards (its accelerator forgets the prepared model and optimizer);
    ``trainer.model`` (the unwrapped model) and ``trainer.state`` stay readable. Call it last, after saving.
    Raises ``RuntimeError`` when something outside the trainer still holds the wrapped (DDP) model, since
    destroying the group then would be the hang this function exists to avoid.
    """
    wrapped = None
    if trainer is not None:
        wrapped = _release_wrapped_model(trainer)
    gc.collect()
    if wrapped is not None and wrapped() is not None:
        raise RuntimeError(
            f"close_distributed: {type(wrapped()).__name__} is still referenced outside the trainer; delete "
            "your own references to trainer.model_wrapped before closing the process group."
        )
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def _release_wrapped_model(trainer: Trainer) -> weakref.ref | None:
    """Drop the trainer's and its accelerator's references to the wrapped model; a weak reference to it."""
    wrapped = trainer.model_wrapped
    watch = weakref.ref(wrapped) if wrapped is not None and wrapped is not trainer.model else None
    trainer.accelerator.free_memory()  # its lists hold the DDP / FSDP wrapper, optimizer and loaders
    trainer.model_wrapped = trainer.model
    del wrapped
    return watch
