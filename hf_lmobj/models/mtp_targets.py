"""Multi-token prediction targets: depth ``k`` of position ``t`` is the token ``t + k + 1`` of the same document.

Targets come from the batch's next-token targets (``shift_labels``, else ``labels`` shifted, as
:func:`hf_lmobj.losses.targets.objective_targets` reads them). Depth 0 is exactly those targets
(the stock model's objective, what ``ObjectiveTrainer`` trains and evaluation scores). Depth
``k >= 1`` is them shifted ``k`` further, and -100 wherever the target token lies past the row end,
in another document than the predicting position, on padding (``attention_mask`` 0), or was -100
itself: the document test is made on the token ids' documents, so it holds whether or not the labels
mask each document's first token (the collators do; a hand-built packed batch may not).

Documents are read from ``position_ids`` (packed rows restart at 0), else from flash-attention's
``cu_seq_lens_q`` (the batch flattened into one stream), else from a 2-D ``attention_mask`` (each
run of one value is a segment: padding is its own), else each row is one document. A batch with
``seq_lengths`` or a 4-D ``attention_mask`` but no ``position_ids`` is refused: the documents would
be invisible here (collate it with ``DataCollatorForCausalLM``, which writes ``position_ids``).

A row shorter than ``k + 2`` tokens has no depth-``k`` target: that depth contributes nothing for
it, and :func:`count_multi_token_targets` counts 0 there.

Example:
    >>> import torch
    >>> batch = {"input_ids": torch.tensor([[5, 6, 7, 8, 9]]), "position_ids": torch.tensor([[0, 1, 2, 0, 1]])}
    >>> batch["labels"] = batch["input_ids"].masked_fill(batch["position_ids"] == 0, -100)
    >>> multi_token_targets(batch, 1).tolist()  # depth 0 and depth 1 (two documents: 5 6 7 | 8 9)
    [[[6, 7, -100, 9, -100]], [[7, -100, -100, -100, -100]]]
    >>> batch["labels"] = batch["input_ids"]  # document starts left unmasked: depth 1 still stops at 7
    >>> multi_token_targets(batch, 1)[1].tolist()
    [[7, -100, -100, -100, -100]]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from hf_lmobj.checks import check_id_range, check_labels, check_length
from hf_lmobj.constants import IGNORE_INDEX
from hf_lmobj.losses.targets import objective_targets
from hf_lmobj.packing.masks import document_ids_from_position_ids

_ANY_ID = torch.iinfo(torch.int64).max  # no vocabulary given: only the dtype, the shape and -100 are checked


def _input_ids(batch: Mapping[str, Any], vocab_size: int | None) -> torch.Tensor:
    """The batch's ``input_ids`` checked: a non-empty (B, T) integer tensor, ids in ``[0, vocab_size)``."""
    ids = batch.get("input_ids") if isinstance(batch, Mapping) else None
    if ids is None:
        raise ValueError("multi-token prediction needs input_ids in the batch (embeddings of later tokens)")
    if not isinstance(ids, torch.Tensor) or ids.dtype == torch.bool or ids.is_floating_point() or ids.is_complex():
        kind = ids.dtype if isinstance(ids, torch.Tensor) else type(ids).__name__
        raise TypeError(f"input_ids must be an integer tensor of token ids (B, T), got {kind}")
    if ids.dim() != 2 or ids.numel() == 0:
        raise ValueError(
            f"input_ids must be a (B, T) tensor with at least one row of one token, got shape {tuple(ids.shape)}"
        )
    if vocab_size is not None:
        check_id_range(np.array([int(ids.min()), int(ids.max())]), vocab_size)
    return ids


def _next_targets(batch: Mapping[str, Any], ids: torch.Tensor, vocab_size: int | None) -> torch.Tensor:
    """(B, T) next-token targets, checked against ``input_ids``' shape and the vocabulary."""
    if batch.get("logits_to_keep") is not None:
        raise ValueError("multi-token prediction scores every position: drop logits_to_keep from the batch")
    field = "shift_labels" if batch.get("shift_labels") is not None else "labels"
    if batch.get(field) is None:
        raise ValueError(f"a causal batch needs 'labels' or 'shift_labels' (got keys {sorted(batch)})")
    num_classes = _ANY_ID if vocab_size is None else vocab_size
    check_labels(batch[field], field, num_classes, shape=ids.shape, shape_of="input_ids' shape")
    return objective_targets("causal", batch).long()  # (B, T)


def document_ids(batch: Mapping[str, Any]) -> torch.Tensor:
    """(B, T) int64 segment numbers: equal exactly for positions of the same document.

    From ``position_ids`` (a document starts at 0), else ``cu_seq_lens_q`` (starts in the flattened
    batch), else a 2D ``attention_mask`` (each run of one value is a segment: padding is its own),
    else one document per row. ``seq_lengths`` or a 4D mask without ``position_ids`` is refused.

    Example:
        >>> document_ids({"input_ids": torch.zeros(1, 4), "attention_mask": torch.tensor([[1, 1, 0, 0]])}).tolist()
        [[0, 0, 1, 1]]
        >>> document_ids({"input_ids": torch.zeros(2, 3), "cu_seq_lens_q": torch.tensor([0, 2, 3, 6])}).tolist()
        [[0, 0, 1], [0, 0, 0]]
    """
    input_ids = batch["input_ids"]
    positions = batch.get("position_ids")
    if positions is not None:
        return document_ids_from_position_ids(_checked_positions(positions, input_ids).expand_as(input_ids))  # (B, T)
    mask = batch.get("attention_mask")
    for key, present in (("seq_lengths", batch.get("seq_lengths") is not None),
                         ("a 4-D attention_mask", isinstance(mask, torch.Tensor) and mask.dim() == 4)):  # fmt: skip
        if present:
            raise ValueError(
                f"this batch marks its documents with {key} but has no position_ids, so multi-token targets would "
                "cross documents; collate packed rows with DataCollatorForCausalLM (it writes position_ids)"
            )
    if batch.get("cu_seq_lens_q") is not None:
        return _documents_from_cu_seq_lens(batch["cu_seq_lens_q"], input_ids.shape).to(input_ids.device)
    if isinstance(mask, torch.Tensor) and mask.dim() == 2:
        changes = torch.zeros_like(mask, dtype=torch.long)  # (B, T)
        changes[:, 1:] = (mask[:, 1:] != mask[:, :-1]).long()
        return changes.cumsum(dim=1)  # (B, T)
    return torch.zeros(input_ids.shape, dtype=torch.long, device=input_ids.device)


def _checked_positions(positions: Any, input_ids: torch.Tensor) -> torch.Tensor:
    """``position_ids`` of shape (B, T) or (1, T), like ``input_ids`` (B, T)."""
    rows, length = input_ids.shape
    if not isinstance(positions, torch.Tensor) or positions.dim() != 2 or positions.shape[1] != length:
        shape = tuple(positions.shape) if isinstance(positions, torch.Tensor) else type(positions).__name__
        raise ValueError(f"position_ids must be (B, T) like input_ids {(rows, length)}, got {shape}")
    if positions.shape[0] not in (1, rows):
        raise ValueError(f"position_ids must be (B, T) like input_ids {(rows, length)}, got {tuple(positions.shape)}")
    return positions


def _documents_from_cu_seq_lens(cu: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """(B, T) segment numbers from flash-attention's cumulative lengths over the flattened (B * T) batch."""
    rows, length = shape
    cu = cu.reshape(-1).long().cpu()
    if cu.numel() < 2 or int(cu[0]) != 0 or int(cu[-1]) != rows * length or bool((cu[1:] <= cu[:-1]).any()):
        raise ValueError(
            f"cu_seq_lens_q must rise strictly from 0 to B * T = {rows * length} (the flattened batch), "
            f"got {cu.tolist()}"
        )
    starts = torch.zeros(rows * length, dtype=torch.long)  # (B * T,)
    starts[cu[:-1]] = 1
    starts = starts.view(rows, length)
    starts[:, 0] = 1  # each row starts a document
    return starts.cumsum(dim=1) - 1  # (B, T)


def real_tokens(batch: Mapping[str, Any]) -> torch.Tensor | None:
    """(B, T) bool, False on padding (a 2-D ``attention_mask`` equal to 0); None when every token is real.

    Example:
        >>> real_tokens({"input_ids": torch.zeros(1, 3), "attention_mask": torch.tensor([[1, 1, 0]])}).tolist()
        [[True, True, False]]
    """
    mask = batch.get("attention_mask")
    if not isinstance(mask, torch.Tensor) or mask.dim() != 2:
        return None
    if tuple(mask.shape) != tuple(batch["input_ids"].shape):
        raise ValueError(
            f"attention_mask shape {tuple(mask.shape)} must equal input_ids' shape {tuple(batch['input_ids'].shape)}"
        )
    return mask != 0


def shifted_targets(
    next_targets: torch.Tensor, documents: torch.Tensor, depth: int, real: torch.Tensor | None = None
) -> torch.Tensor:
    """Depth-``depth`` targets: ``next_targets[:, t + depth]`` where token ``t + depth + 1`` is in ``t``'s document.

    Shapes: ``next_targets`` (B, T) (the next-token targets, -100 where there is none),
    ``documents`` (B, T) and ``real`` (B, T) bool or None (False on padding) -> (B, T). Depth 0
    returns ``next_targets``. The last position's next token lies past the row: only a
    ``shift_labels`` entry can name it, and it counts as that position's document.

    Example:
        >>> shifted_targets(torch.tensor([[1, 2, 3, -100]]), torch.tensor([[0, 0, 0, 1]]), 1).tolist()
        [[2, -100, -100, -100]]
    """
    depth = check_length(depth, "depth", minimum=0)
    if depth == 0:
        return next_targets
    out = torch.full_like(next_targets, IGNORE_INDEX)  # (B, T)
    width = next_targets.shape[1] - depth
    if width <= 0:  # the row is too short for this depth: no target
        return out
    next_documents = torch.cat([documents[:, 1:], documents[:, -1:]], dim=1)  # (B, T): document of token j + 1
    keep = next_documents[:, depth:] == documents[:, :width]  # (B, T - depth)
    if real is not None:
        next_real = torch.cat([real[:, 1:], real[:, -1:]], dim=1)  # (B, T)
        keep &= real[:, :width] & next_real[:, depth:]
    out[:, :width] = next_targets[:, depth:].masked_fill(~keep, IGNORE_INDEX)
    return out


def multi_token_targets(batch: Mapping[str, Any], num_depths: int, vocab_size: int | None = None) -> torch.Tensor:
    """(1 + D, B, T) int64 targets of depths 0..D (depth 0: the ordinary next-token targets).

    The batch is checked first: ``input_ids`` a non-empty (B, T) integer tensor (ids in
    ``[0, vocab_size)`` when given), ``labels`` / ``shift_labels`` of the same shape, integer, each
    ``-100`` or a token id.
    """
    num_depths = check_length(num_depths, "num_depths", minimum=0)
    ids = _input_ids(batch, vocab_size)
    next_targets = _next_targets(batch, ids, vocab_size)  # (B, T)
    documents = document_ids(batch)  # (B, T)
    real = real_tokens(batch)  # (B, T) or None
    return torch.stack([shifted_targets(next_targets, documents, k, real) for k in range(num_depths + 1)])


def count_multi_token_targets(batch: Mapping[str, Any], num_depths: int, vocab_size: int | None = None) -> torch.Tensor:
    """(1 + D,) int64: the targets of each depth in one batch (the per-depth loss denominators, 0 allowed)."""
    return (multi_token_targets(batch, num_depths, vocab_size) != IGNORE_INDEX).sum(dim=(1, 2))


def document_positions(documents: torch.Tensor) -> torch.Tensor:
    """(B, T) position of each token inside its document (0 at every document start).

    Example:
        >>> document_positions(torch.tensor([[0, 0, 0, 1, 1]])).tolist()
        [[0, 1, 2, 0, 1]]
    """
    index = torch.arange(documents.shape[1], device=documents.device).expand_as(documents)  # (B, T)
    starts = torch.ones_like(documents, dtype=torch.bool)  # (B, T)
    starts[:, 1:] = documents[:, 1:] != documents[:, :-1]
    first = torch.where(starts, index, torch.zeros_like(index)).cummax(dim=1).values  # (B, T)
    return index - first
