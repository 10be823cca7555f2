"""Which optimizer a Trainer runs, as a config section: the Trainer's own (``TrainingArguments.optim``) or Muon + AdamW.

``--optimizer muon`` trains the blocks' matrices with Muon and the embeddings, head, norms and
biases with AdamW (:mod:`hf_lmobj.optim.muon`), through the Trainer's optimizer-factory hook
(``optimizer_cls_and_kwargs``), with the run's ``learning_rate``, ``weight_decay``, ``adam_beta1/2``
and ``adam_epsilon``, and the Trainer's scheduler. Muon needs the weight matrices' shapes: DeepSpeed ZeRO and
FSDP1 (which flatten them) are refused here, before any model is wrapped; FSDP2 works (each sharded
matrix is gathered for its update).

Example:
    >>> from transformers import TrainingArguments
    >>> args = TrainingArguments(output_dir="out", learning_rate=5e-3, weight_decay=0.1, report_to="none")
    >>> factory, kwargs = optimizer_cls_and_kwargs(OptimizerArguments("muon"), args)
    >>> factory.__name__, kwargs["lr"], kwargs["momentum"]
    ('MuonAdamWFactory', 0.005, 0.95)
    >>> optimizer_cls_and_kwargs(OptimizerArguments(), args) is None  # the Trainer's AdamW
    True
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from hf_lmobj.optim.muon import MuonAdamWFactory

if TYPE_CHECKING:
    from transformers import TrainingArguments

OPTIMIZERS = ("trainer", "muon")


@dataclass
class OptimizerArguments:
    """Which optimizer trains the model."""

    #: The YAML config section of these fields (hf_lmobj.config): ``optimizer: {...}``.
    SECTION: ClassVar[str] = "optimizer"

    optimizer: str = field(
        default="trainer",
        metadata={
            "help": "trainer: the Trainer's own (TrainingArguments.optim, AdamW by default); muon: Muon for the "
            "blocks' matrices, AdamW for embeddings, head, norms and biases, one learning rate (not with DeepSpeed / FSDP1)."
        },
    )
    muon_momentum: float = field(default=0.95, metadata={"help": "Muon's (Nesterov) momentum."})

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {self.optimizer!r}")
        if isinstance(self.muon_momentum, bool) or not isinstance(self.muon_momentum, (int, float)):
            raise TypeError(f"muon_momentum must be a number in [0, 1), got {self.muon_momentum!r}")
        if not 0 <= self.muon_momentum < 1:
            raise ValueError(f"muon_momentum must lie in [0, 1), got {self.muon_momentum}")
        self.muon_momentum = float(self.muon_momentum)


def optimizer_cls_and_kwargs(args: OptimizerArguments, train_args: TrainingArguments) -> tuple[Any, dict] | None:
    """The Trainer's ``optimizer_cls_and_kwargs`` for ``args.optimizer``; None leaves the Trainer's own."""
    if args.optimizer == "trainer":
        return None
    if _flattens_parameters(train_args):
        raise ValueError(
            "optimizer muon orthogonalizes weight matrices; DeepSpeed ZeRO and FSDP1 flatten them into 1-D buffers. "
            "Use --optimizer trainer with them, or FSDP2 (accelerate_configs/fsdp2.yaml of the recipes), DDP or one process"
        )
    kwargs = {
        "lr": train_args.learning_rate,
        "weight_decay": train_args.weight_decay,
        "betas": (train_args.adam_beta1, train_args.adam_beta2),
        "eps": train_args.adam_epsilon,
        "momentum": args.muon_momentum,
    }
    return MuonAdamWFactory, kwargs


def _flattens_parameters(train_args: TrainingArguments) -> bool:
    """DeepSpeed or FSDP version 1 (FSDP2's DTensor parameters keep their shape), from the arguments or accelerate."""
    env = os.environ
    if train_args.deepspeed or env.get("ACCELERATE_USE_DEEPSPEED", "").lower() in ("1", "true"):
        return True
    fsdp = bool(train_args.fsdp) or env.get("ACCELERATE_USE_FSDP", "").lower() in ("1", "true")
    version = str((train_args.fsdp_config or {}).get("version", env.get("FSDP_VERSION", "1")))
    return fsdp and version != "2"
