"""The Trainer callback that moves collators to the next epoch's randomness (a Trainer extension point).

Kept apart from :mod:`hf_lmobj.collators.seeding` because subclassing ``TrainerCallback`` imports
``transformers.trainer_utils`` (and peft with it): a collator does not pay for it.
"""

from __future__ import annotations

import math
from typing import Any

from transformers import TrainerCallback


class CollatorEpochCallback(TrainerCallback):
    """Advance ``set_epoch`` of one or more collators at the start of every Trainer epoch.

    The epoch is ``floor(state.epoch)``, so a run resumed mid-epoch gets the epoch it stopped in.

    Example:
        >>> from types import SimpleNamespace
        >>> class Counter:
        ...     def set_epoch(self, n): self.n = n
        >>> c = Counter()
        >>> _ = CollatorEpochCallback(c).on_epoch_begin(None, SimpleNamespace(epoch=2.5), None)
        >>> c.n
        2
    """

    def __init__(self, *collators: Any) -> None:
        if not collators or not all(hasattr(c, "set_epoch") for c in collators):
            raise TypeError("CollatorEpochCallback needs one or more collators with set_epoch()")
        self.collators = collators

    def on_epoch_begin(self, args, state, control, **kwargs):
        epoch = math.floor((state.epoch or 0) + 1e-6)
        for collator in self.collators:
            collator.set_epoch(epoch)
        return control
