"""The models: stock architectures built for an objective, and those an auxiliary objective trains beside them.

:mod:`.stock` (``ModelArguments``, ``build_model``: a small stock model of the objective's architectures, or a
checkpoint; position limits) and :mod:`.pretraining` (``build_pretraining_model``: the same with MTP or ELECTRA
around it) build what the pre-training recipe trains.

:mod:`.mtp` (``MTPConfig``, ``MultiTokenPredictionModel``: extra prediction depths on a causal LM;
its depth modules :mod:`.mtp_blocks`, its targets :mod:`.mtp_targets`), :mod:`.electra`
(``ElectraPretrainingModel``: a masked-LM generator and a replaced-token discriminator; what it
scores :mod:`.electra_loss`) and :mod:`.auxiliary_model` (``AuxiliaryModel``, the base of both: the
stock model's face to ``transformers.Trainer``). ``AuxiliaryObjectiveTrainer``
(:mod:`hf_lmobj.trainer.auxiliary`) trains them. What any stock model's head and shards are, for a loss on
hidden states: :mod:`.head` (``linear_head``, ``capture_head``) and :mod:`.sharding` (``DTensor`` parameters).

Example:
    >>> from transformers import GPT2Config, GPT2LMHeadModel
    >>> from hf_lmobj.models import MTPConfig, MultiTokenPredictionModel
    >>> base = GPT2LMHeadModel(GPT2Config(n_embd=32, n_layer=2, n_head=2, vocab_size=64))
    >>> model = MultiTokenPredictionModel(base, MTPConfig(num_depths=2))
    >>> model.stock_model is base, model.config.n_embd
    (True, 32)
"""

from typing import TYPE_CHECKING

from hf_lmobj.lazy_faces import lazy_face

if TYPE_CHECKING:
    from hf_lmobj.models.auxiliary_model import AuxiliaryModel
    from hf_lmobj.models.electra import ElectraPretrainingConfig, ElectraPretrainingModel
    from hf_lmobj.models.electra_loss import ElectraPretrainingOutput, electra_loss
    from hf_lmobj.models.mtp import MTPConfig, MultiTokenPredictionModel
    from hf_lmobj.models.mtp_targets import multi_token_targets

__all__ = [
    "AuxiliaryModel",
    "MTPConfig",
    "MultiTokenPredictionModel",
    "multi_token_targets",
    "ElectraPretrainingConfig",
    "ElectraPretrainingModel",
    "ElectraPretrainingOutput",
    "electra_loss",
]

__getattr__, __dir__ = lazy_face(__name__, __all__)
