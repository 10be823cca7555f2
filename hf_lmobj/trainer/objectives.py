"""What an objective trains on, and how to get the head's inputs out of a stock model.

* ``infer_objective(model)``: ``"span"`` for encoder-decoders (every encoder-decoder objective
  shares its loss), ``"masked"`` for masked-LM classes, else ``"causal"``.
* ``objective_targets(objective, batch)``: the per-position targets the loss scores (next-token
  objectives: ``shift_labels`` or ``labels`` shifted; the others: ``labels``), with positions outside a
  batch's ``logits_to_keep`` set to -100. ``count_targets`` counts them (``num_items_in_batch``).
* ``linear_head(model)``: the output embedding as a plain ``nn.Linear`` (weight and bias; sharded
  by FSDP2's ``fully_shard`` or not, tied to the input embedding or not), or ``None`` when the
  logits must come from the model itself (LoRA on the head, logit scaling after the head, no
  output embedding).
* ``capture_head(head, fn)``: while active, the head module does not project: it hands its input
  (the final hidden states, after whatever the model applies first: GPT-2's ``ln_f``, BERT's
  prediction transform, T5's ``d_model**-0.5`` rescaling of tied embeddings) to ``fn`` and
  returns an empty ``(..., 0)`` placeholder tied to ``fn``'s result in the autograd graph, so the
  wrapped model (DDP with ``find_unused_parameters`` included) sees every parameter used.

Example:
    >>> import torch
    >>> batch = {"labels": torch.tensor([[5, 6, 7]])}
    >>> objective_targets("causal", batch).tolist(), int(count_targets("causal", batch))
    ([[6, 7, -100]], 2)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Literal

import torch
from torch import nn
from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES
from transformers.trainer_utils import unwrap_peft_model

from hf_lmobj.losses.functional import next_token_targets
from hf_lmobj.objectives import OBJECTIVES, ObjectiveSpec, get_objective, objective_names
from hf_lmobj.trainer.sharding import unwrap_sharded_class
from hf_lmobj.validation import check_length

__all__ = [
    "Objective",
    "POST_HEAD_SCALING_FIELDS",
    "base_model_of",
    "infer_objective",
    "check_objective",
    "objective_targets",
    "count_targets",
    "model_inputs",
    "linear_head",
    "model_logit_softcap",
    "capture_head",
]

#: An objective word of :mod:`hf_lmobj.objectives` (or its spec).
Objective = Literal["causal", "masked", "span", "ul2", "text_infilling", "prefix_lm"] | ObjectiveSpec

#: Config fields of models that rescale logits after the head: their loss needs the real logits.
POST_HEAD_SCALING_FIELDS = ("logit_scale", "logits_scaling", "output_multiplier_scale")


def base_model_of(model: nn.Module) -> nn.Module:
    """The transformers model inside DDP / accelerate / PEFT wrappers.

    Example:
        >>> lin = nn.Linear(2, 2)
        >>> base_model_of(lin) is lin
        True
    """
    while isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)) and "module" in model._modules:
        model = model.module
    return unwrap_peft_model(model)


def infer_objective(model: nn.Module) -> str:
    """``"span"`` if ``config.is_encoder_decoder`` (its loss is every encoder-decoder objective's),
    ``"masked"`` for MaskedLM classes, else ``"causal"``.

    Example:
        >>> from transformers import BertConfig, BertForMaskedLM
        >>> infer_objective(BertForMaskedLM(BertConfig(hidden_size=8, num_hidden_layers=1,
        ...     num_attention_heads=2, intermediate_size=8, vocab_size=16)))
        'masked'
    """
    model = base_model_of(model)
    if getattr(getattr(model, "config", None), "is_encoder_decoder", False):
        return _word_of(encoder_decoder=True)
    name = type(model).__name__
    if name in MODEL_FOR_MASKED_LM_MAPPING_NAMES.values() or name.endswith("ForMaskedLM"):
        return _word_of(encoder_decoder=False, next_token=False)
    return _word_of(next_token=True)


def _word_of(**attributes: bool) -> str:
    """The first pre-training objective of the registry with these attributes."""
    return next(
        spec.name
        for spec in OBJECTIVES.values()
        if spec.pretraining and all(getattr(spec, key) == value for key, value in attributes.items())
    )


def check_objective(objective: Objective) -> str:
    """Validate an ``objective=`` argument: a pre-training objective word; its word."""
    words = objective_names(pretraining=True)
    if isinstance(objective, str) and not OBJECTIVES.get(objective, OBJECTIVES["causal"]).pretraining:
        raise ValueError(
            f"objective {objective!r} is not a pre-training objective; ObjectiveTrainer trains one of {list(words)}"
        )
    return get_objective(objective, among=words).name


def _kept_positions(logits_to_keep: Any, length: int, device: torch.device) -> torch.Tensor | None:
    """(T,) bool mask of the positions a ``logits_to_keep`` value scores, or None for all."""
    if isinstance(logits_to_keep, torch.Tensor) and logits_to_keep.dim() == 0:
        logits_to_keep = logits_to_keep.item()
    if not isinstance(logits_to_keep, torch.Tensor):
        logits_to_keep = check_length(logits_to_keep, "logits_to_keep", minimum=0, why="0 keeps all")
        if logits_to_keep == 0 or logits_to_keep >= length:
            return None
        keep = torch.zeros(length, dtype=torch.bool, device=device)
        keep[length - logits_to_keep :] = True
        return keep
    if isinstance(logits_to_keep, torch.Tensor) and logits_to_keep.dim() == 1:
        keep = torch.zeros(length, dtype=torch.bool, device=device)
        keep[logits_to_keep.to(device)] = True
        return keep
    raise ValueError("logits_to_keep must be an int or a 1-D tensor of positions for ObjectiveTrainer")


def objective_targets(objective: Objective, batch: Mapping[str, Any], ignore_index: int = -100) -> torch.Tensor:
    """(B, T) targets aligned with the positions whose logits the loss scores.

    Example:
        >>> b = {"labels": torch.tensor([[1, 2, 3]]), "shift_labels": torch.tensor([[2, -100, -100]])}
        >>> objective_targets("causal", b).tolist(), objective_targets("masked", b).tolist()
        ([[2, -100, -100]], [[1, 2, 3]])
    """
    spec = get_objective(objective)
    labels = batch.get("labels")
    if spec.next_token and batch.get("shift_labels") is not None:
        targets = batch["shift_labels"]
    elif labels is None:
        raise ValueError(f"a {spec.name} batch needs 'labels' (got keys {sorted(batch)})")
    else:
        targets = next_token_targets(labels, ignore_index) if spec.next_token else labels
    if batch.get("logits_to_keep") is not None:
        keep = _kept_positions(batch["logits_to_keep"], targets.shape[-1], targets.device)
        if keep is not None:
            targets = targets.masked_fill(~keep, ignore_index)  # (B, T)
    return targets


def count_targets(objective: Objective, batch: Mapping[str, Any], ignore_index: int = -100) -> torch.Tensor:
    """Number of scored targets in one batch (0-d int64 tensor)."""
    return (objective_targets(objective, batch, ignore_index) != ignore_index).sum()


def model_inputs(objective: Objective, batch: Mapping[str, Any], model: nn.Module) -> dict[str, Any]:
    """The batch without its targets (the loss is computed outside the model), ready for forward.

    Seq2seq batches without ``decoder_input_ids`` get them from the model's
    ``prepare_decoder_input_ids_from_labels`` (labels shifted right with the start token).
    """
    spec = get_objective(objective)
    inputs = {k: v for k, v in batch.items() if k not in ("labels", "shift_labels", "logits_to_keep")}
    if spec.encoder_decoder and inputs.get("decoder_input_ids") is None and inputs.get("decoder_inputs_embeds") is None:
        base = base_model_of(model)
        if not hasattr(base, "prepare_decoder_input_ids_from_labels"):
            raise ValueError(
                "encoder-decoder batches need 'decoder_input_ids' (labels shifted right); the model cannot derive them"
            )
        inputs["decoder_input_ids"] = base.prepare_decoder_input_ids_from_labels(labels=batch["labels"])
    if spec.next_token or spec.encoder_decoder:  # generative models: no key/value cache while training
        inputs.setdefault("use_cache", False)
    return inputs


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
    from hf_lmobj.losses.vocab_parallel import dtensor_type

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
