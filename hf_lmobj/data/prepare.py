"""What a pre-training run's data is (:class:`DataArguments`) and how its objective shapes it.

:func:`objective_collator` is the objective's collator and row format; :mod:`hf_lmobj.data.run_sources` finds the
run's text and held-out documents and :mod:`hf_lmobj.data.prepare_run` makes the one
:class:`~hf_lmobj.data.PretrainingStream` every run trains on (:class:`ObjectiveData`).

Example:
    >>> args = DataArguments(objective="masked", max_length=100)
    >>> args.objective, row_positions(args.objective, args.max_length)
    ('masked', 104)
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

import datasets
from transformers import PreTrainedModel, PreTrainedTokenizerBase, TrainerCallback

from hf_lmobj.checks import check_flag, check_length, check_name, check_number
from hf_lmobj.corpus import DEFAULT_VOCAB_SIZE, SPECIAL_TOKENS
from hf_lmobj.data.block_rows import RowFormat
from hf_lmobj.data.local_files import TEXT_UNITS
from hf_lmobj.held_out import DEFAULT_VALIDATION_FRACTION
from hf_lmobj.objectives import OBJECTIVES, ObjectiveSpec, get_objective

#: The objectives whose data the recipes prepare (:attr:`~hf_lmobj.objectives.ObjectiveSpec.data` set).
RECIPE_OBJECTIVES = tuple(name for name, spec in OBJECTIVES.items() if spec.data is not None)
#: masked rows are padded to a multiple of this (tensor-core friendly shapes): a row of max_length tokens fills
#: ``row_positions(objective, max_length)`` positions.
MASKED_PAD_MULTIPLE = 8


@dataclass
class DataArguments:
    """What to train on and how the objective shapes it."""

    objective: str = field(default="causal", metadata={"help": f"One of {RECIPE_OBJECTIVES}."})
    dataset_name: str | None = field(
        default=None, metadata={"help": "Hub/local dataset; None = embedded stdlib corpus."}
    )
    dataset_config: str | None = field(default=None, metadata={"help": "Dataset configuration name."})
    text_column: str = field(default="text", metadata={"help": "Column holding the raw text."})
    validation_fraction: float = field(
        default=DEFAULT_VALIDATION_FRACTION,
        metadata={"help": "Share of the documents held out by content hash when the data has no validation split."},
    )
    text_unit: str = field(
        default="document",
        metadata={"help": f"Local .txt files: one of {TEXT_UNITS} per example (document = one file)."},
    )
    max_documents: int | None = field(default=None, metadata={"help": "Use only the first N documents (quick runs)."})
    tokenizer_name: str | None = field(
        default=None,
        metadata={
            "help": "Hub/local tokenizer; None: a token store's own, else a byte-level BPE trained on a sample of "
            "the training side of the data (cached by that sample)."
        },
    )
    vocab_size: int = field(
        default=DEFAULT_VOCAB_SIZE, metadata={"help": "Vocabulary of the locally trained tokenizer."}
    )
    max_length: int = field(
        default=256, metadata={"help": "Tokens per row (causal, masked) or encoder input length (span, ul2)."}
    )
    mlm_probability: float = field(default=0.15, metadata={"help": "masked: share of tokens selected."})
    whole_word_mask: bool = field(default=False, metadata={"help": "masked: select whole words."})
    noise_density: float = field(default=0.15, metadata={"help": "span: share of tokens corrupted."})
    mean_noise_span_length: float = field(default=3.0, metadata={"help": "span: mean length of a noise span."})
    max_eval_rows: int | None = field(
        default=64, metadata={"help": "Validation rows (a fixed random subset) for eval_loss; None = all."}
    )
    streaming: bool = field(
        default=False, metadata={"help": "Stream dataset_name (never loaded whole): each rank reads its own slice."}
    )
    token_store: str | None = field(
        default=None,
        metadata={"help": "A token store folder (recipes/tokenize_corpus.py) to train on instead of text."},
    )
    sources: str | None = field(
        default=None,
        metadata={
            "help": "A mixture: a YAML list / JSON string of {dataset_name: ... | token_store: ..., weight: w, "
            "name: ..., text_column: ...}; weights are shares of the tokens."
        },
    )
    drop_contaminated: bool = field(
        default=False,
        metadata={
            "help": "Leave out every training document holding a 13-token n-gram of the validation text (Paloma's "
            "rule: a document dropped on any hit); counted, part of the data fingerprint."
        },
    )
    ignore_data_fingerprint: bool = field(
        default=False,
        metadata={
            "help": "Resume even if the data (sources, weights, tokenizer, max_length, objective, seed) changed."
        },
    )
    block_documents: int = field(
        default=1000,
        metadata={
            "help": "Documents laid out together, their rows shuffled together (more packs tighter and mixes "
            "more; a small corpus trains best in one block)."
        },
    )
    max_validation_documents: int = field(
        default=100,
        metadata={"help": "Validation documents scored: the first held-out ones (or of the validation split)."},
    )
    report_sample_tokens: int | None = field(
        default=None,
        metadata={
            "help": "Training tokens the report's statistics (unigram entropy, n-gram baseline) fit on; None = all "
            "of an in-memory corpus, the first 5M of a streamed / token-store / mixture run."
        },
    )

    #: What a YAML config may give beyond the annotations (hf_lmobj.config): ``sources`` as a YAML list.
    YAML_TYPES: ClassVar[dict[str, Any]] = {"sources": str | list[dict[str, Any]] | None}
    #: The YAML config section of these fields (hf_lmobj.config): ``data: {...}``.
    SECTION: ClassVar[str] = "data"

    def __post_init__(self) -> None:
        spec = get_objective(self.objective, among=RECIPE_OBJECTIVES)  # the objectives whose data is prepared here
        self.objective = spec.name
        for name in ("dataset_name", "dataset_config", "tokenizer_name", "token_store"):
            setattr(self, name, check_name(getattr(self, name), name, optional=True))
        self.text_column = check_name(self.text_column, "text_column")
        if self.text_unit not in TEXT_UNITS:
            raise ValueError(
                f"text_unit must be one of {TEXT_UNITS} (how a .txt file becomes examples), got {self.text_unit!r}"
            )
        self.validation_fraction = check_number(
            self.validation_fraction, "validation_fraction", 0.0, 1.0, low_open=True, high_open=True,
            hint="the held-out share of the documents (0 leaves no validation text, 1 no training text)",
        )  # fmt: skip
        self.max_documents = check_length(self.max_documents, "max_documents", 1, "None = all", optional=True)
        if self.tokenizer_name is None:
            least = 256 + len(SPECIAL_TOKENS)
            self.vocab_size = check_length(self.vocab_size, "vocab_size", least, "the 256 bytes + the special tokens")
        self.max_length = check_length(self.max_length, "max_length", 2, "a token and the next one")
        self.max_eval_rows = check_length(self.max_eval_rows, "max_eval_rows", 1, "None = all", optional=True)
        if spec.labels_in_place:
            self.mlm_probability = check_number(self.mlm_probability, "mlm_probability", 0.0, 1.0, low_open=True,
                                                hint="the share of tokens selected (BERT: 0.15)")  # fmt: skip
        if _takes_noise_arguments(spec):
            self.noise_density = check_number(self.noise_density, "noise_density", 0.0, 1.0, low_open=True,
                                              high_open=True, hint="the share of tokens corrupted (T5: 0.15)")  # fmt: skip
            self.mean_noise_span_length = check_number(
                self.mean_noise_span_length, "mean_noise_span_length", 1.0, hint="T5 uses 3.0"
            )
        for name in ("whole_word_mask", "streaming", "ignore_data_fingerprint", "drop_contaminated"):
            setattr(self, name, check_flag(getattr(self, name), name))
        self.sources = _parse_sources(self.sources)
        for name in ("block_documents", "max_validation_documents", "report_sample_tokens"):
            value = getattr(self, name)
            if value is None and name == "report_sample_tokens":
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if self.token_store and self.sources:
            raise ValueError("give token_store or sources, not both (a token store can be one of the sources)")


def row_positions(objective: str, max_length: int) -> int:
    """Positions a row of ``max_length`` tokens fills in the model: ``max_length`` (causal), rounded up to
    :data:`MASKED_PAD_MULTIPLE` (masked), the encoder's ``max_length`` (span, ul2).

    Example:
        >>> row_positions("causal", 100), row_positions("masked", 100)
        (100, 104)
    """
    if get_objective(objective).labels_in_place:
        return -(-max_length // MASKED_PAD_MULTIPLE) * MASKED_PAD_MULTIPLE
    return max_length


def _parse_sources(value: Any) -> list[dict[str, Any]] | None:
    """``sources`` from YAML (a list) or the command line (a JSON string), each entry checked."""
    if value is None or value == []:
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as error:
            raise ValueError(f"sources must be a JSON list of {{dataset_name|token_store, weight}}: {error}") from None
    if not isinstance(value, list) or not all(isinstance(entry, dict) for entry in value):
        raise ValueError(f"sources must be a list of mappings, got {value!r}")
    allowed = {"dataset_name", "token_store", "weight", "name", "text_column", "dataset_config"}
    for index, entry in enumerate(value):
        unknown = sorted(set(entry) - allowed)
        if unknown:
            raise ValueError(f"sources[{index}]: unknown keys {unknown}; allowed: {sorted(allowed)}")
        if bool(entry.get("dataset_name")) == bool(entry.get("token_store")):
            raise ValueError(f"sources[{index}]: give exactly one of dataset_name (streamed text) or token_store")
        weight = entry.get("weight")
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0 or weight == float("inf"):
            raise ValueError(f"sources[{index}]: weight must be a number > 0 (a share of the tokens), got {weight!r}")
    return value


@dataclass
class ObjectiveData:
    """What a run trains and evaluates on: ``Trainer(train_dataset=..., eval_dataset=..., data_collator=...)``."""

    train_dataset: Any  # a PretrainingStream: collated batches of one rank
    eval_dataset: datasets.Dataset  # rows of the validation text, batched by ``collator``
    collator: Callable[[list[dict[str, Any]]], dict[str, Any]]
    hyperparameters: dict[str, Any]
    validation_texts: list[str] = field(default_factory=list)  # the held-out text the report scores
    validation_domains: list[str] = field(default_factory=list)  # the domain of each validation text
    provenance: dict[str, Any] = field(default_factory=dict)  # sources, validation, skipped documents (run_sources)
    sample_documents: Callable[[], datasets.Dataset] | None = None  # the report's training sample, read when called
    train_documents: datasets.Dataset | None = None  # that sample once read (after training)
    callbacks: list[TrainerCallback] = field(default_factory=list)


def objective_collator(
    spec: ObjectiveSpec,
    tokenizer: PreTrainedTokenizerBase,
    args: DataArguments,
    model: PreTrainedModel | None,
    seed: int,
) -> tuple[Any, RowFormat, dict[str, Any]]:
    """The objective's collator, the rows it takes and the hyperparameters it records.

    ``model`` supplies what the batch must match: its attention implementation (packed masks) and decoder start
    token (encoder-decoders). ``seed`` keys the per-example masks and noise.

    Example:
        >>> from hf_lmobj.corpus import build_tokenizer
        >>> _, rows, _ = objective_collator(get_objective("masked"), build_tokenizer(512, max_documents=20),
        ...                                 DataArguments(objective="masked", max_length=64), None, 0)
        >>> rows
        RowFormat(kind='pieces', max_length=64)
    """
    if spec.data == "packed":
        collator = packed_collator(tokenizer, args.max_length, model)
        return collator, RowFormat("packed", args.max_length), {"max_length": args.max_length, "packing": True}
    if spec.labels_in_place and spec.data == "pieces":
        from hf_lmobj.collators.masked import DataCollatorForMaskedLM

        collator = DataCollatorForMaskedLM(tokenizer, mlm_probability=args.mlm_probability,
                                           whole_word_mask=args.whole_word_mask, seed=seed, max_length=args.max_length,
                                           pad_to_multiple_of=MASKED_PAD_MULTIPLE)  # fmt: skip
        hyperparameters = {"max_length": args.max_length, "mlm_probability": args.mlm_probability,
                           "mask_replace_prob": collator.mask_replace_prob,
                           "random_replace_prob": collator.random_replace_prob, "whole_word_mask": args.whole_word_mask}  # fmt: skip
        return collator, RowFormat("pieces", args.max_length), hyperparameters
    if spec.encoder_decoder and spec.data == "pieces":
        noise = {"noise_density": args.noise_density, "mean_noise_span_length": args.mean_noise_span_length}
        noise = noise if _takes_noise_arguments(spec) else {}
        collator = spec.collator_class()(tokenizer, input_length=args.max_length, model=model, seed=seed, **noise)
        hyperparameters = {"input_length": args.max_length, "raw_tokens_length": collator.raw_tokens_length,
                           "targets_length": collator.targets_length, **noise}  # fmt: skip
        return collator, RowFormat("pieces", collator.raw_tokens_length), hyperparameters
    raise ValueError(f"objective must be one of {RECIPE_OBJECTIVES}, got {spec.name!r}")


def packed_collator(tokenizer, max_length: int, model: PreTrainedModel | None) -> Any:
    """The packing causal collator of a run, checked against the stock model it trains (an MTP wrapper's base):
    a model that cannot keep packed documents apart is refused here, before any step."""
    from hf_lmobj.collators.causal import DataCollatorForCausalLM
    from hf_lmobj.models.auxiliary_model import AuxiliaryModel

    stock = model.stock_model if isinstance(model, AuxiliaryModel) else model
    attn_implementation = getattr(getattr(stock, "config", None), "_attn_implementation", None) or "sdpa"
    return DataCollatorForCausalLM(
        tokenizer, max_length=max_length, packing=True, attn_implementation=attn_implementation, model=stock
    )


def _takes_noise_arguments(spec: ObjectiveSpec) -> bool:
    """Whether the objective's collator takes ``noise_density`` / ``mean_noise_span_length`` (span corruption;
    UL2 carries its own per-denoiser values)."""
    fields = {f.name for f in dataclasses.fields(spec.collator_class())} if spec.collator else set()
    return {"noise_density", "mean_noise_span_length"} <= fields


def eval_subset(dataset: datasets.Dataset, rows: int | None) -> datasets.Dataset:
    """``rows`` rows drawn evenly (fixed seed) from the whole split, or all of it when None.

    Packed and split datasets are ordered (longest documents first, pieces in document order), so
    the first rows would stand for a few documents only.
    """
    if rows is None or rows >= dataset.num_rows:
        return dataset
    return dataset.shuffle(seed=0).select(range(rows))
