"""Functional language-modeling losses on logits: causal, masked and sequence-to-sequence.

Every loss is the token-sum cross-entropy over the targets that are not ``ignore_index``, divided
by ``num_items_in_batch`` when given (the target count of the whole accumulated, data-parallel
batch, as ``transformers.Trainer`` passes it) and by the local target count otherwise. With the
global count, the micro-batch losses of gradient accumulation and of data-parallel ranks add up to
exactly the loss (and gradients) of one big batch. Accumulation is float32 whatever the logits'
dtype (float64 stays float64). Options: ``label_smoothing`` (as ``torch.nn.functional.cross_entropy``),
``z_loss`` (coefficient on logsumexp**2) and ``logit_softcap`` (``c * tanh(logits / c)``).

:func:`~hf_lmobj.losses.linear_cross_entropy.linear_cross_entropy` is the same loss computed from hidden states
and a head weight without materializing the logits.

Example:
    >>> import torch
    >>> logits = torch.zeros(1, 3, 4)  # (B, T, V): uniform over 4 tokens
    >>> labels = torch.tensor([[5, 1, -100]]).clamp(max=3)
    >>> round(causal_lm_loss(logits, labels).item(), 4)  # one target (1 after 3), ln 4
    1.3863
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from hf_lmobj.checks import check_labels
from hf_lmobj.losses.head_chunks import HeadLossOptions, _denominator, accumulation_dtype


def next_token_targets(labels: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
    """``labels`` shifted left by one (the target of position t is ``labels[..., t + 1]``).

    Example:
        >>> next_token_targets(torch.tensor([[7, 8, 9]])).tolist()
        [[8, 9, -100]]
    """
    return F.pad(labels[..., 1:], (0, 1), value=ignore_index)


def token_losses(
    logits: torch.Tensor, targets: torch.Tensor, opts: HeadLossOptions = HeadLossOptions()
) -> torch.Tensor:
    """Differentiable per-row loss of ``logits`` (M, V) against valid ``targets`` (M,).

    Example:
        >>> [round(x, 4) for x in token_losses(torch.zeros(2, 2), torch.tensor([0, 1])).tolist()]  # ln 2
        [0.6931, 0.6931]
    """
    z = logits.to(accumulation_dtype(logits.dtype))  # (M, V)
    if opts.logit_softcap is not None:
        z = opts.logit_softcap * torch.tanh(z / opts.logit_softcap)
    lse = torch.logsumexp(z, dim=-1)  # (M,)
    eps = opts.label_smoothing
    losses = lse - (1.0 - eps) * z.gather(1, targets[:, None]).squeeze(1)
    if eps > 0.0:
        losses = losses - eps * z.mean(dim=-1)
    if opts.z_loss > 0.0:
        losses = losses + opts.z_loss * lse.square()
    return losses


def token_nll(
    logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = -100, opts: HeadLossOptions = HeadLossOptions()
) -> torch.Tensor:
    """Per-position loss of ``logits`` (..., V) against ``targets`` (...), float32, 0 where ignored.

    The one per-token cross-entropy of the package: the trainer's evaluation, the metrics' scoring
    and the infilling evaluation all call it (``token_losses`` on the kept rows).

    Example:
        >>> [round(x, 4) for x in token_nll(torch.zeros(1, 3, 2), torch.tensor([[0, -100, 1]]))[0].tolist()]
        [0.6931, 0.0, 0.6931]
    """
    flat_t = targets.reshape(-1)  # (N,)
    rows = (flat_t != ignore_index).nonzero().squeeze(1)  # (M,)
    kept = token_losses(logits.reshape(-1, logits.shape[-1]).index_select(0, rows), flat_t.index_select(0, rows), opts)
    out = kept.new_zeros(flat_t.shape, dtype=kept.dtype)  # (N,)
    out[rows] = kept
    return out.reshape(targets.shape)


def check_logits(logits: Any) -> torch.Tensor:
    """``logits`` (..., V): a floating-point tensor with a vocabulary dimension, else a clear error."""
    if not isinstance(logits, torch.Tensor):
        raise TypeError(f"logits must be a torch.Tensor (..., vocab), got {type(logits).__name__}")
    if not logits.is_floating_point():
        raise TypeError(f"logits must be floating point, got dtype {logits.dtype}; pass the model's logits (.float())")
    if logits.dim() < 2 or logits.shape[-1] == 0:
        raise ValueError(f"logits must be (..., vocab) with vocab >= 1, got shape {tuple(logits.shape)}")
    return logits


def summed_loss(logits, targets, num_items_in_batch, ignore_index, opts: HeadLossOptions) -> torch.Tensor:
    """Sum of ``token_losses`` over the targets that are not ``ignore_index``, over ``num_items_in_batch`` (else their count)."""
    check_logits(logits)
    targets = check_labels(targets, "labels", logits.shape[-1], ignore_index, shape=logits.shape[:-1])
    flat_z = logits.reshape(-1, logits.shape[-1])  # (N, V)
    flat_t = targets.reshape(-1)  # (N,)
    rows = (flat_t != ignore_index).nonzero().squeeze(1)  # (M,)
    kept_t = flat_t.index_select(0, rows)
    total = token_losses(flat_z.index_select(0, rows), kept_t, opts).sum()
    return total / _denominator(num_items_in_batch, kept_t.numel(), total.detach())


def causal_lm_loss(
    logits: torch.Tensor,
    labels: torch.Tensor | None = None,
    *,
    shift_labels: torch.Tensor | None = None,
    num_items_in_batch: int | torch.Tensor | None = None,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    z_loss: float = 0.0,
    logit_softcap: float | None = None,
) -> torch.Tensor:
    """Next-token loss of ``logits`` (B, T, V); targets are ``shift_labels`` or ``labels`` shifted.

    ``shift_labels`` (as the causal collator emits, -100 across document boundaries) wins when
    given; otherwise ``labels`` are aligned with the inputs and shifted here, like transformers.

    Example:
        >>> z = torch.zeros(1, 2, 3)
        >>> round(causal_lm_loss(z, shift_labels=torch.tensor([[2, 0]]), num_items_in_batch=4).item(), 4)
        0.5493
    """
    if shift_labels is None:
        if labels is None:
            raise ValueError("causal_lm_loss needs labels or shift_labels (got neither)")
        check_logits(logits)
        labels = check_labels(labels, "labels", logits.shape[-1], ignore_index, shape=logits.shape[:-1])
        shift_labels = next_token_targets(labels, ignore_index)
    return masked_lm_loss(
        logits,
        shift_labels,
        num_items_in_batch=num_items_in_batch,
        ignore_index=ignore_index,
        label_smoothing=label_smoothing,
        z_loss=z_loss,
        logit_softcap=logit_softcap,
    )


def masked_lm_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    *,
    num_items_in_batch: int | torch.Tensor | None = None,
    ignore_index: int = -100,
    label_smoothing: float = 0.0,
    z_loss: float = 0.0,
    logit_softcap: float | None = None,
) -> torch.Tensor:
    """Masked-LM loss: cross-entropy at the selected positions (``labels != -100``), unshifted.

    Example:
        >>> round(masked_lm_loss(torch.zeros(1, 3, 4), torch.tensor([[-100, 2, -100]])).item(), 4)
        1.3863
    """
    opts = HeadLossOptions(label_smoothing, z_loss, logit_softcap)
    return summed_loss(logits, labels, num_items_in_batch, ignore_index, opts)


def seq2seq_lm_loss(logits: torch.Tensor, labels: torch.Tensor, **options: Any) -> torch.Tensor:
    """Decoder loss of an encoder-decoder: ``logits`` (B, Td, V) already aligned with ``labels``.

    The decoder saw ``labels`` shifted right, so the targets are ``labels`` themselves: the same
    loss as :func:`masked_lm_loss`, with the same keyword options.

    Example:
        >>> round(seq2seq_lm_loss(torch.zeros(1, 2, 4), torch.tensor([[3, 1]])).item(), 4)
        1.3863
    """
    return masked_lm_loss(logits, labels, **options)
