"""Cross-entropy of a linear head without ever holding the ``[tokens, vocab]`` logits.

``linear_cross_entropy(hidden, weight, targets)`` equals
``cross_entropy(hidden @ weight.T + bias, targets)`` in value and gradients, but walks the target
rows in chunks of ``chunk_size``: each chunk's logits are built, turned into its loss and its
gradient with respect to the logits, multiplied into ``grad_hidden`` / ``grad_weight`` and freed.
The gradients are therefore computed during the forward pass (the backward only scales them by
the incoming gradient), so the peak extra memory is one ``[chunk_size, vocab]`` block plus the
gradient buffers themselves. Rows whose target is ``ignore_index`` are dropped before the head is
applied: they cost nothing, which is also how the sparse masked-LM path runs the head only on the
selected positions.

Per-token loss (``z`` = logits, optionally soft-capped ``c * tanh(z / c)``; ``eps`` = label
smoothing; ``lse`` = logsumexp(z))::

    loss = lse - (1 - eps) * z[target] - eps * mean(z) + z_loss * lse ** 2

summed over the kept rows and divided by ``num_items_in_batch`` when given, else by their count.

Precision (one rule for every dtype and for ``torch.autocast``): the head's matmuls (logits, and
the gradient products) run in the *compute dtype*, the one a stock ``lm_head`` would use in the same
place: autocast's dtype when autocast is on for the inputs' device, else the promoted dtype of
``hidden`` and ``weight`` (bf16 weights -> bf16 matmuls, fp32 -> fp32). Each chunk's logits are then
upcast, and the softmax, the losses and the gradient sums accumulate in float32 (float64 for float64
inputs); gradients come back in each input's own dtype. Under bf16 autocast the value therefore
equals the transformers loss of the autocast model (bf16 logits, float32 cross-entropy), with no
``[tokens, vocab]`` tensor in either dtype.

Example:
    >>> import torch
    >>> g = torch.Generator().manual_seed(0)
    >>> h = torch.randn(6, 4, generator=g, requires_grad=True)
    >>> w = torch.randn(10, 4, generator=g, requires_grad=True)
    >>> t = torch.tensor([1, 2, -100, 3, 9, 0])
    >>> ours = linear_cross_entropy(h, w, t, chunk_size=2)
    >>> ref = torch.nn.functional.cross_entropy(h @ w.T, t)
    >>> torch.allclose(ours, ref)
    True

Tensor (vocab) parallelism: a head weight that is a ``DTensor`` placed ``Shard(0)`` (``ColwiseParallel``
on the ``lm_head``, ``tp_plan="auto"``), or a plain local shard with ``process_group=`` and
``vocab_start=``, runs vocab-parallel: the same loss and gradients, with only ``[chunk, V / tp]``
logits per rank and two small all-reduces per chunk (contract and example: ``hf_lmobj.losses.vocab_parallel``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch.autograd.function import once_differentiable

from hf_lmobj.validation import check_labels, check_length, check_num_items_in_batch, check_number

__all__ = [
    "DEFAULT_CHUNK_ELEMENTS",
    "CPU_CHUNK_ELEMENTS",
    "HeadLossOptions",
    "accumulation_dtype",
    "compute_dtype",
    "resolve_chunk_size",
    "token_losses_and_grad",
    "linear_cross_entropy",
    "linear_token_losses",
]

#: Budget, in elements, of one chunk's logits block when ``chunk_size`` is left to ``None``.
DEFAULT_CHUNK_ELEMENTS = 2**24
#: The CPU budget: an 8 MiB float32 block stays in the last-level cache between the matmul and the
#: softmax passes over it (vocab 4096, 8192 rows: the loss and its gradient ~1.35x faster than with
#: the 16M budget on a 2-core AMD EPYC; ``benchmarks/demo_experiments.md``). At least 256 rows, so
#: a large vocabulary still multiplies blocks of a useful height.
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
    logits: torch.Tensor, targets: torch.Tensor, opts: HeadLossOptions, need_grad: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-row losses of a logits block and, if asked, d(sum of losses)/d(logits), in place.

    ``logits`` (C, V) must be a scratch tensor in the accumulation dtype: it is overwritten and
    returned as the gradient so one block serves both.

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
    lse = torch.logsumexp(logits, dim=-1)  # (C,)
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


def _head_logits(h: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, acc: torch.dtype) -> torch.Tensor:
    """One chunk's logits in the operands' (compute) dtype, returned as a fresh ``acc`` tensor."""
    logits = torch.addmm(bias, h, weight.T) if bias is not None else h @ weight.T  # (C, V)
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


class _ChunkedLinearCrossEntropy(torch.autograd.Function):
    """Sum of per-row losses over ``hidden`` (all rows kept), times ``scale``; grads in forward."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, scale, opts, chunk_size, grad_enabled, compute):  # noqa: D102
        acc = accumulation_dtype(compute)
        h, w = hidden.to(compute), weight.to(compute)  # no copy when already in the compute dtype
        b = None if bias is None else bias.to(compute)
        # needs_input_grad ignores torch.no_grad(): the caller's grad mode decides too
        want_h, want_w, want_b = (grad_enabled and need for need in ctx.needs_input_grad[:3])
        need_grad = want_h or want_w or want_b
        grad_h = h.new_empty(h.shape, dtype=acc) if want_h else None  # (M, H)
        grad_w = w.new_zeros(w.shape, dtype=acc) if want_w else None  # (V, H)
        grad_b = w.new_zeros(w.shape[:1], dtype=acc) if want_b else None  # (V,)
        total = h.new_zeros((), dtype=acc)
        with _autocast_off(h.device):
            for start in range(0, h.shape[0], chunk_size):
                h_c, t_c = h[start : start + chunk_size], targets[start : start + chunk_size]
                losses, g = token_losses_and_grad(_head_logits(h_c, w, b, acc), t_c, opts, need_grad)  # g: (C, V)
                total += losses.sum()
                if g is None:
                    continue
                g.mul_(scale)
                if want_h:
                    _store_product(grad_h[start : start + chunk_size], g, w)  # (C, H)
                if want_w:
                    _add_product(grad_w, g.T, h_c)  # (V, H)
                if want_b:
                    grad_b += g.sum(dim=0)
        ctx.grads = (grad_h, grad_w, grad_b)
        ctx.dtypes = (hidden.dtype, weight.dtype, None if bias is None else bias.dtype)
        return total * scale

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):  # noqa: D102
        if ctx.grads is None:
            raise RuntimeError(
                "linear_cross_entropy computes its gradients in the forward pass and hands them out once: "
                "a second backward through the same loss is not supported; recompute the loss instead"
            )
        grads = []
        for grad, dtype in zip(ctx.grads, ctx.dtypes):
            if grad is not None:
                grad = grad.mul_(grad_out.to(grad.dtype)).to(dtype)
            grads.append(grad)
        ctx.grads = None
        return (*grads, None, None, None, None, None, None)


def _denominator(num_items_in_batch, kept: int, like: torch.Tensor) -> torch.Tensor:
    """The loss denominator: ``num_items_in_batch`` (checked), else ``kept``, the batch's own targets.

    A batch without targets has a summed loss of 0 and gets the denominator 1: it adds nothing to
    the step (neither loss nor gradient), as it should under gradient accumulation.
    """
    count = check_num_items_in_batch(num_items_in_batch, kept)
    count = float(kept) if count is None else count
    return like.new_tensor(count if count > 0 else 1.0)


def linear_cross_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    ignore_index: int = -100,
    num_items_in_batch: int | float | torch.Tensor | None = None,
    chunk_size: int | None = None,
    label_smoothing: float = 0.0,
    z_loss: float = 0.0,
    logit_softcap: float | None = None,
    process_group=None,
    vocab_start: int | None = None,
) -> torch.Tensor:
    """Cross-entropy of ``hidden @ weight.T + bias`` against ``targets``, chunked over rows.

    Args:
        hidden: ``(..., H)`` inputs of the head (any leading shape, flattened).
        weight: ``(V, H)`` head weight (e.g. ``model.get_output_embeddings().weight``).
        targets: ``(...)`` class indices matching ``hidden``'s leading shape; ``ignore_index``
            rows are skipped entirely.
        bias: optional ``(V,)`` head bias.
        num_items_in_batch: denominator of the summed loss (the target count of the whole
            accumulated / data-parallel batch; a number >= 0, 0 only when this batch has no
            target); default the number of kept rows. A batch without targets gives 0 (its share
            of the step's sum), not NaN.
        chunk_size: rows per chunk; ``None`` = ``resolve_chunk_size`` (16M logits elements; 2M on CPU).
        label_smoothing, z_loss, logit_softcap: see ``HeadLossOptions``.
        process_group, vocab_start: tensor (vocab) parallelism with a plain local weight shard:
            ``weight`` / ``bias`` hold the rows ``vocab_start : vocab_start + V_local`` of the head
            and ``process_group`` the ranks sharing it. A DTensor ``weight`` placed ``Shard(0)``
            (``ColwiseParallel``, ``tp_plan="auto"``) needs neither. See ``hf_lmobj.losses.vocab_parallel``.

    Returns:
        A 0-d tensor in the accumulation dtype (float32, or float64 for float64 inputs). The
        matmuls run in ``compute_dtype(hidden, weight)`` (autocast's dtype under autocast).

    Example:
        >>> h, w = torch.zeros(3, 2), torch.zeros(5, 2)
        >>> round(linear_cross_entropy(h, w, torch.tensor([0, -100, 4])).item(), 4)  # ln 5
        1.6094
    """
    opts = HeadLossOptions(label_smoothing, z_loss, logit_softcap)
    hidden, weight, targets, bias, shard = _route(
        hidden, weight, targets, bias, process_group, vocab_start, ignore_index
    )
    if shard is not None:
        from hf_lmobj.losses.vocab_parallel import vocab_parallel_cross_entropy

        return vocab_parallel_cross_entropy(
            shard, ignore_index=ignore_index, num_items_in_batch=num_items_in_batch, chunk_size=chunk_size, opts=opts
        )
    targets = _check_inputs(hidden, weight, targets, bias, ignore_index)
    flat_h = hidden.reshape(-1, hidden.shape[-1])  # (N, H)
    flat_t = targets.reshape(-1)  # (N,)
    keep = flat_t != ignore_index
    if not bool(keep.all()):
        rows = keep.nonzero().squeeze(1)  # (M,)
        flat_h, flat_t = flat_h.index_select(0, rows), flat_t.index_select(0, rows)
    compute = compute_dtype(hidden, weight)
    like = hidden.new_zeros((), dtype=accumulation_dtype(compute))
    scale = 1.0 / _denominator(num_items_in_batch, flat_t.numel(), like)
    return _ChunkedLinearCrossEntropy.apply(
        flat_h,
        weight,
        bias,
        flat_t,
        scale,
        opts,
        resolve_chunk_size(chunk_size, weight.shape[0], weight.device.type),
        torch.is_grad_enabled(),
        compute,
    )


def _route(hidden, weight, targets, bias, process_group, vocab_start, ignore_index: int):
    """``(hidden, weight, targets, bias, None)`` for the single-device path (a replicated DTensor
    head made local), or ``(..., VocabShard)`` for the vocab-parallel one (``vocab_parallel``)."""
    if process_group is None and vocab_start is None and not _any_dtensor(hidden, weight, targets, bias):
        return hidden, weight, targets, bias, None
    from hf_lmobj.losses.vocab_parallel import resolve_vocab_shard

    kind, payload = resolve_vocab_shard(hidden, weight, targets, bias, process_group, vocab_start, ignore_index)
    if kind == "tp":
        return hidden, weight, targets, bias, payload
    return (*payload, None)


def _any_dtensor(*tensors) -> bool:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover - torch without distributed
        return False
    return any(isinstance(t, DTensor) for t in tensors)


def _check_inputs(hidden, weight, targets, bias, ignore_index: int) -> torch.Tensor:
    """Check the head's inputs; return ``targets`` as int64 (class indices or ``ignore_index``)."""
    for name, tensor in (("hidden", hidden), ("weight", weight), ("bias", bias)):
        if tensor is not None and (not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point()):
            kind = tensor.dtype if isinstance(tensor, torch.Tensor) else type(tensor).__name__
            raise TypeError(f"{name} must be a floating-point tensor, got {kind}")
    if hidden.dim() < 1:
        raise ValueError("hidden must have a feature dimension (..., H), got a 0-d tensor")
    if weight.dim() != 2 or hidden.shape[-1] != weight.shape[1]:
        raise ValueError(
            f"weight must be (vocab, hidden={hidden.shape[-1]}), got {tuple(weight.shape)}; "
            "pass the head's weight as stored by nn.Linear (out_features first)"
        )
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        raise ValueError(f"bias must be ({weight.shape[0]},), got {tuple(bias.shape)}")
    leading = "hidden's leading shape"
    return check_labels(targets, "targets", weight.shape[0], ignore_index, shape=hidden.shape[:-1], shape_of=leading)


@torch.no_grad()
def linear_token_losses(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    ignore_index: int = -100,
    chunk_size: int | None = None,
    logit_softcap: float | None = None,
    process_group=None,
    vocab_start: int | None = None,
) -> torch.Tensor:
    """Per-token negative log-likelihood of ``hidden @ weight.T + bias`` (no grad), 0 where ignored.

    The evaluation path: the same chunking as ``linear_cross_entropy``, returning ``targets``'
    shape in the accumulation dtype, so per-row sums (corpus perplexity) need no logits.

    Example:
        >>> out = linear_token_losses(torch.zeros(1, 2, 3), torch.zeros(4, 3), torch.tensor([[2, -100]]))
        >>> [round(x, 4) for x in out[0].tolist()]  # ln 4, ignored
        [1.3863, 0.0]
    """
    opts = HeadLossOptions(logit_softcap=logit_softcap)
    hidden, weight, targets, bias, shard = _route(
        hidden, weight, targets, bias, process_group, vocab_start, ignore_index
    )
    if shard is not None:
        from hf_lmobj.losses.vocab_parallel import vocab_parallel_token_losses

        return vocab_parallel_token_losses(shard, ignore_index=ignore_index, chunk_size=chunk_size, opts=opts)
    targets = _check_inputs(hidden, weight, targets, bias, ignore_index)
    flat_h, flat_t = hidden.reshape(-1, hidden.shape[-1]), targets.reshape(-1)  # (N, H), (N,)
    rows = (flat_t != ignore_index).nonzero().squeeze(1)  # (M,)
    kept_t = flat_t.index_select(0, rows)
    compute = compute_dtype(hidden, weight)
    acc = accumulation_dtype(compute)
    w, b = weight.to(compute), None if bias is None else bias.to(compute)
    out = torch.zeros(flat_t.shape, dtype=acc, device=hidden.device)  # (N,)
    step = resolve_chunk_size(chunk_size, weight.shape[0], weight.device.type)
    with _autocast_off(hidden.device):
        for start in range(0, rows.numel(), step):
            r = rows[start : start + step]
            logits = _head_logits(flat_h.index_select(0, r).to(compute), w, b, acc)  # (C, V)
            out[r] = token_losses_and_grad(logits, kept_t[start : start + step], opts, False)[0]
    return out.reshape(targets.shape)
