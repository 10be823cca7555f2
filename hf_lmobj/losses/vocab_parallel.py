"""Vocab-parallel (tensor-parallel) ``linear_cross_entropy``: the head weight split by vocabulary rows.

Contract. ``linear_cross_entropy`` / ``linear_token_losses`` take this path when

* ``weight`` is a ``DTensor`` whose placements are ``Shard(0)`` on exactly one mesh dimension and
  ``Replicate()`` on the others (``ColwiseParallel`` on the ``lm_head``, transformers'
  ``tp_plan="auto"``; uneven shards are fine), the TP group being that mesh dimension's group; or
* ``weight`` is a plain ``(V_local, H)`` tensor and ``process_group=`` / ``vocab_start=`` say which
  group shares the vocabulary and where this rank's rows start (``V`` = the sum of ``V_local``).

``bias`` (optional) is sharded the same way (a DTensor with the weight's placements, or the plain
local ``(V_local,)`` slice). ``hidden`` and ``targets`` must be *replicated* over the TP group (the
same values on every rank); a DTensor ``hidden`` / ``targets`` (e.g. sequence-parallel) is gathered
to ``Replicate`` first with ``full_tensor()``. Every rank returns the same loss, exactly the loss of
the unsharded head (label smoothing, z-loss, logit softcap, ``ignore_index`` and
``num_items_in_batch`` included), and gets the gradient of its own weight / bias shard and the full
gradient of ``hidden``. The call and the backward are collectives: every TP rank must make them,
with the same targets (checked: one small all-reduce per call). A DTensor weight placed
``Replicate()`` only (FSDP2-gathered) takes the ordinary path on its local copy. Other placements
(``Shard(1)``, ``Partial``, strided shards from FSDP + TP) raise ``NotImplementedError``.

How: Megatron's vocab-parallel cross-entropy, one ``[chunk_size, V_local]`` block at a time, with two
all-reduces per chunk (max, then the sums) and ``hidden``'s gradient summed over the TP group in the
backward. Why: the full ``[N, V]`` logits, or even a gathered weight, never exist on one rank;
memory is ``O(chunk_size x V / tp)``.

Example (2 ranks, under ``torchrun``; see ``tests/scripts/vocab_parallel_step.py``)::

    mesh = init_device_mesh("cpu", (2,))
    w = distribute_tensor(full_weight, mesh, [Shard(0)])      # or ColwiseParallel on lm_head
    loss = linear_cross_entropy(hidden, w, targets)            # == the loss with full_weight
    loss.backward()                                            # w.grad: DTensor, Shard(0)
"""

from __future__ import annotations

import torch
import torch.distributed as dist
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
)


def dtensor_type() -> type | None:
    """torch's ``DTensor`` class, or None where torch was built without distributed support."""
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # pragma: no cover - torch without distributed
        return None
    return DTensor


def _is_dtensor(x) -> bool:
    cls = dtensor_type()
    return cls is not None and isinstance(x, cls)


class VocabShard:
    """What the vocab-parallel path needs: local tensors, the TP group and this rank's vocab slice."""

    def __init__(self, hidden, weight, bias, targets, group, vocab_start: int, vocab_size: int):
        self.hidden, self.weight, self.bias, self.targets = hidden, weight, bias, targets
        self.group, self.vocab_start, self.vocab_size = group, vocab_start, vocab_size


def _replicated(x):
    """A DTensor ``hidden`` / ``targets`` gathered to every rank (differentiable); others as given."""
    return x.full_tensor() if _is_dtensor(x) else x


def _shard_dim(weight, name: str) -> int | None:
    """The mesh dimension over which ``weight`` is ``Shard(0)``; ``None`` if fully replicated."""
    sharded = []
    for i, p in enumerate(weight.placements):
        if p.is_replicate():
            continue
        if type(p).__name__ == "Shard" and p.dim == 0:
            sharded.append(i)
            continue
        raise NotImplementedError(
            f"linear_cross_entropy: {name} placements {tuple(weight.placements)} are not supported; "
            "use Shard(0) (vocab-parallel) on one mesh dimension and Replicate() on the others, "
            "or full_tensor() the weight first"
        )
    if len(sharded) > 1:
        raise NotImplementedError(
            f"linear_cross_entropy: {name} is sharded over the vocabulary on {len(sharded)} mesh dimensions "
            f"{tuple(weight.placements)}; only one is supported"
        )
    return sharded[0] if sharded else None


def resolve_vocab_shard(hidden, weight, targets, bias, process_group, vocab_start, ignore_index: int):
    """Sort out DTensor / explicit-group inputs. Returns a tuple ``(kind, payload)``: ``("plain", (hidden, weight, targets, bias))`` for the ordinary
    single-device path, ``("tp", VocabShard)`` for the vocab-parallel one.
    """
    hidden, targets = _replicated(hidden), _replicated(targets)
    w_dt, b_dt = _is_dtensor(weight), _is_dtensor(bias)
    if process_group is not None:
        if w_dt or b_dt:
            raise ValueError("process_group= / vocab_start= are for a plain local weight shard, not a DTensor")
        if vocab_start is None:
            raise ValueError("process_group= needs vocab_start= (the first vocabulary row of this rank's shard)")
        return "tp", _explicit_shard(hidden, weight, targets, bias, process_group, int(vocab_start), ignore_index)
    if vocab_start is not None:
        raise ValueError("vocab_start= needs process_group= (the group that shares the vocabulary)")
    if not w_dt:
        if b_dt:
            bias = _local_replicated(bias, "bias")
        return "plain", (hidden, weight, targets, bias)
    dim = _shard_dim(weight, "weight")
    if dim is None:  # Replicate everywhere (FSDP2-gathered): the ordinary path on the local copy
        weight = weight.to_local()
        if b_dt:
            bias = _local_replicated(bias, "bias")
        return "plain", (hidden, weight, targets, bias)
    from torch.distributed.tensor._utils import compute_local_shape_and_global_offset

    mesh = weight.device_mesh
    _check_shapes(hidden, weight.shape)
    _, offset = compute_local_shape_and_global_offset(weight.shape, mesh, weight.placements)
    start, vocab_size = int(offset[0]), int(weight.shape[0])
    local_w = weight.to_local()
    local_b = None
    if bias is not None:
        if b_dt:
            if tuple(bias.placements) != tuple(weight.placements) or bias.device_mesh != mesh:
                raise NotImplementedError(
                    f"linear_cross_entropy: a DTensor bias must be placed like the weight {tuple(weight.placements)}, "
                    f"got {tuple(bias.placements)}"
                )
            local_b = bias.to_local()
        else:
            local_b = bias
        if tuple(local_b.shape) != (local_w.shape[0],):
            raise ValueError(
                f"bias must be this rank's ({local_w.shape[0]},) shard of the vocab-parallel bias, "
                f"got {tuple(local_b.shape)}"
            )
    return "tp", VocabShard(hidden, local_w, local_b, targets, mesh.get_group(dim), start, vocab_size)


def _local_replicated(bias, name):
    if _shard_dim(bias, name) is not None:
        raise NotImplementedError(f"linear_cross_entropy: a {name} sharded over the vocabulary needs a sharded weight")
    return bias.to_local()


def _check_shapes(hidden, weight_shape) -> None:
    if not isinstance(hidden, torch.Tensor) or not hidden.is_floating_point():
        raise TypeError("hidden must be a floating-point tensor")
    if hidden.dim() < 1 or len(weight_shape) != 2 or hidden.shape[-1] != weight_shape[1]:
        raise ValueError(
            f"weight must be (vocab, hidden={hidden.shape[-1] if hidden.dim() else '?'}), got {tuple(weight_shape)}"
        )


def _explicit_shard(hidden, weight, targets, bias, group, start, ignore_index):
    if not isinstance(weight, torch.Tensor) or not weight.is_floating_point() or weight.dim() != 2:
        raise TypeError("weight must be a floating-point (V_local, H) tensor")
    _check_shapes(hidden, weight.shape)
    if bias is not None and tuple(bias.shape) != (weight.shape[0],):
        raise ValueError(f"bias must be this rank's ({weight.shape[0]},) shard, got {tuple(bias.shape)}")
    sizes = torch.tensor([weight.shape[0]], dtype=torch.int64, device=_comm_device(weight, group))
    dist.all_reduce(sizes, group=group)
    vocab_size = int(sizes.item())
    if start < 0 or start + weight.shape[0] > vocab_size:
        raise ValueError(f"vocab_start={start} + {weight.shape[0]} rows is outside the vocabulary of {vocab_size}")
    return VocabShard(hidden, weight, bias, targets, group, start, vocab_size)


def _comm_device(like: torch.Tensor, group) -> torch.device:
    """The device collectives of ``group`` run on: gloo on CPU, the backend's device otherwise."""
    backend = dist.get_backend(group)
    return torch.device("cpu") if backend == "gloo" else like.device


def _all_reduce(t: torch.Tensor, op, group) -> torch.Tensor:
    dev = _comm_device(t, group)
    if dev == t.device:
        dist.all_reduce(t, op=op, group=group)
        return t
    moved = t.to(dev)
    dist.all_reduce(moved, op=op, group=group)
    return t.copy_(moved)


def _vp_losses_and_grad(z, local_t, owned, opts: HeadLossOptions, need_grad: bool, group, vocab: int):
    """``token_losses_and_grad`` for a ``(C, V_local)`` block of the vocab-parallel logits (in place)."""
    eps = opts.label_smoothing
    tanh = None
    if opts.logit_softcap is not None:
        tanh = z.div_(opts.logit_softcap).tanh_()
        z = tanh.mul(opts.logit_softcap) if need_grad else tanh.mul_(opts.logit_softcap)
    rows, v_local = z.shape
    if v_local:
        shift = z.amax(dim=-1)  # (C,)
        target = z.gather(1, local_t[:, None]).squeeze(1).mul_(owned)  # (C,), 0 where another rank owns it
    else:
        shift = z.new_full((rows,), float("-inf"))
        target = z.new_zeros(rows)
    shift = _all_reduce(shift, dist.ReduceOp.MAX, group)
    stats = [None, target]
    if eps > 0.0:
        stats.append(z.sum(dim=-1))
    p = z.sub_(shift[:, None]).exp_()  # (C, V_local) exp(z - max), the block reused
    stats[0] = p.sum(dim=-1)
    stats = _all_reduce(torch.stack(stats), dist.ReduceOp.SUM, group)
    sumexp, target = stats[0], stats[1]
    lse = shift + sumexp.log()
    losses = lse - (1.0 - eps) * target
    if eps > 0.0:
        losses = losses - eps * stats[2] / vocab
    if opts.z_loss > 0.0:
        losses = losses + opts.z_loss * lse.square()
    if not need_grad:
        return losses, None
    grad = p.div_(sumexp[:, None])  # softmax over the whole vocabulary, this rank's columns
    if opts.z_loss > 0.0:
        grad.mul_((1.0 + 2.0 * opts.z_loss * lse)[:, None])
    if eps > 0.0:
        grad.sub_(eps / vocab)
    if v_local:
        grad.scatter_add_(1, local_t[:, None], owned.to(grad.dtype)[:, None] * (eps - 1.0))
    if tanh is not None:
        grad.mul_(1.0 - tanh.square_())
    return losses, grad


def _local_targets(targets: torch.Tensor, start: int, v_local: int):
    local = targets - start
    owned = (local >= 0) & (local < v_local)
    return local.where(owned, torch.zeros_like(local)), owned


class _VocabParallelLinearCrossEntropy(torch.autograd.Function):
    """Sum of per-row losses (all rows kept) times ``scale``, vocab-parallel; grads in the forward."""

    @staticmethod
    def forward(ctx, hidden, weight, bias, targets, scale, opts, chunk_size, grad_enabled, compute, shard):  # noqa: D102
        acc = accumulation_dtype(compute)
        h, w = hidden.to(compute), weight.to(compute)
        b = None if bias is None else bias.to(compute)
        want_h, want_w, want_b = (grad_enabled and need for need in ctx.needs_input_grad[:3])
        need_grad = want_h or want_w or want_b
        grad_h = h.new_zeros(h.shape, dtype=acc) if want_h else None  # (M, H), this shard's partial
        grad_w = w.new_zeros(w.shape, dtype=acc) if want_w else None  # (V_local, H)
        grad_b = w.new_zeros(w.shape[:1], dtype=acc) if want_b else None
        local_t, owned = _local_targets(targets, shard.vocab_start, w.shape[0])
        total = h.new_zeros((), dtype=acc)
        with _autocast_off(h.device):
            for start in range(0, h.shape[0], chunk_size):
                sl = slice(start, start + chunk_size)
                h_c = h[sl]
                z = _head_logits(h_c, w, b, acc)  # (C, V_local)
                losses, g = _vp_losses_and_grad(
                    z, local_t[sl], owned[sl], opts, need_grad, shard.group, shard.vocab_size
                )
                total += losses.sum()
                if g is None:
                    continue
                g.mul_(scale)
                if want_h and w.shape[0]:
                    _store_product(grad_h[sl], g, w)
                if want_w:
                    _add_product(grad_w, g.T, h_c)
                if want_b:
                    grad_b += g.sum(dim=0)
        ctx.grads = (grad_h, grad_w, grad_b)
        ctx.dtypes = (hidden.dtype, weight.dtype, None if bias is None else bias.dtype)
        ctx.group = shard.group
        return total * scale

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_out):  # noqa: D102
        group = ctx.group  # hidden is replicated over TP: its gradient is the sum of every shard's part
        grads = handed_out_grads(ctx, grad_out, lambda grad: _all_reduce(grad, dist.ReduceOp.SUM, group))
        return (*grads, None, None, None, None, None, None, None)


def _kept_rows(shard: VocabShard, ignore_index: int, shape_hint: str):
    targets = check_labels(
        shard.targets, "targets", shard.vocab_size, ignore_index, shape=shard.hidden.shape[:-1], shape_of=shape_hint
    )
    flat_h = shard.hidden.reshape(-1, shard.hidden.shape[-1])
    flat_t = targets.reshape(-1)
    return targets, flat_h, flat_t


def _check_same_rows(count: int, like: torch.Tensor, group) -> None:
    """Every TP rank must walk the same rows (replicated targets), else the collectives would hang."""
    t = torch.tensor([count, -count], dtype=torch.int64, device=_comm_device(like, group))
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=group)
    if int(t[0]) != count or -int(t[1]) != count:
        raise ValueError(
            "vocab-parallel linear_cross_entropy: the TP ranks hold different targets "
            f"({count} kept rows here, between {-int(t[1])} and {int(t[0])} across the group); "
            "hidden and targets must be replicated over the tensor-parallel group"
        )


def vocab_parallel_cross_entropy(
    shard: VocabShard, *, ignore_index, num_items_in_batch, chunk_size, opts: HeadLossOptions
) -> torch.Tensor:
    """``linear_cross_entropy`` on a ``VocabShard`` (called by it; same semantics)."""
    _, flat_h, flat_t = _kept_rows(shard, ignore_index, "hidden's leading shape")
    keep = flat_t != ignore_index
    if not bool(keep.all()):
        rows = keep.nonzero().squeeze(1)
        flat_h, flat_t = flat_h.index_select(0, rows), flat_t.index_select(0, rows)
    _check_same_rows(flat_t.numel(), flat_t, shard.group)
    compute = compute_dtype(shard.hidden, shard.weight)
    like = shard.hidden.new_zeros((), dtype=accumulation_dtype(compute))
    scale = 1.0 / _denominator(num_items_in_batch, flat_t.numel(), like)
    return _VocabParallelLinearCrossEntropy.apply(
        flat_h,
        shard.weight,
        shard.bias,
        flat_t,
        scale,
        opts,
        resolve_chunk_size(chunk_size, shard.vocab_size, shard.weight.device.type),
        torch.is_grad_enabled(),
        compute,
        shard,
    )


@torch.no_grad()
def vocab_parallel_token_losses(shard: VocabShard, *, ignore_index, chunk_size, opts: HeadLossOptions):
    """``linear_token_losses`` on a ``VocabShard`` (called by it; same semantics)."""
    targets, flat_h, flat_t = _kept_rows(shard, ignore_index, "hidden's leading shape")
    rows = (flat_t != ignore_index).nonzero().squeeze(1)
    _check_same_rows(rows.numel(), flat_t, shard.group)
    kept_t = flat_t.index_select(0, rows)
    compute = compute_dtype(shard.hidden, shard.weight)
    acc = accumulation_dtype(compute)
    w = shard.weight.to(compute)
    b = None if shard.bias is None else shard.bias.to(compute)
    local_t, owned = _local_targets(kept_t, shard.vocab_start, w.shape[0])
    out = torch.zeros(flat_t.shape, dtype=acc, device=shard.hidden.device)
    step = resolve_chunk_size(chunk_size, shard.vocab_size, w.device.type)
    with _autocast_off(shard.hidden.device):
        for start in range(0, rows.numel(), step):
            sl = slice(start, start + step)
            r = rows[sl]
            z = _head_logits(flat_h.index_select(0, r).to(compute), w, b, acc)
            out[r] = _vp_losses_and_grad(z, local_t[sl], owned[sl], opts, False, shard.group, shard.vocab_size)[0]
    return out.reshape(targets.shape)
