"""What every encoder-decoder collator (span, ul2, text_infilling) shares: ids, decoder inputs, the batch.

Example:
    >>> batch = encoder_decoder_batch([torch.tensor([5, 6])], [torch.tensor([7, 1])], pad_token_id=0,
    ...                               decoder_start_token_id=0)
    >>> batch["decoder_input_ids"].tolist(), batch["attention_mask"].tolist()
    ([[0, 7]], [[1, 1]])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch

from hf_lmobj.checks import check_token_id
from hf_lmobj.collators.features import token_ids
from hf_lmobj.constants import IGNORE_INDEX, round_up


def required_token_id(tokenizer: Any, name: str) -> int:
    """``tokenizer.<name>_token_id``, or a ``ValueError`` saying how to set it."""
    token_id = getattr(tokenizer, f"{name}_token_id", None)
    if token_id is None:
        raise ValueError(f"tokenizer has no {name} token; set tokenizer.{name}_token first")
    return int(token_id)


def resolve_decoder_start(explicit: int | None, model: Any, tokenizer: Any) -> int:
    """The explicit id, else ``model.config.decoder_start_token_id``, else the pad id (as T5)."""
    if explicit is not None:
        return check_token_id(explicit, "decoder_start_token_id", len(tokenizer))
    if model is not None:
        start = getattr(getattr(model, "config", None), "decoder_start_token_id", None)
        if start is None:
            raise ValueError("model.config.decoder_start_token_id is None; pass decoder_start_token_id")
        return int(start)
    return required_token_id(tokenizer, "pad")


def feature_tokens(feature: Mapping[str, Any], eos_token_id: int | None, vocab_size: int, index: int) -> torch.Tensor:
    """A feature's ``input_ids`` (checked) as a 1D int64 tensor, one trailing EOS taken off."""
    tokens = torch.from_numpy(token_ids(feature, index, vocab_size))  # (T,)
    if eos_token_id is not None and len(tokens) and int(tokens[-1]) == eos_token_id:
        tokens = tokens[:-1]
    return tokens


def pad_rows(rows: Sequence[torch.Tensor], width: int, value: int) -> torch.Tensor:
    """Right-pad 1D rows into a (B, width) tensor."""
    out = torch.full((len(rows), width), value, dtype=torch.long)  # (B, W)
    for index, row in enumerate(rows):
        out[index, : len(row)] = row
    return out


def shift_right(labels: torch.Tensor, decoder_start_token_id: int, pad_token_id: int) -> torch.Tensor:
    """Decoder inputs: ``[start] + labels[:, :-1]``, with -100 turned into the pad id (as T5).

    Example:
        >>> shift_right(torch.tensor([[7, 8, -100]]), 0, 0).tolist()
        [[0, 7, 8]]
    """
    start = torch.full_like(labels[:, :1], decoder_start_token_id)  # (B, 1)
    shifted = torch.cat([start, labels[:, :-1]], dim=1)  # (B, T)
    return shifted.masked_fill(shifted == IGNORE_INDEX, pad_token_id)


def encoder_decoder_batch(
    inputs: Sequence[torch.Tensor],
    targets: Sequence[torch.Tensor],
    *,
    pad_token_id: int,
    decoder_start_token_id: int,
    input_width: int | None = None,
    target_width: int | None = None,
    pad_to_multiple_of: int | None = None,
) -> dict[str, torch.Tensor]:
    """``input_ids``, ``attention_mask``, ``labels`` and ``decoder_input_ids`` of 1-D input and target rows.

    A width left None is the longest row, rounded up to ``pad_to_multiple_of``; labels pad with -100.
    """
    input_width = input_width or round_up(max(map(len, inputs)), pad_to_multiple_of)
    target_width = target_width or round_up(max(map(len, targets)), pad_to_multiple_of)
    labels = pad_rows(targets, target_width, IGNORE_INDEX)  # (B, T_out)
    return {
        "input_ids": pad_rows(inputs, input_width, pad_token_id),  # (B, T_in)
        "attention_mask": pad_rows([torch.ones_like(row) for row in inputs], input_width, 0),  # (B, T_in)
        "labels": labels,
        "decoder_input_ids": shift_right(labels, decoder_start_token_id, pad_token_id),  # (B, T_out)
    }
