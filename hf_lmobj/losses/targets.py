"""What an objective's loss scores: the per-position targets of a batch, and how many there are.

* ``objective_targets(objective, batch)``: the (B, T) targets aligned with the positions whose logits
  the loss scores (next-token objectives: ``shift_labels``, else ``labels`` shifted; the others:
  ``labels``), with positions outside a batch's ``logits_to_keep`` set to -100.
* ``count_targets(objective, batch)``: how many of them are scored (``num_items_in_batch``).

The targets sit below the models (``MultiTokenPredictionModel`` builds its depths from them) and the
trainer (which divides by their count); they read the registry's ``next_token`` attribute, never a name.

Example:
    >>> import torch
    >>> batch = {"labels": torch.tensor([[5, 6, 7]])}
    >>> objective_targets("causal", batch).tolist(), int(count_targets("causal", batch))
    ([[6, 7, -100]], 2)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import torch

from hf_lmobj.checks import check_length
from hf_lmobj.losses.functional import next_token_targets
from hf_lmobj.objectives import ObjectiveSpec, get_objective

#: An objective word of :mod:`hf_lmobj.objectives` (or its spec).
Objective = Literal["causal", "masked", "span", "ul2", "text_infilling", "prefix_lm"] | ObjectiveSpec


def _kept_positions(logits_to_keep: Any, length: int, device: torch.device) -> torch.Tensor | None:
    """(T,) bool mask of the positions a ``logits_to_keep`` value scores, or None for all."""
    if isinstance(logits_to_keep, torch.Tensor) and logits_to_keep.dim() == 0:
        logits_to_keep = logits_to_keep.item()
    if not isinstance(logits_to_keep, torch.Tensor):
        logits_to_keep = check_length(logits_to_keep, "logits_to_keep", minimum=0, why="0 keeps all")
        if logits_to_keep == 0 or logits_to_keep >= length:
            return None
        keep = torch.zeros(length, dtype=torch.bool, device=device)
        keep[length - logits_to_keep :] = True
        return keep
    if isinstance(logits_to_keep, torch.Tensor) and logits_to_keep.dim() == 1:
        keep = torch.zeros(length, dtype=torch.bool, device=device)
        keep[logits_to_keep.to(device)] = True
        return keep
    raise ValueError("logits_to_keep must be an int or a 1-D tensor of positions for ObjectiveTrainer")


def objective_targets(objective: Objective, batch: Mapping[str, Any], ignore_index: int = -100) -> torch.Tensor:
    """(B, T) targets aligned with the positions whose logits the loss scores.

    Example:
        >>> b = {"labels": torch.tensor([[1, 2, 3]]), "shift_labels": torch.tensor([[2, -100, -100]])}
        >>> objective_targets("causal", b).tolist(), objective_targets("masked", b).tolist()
        ([[2, -100, -100]], [[1, 2, 3]])
    """
    spec = get_objective(objective)
    labels = batch.get("labels")
    if spec.next_token and batch.get("shift_labels") is not None:
        targets = batch["shift_labels"]
    elif labels is None:
        raise ValueError(f"a {spec.name} batch needs 'labels' (got keys {sorted(batch)})")
    else:
        targets = next_token_targets(labels, ignore_index) if spec.next_token else labels
    if batch.get("logits_to_keep") is not None:
        keep = _kept_positions(batch["logits_to_keep"], targets.shape[-1], targets.device)
        if keep is not None:
            targets = targets.masked_fill(~keep, ignore_index)  # (B, T)
    return targets


def count_targets(objective: Objective, batch: Mapping[str, Any], ignore_index: int = -100) -> torch.Tensor:
    """Number of scored targets in one batch (0-d int64 tensor)."""
    return (objective_targets(objective, batch, ignore_index) != ignore_index).sum()
