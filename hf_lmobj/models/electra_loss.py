"""What ELECTRA scores: the replaced-token positions, the generator's seeded samples, and the two losses.

The model itself (generator, discriminator, shared embeddings) is :mod:`hf_lmobj.models.electra`; this module is
the arithmetic on one forward's outputs.

Example:
    >>> int(count_electra_targets({"input_ids": torch.zeros(1, 3), "labels": torch.tensor([[5, -100, -100]])})[0])
    1
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from transformers.utils import ModelOutput

from hf_lmobj.checks import check_number
from hf_lmobj.collators.seeding import example_generator
from hf_lmobj.constants import IGNORE_INDEX
from hf_lmobj.losses.functional import token_losses
from hf_lmobj.losses.head_chunks import HeadLossOptions


def rtd_positions(batch: Mapping[str, Any]) -> torch.Tensor:
    """(B, T) bool: the real tokens the discriminator is trained on (``attention_mask`` != 0, else all).

    Example:
        >>> rtd_positions({"input_ids": torch.zeros(1, 3), "attention_mask": torch.tensor([[1, 1, 0]])}).tolist()
        [[True, True, False]]
    """
    mask, ids = batch.get("attention_mask"), batch["input_ids"]
    if mask is None:
        return torch.ones(ids.shape, dtype=torch.bool, device=ids.device)
    if not isinstance(mask, torch.Tensor) or mask.dim() != 2:
        raise ValueError(
            "ELECTRA needs a 2D attention_mask (padding mode) to know the real tokens; "
            "use DataCollatorForMaskedLM without packing"
        )
    if tuple(mask.shape) != tuple(ids.shape):
        raise ValueError(f"attention_mask shape {tuple(mask.shape)} must equal input_ids' shape {tuple(ids.shape)}")
    return mask != 0


def selected_positions(labels: torch.Tensor, masked_positions: Any = None) -> torch.Tensor:
    """(M,) int64 ascending flat indices into ``labels.view(-1)`` of the selected tokens (labels != -100).

    ``masked_positions`` (optional) is the same list as the batch brought it
    (``DataCollatorForMaskedLM(return_sparse_indices=True)``); it is checked against ``labels`` and
    a mismatch (labels edited after collation, a batch split across devices) is refused by name.

    Example:
        >>> labels = torch.tensor([[-100, 5], [6, -100]])
        >>> selected_positions(labels, torch.tensor([1, 2])).tolist()
        [1, 2]
        >>> selected_positions(labels, torch.tensor([1]))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: masked_positions must list the 2 flat indices of labels != -100 in ascending order, got 1 ...
    """
    flat = (labels.reshape(-1) != IGNORE_INDEX).nonzero().squeeze(1)  # (M,)
    if masked_positions is None:
        return flat
    fix = "DataCollatorForMaskedLM(return_sparse_indices=True) makes them"
    if not isinstance(masked_positions, torch.Tensor):
        raise TypeError(f"masked_positions must be a 1D integer tensor ({fix}), got {type(masked_positions).__name__}")
    if masked_positions.dtype == torch.bool or masked_positions.is_floating_point() or masked_positions.is_complex():
        raise TypeError(f"masked_positions must hold integer flat indices ({fix}), got dtype {masked_positions.dtype}")
    if masked_positions.dim() != 1:
        raise ValueError(f"masked_positions must be 1D (flat indices into labels.view(-1)), got shape "
                         f"{tuple(masked_positions.shape)}")  # fmt: skip
    if not torch.equal(masked_positions.to(flat.device, torch.long), flat):
        raise ValueError(
            f"masked_positions must list the {flat.numel()} flat indices of labels != -100 in ascending order, got "
            f"{masked_positions.numel()} that differ; were the labels changed after collation, or the batch split "
            "across devices (nn.DataParallel)? Collate each process's batch itself, or drop masked_positions"
        )
    return flat


def count_electra_targets(batch: Mapping[str, Any]) -> torch.Tensor:
    """(2,) int64: MLM targets (labels != -100) and RTD targets (real tokens) of one batch."""
    if batch.get("labels") is None:
        raise ValueError("an ELECTRA batch needs 'labels' (from DataCollatorForMaskedLM)")
    return torch.stack([(batch["labels"] != IGNORE_INDEX).sum(), rtd_positions(batch).sum()])


@torch.no_grad()
def sample_replacements(
    logits: torch.Tensor, rows: torch.Tensor, row_keys: list[bytes], seed: int, step: int, temperature: float = 1.0
) -> torch.Tensor:
    """One token per row of ``logits`` (M, V) drawn from ``softmax(logits / temperature)`` (Gumbel-max).

    ``rows`` (M,) says which batch row each position belongs to; row ``b`` draws from a generator
    keyed by ``(seed, step, row_keys[b])`` only. Returns (M,) int64, never differentiable.

    Example:
        >>> z = torch.tensor([[0.0, 30.0, 0.0], [30.0, 0.0, 0.0]])
        >>> sample_replacements(z, torch.tensor([0, 0]), [b"row"], seed=0, step=0).tolist()
        [1, 0]
    """
    temperature = check_number(temperature, "sampling_temperature", 0.0, low_open=True)
    samples = torch.empty(logits.shape[0], dtype=torch.long, device=logits.device)  # (M,)
    scaled = logits.detach().float() / temperature  # (M, V)
    for row in rows.unique().tolist():
        where = (rows == row).nonzero().squeeze(1)  # (m,)
        generator = example_generator(seed, step, row_keys[row])
        exponential = torch.empty((where.numel(), logits.shape[1])).exponential_(generator=generator)  # (m, V)
        samples[where] = (scaled[where] - exponential.to(logits.device).log()).argmax(dim=-1)  # -log Exp(1) ~ Gumbel
    return samples


@dataclass
class ElectraPretrainingOutput(ModelOutput):
    """What one ELECTRA forward returns (the losses are formed by :func:`electra_loss`).

    Attributes:
        generator_logits: (M, V) generator logits at the selected positions (row-major order).
        mlm_targets: (M,) the original tokens there.
        replaced_input_ids: (B, T) the discriminator's input: the original text with the samples put in.
        replaced: (B, T) bool discriminator labels, ``replaced_input_ids != original``.
        discriminator_logits: (B, T) replaced-token logits.
        rtd_mask: (B, T) bool, the real tokens the RTD loss covers.
    """

    generator_logits: torch.Tensor | None = None
    mlm_targets: torch.Tensor | None = None
    replaced_input_ids: torch.Tensor | None = None
    replaced: torch.Tensor | None = None
    discriminator_logits: torch.Tensor | None = None
    rtd_mask: torch.Tensor | None = None


def electra_loss(
    output: ElectraPretrainingOutput,
    mlm_denominator: int | torch.Tensor | None = None,
    rtd_denominator: int | torch.Tensor | None = None,
    rtd_weight: float = 50.0,
    options: HeadLossOptions = HeadLossOptions(),
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(MLM + rtd_weight * RTD, MLM, RTD)``, each a token sum over its denominator (default: local count).

    Example:
        >>> out = ElectraPretrainingOutput(generator_logits=torch.zeros(1, 4), mlm_targets=torch.tensor([2]),
        ...     replaced=torch.tensor([[False, True]]), discriminator_logits=torch.zeros(1, 2),
        ...     rtd_mask=torch.tensor([[True, True]]))
        >>> [round(x.item(), 4) for x in electra_loss(out, rtd_weight=1.0)]  # ln 4 + ln 2, ln 4, ln 2
        [2.0794, 1.3863, 0.6931]
    """
    rtd_weight = check_number(rtd_weight, "rtd_weight", 0.0, hint="the paper uses 50")
    mlm_sum = token_losses(output.generator_logits, output.mlm_targets, options).sum()
    bce = F.binary_cross_entropy_with_logits(
        output.discriminator_logits.float(), output.replaced.float(), reduction="none"
    )  # (B, T)
    rtd_sum = bce.masked_fill(~output.rtd_mask, 0.0).sum()
    mlm = mlm_sum / _count(mlm_denominator, output.mlm_targets.numel(), mlm_sum)
    rtd = rtd_sum / _count(rtd_denominator, output.rtd_mask.sum(), rtd_sum)
    return mlm + rtd_weight * rtd, mlm, rtd


def _count(value: int | torch.Tensor | None, local: int | torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    count = local if value is None else value
    return torch.as_tensor(count, device=like.device).to(like.dtype).clamp_min(1.0)
