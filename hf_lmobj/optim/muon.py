"""Muon for a transformer's hidden matrices and AdamW for the rest, as one optimizer the Trainer can hold.

Muon (Jordan et al. 2024) replaces each 2-D weight's momentum update by its nearest semi-orthogonal
matrix (``ns_steps`` Newton-Schulz iterations, five by default, approximate ``U V^T`` of the update
``U S V^T``), so every direction of the matrix moves at the same rate. It is for the matrices
*inside* the blocks; embeddings, the output head, norms and biases keep AdamW. The Muon update is
scaled by ``0.2 * sqrt(max(rows, cols))`` so that its RMS matches AdamW's (Liu et al. 2025): both
groups share one learning rate and one schedule, driven by the Trainer's scheduler.

:class:`MuonAdamW` is one ``torch.optim.Optimizer`` whose param groups say which rule they follow,
orthogonalizing matrices of one shape as one fp32 batch. Why not ``torch.optim.Muon``: it takes
2-D parameters only and orthogonalizes in bf16 (slow on a CPU without bf16 units), while the
Trainer holds one optimizer (its scheduler, gradient clipping and checkpointing see one object).
:class:`MuonAdamWFactory` plugs it into ``transformers.Trainer`` through its optimizer-factory hook::

    Trainer(model=model, args=args, optimizer_cls_and_kwargs=(MuonAdamWFactory, {"lr": 5e-3, "weight_decay": 0.1}))

Muon needs each matrix whole: a sharded (FSDP2 / DTensor) matrix is gathered on every rank for its
update, orthogonalized there, and each rank keeps its own shard of the result (fine for the small
models this package trains on CPUs; a large model would shard the Newton-Schulz work across ranks).
Parameters flattened by FSDP1 or DeepSpeed ZeRO are not matrices any more and are refused.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch import nn

from hf_lmobj.checks import check_flag, check_length, check_number

NS_COEFFICIENTS = (3.4445, -4.7750, 2.0315)  # Jordan's quintic: fast growth of small singular values
RMS_MATCH = 0.2  # Moonlight: Muon's update RMS set to AdamW's typical 0.2-0.4


def orthogonalize(update: torch.Tensor, steps: int = 5, eps: float = 1e-7) -> torch.Tensor:
    """Approximately ``U V^T`` of ``update = U S V^T`` by Newton-Schulz iterations (singular values -> ~1).

    Example:
        >>> m = torch.randn(8, 4, generator=torch.Generator().manual_seed(0))
        >>> s = torch.linalg.svdvals(orthogonalize(m))
        >>> bool(((s > 0.6) & (s < 1.3)).all())
        True
    """
    a, b, c = NS_COEFFICIENTS
    x = update.float()  # (rows, cols)
    tall = x.size(-2) > x.size(-1)
    if tall:
        x = x.mT  # iterate on the short side: the Gram matrix is min(rows, cols) square
    x = x / (x.norm(dim=(-2, -1), keepdim=True) + eps)  # spectral norm <= Frobenius norm <= 1
    for _ in range(steps):
        gram = x @ x.mT  # (short, short)
        x = a * x + (b * gram + c * gram @ gram) @ x
    return (x.mT if tall else x).to(update.dtype)


def muon_param_groups(model: nn.Module, weight_decay: float = 0.0) -> list[dict[str, Any]]:
    """Three param groups: Muon for the blocks' 2-D weights, AdamW with decay for the embedding tables and the
    output head, AdamW without decay for norms and biases (as the Trainer's default AdamW groups).

    Parameters without ``requires_grad`` (frozen, e.g. under PEFT) are left out. A model with no 2-D
    weight outside its embeddings (flattened by FSDP1 / ZeRO) is refused: Muon would train nothing.
    ``weight_decay`` is checked as ``MuonAdamW`` checks it (finite, >= 0).

    Example:
        >>> import torch
        >>> from transformers import LlamaConfig, LlamaForCausalLM
        >>> model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
        ...     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2))
        >>> optimizer = MuonAdamW(muon_param_groups(model, weight_decay=0.1), lr=1e-3)
        >>> [(group["use_muon"], len(group["params"])) for group in optimizer.param_groups]
        [(True, 7), (False, 2), (False, 3)]
        >>> model(torch.tensor([[1, 2, 3]]), labels=torch.tensor([[1, 2, 3]])).loss.backward()
        >>> optimizer.step()
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch nn.Module, got {type(model).__name__}")
    weight_decay = check_number(weight_decay, "weight_decay", 0.0, hint=DECAY_HINT)
    embeddings = {id(m.weight) for m in model.modules() if isinstance(m, nn.Embedding)}  # every table (wrappers too)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None:
        embeddings.add(id(head.weight))
    muon, decayed, plain = [], [], []
    for param in model.parameters():
        if not param.requires_grad:
            continue
        if param.ndim == 2 and id(param) not in embeddings:
            muon.append(param)
        elif param.ndim >= 2:
            decayed.append(param)
        else:
            plain.append(param)
    if not muon:
        raise ValueError(
            "muon_param_groups found no trainable 2-D weight outside the embeddings and head (parameters flattened "
            "by FSDP1 / DeepSpeed ZeRO, or all frozen): Muon would train nothing; use AdamW for this model"
        )
    groups = [
        {"params": muon, "use_muon": True, "weight_decay": weight_decay},
        {"params": decayed, "use_muon": False, "weight_decay": weight_decay},
        {"params": plain, "use_muon": False, "weight_decay": 0.0},
    ]
    return [group for group in groups if group["params"]]


class MuonAdamW(torch.optim.Optimizer):
    """Muon on param groups with ``use_muon=True`` (2-D only), AdamW on the others; one lr for both.

    Args:
        params: parameters or param groups (see :func:`muon_param_groups`); a group without
            ``use_muon`` follows AdamW.
        lr: learning rate of both rules (Muon's update is RMS-matched to AdamW's).
        weight_decay: decoupled weight decay (``p -= lr * weight_decay * p``), both rules.
        momentum: Muon's momentum; ``nesterov`` uses the Nesterov form (the default, as Jordan's).
        ns_steps: Newton-Schulz iterations per Muon update.
        betas, eps: AdamW's moments and denominator guard.

    Every hyper-parameter is checked where it enters, here and in ``add_param_group`` (a group's own
    values, and that a ``use_muon`` group holds 2-D matrices only), refusing what ``torch.optim.AdamW``
    refuses and more: ``lr``, ``weight_decay``, ``eps`` finite and >= 0; ``momentum`` and each beta
    in ``[0, 1)``; ``ns_steps`` an int >= 1; ``nesterov`` / ``use_muon`` True or False.

    Example:
        >>> MuonAdamW([torch.nn.Parameter(torch.zeros(2, 2))], weight_decay=-0.1)
        Traceback (most recent call last):
        ...
        ValueError: weight_decay must be a finite number in [0, inf), got -0.1; decoupled decay p -= lr * weight_decay * p (0.1 is usual)
    """

    def __init__(
        self,
        params: Iterable[torch.Tensor] | Iterable[dict[str, Any]],
        lr: float = 1e-3,
        weight_decay: float = 0.0,
        momentum: float = 0.95,
        nesterov: bool = True,
        ns_steps: int = 5,
        betas: tuple[float, float] = (0.9, 0.95),
        eps: float = 1e-8,
    ) -> None:
        defaults = dict(lr=lr, weight_decay=weight_decay, momentum=momentum, nesterov=nesterov, ns_steps=ns_steps,
                        betas=betas, eps=eps, use_muon=False)  # fmt: skip
        super().__init__(params, check_hyperparameters(defaults))  # each group: add_param_group

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """``Optimizer.add_param_group`` after the checks of the class docstring (errors name the group)."""
        if not isinstance(param_group, dict):
            raise TypeError(f"a param group must be a dict with 'params', got {type(param_group).__name__}")
        if "params" not in param_group:
            raise ValueError("a param group must have a 'params' entry (the parameters it updates)")
        group, index = dict(param_group), len(self.param_groups)
        params = group["params"]
        if isinstance(params, set):
            raise TypeError("a param group's params must be an ordered sequence (a list), not a set")
        group["params"] = [params] if isinstance(params, torch.Tensor) else list(params)
        unknown = sorted(set(group) - set(self.defaults) - GROUP_EXTRAS)  # a typo ("use_moun") would be ignored
        if unknown:
            raise ValueError(f"param group {index} has unknown setting(s) {unknown}; known: {sorted(self.defaults)}")
        checked = check_hyperparameters({**self.defaults, **group}, f"param group {index}: ")
        group.update({key: checked[key] for key in group if key in checked})
        if checked["use_muon"]:
            _check_muon_group(index, group["params"])
        super().add_param_group(group)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None) -> float | None:
        """One update of every parameter with a gradient."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if group["use_muon"]:
                for same_shape in _by_shape(params):
                    if _is_sharded(same_shape[0]):
                        for param in same_shape:
                            self._sharded_muon_update(param, group)
                    else:
                        self._muon_update(same_shape, group)
            else:
                for param in params:
                    self._adamw_update(param, group)
        return loss

    def _muon_update(self, params: list[torch.Tensor], group: dict[str, Any]) -> None:
        """Muon on matrices of one shape, orthogonalized as one batch (one matmul per iteration for all)."""
        for param in params:
            if "momentum_buffer" not in self.state[param]:
                self.state[param]["momentum_buffer"] = torch.zeros_like(param)
        grads = torch.stack([p.grad for p in params])  # (n, rows, cols)
        buffers = [self.state[p]["momentum_buffer"] for p in params]
        torch._foreach_lerp_(buffers, list(grads.unbind()), 1 - group["momentum"])
        stacked = torch.stack(buffers)  # (n, rows, cols)
        direction = grads.lerp_(stacked, group["momentum"]) if group["nesterov"] else stacked
        updates = orthogonalize(direction, group["ns_steps"])  # (n, rows, cols)
        scale = RMS_MATCH * math.sqrt(max(params[0].shape))
        torch._foreach_mul_(params, 1 - group["lr"] * group["weight_decay"])
        torch._foreach_add_(params, list(updates.unbind()), alpha=-group["lr"] * scale)

    def _sharded_muon_update(self, param: torch.Tensor, group: dict[str, Any]) -> None:
        """Muon on a DTensor (FSDP2): every rank gathers the whole update, orthogonalizes it and keeps its shard."""
        from torch.distributed.tensor import distribute_tensor

        state = self.state[param]
        if "momentum_buffer" not in state:
            state["momentum_buffer"] = torch.zeros_like(param)  # a DTensor sharded like param
        buffer = state["momentum_buffer"]
        buffer.lerp_(param.grad, 1 - group["momentum"])
        direction = param.grad.lerp(buffer, group["momentum"]) if group["nesterov"] else buffer
        whole = orthogonalize(direction.full_tensor(), group["ns_steps"])  # (rows, cols), the same on every rank
        update = distribute_tensor(whole, param.device_mesh, param.placements, src_data_rank=None)  # local slice
        param.mul_(1 - group["lr"] * group["weight_decay"])
        param.add_(update, alpha=-group["lr"] * RMS_MATCH * math.sqrt(max(param.shape)))

    def _adamw_update(self, param: torch.Tensor, group: dict[str, Any]) -> None:
        grad, state = param.grad, self.state[param]
        if "step" not in state:
            state["step"] = torch.tensor(0.0)
            state["exp_avg"] = torch.zeros_like(param)
            state["exp_avg_sq"] = torch.zeros_like(param)
        state["step"] += 1
        step, (beta1, beta2) = float(state["step"]), group["betas"]
        state["exp_avg"].lerp_(grad, 1 - beta1)
        state["exp_avg_sq"].mul_(beta2).addcmul_(grad, grad, value=1 - beta2)
        denominator = (state["exp_avg_sq"] / (1 - beta2**step)).sqrt_().add_(group["eps"])
        param.mul_(1 - group["lr"] * group["weight_decay"])
        param.addcdiv_(state["exp_avg"], denominator, value=-group["lr"] / (1 - beta1**step))


class MuonAdamWFactory:
    """``transformers.Trainer``'s optimizer-factory hook: the Trainer calls ``MuonAdamWFactory()(model, **kwargs)``.

    Example:
        >>> from transformers import LlamaConfig, LlamaForCausalLM
        >>> model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64,
        ...     num_hidden_layers=1, num_attention_heads=2, num_key_value_heads=2))
        >>> type(MuonAdamWFactory()(model, lr=5e-3, weight_decay=0.1)).__name__
        'MuonAdamW'
    """

    def __call__(self, model: nn.Module, lr: float = 1e-3, weight_decay: float = 0.0, **kwargs: Any) -> MuonAdamW:
        return MuonAdamW(muon_param_groups(model, weight_decay), lr=lr, weight_decay=weight_decay, **kwargs)


GROUP_EXTRAS = frozenset({"params", "param_names", "initial_lr", "name"})  # torch's and the schedulers' own keys
DECAY_HINT = "decoupled decay p -= lr * weight_decay * p (0.1 is usual)"


def check_hyperparameters(settings: dict[str, Any], where: str = "") -> dict[str, Any]:
    """``settings`` with every MuonAdamW hyper-parameter checked and normalised (see ``MuonAdamW``).

    Example:
        >>> check_hyperparameters({"lr": 1e-3, "betas": (0.9, 1.0)})
        Traceback (most recent call last):
        ...
        ValueError: betas[1] must be a finite number in [0, 1), got 1.0; AdamW's moment decays, e.g. (0.9, 0.95)
    """
    out = dict(settings)
    for key, hint in (("lr", "the learning rate of both rules"), ("weight_decay", DECAY_HINT),
                      ("eps", "AdamW's denominator guard, e.g. 1e-8")):  # fmt: skip
        if key in out:
            out[key] = check_number(out[key], f"{where}{key}", 0.0, hint=hint)
    if "momentum" in out:
        out["momentum"] = check_number(
            out["momentum"], f"{where}momentum", 0.0, 1.0, high_open=True, hint="Muon's momentum, e.g. 0.95"
        )
    if "betas" in out:
        out["betas"] = _check_betas(out["betas"], f"{where}betas")
    if "ns_steps" in out:
        out["ns_steps"] = check_length(out["ns_steps"], f"{where}ns_steps", 1, why="Newton-Schulz iterations")
    for key in ("nesterov", "use_muon"):
        if key in out:
            out[key] = check_flag(out[key], f"{where}{key}")
    return out


def _check_betas(betas: Any, field: str) -> tuple[float, float]:
    if isinstance(betas, (str, bytes)) or not isinstance(betas, (tuple, list)) or len(betas) != 2:
        raise TypeError(f"{field} must be a pair (beta1, beta2), e.g. (0.9, 0.95), got {betas!r}")
    hint = "AdamW's moment decays, e.g. (0.9, 0.95)"
    return tuple(check_number(b, f"{field}[{i}]", 0.0, 1.0, high_open=True, hint=hint) for i, b in enumerate(betas))


def _check_muon_group(index: int, params: list[Any]) -> None:
    """Muon groups hold whole 2-D matrices only."""
    params = [p[1] if isinstance(p, tuple) else p for p in params]  # named parameters: (name, tensor)
    flat = [p for p in params if not isinstance(p, torch.Tensor) or p.ndim != 2]
    if flat:
        raise ValueError(
            f"param group {index} has use_muon=True but holds {len(flat)} parameter(s) that are not 2-D "
            f"(shape {tuple(getattr(flat[0], 'shape', ()))}): Muon orthogonalizes matrices; put them in an AdamW group"
        )


def _is_sharded(param: torch.Tensor) -> bool:
    if not torch.distributed.is_available():
        return False
    from torch.distributed.tensor import DTensor

    return isinstance(param, DTensor)


def _by_shape(params: list[torch.Tensor]) -> list[list[torch.Tensor]]:
    """Parameters grouped by (shape, dtype, device), in first-seen order."""
    groups: dict[tuple[Any, ...], list[torch.Tensor]] = {}
    for param in params:
        groups.setdefault((tuple(param.shape), param.dtype, param.device), []).append(param)
    return list(groups.values())
