"""A model's shards: spotting ``DTensor`` parameters, their model-parallel degree, gathering them whole.

The models read it (ELECTRA refuses tensor parallelism, :mod:`.head` recognises a sharded linear head) and so
does the trainer (token counts per replica, saving a sharded model).

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

from hf_lmobj.losses.vocab_parallel import dtensor_type


def _fsdp_module_type() -> type | None:
    try:
        from torch.distributed.fsdp import FSDPModule
    except ImportError:  # torch < 2.6 keeps it private, or no distributed support
        return None
    return FSDPModule


def has_dtensor_parameters(model: nn.Module) -> bool:
    """True when any parameter is a ``DTensor`` (FSDP2 / tensor-parallel shards)."""
    dtensor = dtensor_type()
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

    Read, in this order, from accelerate's ``ParallelismConfig`` (``non_data_parallel_size``) when the
    accelerator has one, from a transformers model sharded with ``tp_plan`` (``model.tp_size``), and from the
    device mesh of the model's ``DTensor`` parameters (TP applied by hand with ``parallelize_module``): the
    sizes of its dimensions named ``"tp"``, ``"cp"`` or ``"sp"``; an unnamed 1-D mesh is tensor-parallel
    unless the model is FSDP2-sharded (then it is FSDP's data-parallel mesh). Token counts summed over every
    rank are divided by it, and gradients average over ``world_size / it`` ranks. Raises ``ValueError`` for a
    mesh it cannot read (unnamed dimensions on a 2-D mesh, names it does not know).

    Example:
        >>> class Accelerator:  # no parallelism_config, a model without tp_size or DTensors
        ...     parallelism_config = None
        >>> ranks_per_replica(Accelerator(), nn.Linear(2, 2))
        1
    """
    config = getattr(accelerator, "parallelism_config", None)
    if config is not None:
        return int(config.non_data_parallel_size)
    base = getattr(model, "module", model)  # DDP wraps the model
    size = getattr(base, "tp_size", None) if base is not None else None
    if isinstance(size, int) and size > 1:
        return size
    return mesh_model_parallel_size(base) if isinstance(base, nn.Module) else 1


MODEL_PARALLEL_DIMS = frozenset({"tp", "cp", "sp"})  # ranks on these dimensions hold the same batch
DATA_PARALLEL_DIMS = frozenset({"dp", "dp_replicate", "dp_shard", "dp_cp", "dp_shard_cp", "fsdp", "ddp", "hsdp"})


def mesh_model_parallel_size(model: nn.Module) -> int:
    """The model-parallel degree of the device meshes the model's ``DTensor`` parameters live on (1 if none).

    Example:
        >>> mesh_model_parallel_size(nn.Linear(2, 2))  # no DTensor parameters
        1
    """
    dtensor = dtensor_type()
    if dtensor is None:
        return 1
    meshes = {p.device_mesh for p in model.parameters() if isinstance(p, dtensor)}
    if not meshes:
        return 1
    fsdp = _fsdp_module_type()
    sharded = fsdp is not None and any(isinstance(m, fsdp) for m in model.modules())
    return max(_model_parallel_dims(mesh, sharded) for mesh in meshes)


def _model_parallel_dims(mesh: object, fsdp_sharded: bool) -> int:
    """Product of the mesh's model-parallel dimension sizes."""
    names = mesh.mesh_dim_names
    if names is None:
        if mesh.ndim == 1:
            return 1 if fsdp_sharded else mesh.size()
        raise ValueError(
            f"the model's parameters live on an unnamed {mesh.ndim}-D device mesh: name its dimensions "
            f"(init_device_mesh(..., mesh_dim_names=('dp', 'tp'))) or pass accelerate's ParallelismConfig, so "
            "that token counts are summed over the data-parallel ranks only"
        )
    unknown = [n for n in names if n not in MODEL_PARALLEL_DIMS | DATA_PARALLEL_DIMS]
    if unknown:
        raise ValueError(
            f"device mesh dimension(s) {unknown} are neither data-parallel ({sorted(DATA_PARALLEL_DIMS)}) nor "
            f"model-parallel ({sorted(MODEL_PARALLEL_DIMS)}): rename them or pass accelerate's ParallelismConfig"
        )
    size = 1
    for i, name in enumerate(names):
        if name in MODEL_PARALLEL_DIMS:
            size *= mesh.size(i)
    return size
