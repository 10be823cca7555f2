"""The objective's loss for a stock ``Trainer``: ``make_compute_loss_func(objective)`` scores the model's logits.

The objective is the one given (``check_objective``: a pre-training word) or the model's
(``infer_objective``); the model is fed the batch without its targets (``model_inputs``).

Example:
    >>> import torch
    >>> fn = make_compute_loss_func("masked")
    >>> out = {"logits": torch.zeros(1, 2, 4)}
    >>> round(fn(out, torch.tensor([[3, -100]]), num_items_in_batch=2).item(), 4)  # ln 4 / 2
    0.6931
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import nn
from transformers.models.auto.modeling_auto import MODEL_FOR_MASKED_LM_MAPPING_NAMES

from hf_lmobj.losses.functional import causal_lm_loss, masked_lm_loss, seq2seq_lm_loss
from hf_lmobj.losses.head_chunks import HeadLossOptions
from hf_lmobj.losses.targets import Objective
from hf_lmobj.models.head import base_model_of
from hf_lmobj.objectives import OBJECTIVES, ObjectiveSpec, get_objective, objective_names


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


def make_compute_loss_func(
    objective: Objective, *, label_smoothing: float = 0.0, z_loss: float = 0.0, logit_softcap: float | None = None
) -> Callable[..., torch.Tensor]:
    """A ``compute_loss_func(outputs, labels, num_items_in_batch=None)`` for a stock ``Trainer``.

    The stock Trainer counts ``num_items_in_batch`` from ``shift_labels`` when the batch has them
    (``DataCollatorForCausalLM`` emits them); without them it counts unshifted labels for GPT-2,
    which ``ObjectiveTrainer`` does not.

    Example:
        >>> fn = make_compute_loss_func("causal")
        >>> round(fn({"logits": torch.zeros(1, 3, 2)}, torch.tensor([[0, 1, 1]])).item(), 4)
        0.6931
    """
    objective = check_objective(objective)
    loss_fn = _loss_function(get_objective(objective))
    HeadLossOptions(label_smoothing, z_loss, logit_softcap)  # validate now, not at the first step

    def compute_loss_func(outputs: Any, labels: torch.Tensor, num_items_in_batch=None) -> torch.Tensor:
        if labels is None:
            raise ValueError(f"the {objective} loss needs 'labels' in the batch")
        logits = _output_logits(outputs, objective)
        return loss_fn(
            logits,
            labels,
            num_items_in_batch=num_items_in_batch,
            label_smoothing=label_smoothing,
            z_loss=z_loss,
            logit_softcap=logit_softcap,
        )

    compute_loss_func.__name__ = f"{objective}_compute_loss_func"
    return compute_loss_func


def _loss_function(spec: ObjectiveSpec) -> Callable[..., torch.Tensor]:
    """The functional loss of an objective's targets: next-token, encoder-decoder or in-place (masked)."""
    if spec.next_token:
        return causal_lm_loss
    return seq2seq_lm_loss if spec.encoder_decoder else masked_lm_loss


def _output_logits(outputs: Any, objective: str) -> torch.Tensor:
    """The logits of a model's outputs (a ``ModelOutput`` / dict, or a tuple whose first item they are)."""
    if isinstance(outputs, Mapping):
        if "logits" not in outputs:
            raise ValueError(
                f"the {objective} compute_loss_func needs the model's logits, but its outputs hold only "
                f"{sorted(outputs)}: the model returned no logits (a base model without its LM head?); pass "
                "a *ForCausalLM / *ForMaskedLM / *ForConditionalGeneration model"
            )
        return outputs["logits"]
    first = outputs[0] if isinstance(outputs, (tuple, list)) and outputs else None
    if not isinstance(first, torch.Tensor):
        raise TypeError(
            f"the {objective} compute_loss_func needs model outputs with logits (a ModelOutput, a dict or a tuple "
            f"starting with the logits), got {type(outputs).__name__}"
        )
    return first
