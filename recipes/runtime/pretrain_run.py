"""The state of one pre-training run: its argument groups (one per config section) and what each phase builds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from transformers import TrainingArguments

from hf_lmobj.data.prepare import DataArguments, ObjectiveData
from hf_lmobj.data.prepare_fim import FimArguments
from hf_lmobj.models.pretraining import AuxiliaryArguments
from hf_lmobj.models.stock import ModelArguments
from hf_lmobj.optim.arguments import OptimizerArguments
from hf_lmobj.trainer.cpu_threads import AdaptiveThreadsCallback, RuntimeArguments
from hf_lmobj.trainer.resume import ResumeArguments, ResumePlan
from hf_lmobj.trainer.time_budget import StepBudget

from ..report.report_arguments import ReportArguments
from .phase_timer import PhaseTimer

#: The argument dataclasses of ``recipes/pretrain.py``, in :class:`PretrainArguments` order.
ARGUMENT_CLASSES = (
    DataArguments,
    ModelArguments,
    AuxiliaryArguments,
    FimArguments,
    ReportArguments,
    RuntimeArguments,
    OptimizerArguments,
    ResumeArguments,
    TrainingArguments,
)


@dataclass
class PretrainArguments:
    """The parsed argument groups, one per config section (in :data:`ARGUMENT_CLASSES` order)."""

    data: DataArguments
    model: ModelArguments
    auxiliary: AuxiliaryArguments
    fim: FimArguments
    report: ReportArguments
    runtime: RuntimeArguments
    optimizer: OptimizerArguments
    resume: ResumeArguments
    training: TrainingArguments


@dataclass
class Run:
    """What setup builds and the later phases (train, evaluate, report) read."""

    args: PretrainArguments
    timer: PhaseTimer
    resume: ResumePlan
    threads: AdaptiveThreadsCallback | None  # None when torch's threads are fixed
    tokenizer: Any = None
    data: ObjectiveData | None = None
    validation: Any = None  # the validation text split
    validation_texts: list[str] = field(default_factory=list)  # its texts, scored after training
    cases: Any = None  # the infilling cases, drawn before training
    trainer: Any = None
    budget: StepBudget | None = None
    train_metrics: dict[str, Any] = field(default_factory=dict)
    sample: str | None = None  # the report's sampled continuation
    provenance: dict[str, Any] = field(default_factory=dict)  # the data's provenance (data.provenance's record)
