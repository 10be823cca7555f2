"""The data side of pre-training: text splits -> tokenized, objective-ready datasets + collator.

``prepare_objective_data`` is what ``recipes/pretrain.py`` calls: it turns train/validation text
into the datasets and the collator of one objective, so the recipe stays a few lines of wiring.

Example:
    >>> from hf_lmobj.data import build_tokenizer, load_stdlib_corpus
    >>> tok = build_tokenizer(vocab_size=512, max_documents=20)
    >>> data = prepare_objective_data("clm", tok, load_stdlib_corpus(max_documents=20),
    ...                               DataArguments(max_length=64))
    >>> len(data.train_dataset[0]["input_ids"]) <= 64, sorted(data.collator([data.train_dataset[0]]))[:2]
    (True, ['attention_mask', 'input_ids'])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import datasets
from transformers import PreTrainedTokenizerBase

from hf_lmobj.data import tokenize_corpus

CAUSAL_OBJECTIVES = ("clm",)
OBJECTIVES = (*CAUSAL_OBJECTIVES,)


@dataclass
class DataArguments:
    """What to train on and how the objective shapes it."""

    objective: str = field(default="clm", metadata={"help": f"One of {OBJECTIVES}."})
    dataset_name: str | None = field(default=None, metadata={"help": "Hub/local dataset; None = embedded stdlib corpus."})
    dataset_config: str | None = field(default=None, metadata={"help": "Dataset configuration name."})
    text_column: str = field(default="text", metadata={"help": "Column holding the raw text."})
    validation_fraction: float = field(default=0.02, metadata={"help": "Held-out share when there is no validation split."})
    max_documents: int | None = field(default=None, metadata={"help": "Use only the first N documents (quick runs)."})
    tokenizer_name: str | None = field(default=None, metadata={"help": "Hub/local tokenizer; None trains a byte-level BPE."})
    vocab_size: int = field(default=8192, metadata={"help": "Vocabulary of the locally trained tokenizer."})
    max_length: int = field(default=256, metadata={"help": "Tokens per packed training row."})
    max_eval_rows: int | None = field(default=64, metadata={"help": "Validation rows for the periodic eval_loss; None = all."})

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {OBJECTIVES}, got {self.objective!r}")
        if self.max_length <= 1:
            raise ValueError(f"max_length must be at least 2, got {self.max_length}")
        if self.max_eval_rows is not None and self.max_eval_rows <= 0:
            raise ValueError("max_eval_rows must be positive or None")


@dataclass
class ObjectiveData:
    """Datasets and collator ready for ``Trainer(train_dataset=..., data_collator=...)``."""

    train_dataset: datasets.Dataset
    eval_dataset: datasets.Dataset
    collator: Callable[[list[dict[str, Any]]], dict[str, Any]]
    hyperparameters: dict[str, Any]


def prepare_objective_data(
    objective: str,
    tokenizer: PreTrainedTokenizerBase,
    splits: datasets.DatasetDict,
    args: DataArguments,
    attn_implementation: str = "sdpa",
) -> ObjectiveData:
    """Tokenize ``splits`` and shape them for ``objective`` (see :data:`OBJECTIVES`)."""
    if objective == "clm":
        return _causal_data(tokenizer, splits, args, attn_implementation)
    raise ValueError(f"objective must be one of {OBJECTIVES}, got {objective!r}")


def _causal_data(tokenizer, splits, args: DataArguments, attn_implementation: str) -> ObjectiveData:
    from hf_lmobj.collators.causal import DataCollatorForCausalLM
    from hf_lmobj.collators.dataset_packing import pack_dataset

    tokenized = {
        name: tokenize_corpus(split, tokenizer, add_bos=True, add_eos=True, text_column=args.text_column)
        for name, split in splits.items()
    }
    train = pack_dataset(tokenized["train"].remove_columns("num_bytes"), max_length=args.max_length)
    evaluation = pack_dataset(tokenized["validation"].remove_columns("num_bytes"), max_length=args.max_length)
    if args.max_eval_rows is not None:
        evaluation = evaluation.select(range(min(args.max_eval_rows, evaluation.num_rows)))
    collator = DataCollatorForCausalLM(
        tokenizer, max_length=args.max_length, packing=True, attn_implementation=attn_implementation
    )
    hyperparameters = {"max_length": args.max_length, "packing": True, "train_rows": train.num_rows}
    return ObjectiveData(train, evaluation, collator, hyperparameters)
