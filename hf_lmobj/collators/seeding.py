"""Per-example randomness that depends only on (seed, epoch, example), never on the batch.

A collator that draws its noise from one generator for the whole batch gives an example different
masks depending on which batch it lands in, how many DataLoader workers there are, the world size
and the resume point. Keying a generator by the example itself removes all four: the same
``(seed, epoch, key)`` always gives the same draws.

The key is the example's index when the feature carries one (``"idx"`` / ``"index"``), else a
hash of its token ids (identical documents then share a mask within an epoch, which is harmless).

Example:
    >>> a = example_generator(seed=0, epoch=1, key=example_key({"input_ids": [5, 6, 7]}))
    >>> b = example_generator(seed=0, epoch=1, key=example_key({"input_ids": [5, 6, 7]}))
    >>> torch.equal(torch.rand(3, generator=a), torch.rand(3, generator=b))
    True
"""

from __future__ import annotations

import hashlib
import math
import os
from typing import Any, Mapping

import numpy as np
import torch
from transformers import TrainerCallback

from hf_lmobj.validation import check_count

INDEX_KEYS = ("idx", "index")


def example_key(feature: Mapping[str, Any]) -> bytes:
    """Stable bytes naming one example: its index if present, else its ``input_ids`` content."""
    for name in INDEX_KEYS:
        if name in feature:  # an index, checked: 2.7 or "3" would silently share another example's key
            return b"i" + str(check_count(feature[name], f"feature {name!r}")).encode()
    ids = feature["input_ids"]
    if isinstance(ids, torch.Tensor):
        array = ids.detach().cpu().numpy()
    else:
        array = np.asarray(ids)
    return b"c" + np.ascontiguousarray(array, dtype=np.int64).tobytes()


def example_seed(seed: int, epoch: int, key: bytes) -> int:
    """A 63-bit seed mixed from ``seed``, ``epoch`` and the example ``key`` (BLAKE2b)."""
    digest = hashlib.blake2b(key, digest_size=8, key=f"{seed}:{epoch}".encode()[:64]).digest()
    return int.from_bytes(digest, "little") >> 1


def example_generator(seed: int, epoch: int, key: bytes) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded by :func:`example_seed`."""
    return torch.Generator().manual_seed(example_seed(seed, epoch, key))


def resolve_seed(seed: int | None) -> int:
    """``seed`` itself, or a fresh one from the OS when it is None (unseeded but not global)."""
    if seed is None:
        return int.from_bytes(os.urandom(8), "little") >> 1
    try:
        return check_count(seed, "seed")
    except (TypeError, ValueError) as error:
        raise type(error)(f"seed must be a non-negative int or None ({error})") from None


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
