"""The head of any stock model: found through its wrappers, read, and captured for a loss on hidden states.

* ``base_model_of(model)``: the transformers model inside DDP / accelerate / PEFT wrappers.
* ``linear_head(model)``: the output embedding as a plain ``nn.Linear`` (weight and bias; sharded
  by FSDP2's ``fully_shard`` or not, tied to the input embedding or not), or ``None`` when the
  logits must come from the model itself (LoRA on the head, logit scaling after the head, no
  output embedding).
* ``model_logit_softcap(model)``: the soft cap the model applies after its head (Gemma 2), or None.
* ``capture_head(head, fn)``: while active, the head module does not project: it hands its input
  (the final hidden states, after whatever the model applies first: GPT-2's ``ln_f``, BERT's
  prediction transform, T5's ``d_model**-0.5`` rescaling of tied embeddings) to ``fn`` and
  returns an empty ``(..., 0)`` placeholder tied to ``fn``'s result in the autograd graph, so the
  wrapped model (DDP with ``find_unused_parameters`` included) sees every parameter used.

Example:
    >>> lin = nn.Linear(2, 2)
    >>> base_model_of(nn.DataParallel(lin)) is lin, linear_head(lin)  # no output embedding: no head to capture
    (True, None)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator

import torch
from torch import nn

from hf_lmobj.losses.vocab_parallel import dtensor_type
from hf_lmobj.models.sharding import unwrap_sharded_class

#: Config fields of models that rescale logits after the head: their loss needs the real logits.
POST_HEAD_SCALING_FIELDS = ("logit_scale", "logits_scaling", "output_multiplier_scale")


def base_model_of(model: nn.Module) -> nn.Module:
    """The transformers model inside DDP / accelerate / PEFT wrappers.

    Example:
        >>> lin = nn.Linear(2, 2)
        >>> base_model_of(lin) is lin
        True
    """
    from transformers.trainer_utils import unwrap_peft_model  # here: it imports peft (seconds), the models do not

    while isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)) and "module" in model._modules:
        model = model.module
    return unwrap_peft_model(model)


def linear_head(model: nn.Module) -> nn.Linear | None:
    """The output embedding as an ``nn.Linear`` when the hidden-state path is exact, else None.

    Example:
        >>> from transformers import GPT2Config, GPT2LMHeadModel
        >>> m = GPT2LMHeadModel(GPT2Config(n_embd=8, n_layer=1, n_head=2, vocab_size=16))
        >>> linear_head(m) is m.lm_head
        True
    """
    base = base_model_of(model)
    config = getattr(base, "config", None)
    if any(getattr(config, field, None) not in (None, 1, 1.0) for field in POST_HEAD_SCALING_FIELDS):
        return None
    getter = getattr(base, "get_output_embeddings", None)
    head = getter() if callable(getter) else None
    # exactly nn.Linear (an FSDP2-sharded one included): subclasses may change forward (quantized heads)
    return head if head is not None and unwrap_sharded_class(head) is nn.Linear else None


def model_logit_softcap(model: nn.Module) -> float | None:
    """The model's own ``logit_softcap``: its config's ``final_logit_softcapping`` (Gemma 2), applied after the head.

    Example:
        >>> from transformers import GPT2Config, GPT2LMHeadModel
        >>> model_logit_softcap(GPT2LMHeadModel(GPT2Config(n_embd=8, n_layer=1, n_head=2, vocab_size=16))) is None
        True
    """
    return getattr(getattr(base_model_of(model), "config", None), "final_logit_softcapping", None)


def _like_input(anchor: torch.Tensor, hidden: torch.Tensor) -> torch.Tensor:
    """A DTensor (replicated on the input's mesh) when the head's input is one, as torch's
    ``ColwiseParallel`` output hook expects of a tensor-parallel head; else ``anchor`` itself."""
    dtensor = dtensor_type()
    if dtensor is None or not isinstance(hidden, dtensor):
        return anchor
    from torch.distributed.tensor import Replicate

    if isinstance(anchor, dtensor):
        anchor = anchor.to_local()
    mesh = hidden.device_mesh
    return dtensor.from_local(anchor, mesh, [Replicate()] * mesh.ndim, run_check=False)


@contextlib.contextmanager
def capture_head(head: nn.Module, fn: Callable[[torch.Tensor], torch.Tensor]) -> Iterator[list[torch.Tensor]]:
    """Replace ``head``'s projection by ``fn(head_input)``; yields a list that receives fn's result.

    Example:
        >>> head = nn.Linear(3, 5)
        >>> with capture_head(head, lambda h: h.sum()) as got:
        ...     out = head(torch.ones(2, 3))
        >>> tuple(out.shape), got[0].item()
        ((2, 0), 6.0)
    """
    results: list[torch.Tensor] = []
    previous = head.__dict__.get("forward")

    def forward(hidden: torch.Tensor) -> torch.Tensor:
        result = fn(hidden)
        results.append(result)
        anchor = result.sum() if result.requires_grad else hidden.new_zeros(())
        anchor = anchor.to(hidden.dtype).expand(*hidden.shape[:-1], 0)  # (..., 0), no memory
        return _like_input(anchor, hidden)

    head.forward = forward
    try:
        yield results
    finally:
        if previous is None:
            del head.forward
        else:
            head.forward = previous
