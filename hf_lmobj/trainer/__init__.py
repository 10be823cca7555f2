"""``ObjectiveTrainer`` and the auxiliary objectives no stock trainer ships (MTP, ELECTRA).

:mod:`.objective_trainer` (the Trainer and ``make_compute_loss_func``), :mod:`.objectives` (which
objective a model trains, its targets and counts, head capture), :mod:`.sharding` (FSDP2 / DTensor
helpers), :mod:`.mtp`, :mod:`.electra` and :mod:`.auxiliary` (``AuxiliaryObjectiveTrainer``), and
:mod:`.muon` (``MuonAdamW``: Muon for the hidden matrices, AdamW for the rest, through the Trainer's
optimizer-factory hook).

Example:
    >>> from hf_lmobj.trainer import ObjectiveTrainer, make_compute_loss_func
    >>> ObjectiveTrainer.__mro__[1].__name__
    'Trainer'
"""

from hf_lmobj.trainer.auxiliary import AuxiliaryObjectiveTrainer
from hf_lmobj.trainer.electra import ElectraPretrainingConfig, ElectraPretrainingModel
from hf_lmobj.trainer.mtp import MTPConfig, MultiTokenPredictionModel
from hf_lmobj.trainer.muon import MuonAdamW, MuonAdamWFactory, muon_param_groups
from hf_lmobj.trainer.objective_trainer import ObjectiveTrainer, make_compute_loss_func

__all__ = [
    "ObjectiveTrainer",
    "make_compute_loss_func",
    "AuxiliaryObjectiveTrainer",
    "MTPConfig",
    "MultiTokenPredictionModel",
    "ElectraPretrainingConfig",
    "ElectraPretrainingModel",
    "MuonAdamW",
    "MuonAdamWFactory",
    "muon_param_groups",
]
