"""hf_lmobj: causal, masked and span-corruption objectives for the Hugging Face stack.

Every user-facing name of the objectives is importable from here: the collators and ``pack_dataset``,
the losses, ``ObjectiveTrainer`` and its auxiliary objectives, the sampler and the metric loader. What
runs a training script (configs, resume, time budget, threads, cards, baselines) is importable from its
package: :mod:`hf_lmobj.config`, :mod:`hf_lmobj.trainer`, :mod:`hf_lmobj.cards`, :mod:`hf_lmobj.baselines`. The core needs
only the core dependencies (torch, transformers, accelerate, datasets, evaluate); the recipes
(``hf_lmobj.recipes``) need the ``[recipes]`` extra.

Example:
    >>> import hf_lmobj
    >>> hf_lmobj.compute_input_and_target_lengths(512, 0.15, 3.0)
    (568, 114)
"""

from hf_lmobj.collators import (
    CollatorEpochCallback,
    DataCollatorForCausalLM,
    DataCollatorForMaskedLM,
    DataCollatorForSpanCorruption,
    DataCollatorForTextInfilling,
    DataCollatorForUL2,
    Denoiser,
    compute_input_and_target_lengths,
)
from hf_lmobj.corpus import build_tokenizer, load_stdlib_corpus
from hf_lmobj.data import (
    DatasetSource,
    PipelineLoader,
    PretrainingStream,
    RowFormat,
    TextStream,
    TokenStore,
    tokenize_to_token_store,
    write_token_store,
)
from hf_lmobj.fim import (
    DataCollatorForFillInTheMiddle,
    FimTokens,
    LeadLogitsProcessor,
    evaluate_infilling,
    fim_dataset,
    fim_prompts,
    heal_prompts,
    infill,
    single_line_cases,
)
from hf_lmobj.generation import SamplingLogitsProcessor, sampling_generate_kwargs
from hf_lmobj.losses import causal_lm_loss, linear_cross_entropy, linear_token_losses, masked_lm_loss, seq2seq_lm_loss
from hf_lmobj.metrics import load as load_metric
from hf_lmobj.metrics.trainer_metrics import LanguageModelingMetrics
from hf_lmobj.models import ElectraPretrainingConfig, ElectraPretrainingModel, MTPConfig, MultiTokenPredictionModel
from hf_lmobj.objectives import OBJECTIVES, ObjectiveSpec, get_objective
from hf_lmobj.optim import MuonAdamW, MuonAdamWFactory, muon_param_groups
from hf_lmobj.packing import pack_dataset
from hf_lmobj.trainer import AuxiliaryObjectiveTrainer, ObjectiveTrainer, make_compute_loss_func

__version__ = "0.1.0"

__all__ = [
    # the objective vocabulary
    "OBJECTIVES",
    "ObjectiveSpec",
    "get_objective",
    "DatasetSource",
    "PipelineLoader",
    "PretrainingStream",
    "RowFormat",
    "TextStream",
    "TokenStore",
    "tokenize_to_token_store",
    "write_token_store",
    # collators
    "DataCollatorForCausalLM",
    "DataCollatorForMaskedLM",
    "DataCollatorForSpanCorruption",
    "DataCollatorForUL2",
    "Denoiser",
    "DataCollatorForTextInfilling",
    "DataCollatorForFillInTheMiddle",
    "FimTokens",
    "fim_dataset",
    "pack_dataset",
    "CollatorEpochCallback",
    "compute_input_and_target_lengths",
    # losses
    "causal_lm_loss",
    "masked_lm_loss",
    "seq2seq_lm_loss",
    "linear_cross_entropy",
    "linear_token_losses",
    # trainer
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
    # generation
    "SamplingLogitsProcessor",
    "LeadLogitsProcessor",
    "heal_prompts",
    "sampling_generate_kwargs",
    "fim_prompts",
    "infill",
    # metrics
    "load_metric",
    "LanguageModelingMetrics",
    "single_line_cases",
    "evaluate_infilling",
    # the embedded corpus
    "build_tokenizer",
    "load_stdlib_corpus",
]
