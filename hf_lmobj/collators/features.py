"""Reading one feature's token ids, checked where they enter every collator.

A collator gets features from users' datasets: lists or tensors, sometimes floats, sometimes ids
of another tokenizer. Each is turned into a 1D int64 array here or rejected with an error naming
the feature, the field and the fix, before anything reaches torch.

Example:
    >>> token_ids({"input_ids": [5, 6, 7]}, index=0, vocab_size=10).tolist()
    [5, 6, 7]
    >>> token_ids({"input_ids": [5.5]}, index=3, vocab_size=10)
    Traceback (most recent call last):
    ...
    TypeError: feature 3: input_ids must be a 1D list of ints, got dtype float64
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np
import torch


def as_int_array(value: Any, name: str, index: int) -> np.ndarray:
    """One feature field as a 1D int64 array, or a clear TypeError / ValueError."""
    if isinstance(value, torch.Tensor):
        if value.is_floating_point() or value.is_complex() or value.dtype == torch.bool:
            raise TypeError(f"feature {index}: {name} must be a 1D list of ints, got dtype {value.dtype}")
        value = value.detach().cpu().numpy()
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as error:
        raise TypeError(f"feature {index}: {name} must be a 1D list of ints ({error})") from None
    if array.size == 0 and array.ndim == 1:
        return array.astype(np.int64)  # [] has no element type to check
    if array.dtype.kind not in "iu":
        raise TypeError(f"feature {index}: {name} must be a 1D list of ints, got dtype {array.dtype}")
    if array.ndim != 1:
        raise ValueError(
            f"feature {index}: {name} must be 1D (one sequence per feature), got shape {array.shape}"
        )
    return array.astype(np.int64, copy=False)


def check_vocabulary_range(ids: np.ndarray, vocab_size: int, name: str, index: int) -> None:
    """Every id in ``[0, vocab_size)``, or a ValueError that suggests a tokenizer mix-up."""
    if ids.size == 0:
        return
    low, high = int(ids.min()), int(ids.max())
    if low < 0 or high >= vocab_size:
        raise ValueError(
            f"feature {index}: {name} must lie in [0, len(tokenizer)={vocab_size}), got "
            f"[{low}, {high}]; was it tokenized with another tokenizer?"
        )


def token_ids(feature: Any, index: int, vocab_size: int) -> np.ndarray:
    """``feature["input_ids"]`` checked: a mapping that has it, ints, 1D, non-empty, in range."""
    if not isinstance(feature, Mapping):
        raise TypeError(f"feature {index} must be a dict with 'input_ids', got {type(feature).__name__}")
    if "input_ids" not in feature:
        raise ValueError(f"feature {index} has no 'input_ids' (keys: {sorted(feature)}); tokenize first")
    ids = as_int_array(feature["input_ids"], "input_ids", index)  # (L,)
    if ids.size == 0:
        raise ValueError(f"feature {index}: input_ids is empty; filter out empty documents first")
    check_vocabulary_range(ids, vocab_size, "input_ids", index)
    return ids
