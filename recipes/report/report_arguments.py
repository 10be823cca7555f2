"""What the end of a pre-training run measures and shows (``ReportArguments``), checked before any data.

Each costly phase of the report has a switch: ``ngram_orders: []`` (``--ngram_orders none``) skips the
Kneser-Ney baseline, ``compressor_baselines: false`` the zlib / bz2 / xz ones (and ``infill_cases: 0`` the
infilling of a FIM run, a FimArguments field).

Example:
    >>> ReportArguments(score_stride=64).score_stride, ReportArguments().ngram_orders
    (64, [3, 4, 5])
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from hf_lmobj.checks import check_count, check_flag, check_length, check_number, check_seed
from hf_lmobj.models.stock import check_positions

#: The highest Kneser-Ney order the report fits: each order adds a count table as large as the training tokens.
NGRAM_MAX_ORDER = 16


@dataclass
class ReportArguments:
    """What the end of the run measures and shows."""

    #: The YAML config section of these fields (hf_lmobj.config): ``report: {...}``.
    SECTION: ClassVar[str] = "report"

    score_batch_size: int = field(
        default=16, metadata={"help": "Windows per forward pass when scoring the validation text."}
    )
    score_max_length: int | None = field(
        default=None, metadata={"help": "Window length when scoring; None = max_length."}
    )
    score_stride: int | None = field(default=None, metadata={"help": "Window stride when scoring; None = window // 2."})
    ngram_orders: list[int] = field(
        default_factory=lambda: [3, 4, 5],
        metadata={
            "help": "causal: Kneser-Ney baseline orders tried on the validation text (the best is reported); "
            "none (or [] in YAML) = no n-gram baseline."
        },
    )
    compressor_baselines: bool = field(
        default=True, metadata={"help": "causal: also report zlib / bz2 / xz bits per byte of the validation text."}
    )
    bootstrap_samples: int = field(
        default=1000,
        metadata={"help": "Document-level bootstrap resamples for the intervals of every figure; 0 = no intervals."},
    )
    contamination_scan: bool = field(
        default=True, metadata={"help": "causal: scan the training tokens for the validation text's n-grams."}
    )
    contamination_ngram: int = field(default=13, metadata={"help": "Tokens per n-gram of the contamination scan."})
    reference_max_steps: int | None = field(
        default=None,
        metadata={
            "help": "Steps the config's published figure is measured at (the demo's README figure); a run of "
            "other max_steps says its figure is not that one. None = no reference."
        },
    )
    sample_prompt: str = field(default="def ", metadata={"help": "Prompt of the sampled continuation (causal models)."})
    sample_max_new_tokens: int = field(default=64, metadata={"help": "Length of the sampled continuation."})
    sample_top_p: float = field(default=0.9, metadata={"help": "Nucleus of the sampled continuation."})
    sample_seed: int = field(default=0, metadata={"help": "Seed of the sampled continuation."})

    def __post_init__(self) -> None:
        self.score_batch_size = check_length(self.score_batch_size, "score_batch_size", 1, "windows per forward pass")
        self.score_max_length = check_length(
            self.score_max_length,
            "score_max_length",
            2,
            "a token and the one it predicts; None = max_length",
            optional=True,
        )
        self.score_stride = check_length(self.score_stride, "score_stride", 1, "None = window // 2", optional=True)
        if (
            self.score_stride is not None
            and self.score_max_length is not None
            and self.score_stride > self.score_max_length
        ):
            raise ValueError(
                f"score_stride {self.score_stride} must be <= score_max_length {self.score_max_length} "
                "(new tokens scored per window); lower score_stride"
            )
        self.ngram_orders = check_ngram_orders(self.ngram_orders)
        self.compressor_baselines = check_flag(self.compressor_baselines, "compressor_baselines")
        self.contamination_scan = check_flag(self.contamination_scan, "contamination_scan")
        self.bootstrap_samples = check_count(self.bootstrap_samples, "bootstrap_samples")
        self.contamination_ngram = check_length(self.contamination_ngram, "contamination_ngram", 1, "tokens per n-gram")
        if not isinstance(self.sample_prompt, str):
            raise TypeError(f"sample_prompt must be a string, got {self.sample_prompt!r}")
        self.sample_max_new_tokens = check_length(self.sample_max_new_tokens, "sample_max_new_tokens", 1)
        self.sample_top_p = check_number(
            self.sample_top_p, "sample_top_p", 0.0, 1.0, low_open=True, hint="the nucleus mass; 1 = off"
        )
        self.sample_seed = check_seed(self.sample_seed, "sample_seed")
        self.reference_max_steps = check_length(self.reference_max_steps, "reference_max_steps", 1,
                                                "None = no reference figure", optional=True)  # fmt: skip


def reference_line(reference_max_steps: int | None, max_steps: int) -> str | None:
    """Whether this run's figure is the config's published one: the same steps, or not (a shorter demo).

    Example:
        >>> reference_line(5000, 1000)
        "reference: this config's published figure is measured at 5,000 steps; this run trained 1,000, so its figure is not the reference one"
        >>> reference_line(5000, 5000), reference_line(None, 10)
        ('reference: 5,000 steps, the steps of the published figure', None)
    """
    if reference_max_steps is None:
        return None
    if reference_max_steps == max_steps:
        return f"reference: {max_steps:,} steps, the steps of the published figure"
    return (f"reference: this config's published figure is measured at {reference_max_steps:,} steps; this run "
            f"trained {max_steps:,}, so its figure is not the reference one")  # fmt: skip


def check_ngram_orders(orders: Any) -> list[int]:
    """Kneser-Ney orders: a list of distinct ints in ``[1, NGRAM_MAX_ORDER]``; ``[]`` = no n-gram baseline
    (``--ngram_orders none`` on the command line, ``ngram_orders: none`` or ``[]`` in YAML).

    Example:
        >>> check_ngram_orders([5, 3]), check_ngram_orders([])
        ([5, 3], [])
        >>> check_ngram_orders([0])
        Traceback (most recent call last):
        ...
        ValueError: ngram_orders[0] must be an int >= 1 (a 1-gram is the unigram; [] = no n-gram baseline), got 0
    """
    if isinstance(orders, (str, bytes)) or not isinstance(orders, (list, tuple)):
        raise TypeError(
            f"ngram_orders must be a list of ints such as [3, 4, 5], got {orders!r}; for no n-gram baseline give "
            "[] (on the command line: --ngram_orders none)"
        )
    checked = [
        check_length(order, f"ngram_orders[{i}]", 1, "a 1-gram is the unigram; [] = no n-gram baseline")
        for i, order in enumerate(orders)
    ]
    too_long = [order for order in checked if order > NGRAM_MAX_ORDER]
    if too_long:
        raise ValueError(
            f"ngram_orders {too_long} exceed {NGRAM_MAX_ORDER}: each order adds a count table as large as the "
            "training tokens; use orders up to 5 or so (the best is usually 3 to 5)"
        )
    if len(set(checked)) != len(checked):
        raise ValueError(f"ngram_orders lists an order twice: {checked}; list each once")
    return checked


def check_report_fits(report_args: ReportArguments, max_length: int, limit: int | None, rotary: bool,
                      prompt_tokens: int = 1) -> None:  # fmt: skip
    """The scoring windows and the sampled continuation against the rows (``max_length``) and the model's
    ``limit`` positions (None: no limit), before anything is trained.

    The scoring window (``score_max_length``, else ``max_length``) must fit the model and hold the
    stride. The sample (``prompt_tokens`` + ``sample_max_new_tokens``) must fit a position table
    (GPT-2: past it the embedding lookup fails); rotary positions (Llama) have no table to overrun,
    so a sample may run past ``limit`` there.
    """
    window = report_args.score_max_length or max_length
    stride = report_args.score_stride
    if stride is not None and stride > window:
        raise ValueError(
            f"score_stride {stride} must be <= the scoring window {window} (score_max_length, else max_length): "
            "it counts the new tokens scored per window; lower score_stride"
        )
    check_positions(window, limit, f"the scoring window (score_max_length, else max_length) {window}",
                    "lower score_max_length (or max_length), or raise max_position_embeddings")  # fmt: skip
    if not rotary:
        needed = prompt_tokens + report_args.sample_max_new_tokens
        check_positions(needed, limit, f"the sample ({prompt_tokens} prompt tokens + sample_max_new_tokens "
                        f"{report_args.sample_max_new_tokens})", "lower sample_max_new_tokens")  # fmt: skip
