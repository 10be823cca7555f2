"""``ObjectiveTrainer`` and ``AuxiliaryObjectiveTrainer``: the objective's loss on a stock ``Trainer``.

:mod:`.objective_trainer` (the Trainer), :mod:`.compute_loss` (``make_compute_loss_func``), :mod:`.auxiliary`
(``AuxiliaryObjectiveTrainer``: the models of :mod:`hf_lmobj.models`, MTP and ELECTRA, term by
term), :mod:`.pipeline_training` and :mod:`.checkpoints` (training on a ``PretrainingStream``, resumable),
:mod:`.state_files` (a checkpoint's state files read back, checked), :mod:`.teardown`; what runs any Trainer:
:mod:`.resume` (which checkpoint, what the first start chose), :mod:`.time_budget` (``max_steps`` from minutes),
:mod:`.cpu_threads` (threads that follow the free cores). Below it: the targets and their counts in
:mod:`hf_lmobj.losses.targets`, the head capture and the shards in :mod:`hf_lmobj.models.head` and
:mod:`hf_lmobj.models.sharding`, the models it trains in :mod:`hf_lmobj.models` (``MTPConfig``,
``ElectraPretrainingModel``, ...), the optimizer in :mod:`hf_lmobj.optim` (``MuonAdamW``, ...).

Example:
    >>> from hf_lmobj.trainer import ObjectiveTrainer, make_compute_loss_func
    >>> ObjectiveTrainer.__mro__[1].__name__
    'Trainer'
"""

from typing import TYPE_CHECKING

from hf_lmobj.lazy_faces import lazy_face

if TYPE_CHECKING:
    from hf_lmobj.trainer.auxiliary import AuxiliaryObjectiveTrainer
    from hf_lmobj.trainer.compute_loss import make_compute_loss_func
    from hf_lmobj.trainer.cpu_threads import AdaptiveThreadsCallback, RuntimeArguments, thread_control
    from hf_lmobj.trainer.objective_trainer import ObjectiveTrainer
    from hf_lmobj.trainer.resume import ResumeArguments, ResumePlan, begin_new_run, plan_resume, step_budget
    from hf_lmobj.trainer.time_budget import StepBudget, fit_max_steps_to_budget

__all__ = [
    "ObjectiveTrainer",
    "make_compute_loss_func",
    "AuxiliaryObjectiveTrainer",
    "RuntimeArguments",
    "AdaptiveThreadsCallback",
    "thread_control",
    "ResumeArguments",
    "ResumePlan",
    "plan_resume",
    "begin_new_run",
    "step_budget",
    "StepBudget",
    "fit_max_steps_to_budget",
]

__getattr__, __dir__ = lazy_face(__name__, __all__)
