"""hf_lmobj: causal, masked and span-corruption objectives for the Hugging Face stack.

Every user-facing name of the objectives is importable from here: the collators and ``pack_dataset``,
the losses, ``ObjectiveTrainer`` and its auxiliary objectives, the sampler and the metric loader; each is
also in its package's face (``hf_lmobj.collators``, ...), which :data:`__all__` groups them by. What
runs a training script (configs, resume, time budget, threads, cards, baselines) is importable from its
package: :mod:`hf_lmobj.config`, :mod:`hf_lmobj.trainer`, :mod:`hf_lmobj.cards`, :mod:`hf_lmobj.baselines`. The core needs
only the core dependencies (torch, transformers, accelerate, datasets, evaluate); the recipes
(``hf_lmobj.recipes``) need the ``[recipes]`` extra.

The faces are lazy (PEP 562): ``import hf_lmobj`` imports no submodule, and a name is imported from its
home on first use, with what that home needs and nothing more (``from hf_lmobj import
DataCollatorForCausalLM`` does not import ``transformers.Trainer``). Type checkers and IDEs read the
faces' ``if TYPE_CHECKING:`` imports, which are also the table the faces resolve names by.

Example:
    >>> import hf_lmobj
    >>> hf_lmobj.compute_input_and_target_lengths(512, 0.15, 3.0)
    (568, 114)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from hf_lmobj.lazy_faces import lazy_face

if TYPE_CHECKING:
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
    from hf_lmobj.corpus import build_tokenizer, load_stdlib_corpus, train_tokenizer
    from hf_lmobj.data import (
        DatasetSource,
        PipelineLoader,
        PretrainingStream,
        RowFormat,
        TextStream,
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
    from hf_lmobj.losses import (
        causal_lm_loss,
        linear_cross_entropy,
        linear_token_losses,
        masked_lm_loss,
        seq2seq_lm_loss,
    )
    from hf_lmobj.metrics import LanguageModelingMetrics
    from hf_lmobj.metrics import load as load_metric
    from hf_lmobj.models import (
        ElectraPretrainingConfig,
        ElectraPretrainingModel,
        MTPConfig,
        MultiTokenPredictionModel,
    )
    from hf_lmobj.objectives import OBJECTIVES, ObjectiveSpec, get_objective
    from hf_lmobj.optim import MuonAdamW, MuonAdamWFactory, muon_param_groups
    from hf_lmobj.packing import pack_dataset
    from hf_lmobj.store import TokenStore, tokenize_to_token_store, write_token_store
    from hf_lmobj.trainer import AuxiliaryObjectiveTrainer, ObjectiveTrainer, make_compute_loss_func

__version__ = "0.1.0"

# One group per package, in the order of the README's layout; each name is also in its package's face.
__all__ = [
    # hf_lmobj.objectives
    "OBJECTIVES",
    "ObjectiveSpec",
    "get_objective",
    # hf_lmobj.collators
    "DataCollatorForCausalLM",
    "DataCollatorForMaskedLM",
    "DataCollatorForSpanCorruption",
    "DataCollatorForUL2",
    "Denoiser",
    "DataCollatorForTextInfilling",
    "CollatorEpochCallback",
    "compute_input_and_target_lengths",
    # hf_lmobj.packing
    "pack_dataset",
    # hf_lmobj.fim
    "DataCollatorForFillInTheMiddle",
    "FimTokens",
    "fim_dataset",
    "fim_prompts",
    "infill",
    "heal_prompts",
    "LeadLogitsProcessor",
    "single_line_cases",
    "evaluate_infilling",
    # hf_lmobj.data
    "DatasetSource",
    "TextStream",
    "RowFormat",
    "PretrainingStream",
    "PipelineLoader",
    # hf_lmobj.store
    "TokenStore",
    "tokenize_to_token_store",
    "write_token_store",
    # hf_lmobj.losses
    "causal_lm_loss",
    "masked_lm_loss",
    "seq2seq_lm_loss",
    "linear_cross_entropy",
    "linear_token_losses",
    # hf_lmobj.models
    "MTPConfig",
    "MultiTokenPredictionModel",
    "ElectraPretrainingConfig",
    "ElectraPretrainingModel",
    # hf_lmobj.optim
    "MuonAdamW",
    "MuonAdamWFactory",
    "muon_param_groups",
    # hf_lmobj.trainer
    "ObjectiveTrainer",
    "make_compute_loss_func",
    "AuxiliaryObjectiveTrainer",
    # hf_lmobj.generation
    "SamplingLogitsProcessor",
    "sampling_generate_kwargs",
    # hf_lmobj.metrics
    "load_metric",
    "LanguageModelingMetrics",
    # hf_lmobj.corpus
    "build_tokenizer",
    "train_tokenizer",
    "load_stdlib_corpus",
]


__getattr__, __dir__ = lazy_face(__name__, __all__)
