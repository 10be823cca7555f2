"""Cross-entropy of a linear head without ever holding the ``[tokens, vocab]`` logits.

``linear_cross_entropy(hidden, weight, targets)`` equals
``cross_entropy(hidden @ weight.T + bias, targets)`` in value and gradients, but walks the target
rows in chunks of ``chunk_size``: each chunk's logits are built, turned into its loss and its
gradient with respect to the logits and multiplied into ``grad_hidden`` / ``grad_weight``, in one
``[chunk_size, vocab]`` block that every chunk reuses (with a second one for the logsumexp's
temporary: no fresh block per chunk). The gradients are computed during the forward (the backward
only scales them by the incoming gradient), so the peak extra memory is those two blocks plus the
gradient buffers.
Rows whose target is ``ignore_index`` are dropped before the head is applied and cost nothing (so a
masked-LM loss runs the head on the selected positions only).

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

A head weight sharded on the vocabulary (a ``DTensor`` placed ``Shard(0)``, or a local shard with
``process_group=`` / ``vocab_start=``) runs vocab-parallel: the same loss and gradients with
``[chunk, V / tp]`` logits per rank (:mod:`hf_lmobj.losses.vocab_parallel`).

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
"""

from __future__ import annotations

import torch
from torch.autograd.function import once_differentiable

from hf_lmobj.checks import check_labels
from hf_lmobj.losses.head_chunks import (
    HeadLossOptions,
    _add_product,
    _autocast_off,
    _denominator,
    _head_logits,
    _store_product,
    accumulation_dtype,
    compute_dtype,
    handed_out_grads,
    resolve_chunk_size,
    token_losses_and_grad,
)


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
        block, work = _chunk_blocks(h.shape[0], w.shape[0], chunk_size, w, acc)  # reused by every chunk
        with _autocast_off(h.device):
            for start in range(0, h.shape[0], chunk_size):
                h_c, t_c = h[start : start + chunk_size], targets[start : start + chunk_size]
                rows = h_c.shape[0]
                logits = _head_logits(h_c, w, b, acc, out=block[:rows])  # (C, V)
                losses, g = token_losses_and_grad(logits, t_c, opts, need_grad, work[:rows])  # g: (C, V)
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
        return (*handed_out_grads(ctx, grad_out), None, None, None, None, None, None)


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


def _chunk_blocks(rows: int, vocab: int, chunk_size: int, like: torch.Tensor, acc: torch.dtype):
    """Two ``(min(chunk_size, rows), vocab)`` blocks of dtype ``acc``, the logits and the logsumexp's temporary,
    allocated once per call and reused by every chunk: two fresh 8 MiB blocks per chunk cost allocations, cold
    cache lines and, where the allocator hands them back to the system, page faults."""
    shape = (min(chunk_size, rows), vocab)
    return like.new_empty(shape, dtype=acc), like.new_empty(shape, dtype=acc)


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
    block, work = _chunk_blocks(rows.numel(), weight.shape[0], step, w, acc)  # reused by every chunk
    with _autocast_off(hidden.device):
        for start in range(0, rows.numel(), step):
            r = rows[start : start + step]
            logits = _head_logits(flat_h.index_select(0, r).to(compute), w, b, acc, out=block[: r.numel()])  # (C, V)
            out[r] = token_losses_and_grad(logits, kept_t[start : start + step], opts, False, work[: r.numel()])[0]
    return out.reshape(targets.shape)
