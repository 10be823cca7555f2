"""The chunk kernel shared by the single-device and the vocab-parallel linear cross-entropy.

One chunk of rows: its logits block (softcap first), the per-token losses (label smoothing, z-loss)
and the gradient of the logits, accumulated in float32 whatever the compute dtype; the dtype policy
(autocast's dtype, else the weights'), the chunk size and the loss denominator; and the backward
that hands out gradients computed in the forward pass (``hf_lmobj.losses.linear_cross_entropy``,
``hf_lmobj.losses.vocab_parallel``).

Example:
    >>> accumulation_dtype(torch.bfloat16), resolve_chunk_size(None, vocab_size=4096, device_type="cpu")
    (torch.float32, 512)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from hf_lmobj.checks import check_length, check_num_items_in_batch, check_number

#: Budget, in elements, of one chunk's logits block when ``chunk_size`` is left to ``None``.
DEFAULT_CHUNK_ELEMENTS = 2**24
#: The CPU budget: an 8 MiB float32 block stays in the last-level cache between the matmul and the
#: softmax passes over it. At least 256 rows, so a large vocabulary still multiplies blocks of a
#: useful height.
CPU_CHUNK_ELEMENTS = 2**21


@dataclass(frozen=True)
class HeadLossOptions:
    """The loss options shared by the chunked and the logits-based paths (validated here)."""

    label_smoothing: float = 0.0  # eps in [0, 1): weight moved from the target to the uniform
    z_loss: float = 0.0  # coefficient on logsumexp**2 (PaLM uses 1e-4)
    logit_softcap: float | None = None  # logits -> softcap * tanh(logits / softcap) (Gemma 2: 30.0)

    def __post_init__(self) -> None:
        check_number(self.label_smoothing, "label_smoothing", 0.0, 1.0, high_open=True, hint="0 switches it off")
        check_number(self.z_loss, "z_loss", 0.0, hint="0 switches it off (PaLM uses 1e-4)")
        check_number(
            self.logit_softcap, "logit_softcap", 0.0, low_open=True, optional=True, hint="None switches it off"
        )


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """float64 stays float64; every other floating dtype accumulates in float32.

    Example:
        >>> accumulation_dtype(torch.bfloat16)
        torch.float32
    """
    return torch.float64 if dtype == torch.float64 else torch.float32


def compute_dtype(hidden: torch.Tensor, weight: torch.Tensor) -> torch.dtype:
    """Dtype of the head's matmuls: autocast's when it is on for ``hidden``'s device, else promoted.

    Example:
        >>> h, w = torch.zeros(1, 2), torch.zeros(3, 2)
        >>> compute_dtype(h, w), compute_dtype(h.bfloat16(), w.bfloat16())
        (torch.float32, torch.bfloat16)
        >>> with torch.autocast("cpu", dtype=torch.bfloat16):
        ...     compute_dtype(h, w)
        torch.bfloat16
    """
    promoted = torch.promote_types(hidden.dtype, weight.dtype)
    device_type = hidden.device.type
    if promoted != torch.float64 and torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return promoted


def resolve_chunk_size(chunk_size: int | None, vocab_size: int, device_type: str = "cuda") -> int:
    """Rows per chunk: ``chunk_size`` as given, else a budget of logits elements per chunk.

    The budget is ``DEFAULT_CHUNK_ELEMENTS`` (16M) on accelerators and ``CPU_CHUNK_ELEMENTS`` (2M,
    at least 256 rows within the 16M) on CPU, where a block that stays in cache is faster.

    Example:
        >>> resolve_chunk_size(None, 50257), resolve_chunk_size(128, 50257)
        (333, 128)
        >>> resolve_chunk_size(None, 4096, "cpu"), resolve_chunk_size(None, 50257, "cpu")
        (512, 256)
    """
    if chunk_size is not None:
        return check_length(chunk_size, "chunk_size")
    vocab_size = max(vocab_size, 1)
    rows = DEFAULT_CHUNK_ELEMENTS // vocab_size
    if device_type == "cpu":
        rows = max(CPU_CHUNK_ELEMENTS // vocab_size, min(256, rows))
    return max(1, rows)


def token_losses_and_grad(
    logits: torch.Tensor,
    targets: torch.Tensor,
    opts: HeadLossOptions,
    need_grad: bool,
    work: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-row losses of a logits block and, if asked, d(sum of losses)/d(logits), in place.

    ``logits`` (C, V) must be a scratch tensor in the accumulation dtype: it is overwritten and
    returned as the gradient so one block serves both. ``work``, another (C, V) tensor of that dtype
    that does not overlap ``logits`` (its contents are overwritten), holds the logsumexp's temporary
    instead of a fresh block each call: the same values bit for bit (:func:`logsumexp_rows`).

    Example:
        >>> z = torch.tensor([[0.0, 0.0]])
        >>> loss, grad = token_losses_and_grad(z, torch.tensor([0]), HeadLossOptions(), True)
        >>> round(loss.item(), 4), grad.tolist()
        (0.6931, [[-0.5, 0.5]])
    """
    eps, vocab = opts.label_smoothing, logits.shape[-1]
    tanh = None
    if opts.logit_softcap is not None:
        tanh = logits.div_(opts.logit_softcap).tanh_()  # (C, V), kept for the chain rule
        logits = tanh.mul(opts.logit_softcap) if need_grad else tanh.mul_(opts.logit_softcap)
    lse = torch.logsumexp(logits, dim=-1) if work is None else logsumexp_rows(logits, work)  # (C,)
    target_logit = logits.gather(1, targets[:, None]).squeeze(1)  # (C,)
    losses = lse - (1.0 - eps) * target_logit
    if eps > 0.0:
        losses = losses - eps * logits.mean(dim=-1)
    if opts.z_loss > 0.0:
        losses = losses + opts.z_loss * lse.square()
    if not need_grad:
        return losses, None
    grad = logits.sub_(lse[:, None]).exp_()  # (C, V) softmax
    if opts.z_loss > 0.0:
        grad.mul_((1.0 + 2.0 * opts.z_loss * lse)[:, None])
    if eps > 0.0:
        grad.sub_(eps / vocab)
    grad.scatter_add_(1, targets[:, None], grad.new_full((len(targets), 1), eps - 1.0))
    if tanh is not None:
        grad.mul_(1.0 - tanh.square_())  # d(c tanh(x / c))/dx = 1 - tanh^2
    return losses, grad


def logsumexp_rows(logits: torch.Tensor, work: torch.Tensor) -> torch.Tensor:
    """``torch.logsumexp(logits, dim=-1)`` of a (C, V) block, bit for bit, its (C, V) temporary written into ``work``.

    The same steps as torch's own (the row maxima, infinite ones set to 0, ``exp(logits - max)`` summed, its
    log plus the maxima), so the values are identical; only the block torch allocates per call is ``work``
    here (the same shape and dtype as ``logits``, not overlapping it; overwritten).

    Example:
        >>> z = torch.tensor([[0.0, 1.0, 2.0], [-math.inf, -math.inf, -math.inf], [math.inf, 0.0, 1.0]])
        >>> torch.equal(logsumexp_rows(z, torch.empty_like(z)), torch.logsumexp(z, dim=-1))
        True
    """
    maxes = logits.amax(dim=-1, keepdim=True)  # (C, 1)
    maxes.masked_fill_(maxes.abs() == math.inf, 0)
    lse = torch.sub(logits, maxes, out=work).exp_().sum(dim=-1)  # (C,)
    return lse.log_().add_(maxes.squeeze(-1))


def _head_logits(
    h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, acc: torch.dtype, out: torch.Tensor | None = None
) -> torch.Tensor:
    """One chunk's logits in the operands' (compute) dtype, returned as an ``acc`` tensor: written into ``out``
    (a (C, V) block of dtype ``acc``, reused across chunks) when the compute dtype is ``acc``, else fresh."""
    if out is not None and h.dtype == weight.dtype == acc and (bias is None or bias.dtype == acc):
        return torch.addmm(bias, h, weight.T, out=out) if bias is not None else torch.mm(h, weight.T, out=out)
    logits = torch.addmm(bias, h, weight.T) if bias is not None else h @ weight.T  # (C, V)
    if out is not None:
        return out.copy_(logits)  # the same rounding as .to(acc), into the reused block
    return logits.to(acc)  # no copy when compute == accumulation dtype (already a fresh tensor)


def _add_product(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """``out += a @ b`` with ``a`` cast to ``b``'s dtype; in place when the dtypes agree."""
    if a.dtype == b.dtype == out.dtype:
        out.addmm_(a, b)
    else:
        out += a.to(b.dtype) @ b


def _store_product(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor) -> None:
    """``out[:] = a @ b`` with ``a`` cast to ``b``'s dtype; no temporary when the dtypes agree."""
    if a.dtype == b.dtype == out.dtype:
        torch.mm(a, b, out=out)
    else:
        out.copy_(a.to(b.dtype) @ b)


def _autocast_off(device: torch.device) -> torch.autocast:
    """The chunked head chooses its dtypes itself (``compute_dtype``): autocast must not recast."""
    return torch.autocast(device.type, enabled=False)


def _denominator(num_items_in_batch, kept: int, like: torch.Tensor) -> torch.Tensor:
    """The loss denominator: ``num_items_in_batch`` (checked), else ``kept``, the batch's own targets.

    A batch without targets has a summed loss of 0 and gets the denominator 1: it adds nothing to
    the step (neither loss nor gradient), as it should under gradient accumulation.
    """
    count = check_num_items_in_batch(num_items_in_batch, kept)
    count = float(kept) if count is None else count
    return like.new_tensor(count if count > 0 else 1.0)


def handed_out_grads(ctx, grad_out: torch.Tensor, reduce_hidden=None) -> list[torch.Tensor | None]:
    """The gradients the forward pass stored in ``ctx.grads`` (hidden, weight, bias), scaled by
    ``grad_out`` and cast to each input's dtype, once; ``reduce_hidden`` (e.g. an all-reduce over
    the TP group) is applied to the hidden gradient first."""
    if ctx.grads is None:
        raise RuntimeError(
            "linear_cross_entropy computes its gradients in the forward pass and hands them out once: "
            "a second backward through the same loss is not supported; recompute the loss instead"
        )
    grads = []
    for index, (grad, dtype) in enumerate(zip(ctx.grads, ctx.dtypes)):
        if grad is not None:
            grad = grad.mul_(grad_out.to(grad.dtype))
            if index == 0 and reduce_hidden is not None:
                grad = reduce_hidden(grad)
            grad = grad.to(dtype)
        grads.append(grad)
    ctx.grads = None
    return grads
