"""What sharded training needs from the package: spotting DTensor shards and gathering them whole.

Torch's FSDP2 (``fully_shard``) replaces a module's parameters by ``DTensor`` shards outside its
forward pass and swaps the module's class for a ``FSDP<Name>`` subclass. Two consequences here:

* ``unwrap_sharded_class(module)`` is the class the user built (``FSDPLinear`` -> ``nn.Linear``), so
  a sharded output embedding is still recognised as a plain linear head.
* ``full_state_dict(model)`` gathers every shard into one full state dict. It is a *collective*:
  every rank must call it (calling it on rank 0 alone hangs); the full tensors land on rank 0's CPU
  (other ranks get an empty dict), ready for ``save_pretrained``.

Example:
    >>> from torch import nn
    >>> lin = nn.Linear(2, 3)
    >>> has_dtensor_parameters(lin), unwrap_sharded_class(lin) is nn.Linear
    (False, True)
    >>> sorted(full_state_dict(lin))  # nothing sharded: the plain state dict
    ['bias', 'weight']
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["has_dtensor_parameters", "unwrap_sharded_class", "full_state_dict", "ranks_per_replica"]


def _dtensor_type() -> type | None:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # torch built without distributed support
        return None
    return DTensor


def _fsdp_module_type() -> type | None:
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # torch < 2.6 keeps it private, or no distributed support
        return None
    return FSDPModule


def has_dtensor_parameters(model: nn.Module) -> bool:
    """True when any parameter is a ``DTensor`` (FSDP2 / tensor-parallel shards)."""
    dtensor = _dtensor_type()
    return dtensor is not None and any(isinstance(p, dtensor) for p in model.parameters())


def unwrap_sharded_class(module: nn.Module) -> type:
    """The module's own class, looking through the ``FSDP<Name>`` subclass ``fully_shard`` creates."""
    cls, fsdp = type(module), _fsdp_module_type()
    if fsdp is not None and issubclass(cls, fsdp) and cls.__bases__[0] is fsdp and len(cls.__bases__) == 2:
        return cls.__bases__[1]
    return cls


def full_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """Every rank calls this; rank 0 receives the full state dict on CPU (others an empty dict).

    Without DTensor parameters it is ``model.state_dict()`` on every rank (no communication).
    """
    if not has_dtensor_parameters(model):
        return model.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def ranks_per_replica(accelerator: object, model: nn.Module | None = None) -> int:
    """How many ranks see the same tokens: the tensor / context / sequence-parallel degree (1 without them).

    Read from accelerate's ``ParallelismConfig`` (``non_data_parallel_size``) when the accelerator has
    one, else from a transformers model sharded with ``tp_plan`` (``model.tp_size``). Token counts
    summed over every rank are divided by it, and gradients average over ``world_size / it`` ranks.

    Example:
        >>> class Accelerator:  # no parallelism_config, a model without tp_size
        ...     parallelism_config = None
        >>> ranks_per_replica(Accelerator(), nn.Linear(2, 2))
        1
    """
    config = getattr(accelerator, "parallelism_config", None)
    if config is not None:
        return int(config.non_data_parallel_size)
    base = getattr(model, "module", model)  # DDP wraps the model
    size = getattr(base, "tp_size", None) if base is not None else None
    return int(size) if isinstance(size, int) and size > 1 else 1
