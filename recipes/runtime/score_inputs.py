"""What the score recipe reads: its arguments (:class:`EvalArguments`), each checked where it enters.

The documents they name and the contamination sources are read by the library
(:func:`hf_lmobj.evaluation.documents.score_documents`,
:func:`hf_lmobj.evaluation.training_locations.open_contamination_sources`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hf_lmobj.checks import check_flag, check_length, check_name, check_number, check_seed
from hf_lmobj.data.load_text import DOMAIN_COLUMN
from hf_lmobj.evaluation.training_locations import source_list

SOURCE_HELP = (
    "Training data to scan for the evaluation documents' 13-grams (token ids; a document is contaminated when half "
    "its 13-grams are seen): a token store folder, a local file / folder of text or a Hub id (its train split), "
    "several comma-separated or the flag repeated. A token store is read as ids, so the index is built with the "
    "tokenizer that wrote it: the store's own tokenizer/ folder (else the scored model's, if the store's meta.json "
    "says it is the same); text sources are encoded with that tokenizer too."
)


@dataclass
class EvalArguments:
    """Which model, which text, how it is scored and where the results go."""

    model_name_or_path: str | None = field(
        default=None, metadata={"help": "Causal LM: Hub id or local folder (required)."}
    )
    tokenizer_name: str | None = field(default=None, metadata={"help": "Tokenizer; None = the model's own."})
    dataset_name: str | None = field(
        default=None,
        metadata={
            "help": "Hub/local dataset (a folder of *.jsonl / *.jsonl.gz files: one domain per "
            "file); None = embedded stdlib corpus."
        },  # fmt: skip
    )
    dataset_config: str | None = field(default=None, metadata={"help": "Dataset configuration name."})
    text_column: str = field(default="text", metadata={"help": "Column holding the raw text."})
    domain_column: str = field(
        default=DOMAIN_COLUMN,
        metadata={
            "help": "Column holding each document's domain (tag paths such as "
            "code/python allowed); absent: the file name without extensions, "
            "else the dataset's name. Another name than 'domain' needs "
            "--dataset_name and a --split other than validation."
        },  # fmt: skip
    )
    split: str = field(default="validation", metadata={"help": "Split to score (train | validation | test ...)."})
    validation_fraction: float = field(
        default=0.02, metadata={"help": "Held-out share when there is no validation split."}
    )
    max_documents: int | None = field(
        default=None, metadata={"help": "Load only the first N training documents (quick runs)."}
    )
    max_texts: int | None = field(default=None, metadata={"help": "Score only the first N texts of the split."})
    max_length: int | None = field(
        default=None, metadata={"help": "Tokens per window; None = the model's context size."}
    )
    stride: int | None = field(default=None, metadata={"help": "Scored positions per later window; None = max_length."})
    add_start_token: bool = field(default=True, metadata={"help": "Prepend BOS so each text's first token is scored."})
    batch_size: int = field(default=8, metadata={"help": "Windows per forward pass."})
    bootstrap_samples: int = field(
        default=1000,
        metadata={
            "help": "Document-bootstrap resamples for the intervals (stratified by domain, "
            "percentile method); 0 = no intervals."
        },  # fmt: skip
    )
    confidence: float = field(default=0.95, metadata={"help": "Confidence level of the intervals, in (0, 1)."})
    bootstrap_seed: int = field(default=0, metadata={"help": "Seed of the bootstrap resamples, in [0, 2**32)."})
    compare_model: str | None = field(
        default=None,
        metadata={
            "help": "A second causal LM (with its own tokenizer) scored on the same documents: "
            "compare/... keys are it minus the model."
        },  # fmt: skip
    )
    contamination_source: list[str] | None = field(default=None, metadata={"help": SOURCE_HELP})
    output_dir: str = field(default="out/eval", metadata={"help": "Where metrics.json and README.md go."})
    use_cpu: bool = field(default=False, metadata={"help": "Score on the CPU even when a GPU is visible."})

    def __post_init__(self) -> None:
        if not self.model_name_or_path:
            raise ValueError("model_name_or_path is required: pass --model_name_or_path <folder or Hub id>")
        self.model_name_or_path = check_name(self.model_name_or_path, "model_name_or_path")
        for name in ("tokenizer_name", "dataset_name", "dataset_config", "compare_model"):
            setattr(self, name, check_name(getattr(self, name), name, optional=True))
        for name in ("text_column", "domain_column", "split", "output_dir"):
            setattr(self, name, check_name(getattr(self, name), name))
        for name in ("max_texts", "max_length", "stride", "max_documents"):
            setattr(self, name, check_length(getattr(self, name), name, 1, "or null", optional=True))
        if self.stride is not None and self.max_length is not None and self.stride > self.max_length:
            raise ValueError(
                f"stride {self.stride} must be <= max_length {self.max_length} (positions scored per window)"
            )
        self.batch_size = check_length(self.batch_size, "batch_size", 1, "windows per forward pass")
        self.validation_fraction = check_number(self.validation_fraction, "validation_fraction", 0.0, 1.0,
                                                low_open=True, high_open=True, hint="the held-out share")  # fmt: skip
        for name in ("add_start_token", "use_cpu"):
            setattr(self, name, check_flag(getattr(self, name), name))
        self.bootstrap_samples = check_length(self.bootstrap_samples, "bootstrap_samples", 0, "0 = no intervals")
        self.confidence = check_number(self.confidence, "confidence", 0.0, 1.0, low_open=True, high_open=True,
                                       hint="e.g. 0.95")  # fmt: skip
        self.bootstrap_seed = check_seed(self.bootstrap_seed, "bootstrap_seed")
        self.contamination_source = source_list(self.contamination_source)
        if self.domain_column != DOMAIN_COLUMN and (self.dataset_name is None or self.split == "validation"):
            raise ValueError(
                f"domain_column {self.domain_column!r} is read from a named split of --dataset_name (--split train, "
                "test ...); the validation split is the text recipes/pretrain.py holds out, whose domain is its "
                "row's 'domain' column, its file's name or, for the embedded corpus, its stdlib package: rename the "
                "column to 'domain', or score a named split"
            )
