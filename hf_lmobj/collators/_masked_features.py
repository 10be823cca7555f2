"""The masked-LM collator's inputs: features read and checked, and the row limits of the model / tokenizer.

A feature is a dict with ``input_ids`` (plus the optional keys of :data:`ACCEPTED_KEYS`) or a bare
id sequence; :func:`_flatten` puts a batch back to back and checks each column, its errors naming
the feature and the field. :class:`_RowLimits` is what ``model=`` (else the tokenizer) allows a row;
"""

from __future__ import annotations

import itertools
import numbers
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from transformers import PreTrainedTokenizerBase
from transformers.tokenization_utils_base import VERY_LARGE_INTEGER

from hf_lmobj.checks import id_column, id_sequence

PER_TOKEN_KEYS = ("special_tokens_mask", "word_ids", "token_type_ids")
ACCEPTED_KEYS = frozenset({"input_ids", "attention_mask", "idx", "index", *PER_TOKEN_KEYS})


@dataclass(frozen=True)
class _RowLimits:
    """What a model (or, without one, the tokenizer) allows a batch: see "Row limit" in :mod:`hf_lmobj.collators.masked`.

    Attributes:
        positions: longest row (None: no known limit).
        source: who sets it, for messages (the model's class name, or the tokenizer's model_max_length).
        from_model: the limit is the model's position table (a longer row fails inside its forward).
        first_position: the model's first position id (RoBERTa: pad_token_id + 1), else 0.
        vocab_rows: rows of the model's input embedding (None without a model).
        type_vocab_size: the model's token-type vocabulary (None when it has none or without a model).
    """

    positions: int | None
    source: str
    from_model: bool = False
    first_position: int = 0
    vocab_rows: int | None = None
    type_vocab_size: int | None = None

    @classmethod
    def of(cls, model: nn.Module | None, tokenizer: PreTrainedTokenizerBase) -> _RowLimits:
        if model is None:
            limit = getattr(tokenizer, "model_max_length", None)
            real = (
                isinstance(limit, numbers.Integral) and not isinstance(limit, bool) and 0 < limit < VERY_LARGE_INTEGER
            )
            return cls(int(limit) if real else None, f"the tokenizer (model_max_length={limit})")
        # not at the top: hf_lmobj.models imports hf_lmobj.collators (no cycle at import time)
        from hf_lmobj.models.stock import model_position_limit, position_limit

        config = getattr(model, "config", None)
        table = getattr(config, "max_position_embeddings", None)
        own = position_limit(config) if config is not None else None
        first = table - own if isinstance(table, int) and isinstance(own, int) else 0
        embedding = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
        rows = getattr(getattr(embedding, "weight", None), "shape", (None,))[0]
        types = getattr(config, "type_vocab_size", None)
        limit = model_position_limit(model)
        return cls(limit, type(model).__name__, limit is not None, max(first, 0), rows, types)


def _as_mapping(feature: Any, index: int) -> Mapping[str, Any]:
    if isinstance(feature, Mapping):
        unknown = set(feature) - ACCEPTED_KEYS
        if unknown:
            raise ValueError(
                f"feature {index} has keys {sorted(unknown)} the masked-LM collator does not use; "
                f"remove those columns (it reads {sorted(ACCEPTED_KEYS)} and makes the labels)"
            )
        if "input_ids" not in feature:
            raise ValueError(f"feature {index} has no 'input_ids'")
        return feature
    if isinstance(feature, (list, tuple, np.ndarray, torch.Tensor)):
        return {"input_ids": feature}
    raise TypeError(
        f"feature {index} must be a dict with 'input_ids' or a sequence of ids, got {type(feature).__name__}"
    )


def _flatten(features: list[Mapping[str, Any]]) -> tuple[torch.Tensor, np.ndarray, dict[str, Any]]:
    """(N,) int64 ids of all features back to back, their lengths, and the per-token extras."""
    rows = [f["input_ids"] for f in features]
    lengths = np.fromiter((_length(r, "input_ids", i) for i, r in enumerate(rows)), dtype=np.int64, count=len(rows))
    for i, (feature, n) in enumerate(zip(features, lengths.tolist())):
        if n == 0:
            raise ValueError(f"feature {i} has no tokens; filter empty examples out first")
        _check_attention_mask(feature.get("attention_mask"), n, i)
    ids = torch.from_numpy(id_column(rows, "input_ids")[0])  # (N,)
    extras = {}
    for name in PER_TOKEN_KEYS:
        present = [name in f for f in features]
        if any(present) and not all(present):
            raise ValueError(f"{name!r} is in some features but not all; give it to every feature")
        if all(present):
            values = [f[name] for f in features]
            for i, (value, n) in enumerate(zip(values, lengths.tolist())):
                if _length(value, name, i) != n:
                    raise ValueError(
                        f"feature {i}: {name!r} has {len(value)} entries but input_ids has {n}; "
                        f"{name!r} must be as long as input_ids in every feature (one entry per token)"
                    )
            extras[name] = _per_token(name, values, int(lengths.sum()))
    return ids, lengths, extras


def _length(value: Any, field: str, index: int) -> int:
    """``len(value)`` of a per-token sequence, or a TypeError naming the feature (None, a number, a 0-d tensor)."""
    if isinstance(value, (torch.Tensor, np.ndarray)) and value.ndim == 0 or not hasattr(value, "__len__"):
        raise TypeError(
            f"feature {index}: {field} must be a 1D list of ints (one per token), got {type(value).__name__}"
        )
    return len(value)


def _check_attention_mask(mask: Any, length: int, index: int) -> None:
    """A feature's own ``attention_mask`` (optional): all ones, as long as its ids; zeros mean it was padded."""
    if mask is None:
        return
    if type(mask) is list and len(mask) == length and mask.count(1) == length and set(map(type, mask)) <= {int, bool}:
        return  # the common case (a tokenizer's all-ones list), at C speed; anything else is read below
    values = id_sequence(mask, "attention_mask", f"feature {index}", allow_bool=True)  # (L,)
    if values.size != length:
        raise ValueError(
            f"feature {index}: attention_mask has {values.size} entries but input_ids has {length}; "
            "drop the attention_mask column (the collator builds its own)"
        )
    if bool(((values != 0) & (values != 1)).any()):
        found = sorted(set(values.tolist()))
        hint = ""
        if found[-1] > 1:
            hint = (
                "; values above 1 look like a pack_dataset row (causal packing, its documents numbered in "
                "attention_mask): give this collator the documents unpacked, with max_length=N to split them "
                "(and packing=True to pack them)"
            )
        raise ValueError(f"feature {index}: attention_mask must hold 0 / 1, got {found}{hint}")
    if not bool(values.all()):
        raise ValueError(
            f"feature {index} is padded (attention_mask has zeros); pass unpadded features, the collator pads"
        )


def _per_token(name: str, values: list[Any], total: int) -> torch.Tensor:
    """One per-token extra as a flat (N,) tensor, checked: word ids, a 0 / 1 special-token mask, token types >= 0."""
    if name == "word_ids":
        return _word_ids(values, total)
    flat, lengths = id_column(values, name, allow_bool=name == "special_tokens_mask")  # (N,)
    bad = ((flat != 0) & (flat != 1)) if name == "special_tokens_mask" else flat < 0
    if bool(bad.any()):
        first = int(np.flatnonzero(bad)[0])
        index = int(np.searchsorted(np.cumsum(lengths), first, side="right"))
        rule = "0 / 1 (1 = never select)" if name == "special_tokens_mask" else "token type ids >= 0"
        raise ValueError(f"feature {index}: {name} must hold {rule}, got {int(flat[first])}")
    return torch.from_numpy(flat)


def _check_token_types(token_types: torch.Tensor, lengths: np.ndarray, limits: _RowLimits) -> None:
    """``token_type_ids`` below the model's ``type_vocab_size`` (known with ``model=``)."""
    size = limits.type_vocab_size
    if size is None or not token_types.numel() or int(token_types.max()) < size:
        return
    first = int((token_types >= size).nonzero()[0])
    index = int(np.searchsorted(np.cumsum(lengths), first, side="right"))
    raise ValueError(
        f"feature {index}: token_type_ids must lie in [0, type_vocab_size={size}) of {limits.source}, "
        f"got {int(token_types[first])}"
    )


def _word_ids(rows: list[Any], total: int) -> torch.Tensor:
    """Word ids of every token as one flat float64 tensor (None, for special tokens, becomes NaN).

    A fast tokenizer's ``word_ids()``: ints >= 0, or None for tokens outside any word. Anything
    else (strings, floats, bools, nesting, negative ids) is refused with the feature named.
    """
    if all(type(r) is list for r in rows) and set(map(type, itertools.chain.from_iterable(rows))) <= {int, type(None)}:
        flat = np.array(list(itertools.chain.from_iterable(rows)), dtype=np.float64)  # (N,), None -> NaN
        if not bool((flat < 0).any()):
            return torch.from_numpy(flat if flat.size else np.zeros(total))
    return torch.from_numpy(np.concatenate([_word_id_row(row, index) for index, row in enumerate(rows)]))


def _word_id_row(row: Any, index: int) -> np.ndarray:
    """One feature's word ids as float64 (None -> NaN), each checked; the error names the feature."""
    where = f"feature {index}: word_ids"
    if isinstance(row, (torch.Tensor, np.ndarray)):
        array = row.detach().cpu().numpy() if isinstance(row, torch.Tensor) else row
        if array.ndim != 1 or array.dtype.kind not in "iu":
            raise TypeError(f"{where} must be one flat sequence of ints, got shape {array.shape} {array.dtype}")
        values = array.astype(np.float64)
    else:
        kinds = set(map(type, row))
        odd = [k for k in kinds if k is not type(None) and (not issubclass(k, numbers.Integral) or k is bool)]
        odd += [k for k in kinds if issubclass(k, np.bool_)]
        if odd:
            raise TypeError(
                f"{where} must hold ints (None for tokens outside any word, as a fast tokenizer's "
                f"word_ids() gives), got a {odd[0].__name__}"
            )
        values = np.array(row, dtype=np.float64)  # (L,), None -> NaN
    if bool((values < 0).any()):
        raise ValueError(f"{where} must be >= 0 (None for tokens outside any word), got {int(np.nanmin(values))}")
    return values
