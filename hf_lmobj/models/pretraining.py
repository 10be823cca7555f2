"""The model a pre-training run trains: a stock model, or one with an auxiliary objective (MTP on causal, ELECTRA on masked).

* ``AuxiliaryArguments``: the recipe's extra argument dataclass (YAML keys / ``--flags``);
* ``build_pretraining_model(objective, tokenizer, model_args, aux_args, seed)``: the stock model of
  ``hf_lmobj.models.stock.build_model`` when no auxiliary objective is asked for, else a
  :class:`~hf_lmobj.models.mtp.MultiTokenPredictionModel` around it (causal) or an
  :class:`~hf_lmobj.models.electra.ElectraPretrainingModel` built from the same width / depth / heads (masked;
  those sizes are the discriminator's);
* ``token_predictor(model)``: the part whose logits the recipe's reports read (perplexity and
  sampling for causal, masked accuracy for masked): the causal LM itself for MTP, the generator for ELECTRA;
* ``auxiliary_hyperparameters(aux_args)``: the settings shown in the model card.

Train the result with :class:`~hf_lmobj.trainer.auxiliary.AuxiliaryObjectiveTrainer`; it saves the
stock model (the causal LM, or the ELECTRA discriminator) where ``from_pretrained`` finds it.

Example:
    >>> from hf_lmobj.corpus import build_tokenizer
    >>> from hf_lmobj.models.stock import ModelArguments
    >>> tok = build_tokenizer(vocab_size=512, max_documents=20)
    >>> sizes = ModelArguments(hidden_size=32, num_hidden_layers=1, num_attention_heads=2)
    >>> mtp = build_pretraining_model("causal", tok, sizes, AuxiliaryArguments("mtp", mtp_num_depths=2))
    >>> type(mtp).__name__, type(token_predictor(mtp)).__name__, len(mtp.mtp)
    ('MultiTokenPredictionModel', 'LlamaForCausalLM', 2)
    >>> electra = build_pretraining_model("masked", tok, sizes, AuxiliaryArguments("electra"))
    >>> electra.discriminator.config.hidden_size, electra.generator.config.hidden_size
    (32, 8)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from torch import nn
from transformers import ElectraConfig, PreTrainedTokenizerBase

from hf_lmobj.checks import check_length, check_number
from hf_lmobj.models.auxiliary_model import AuxiliaryModel
from hf_lmobj.models.electra import ElectraPretrainingConfig, ElectraPretrainingModel
from hf_lmobj.models.mtp import MTP_ARCHITECTURES, MTP_FOLDER, MTPConfig, MultiTokenPredictionModel
from hf_lmobj.models.stock import ModelArguments, build_model, resolve_model_type
from hf_lmobj.objectives import get_objective, objective_of_variant

#: auxiliary objective -> the pre-training objective (``DataArguments.objective``) it rides on
AUXILIARY_BASE_OBJECTIVE = {aux: objective_of_variant(aux).name for aux in ("mtp", "electra")}


@dataclass
class AuxiliaryArguments:
    """An auxiliary objective on top of the run's objective (none by default)."""

    #: The YAML config section of these fields (hf_lmobj.config): ``auxiliary: {...}``.
    SECTION: ClassVar[str] = "auxiliary"

    auxiliary_objective: str | None = field(
        default=None,
        metadata={"help": "None | mtp (multi-token prediction, objective causal) | electra (objective masked)."},
    )
    mtp_num_depths: int = field(default=1, metadata={"help": "mtp: extra tokens predicted per position (D)."})
    mtp_architecture: str = field(
        default="sequential",
        metadata={"help": "mtp: sequential (DeepSeek-V3 modules) | parallel (Gloeckle et al. heads)."},
    )
    mtp_loss_weight: float = field(default=0.3, metadata={"help": "mtp: lambda in L_0 + lambda / D * sum_k L_k."})
    electra_generator_fraction: float = field(
        default=0.25, metadata={"help": "electra: generator width / discriminator width (the paper: 1/4 to 1/3)."}
    )
    electra_rtd_weight: float = field(default=50.0, metadata={"help": "electra: lambda in MLM + lambda * RTD."})
    electra_embedding_size: int | None = field(
        default=None, metadata={"help": "electra: width of the shared embeddings; None = hidden_size."}
    )

    def __post_init__(self) -> None:
        if self.auxiliary_objective not in (None, *AUXILIARY_BASE_OBJECTIVE):
            raise ValueError(
                f"auxiliary_objective must be None or one of {sorted(AUXILIARY_BASE_OBJECTIVE)}, got {self.auxiliary_objective!r}"
            )
        if self.mtp_architecture not in MTP_ARCHITECTURES:
            raise ValueError(f"mtp_architecture must be one of {MTP_ARCHITECTURES}, got {self.mtp_architecture!r}")
        self.electra_embedding_size = check_length(
            self.electra_embedding_size, "electra_embedding_size", 1, "None = hidden_size", optional=True
        )
        self.electra_generator_fraction = check_number(
            self.electra_generator_fraction, "electra_generator_fraction", 0.0, 1.0, low_open=True,
            hint="generator width / discriminator width (the paper: 1/4 to 1/3)",
        )  # fmt: skip
        MTPConfig(self.mtp_num_depths, self.mtp_architecture, self.mtp_loss_weight)  # validates the mtp fields
        ElectraPretrainingConfig(self.electra_rtd_weight)


def build_pretraining_model(
    objective: str,
    tokenizer: PreTrainedTokenizerBase,
    model_args: ModelArguments,
    aux_args: AuxiliaryArguments | None = None,
    seed: int = 0,
) -> nn.Module:
    """The model a pre-training run trains: stock, or wrapped for its auxiliary objective.

    ``seed`` seeds the weights this module creates (MTP modules, the ELECTRA pair); the stock
    model of ``build_model`` draws from the global RNG as before (``set_seed`` in the recipe).
    """
    aux = aux_args.auxiliary_objective if aux_args is not None else None
    if aux is None:
        return build_model(objective, tokenizer, model_args)
    check_auxiliary_fits(objective, model_args, aux_args)
    if aux == "mtp":
        config = MTPConfig(aux_args.mtp_num_depths, aux_args.mtp_architecture, aux_args.mtp_loss_weight)
        if model_args.model_name_or_path and (Path(model_args.model_name_or_path) / MTP_FOLDER).is_dir():  # resume MTP
            return MultiTokenPredictionModel.from_pretrained(
                model_args.model_name_or_path, attn_implementation=model_args.attn_implementation
            )
        return MultiTokenPredictionModel(build_model(objective, tokenizer, model_args), config, seed=seed)
    return _electra(tokenizer, model_args, aux_args, seed)


def check_auxiliary_fits(objective: str, model_args: ModelArguments, aux_args: AuxiliaryArguments | None) -> None:
    """The auxiliary objective against the run's objective and model type (also the plain run's model type).

    Example:
        >>> check_auxiliary_fits("masked", ModelArguments(), AuxiliaryArguments("mtp"))
        Traceback (most recent call last):
        ...
        ValueError: auxiliary_objective 'mtp' trains on the 'causal' objective, not 'masked': set objective: causal
    """
    aux = aux_args.auxiliary_objective if aux_args is not None else None
    if aux is None:
        resolve_model_type(objective, model_args)
        return
    objective = get_objective(objective).name
    if objective != AUXILIARY_BASE_OBJECTIVE[aux]:
        raise ValueError(
            f"auxiliary_objective {aux!r} trains on the {AUXILIARY_BASE_OBJECTIVE[aux]!r} objective, "
            f"not {objective!r}: set objective: {AUXILIARY_BASE_OBJECTIVE[aux]}"
        )
    if aux == "electra" and model_args.model_type not in (None, "electra"):
        raise ValueError(
            f"auxiliary_objective electra builds ELECTRA models: set model_type: electra (got {model_args.model_type!r})"
        )
    if aux == "mtp":
        resolve_model_type(objective, model_args)


def _electra(
    tok: PreTrainedTokenizerBase, a: ModelArguments, aux: AuxiliaryArguments, seed: int
) -> ElectraPretrainingModel:
    if a.model_name_or_path:
        return ElectraPretrainingModel.from_pretrained(a.model_name_or_path, attn_implementation=a.attn_implementation)
    config = ElectraConfig(
        vocab_size=len(tok),
        embedding_size=aux.electra_embedding_size or a.hidden_size,
        hidden_size=a.hidden_size,
        num_hidden_layers=a.num_hidden_layers,
        num_attention_heads=a.num_attention_heads,
        intermediate_size=a.intermediate_size or 4 * a.hidden_size,
        max_position_embeddings=a.max_position_embeddings,
        hidden_dropout_prob=a.dropout,
        attention_probs_dropout_prob=a.dropout,
        pad_token_id=tok.pad_token_id,
    )
    return ElectraPretrainingModel.from_config(
        config,
        aux.electra_generator_fraction,
        ElectraPretrainingConfig(aux.electra_rtd_weight),
        seed=seed,
        attn_implementation=a.attn_implementation,
    )


def token_predictor(model: nn.Module) -> nn.Module:
    """The model whose token logits the reports read: MTP -> the causal LM, ELECTRA -> the generator, else ``model``."""
    if isinstance(model, ElectraPretrainingModel):
        return model.generator
    return model.stock_model if isinstance(model, AuxiliaryModel) else model


def auxiliary_hyperparameters(aux_args: AuxiliaryArguments | None) -> dict[str, Any]:
    """The auxiliary settings for the model card ({} without an auxiliary objective).

    Example:
        >>> auxiliary_hyperparameters(AuxiliaryArguments("mtp", mtp_num_depths=2))
        {'auxiliary_objective': 'mtp', 'mtp_num_depths': 2, 'mtp_architecture': 'sequential', 'mtp_loss_weight': 0.3}
    """
    if aux_args is None or aux_args.auxiliary_objective is None:
        return {}
    prefix = f"{aux_args.auxiliary_objective}_"
    fields = {k: v for k, v in vars(aux_args).items() if k.startswith(prefix)}
    return {"auxiliary_objective": aux_args.auxiliary_objective, **fields}
