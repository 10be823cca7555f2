"""What a pre-training run meets after its data and its training, checked before either.

A run reaches its scoring windows, infilling prompts, sample and n-gram baseline only after it has
trained; a value they cannot use must fail when the arguments are parsed, not after hours of work.
:func:`check_pretrain_arguments` runs right after parsing (nothing loaded yet): the Trainer's
arguments, the objective against the model type, FIM and infilling, the MTP depth, and every length
against the model's positions (the ones ``ModelArguments`` will build, or a checkpoint's config).
:func:`check_built_model` runs once the model exists (before any data is prepared): the same
lengths against the built model's own position table (an MTP or ELECTRA checkpoint included) and
the sample prompt against the tokenizer.

Example:
    >>> from transformers import TrainingArguments
    >>> from hf_lmobj.models.pretraining import AuxiliaryArguments
    >>> from hf_lmobj.trainer.cpu_threads import RuntimeArguments
    >>> from hf_lmobj.data.prepare_fim import FimArguments
    >>> from hf_lmobj.recipes.report.report_arguments import ReportArguments
    >>> train = TrainingArguments(output_dir="out/x", max_steps=2, report_to="none", use_cpu=True)
    >>> check_pretrain_arguments(DataArguments(max_length=128), ModelArguments(model_type="gpt2",
    ...     max_position_embeddings=32), AuxiliaryArguments(), FimArguments(), ReportArguments(),
    ...     RuntimeArguments(), train)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: max_length 128 needs 128 positions but the model has 32 (max_position_embeddings); raise ...
"""

from __future__ import annotations

from typing import Any

from torch import nn
from transformers import AutoConfig, PreTrainedTokenizerBase

from hf_lmobj.data.prepare import DataArguments, row_positions
from hf_lmobj.data.prepare_fim import FimArguments, check_fim_fits
from hf_lmobj.models.pretraining import AuxiliaryArguments, check_auxiliary_fits, token_predictor
from hf_lmobj.models.stock import (
    ROTARY_DECODERS,
    ModelArguments,
    check_positions,
    model_position_limit,
    position_limit,
    resolve_model_type,
    rotary_positions,
)
from hf_lmobj.objectives import get_objective
from hf_lmobj.trainer.cpu_threads import RuntimeArguments

from ..report.report_arguments import ReportArguments, check_report_fits
from .run_checks import check_training_arguments


def check_pretrain_arguments(
    data_args: DataArguments,
    model_args: ModelArguments,
    aux_args: AuxiliaryArguments,
    fim_args: FimArguments,
    report_args: ReportArguments,
    runtime_args: RuntimeArguments,
    train_args: Any,
) -> None:
    """Every argument group against the others, before the corpus, the tokenizer or the model exist."""
    check_training_arguments(train_args, _why_max_steps(data_args, runtime_args))
    check_auxiliary_fits(data_args.objective, model_args, aux_args)
    check_fim_fits(fim_args, data_args.objective, data_args.max_length)
    _check_fim_sources(data_args, fim_args)
    if aux_args.auxiliary_objective == "mtp" and aux_args.mtp_num_depths >= data_args.max_length - 1:
        raise ValueError(
            f"mtp_num_depths {aux_args.mtp_num_depths}: depth k predicts the token k + 1 places ahead, so rows of "
            f"max_length {data_args.max_length} hold targets up to depth {data_args.max_length - 2}; lower "
            "mtp_num_depths or raise max_length"
        )
    limit, rotary, source = configured_positions(data_args.objective, model_args, aux_args)
    _check_lengths(data_args, report_args, limit, rotary, source)


def configured_positions(
    objective: str, model_args: ModelArguments, aux_args: AuxiliaryArguments | None = None
) -> tuple[int | None, bool, str]:
    """(position limit, rotary?, where the limit comes from) of the model the run will build or load.

    A built model reads ``max_position_embeddings`` positions (T5: no limit); a checkpoint's own
    config decides for a loaded one (read here; when it cannot be read, :func:`check_built_model`
    checks the loaded model instead).
    """
    if model_args.model_name_or_path:
        try:
            config = AutoConfig.from_pretrained(model_args.model_name_or_path)
        except (OSError, ValueError, KeyError):
            return None, False, model_args.model_name_or_path
        return position_limit(config), rotary_positions(config), f"the config of {model_args.model_name_or_path}"
    if aux_args is not None and aux_args.auxiliary_objective == "electra":
        return model_args.max_position_embeddings, False, "--max_position_embeddings"
    model_type = resolve_model_type(objective, model_args)
    if model_type == "t5":
        return None, False, "T5's relative positions"
    return model_args.max_position_embeddings, model_type in ROTARY_DECODERS, "--max_position_embeddings"


def check_built_model(
    model: nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    data_args: DataArguments,
    report_args: ReportArguments,
    model_args: ModelArguments,
) -> None:
    """The built or loaded ``model``'s own positions against the rows and the report, and the sample prompt
    against ``tokenizer``, before any data is prepared."""
    predictor = token_predictor(model)
    limit = model_position_limit(model)
    rotary = rotary_positions(predictor.config)
    prompt_tokens = None
    if get_objective(data_args.objective).scores_text:
        prompt_tokens = len(tokenizer(report_args.sample_prompt, add_special_tokens=False)["input_ids"])
        prompt_tokens += tokenizer.bos_token is not None
        if prompt_tokens == 0:
            raise ValueError(
                "sample_prompt '' and a tokenizer without a BOS token leave the sample nothing to continue; "
                "give a sample_prompt such as 'def '"
            )
    path = model_args.model_name_or_path
    source = f"the config of {path}" if path else f"the built {type(predictor).__name__}"
    _check_lengths(data_args, report_args, limit, rotary, source, prompt_tokens)


def _check_lengths(
    data_args: DataArguments,
    report_args: ReportArguments,
    limit: int | None,
    rotary: bool,
    source: str,
    prompt_tokens: int | None = None,
) -> None:
    needed = row_positions(data_args.objective, data_args.max_length)
    padded = f" (masked rows are padded to {needed})" if needed != data_args.max_length else ""
    fix = (
        "lower --max_length (a checkpoint's position table cannot grow)"
        if source.startswith("the config of")
        else f"raise --max_position_embeddings to >= {needed} or lower --max_length"
    )
    check_positions(needed, limit, f"max_length {data_args.max_length}{padded}", f"{fix}; limit from {source}")
    if get_objective(data_args.objective).scores_text:
        check_report_fits(report_args, data_args.max_length, limit, rotary, prompt_tokens or 1)


def _why_max_steps(data_args: DataArguments, runtime_args: RuntimeArguments) -> str | None:
    if data_args.streaming or data_args.sources:
        return "a streamed or mixture run has no epoch length to train by"
    if runtime_args.max_train_minutes is not None:
        return "max_train_minutes lowers max_steps to what fits its budget (max_steps is the most it may keep)"
    return None


def _check_fim_sources(data_args: DataArguments, fim_args: FimArguments) -> None:
    """FIM cuts the documents' text: a token store (alone or in a mixture) holds tokens only."""
    if fim_args.fim_rate == 0:
        return
    stores = [data_args.token_store] if data_args.token_store else []
    stores += [entry["token_store"] for entry in data_args.sources or () if entry.get("token_store")]
    if stores:
        raise ValueError(
            f"source {stores[0]!r}: fim_rate > 0 cuts the documents' text, which a token store does not hold; "
            "stream the text (dataset_name with streaming: true) or set fim_rate: 0"
        )
