"""Multi-token prediction targets: depth ``k`` of position ``t`` is the token ``t + k + 1`` of the same document.

Targets come from the batch's next-token targets (``shift_labels``, else ``labels`` shifted, as
:func:`hf_lmobj.trainer.objectives.objective_targets` reads them) shifted ``k`` further, and are -100
wherever the target lies past the row end or in another document than the predicting position, or
was -100 itself. Documents are read from ``position_ids`` (packed rows restart at 0), else from
``attention_mask`` (padding), else each row is one document.

Example:
    >>> import torch
    >>> batch = {"input_ids": torch.tensor([[5, 6, 7, 8, 9]]), "position_ids": torch.tensor([[0, 1, 2, 0, 1]])}
    >>> batch["labels"] = batch["input_ids"].masked_fill(batch["position_ids"] == 0, -100)
    >>> multi_token_targets(batch, 1).tolist()  # depth 0 and depth 1 (two documents: 5 6 7 | 8 9)
    [[[6, 7, -100, 9, -100]], [[7, -100, -100, -100, -100]]]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from hf_lmobj.collators._layout import document_ids_from_position_ids
from hf_lmobj.constants import IGNORE_INDEX
from hf_lmobj.trainer.objectives import objective_targets

__all__ = ["document_ids", "shifted_targets", "multi_token_targets", "count_multi_token_targets", "document_positions"]


def document_ids(batch: Mapping[str, Any]) -> torch.Tensor:
    """(B, T) int64 segment numbers: equal exactly for positions of the same document.

    From ``position_ids`` (a document starts at 0), else a 2D ``attention_mask`` (each run of one
    value is a segment: padding is its own), else one document per row.

    Example:
        >>> document_ids({"input_ids": torch.zeros(1, 4), "attention_mask": torch.tensor([[1, 1, 0, 0]])}).tolist()
        [[0, 0, 1, 1]]
    """
    input_ids = batch["input_ids"]
    if batch.get("position_ids") is not None:
        return document_ids_from_position_ids(batch["position_ids"].expand_as(input_ids))  # (B, T)
    mask = batch.get("attention_mask")
    if isinstance(mask, torch.Tensor) and mask.dim() == 2:
        changes = torch.zeros_like(mask, dtype=torch.long)  # (B, T)
        changes[:, 1:] = (mask[:, 1:] != mask[:, :-1]).long()
        return changes.cumsum(dim=1)  # (B, T)
    return torch.zeros(input_ids.shape, dtype=torch.long, device=input_ids.device)


def shifted_targets(next_targets: torch.Tensor, documents: torch.Tensor, depth: int) -> torch.Tensor:
    """Depth-``depth`` targets: ``next_targets[:, t + depth]`` where ``t + depth`` is in ``t``'s document.

    Shapes: ``next_targets`` (B, T) (the next-token targets, -100 where there is none) and
    ``documents`` (B, T) -> (B, T). Depth 0 returns ``next_targets``.

    Example:
        >>> shifted_targets(torch.tensor([[1, 2, 3, -100]]), torch.tensor([[0, 0, 0, 1]]), 1).tolist()
        [[2, 3, -100, -100]]
    """
    if depth < 0:
        raise ValueError(f"depth must be >= 0, got {depth}")
    if depth == 0:
        return next_targets
    out = torch.full_like(next_targets, IGNORE_INDEX)  # (B, T)
    width = next_targets.shape[1] - depth
    if width > 0:
        same = documents[:, depth:] == documents[:, :width]  # (B, T - depth)
        out[:, :width] = next_targets[:, depth:].masked_fill(~same, IGNORE_INDEX)
    return out


def multi_token_targets(batch: Mapping[str, Any], num_depths: int) -> torch.Tensor:
    """(1 + D, B, T) targets of depths 0..D (depth 0: the ordinary next-token targets)."""
    if batch.get("logits_to_keep") is not None:
        raise ValueError("multi-token prediction scores every position: drop logits_to_keep from the batch")
    if batch.get("input_ids") is None:
        raise ValueError("multi-token prediction needs input_ids in the batch (embeddings of later tokens)")
    next_targets = objective_targets("causal", batch)  # (B, T)
    documents = document_ids(batch)  # (B, T)
    return torch.stack([shifted_targets(next_targets, documents, k) for k in range(num_depths + 1)])


def count_multi_token_targets(batch: Mapping[str, Any], num_depths: int) -> torch.Tensor:
    """(1 + D,) int64: the targets of each depth in one batch (the per-depth loss denominators)."""
    return (multi_token_targets(batch, num_depths) != IGNORE_INDEX).sum(dim=(1, 2))


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
