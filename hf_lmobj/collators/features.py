"""Reading one feature's token ids, checked where they enter the per-example collators.

A collator gets features from users' datasets: lists or tensors, sometimes floats, sometimes ids
of another tokenizer. :func:`token_ids` turns one feature's ``input_ids`` into a 1D int64 array
or rejects it with an error naming the feature, the field and the fix, before anything reaches
torch. The checks themselves are :mod:`hf_lmobj.checks`'s, shared with every entry point.

Example:
    >>> token_ids({"input_ids": [5, 6, 7]}, index=0, vocab_size=10).tolist()
    [5, 6, 7]
    >>> token_ids({"input_ids": [5.5]}, index=3, vocab_size=10)
    Traceback (most recent call last):
    ...
    TypeError: feature 3: input_ids must be a 1D list of ints, got dtype float64
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from hf_lmobj.checks import check_id_range, id_sequence


def check_feature_mapping(feature: Any, index: int) -> Mapping[str, Any]:
    """``feature`` itself when it is a mapping holding ``input_ids``, else a clear error."""
    if not isinstance(feature, Mapping):
        raise TypeError(f"feature {index} must be a dict with 'input_ids', got {type(feature).__name__}")
    if "input_ids" not in feature:
        raise ValueError(f"feature {index} has no 'input_ids' (keys: {sorted(feature)}); tokenize first")
    return feature


def token_ids(feature: Any, index: int, vocab_size: int) -> np.ndarray:
    """``feature["input_ids"]`` checked: a mapping that has it, ints, 1D, non-empty, in range."""
    ids = id_sequence(check_feature_mapping(feature, index)["input_ids"], "input_ids", f"feature {index}")  # (L,)
    if ids.size == 0:
        raise ValueError(f"feature {index}: input_ids is empty; filter out empty documents first")
    check_id_range(ids, vocab_size, "input_ids", f"feature {index}")
    return ids


def numbered_features(masks: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """(F,) bool: which features number their documents in ``attention_mask`` (a packed row), unchecked.

    A feature is numbered when some value of its mask is above 1: ``2, 2, 3, 3`` as
    :func:`~hf_lmobj.packing.dataset.pack_dataset` writes a packed row, or ``1, 1, 2`` (axolotl's);
    0s and 1s alone are an ordinary mask. ``masks`` (N,) holds the features' masks back to back,
    ``lengths`` (F,) their lengths (0 allowed: not numbered). The values' own checks are the caller's.

    Example:
        >>> numbered_features(np.array([2, 2, 3, 1, 1, 0, 1, 2]), np.array([3, 3, 0, 2])).tolist()
        [True, False, False, True]
    """
    lengths = np.asarray(lengths, dtype=np.int64)  # (F,)
    above = np.concatenate(([0], np.cumsum(np.asarray(masks) > 1)))  # (N + 1,) values > 1 before each token
    ends = np.cumsum(lengths)  # (F,)
    return above[ends] > above[ends - lengths]


def refuse_numpy_call(self: Any, features: Any) -> dict[str, Any]:
    """``collator(features, return_tensors="np")``: these collators build torch tensors only; say so clearly."""
    raise ValueError(
        f"{type(self).__name__} returns torch tensors only: call it with return_tensors='pt' (or leave it out); "
        "got return_tensors='np' (convert the batch with tensor.numpy() if you need arrays)"
    )
