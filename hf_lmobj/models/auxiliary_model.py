"""``AuxiliaryModel``: a stock model plus the modules an auxiliary objective trains beside it.

Both auxiliary objectives train more than the model a user keeps: multi-token prediction adds
prediction depths to a causal LM, ELECTRA adds a generator to the discriminator. Their wrappers
(:class:`~hf_lmobj.models.mtp.MultiTokenPredictionModel`, :class:`~hf_lmobj.models.electra.ElectraPretrainingModel`)
derive from this class, which shows the stock model's face to ``transformers.Trainer`` and to code
written for stock models: ``config``, ``device``, ``tp_size``, the embeddings, ``num_parameters`` (its
``exclude_embeddings`` as transformers counts them for FLOPs). Subclasses give ``stock_model``
(what ``save_pretrained`` writes as a stock checkpoint), ``count_targets`` (one count per loss term:
the denominators ``AuxiliaryObjectiveTrainer`` sums over accumulation steps and processes),
``save_pretrained`` and ``from_pretrained``.

Example:
    >>> from transformers import GPT2Config, GPT2LMHeadModel
    >>> class Plain(AuxiliaryModel):
    ...     def __init__(self, model):
    ...         super().__init__()
    ...         self.base = model
    ...     @property
    ...     def stock_model(self):
    ...         return self.base
    >>> m = Plain(GPT2LMHeadModel(GPT2Config(n_embd=8, n_layer=1, n_head=2, vocab_size=16, n_positions=4)))
    >>> m.num_parameters() == m.base.num_parameters(), m.config.n_embd
    (True, 8)
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn
from transformers import PretrainedConfig, PreTrainedModel


class AuxiliaryModel(nn.Module):
    """Base class of the auxiliary-objective wrappers (see the module docstring)."""

    @property
    def stock_model(self) -> PreTrainedModel:
        """The model saved as a stock checkpoint, loadable by ``from_pretrained`` alone."""
        raise NotImplementedError

    @property
    def config(self) -> PretrainedConfig:
        return self.stock_model.config

    @property
    def device(self) -> torch.device:
        return self.stock_model.device

    @property
    def tp_size(self) -> int | None:
        """The stock model's tensor-parallel degree (``tp_plan``), read by ``Trainer`` to set up TP for the wrapper."""
        return getattr(self.stock_model, "tp_size", None)

    @property
    def _tp_size(self) -> int | None:  # transformers' Trainer.get_tp_size reads the private name
        return getattr(self.stock_model, "_tp_size", None)

    def get_input_embeddings(self) -> nn.Module:
        return self.stock_model.get_input_embeddings()

    def get_output_embeddings(self) -> nn.Module | None:
        return self.stock_model.get_output_embeddings()

    def num_parameters(self, only_trainable: bool = False, exclude_embeddings: bool = False) -> int:
        """Parameters of every part, shared ones counted once (``exclude_embeddings``: without nn.Embedding weights)."""
        skipped = set()
        if exclude_embeddings:
            skipped = {id(m.weight) for m in self.modules() if isinstance(m, nn.Embedding)}
        return sum(
            p.numel() for p in self.parameters() if id(p) not in skipped and (p.requires_grad or not only_trainable)
        )

    def count_targets(self, batch: Mapping[str, Any]) -> torch.Tensor:
        """(K,) int64: the targets of each loss term in ``batch``."""
        raise NotImplementedError

    def save_pretrained(
        self,
        save_directory: str | Path,
        state_dict: Mapping[str, torch.Tensor] | None = None,
        is_main_process: bool = True,
        **kwargs: Any,
    ) -> None:
        raise NotImplementedError

    @classmethod
    def from_pretrained(cls, path: str | Path, **kwargs: Any) -> AuxiliaryModel:
        raise NotImplementedError


def split_state_dict(state_dict: Mapping[str, torch.Tensor], prefix: str) -> dict[str, torch.Tensor]:
    """The entries under ``prefix`` with the prefix removed (a part's own state dict).

    Example:
        >>> split_state_dict({"base.w": 1, "mtp.0.w": 2}, "base.")
        {'w': 1}
    """
    return {key[len(prefix) :]: value for key, value in state_dict.items() if key.startswith(prefix)}
