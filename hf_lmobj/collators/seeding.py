"""Per-example randomness that depends only on (seed, epoch, example), never on the batch.

The same ``(seed, epoch, key)`` always gives the same draws. Why: noise drawn from one generator per
batch would change with the batch an example lands in, the DataLoader workers, the world size and
the resume point.

:func:`example_seeds` is the one rule every random collator (masked, span, UL2, BART, FIM) uses:

* an example's key is its index when the feature carries one (``"idx"``, else ``"index"``), else
  its token ids (identical documents then share a mask within an epoch, which is harmless); each
  example is keyed on its own, so neither the key nor the seed depends on the rest of the batch;
* its seed is BLAKE2b of the key, keyed by ``(seed, epoch)`` (63 bits);
* ``seed=None`` draws a fresh base seed from the OS on every call (not the global RNG): unseeded
  collators give new noise on every call, still keyed per example within that call.

The masked collator feeds these seeds to counter-based uniforms
(:func:`hf_lmobj.collators._masking.counter_uniforms`); the sequence-to-sequence collators and FIM
seed one ``torch.Generator`` per example with them.

Example:
    >>> doc, indexed = {"input_ids": [5, 6, 7]}, {"input_ids": [8, 9], "idx": 4}
    >>> alone = example_seeds([doc], seed=0, epoch=1)
    >>> example_seeds([indexed, doc], seed=0, epoch=1)[1] == alone[0]  # its company changes nothing
    True
    >>> example_seeds([doc], seed=0, epoch=2) == alone  # another epoch, another mask
    False
    >>> g = torch.Generator().manual_seed(alone[0])  # one generator per example (span, UL2, BART, FIM)
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from hf_lmobj.checks import check_count, id_sequence
from hf_lmobj.collators.features import check_feature_mapping

INDEX_KEYS = ("idx", "index")


def example_key(feature: Mapping[str, Any], index: int = 0) -> bytes:
    """Stable bytes naming one example: its index if present, else its ``input_ids`` content.

    ``index`` is the feature's position, only used in error messages.

    Example:
        >>> example_key({"input_ids": [1], "idx": 3}), example_key({"input_ids": [1, 2]})[:9]
        (b'i3', b'c\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x00')
    """
    for name in INDEX_KEYS if isinstance(feature, Mapping) else ():
        if name in feature:  # an index, checked: 2.7 or "3" would silently share another example's key
            fix = "an example index keys its randomness and must be an int >= 0"
            return b"i" + str(check_count(feature[name], f"feature {index} {name!r}", fix=fix)).encode()
    ids = check_feature_mapping(feature, index)["input_ids"]
    return _content_key(id_sequence(ids, "input_ids", f"feature {index}"))


def _content_key(ids: np.ndarray) -> bytes:
    return b"c" + np.ascontiguousarray(ids, dtype=np.int64).tobytes()


def example_seed(seed: int, epoch: int, key: bytes) -> int:
    """A 63-bit seed mixed from ``seed``, ``epoch`` and the example ``key`` (BLAKE2b)."""
    digest = hashlib.blake2b(key, digest_size=8, key=f"{seed}:{epoch}".encode()[:64]).digest()
    return int.from_bytes(digest, "little") >> 1


def example_seeds(
    features: Sequence[Mapping[str, Any]],
    seed: int | None,
    epoch: int,
    contents: Sequence[np.ndarray] | None = None,
) -> list[int]:
    """The seed of each example's randomness: ``f(seed, epoch, key)``, one per feature, in order.

    The key is the feature's ``idx`` / ``index`` when it has one, else its token ids, each
    computed from that feature alone (see the module docstring). ``seed=None`` draws one fresh
    OS seed for this call. ``contents`` optionally gives each feature's token ids already read
    (1D integer arrays, e.g. slices of a collator's flattened batch) so they are not read again;
    they must equal the features' ``input_ids``.

    Example:
        >>> seeds = example_seeds([{"input_ids": [5, 6]}, {"input_ids": [5, 6], "idx": 0}], seed=0, epoch=0)
        >>> seeds == [example_seed(0, 0, b"c" + np.array([5, 6], dtype=np.int64).tobytes()), example_seed(0, 0, b"i0")]
        True
        >>> example_seeds([{"input_ids": [5], "idx": -1}], seed=0, epoch=0)
        Traceback (most recent call last):
        ...
        ValueError: feature 0 'idx' is -1; counts cannot be negative; an example index keys its randomness and must be an int >= 0
    """
    base = resolve_seed(seed)
    epoch = check_count(epoch, "epoch")
    if contents is not None and len(contents) != len(features):
        raise ValueError(f"contents has {len(contents)} entries for {len(features)} features; give one per feature")
    seeds = []
    for index, feature in enumerate(features):
        if contents is not None and isinstance(feature, Mapping) and not any(k in feature for k in INDEX_KEYS):
            key = _content_key(contents[index])
        else:
            key = example_key(feature, index)
        seeds.append(example_seed(base, epoch, key))
    return seeds


def example_generator(seed: int, epoch: int, key: bytes) -> torch.Generator:
    """A CPU ``torch.Generator`` seeded by :func:`example_seed` (for callers that hold a key, not a feature)."""
    return torch.Generator().manual_seed(example_seed(seed, epoch, key))


def resolve_seed(seed: int | None) -> int:
    """``seed`` itself, or a fresh one from the OS when it is None (unseeded but not global)."""
    if seed is None:
        return int.from_bytes(os.urandom(8), "little") >> 1
    try:
        return check_count(seed, "seed")
    except (TypeError, ValueError) as error:
        raise type(error)(f"seed must be a non-negative int or None ({error})") from None
