"""The end of a pre-training run: validation scoring, baselines, the sample, files and the printed report.

``pretrain.py`` trains; this module measures and shows. Scoring and sampling run the model, so
every rank calls them (a sharded model runs them together); :func:`baseline_bits_per_byte` and
:func:`write_and_report` run on the main process only.

Example:
    >>> baseline_key("Kneser-Ney 5-gram"), baseline_key("xz -9e")
    ('baseline_kneser_ney_5_gram_bits_per_byte', 'baseline_xz_9e_bits_per_byte')
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import torch

from hf_lmobj.generation.sampling import encode_prompts, sampling_generate_kwargs
from hf_lmobj.metrics.scoring import bits_per_byte_from_sums, encode_texts, perplexity_from_sums, score_texts
from hf_lmobj.models.pretraining import auxiliary_hyperparameters
from hf_lmobj.models.stock import check_positions
from hf_lmobj.objectives import get_objective
from hf_lmobj.validation import check_length, check_number

from ..runtime.after_training import write_metrics
from ..runtime.phase_timer import PhaseTimer
from ..runtime.run_checks import SEED_LIMIT
from .cards import write_model_card
from .compression import compression_bits_per_byte
from .infilling import print_fim_comparison
from .ngram import KneserNeyLM

if TYPE_CHECKING:
    from ..runtime.pretrain_run import Run

__all__ = [
    "NGRAM_MAX_ORDER",
    "ReportArguments",
    "check_ngram_orders",
    "check_seed",
    "check_report_fits",
    "baseline_key",
    "score_validation_texts",
    "baseline_bits_per_byte",
    "sample_continuation",
    "write_and_report",
]

#: The highest Kneser-Ney order the report fits: each order adds a count table as large as the training tokens.
NGRAM_MAX_ORDER = 16


@dataclass
class ReportArguments:
    """What the end of the run measures and shows."""

    #: The YAML config section of these fields (config_parsing): ``report: {...}``.
    SECTION: ClassVar[str] = "report"
    #: Names of the first release (``eval_`` now means ``Trainer.evaluate`` only): they still work, with a warning.
    RENAMED_FIELDS: ClassVar[dict[str, str]] = {
        "eval_batch_size": "score_batch_size",
        "eval_max_length": "score_max_length",
        "eval_stride": "score_stride",
    }

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
            "help": "causal: Kneser-Ney baseline orders tried on the validation text (the best is reported); [] = none."
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
        if not isinstance(self.sample_prompt, str):
            raise TypeError(f"sample_prompt must be a string, got {self.sample_prompt!r}")
        self.sample_max_new_tokens = check_length(self.sample_max_new_tokens, "sample_max_new_tokens", 1)
        self.sample_top_p = check_number(
            self.sample_top_p, "sample_top_p", 0.0, 1.0, low_open=True, hint="the nucleus mass; 1 = off"
        )
        self.sample_seed = check_seed(self.sample_seed, "sample_seed")


def check_ngram_orders(orders: Any) -> list[int]:
    """Kneser-Ney orders: a list of distinct ints in ``[1, NGRAM_MAX_ORDER]``; ``[]`` = no n-gram baseline.

    Example:
        >>> check_ngram_orders([5, 3])
        [5, 3]
        >>> check_ngram_orders([0])
        Traceback (most recent call last):
        ...
        ValueError: ngram_orders[0] must be an int >= 1 (a 1-gram is the unigram; [] = no n-gram baseline), got 0
    """
    if isinstance(orders, (str, bytes)) or not isinstance(orders, (list, tuple)):
        raise TypeError(f"ngram_orders must be a list of ints such as [3, 4, 5] ([] = none), got {orders!r}")
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


def check_seed(value: Any, field: str) -> int:
    """A seed: an int in ``[0, 2**32)`` (numpy's ``set_seed`` range, used by every seed of a run)."""
    seed = check_length(value, field, 0, "a seed")
    if seed >= SEED_LIMIT:
        raise ValueError(f"{field} must be an int in [0, 2**32) (numpy's seed range), got {seed}")
    return seed


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


def baseline_key(name: str) -> str:
    """The metrics.json key of a baseline's bits per byte (``xz -9e`` -> ``baseline_xz_9e_bits_per_byte``)."""
    return "baseline_" + re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_") + "_bits_per_byte"


def score_validation_texts(model, tokenizer, texts, data_args, report_args, progress: bool) -> dict[str, float]:
    """Corpus perplexity and bits per byte of raw texts (every token scored once, strided windows, a tqdm bar)."""
    window = report_args.score_max_length or data_args.max_length
    stride = report_args.score_stride or max(window // 2, 1)
    scores = score_texts(
        model,
        tokenizer,
        texts,
        max_length=window,
        stride=stride,
        batch_size=report_args.score_batch_size,
        progress=progress,
    )
    nll, tokens, num_bytes = ([getattr(s, name) for s in scores] for name in ("nll", "num_tokens", "num_bytes"))
    return {
        "validation_perplexity": perplexity_from_sums(nll, tokens),
        "validation_bits_per_byte": bits_per_byte_from_sums(nll, num_bytes),
        "validation_tokens": sum(tokens),
        "validation_bytes": sum(num_bytes),
    }


def baseline_bits_per_byte(data, tokenizer, texts, report_args, timer: PhaseTimer) -> dict[str, float]:
    """Bits per byte of the same validation texts under Kneser-Ney n-grams (same training tokens) and compressors.

    Keys are display names (``"Kneser-Ney 5-gram"``, ``"xz -9e"``), in the order they are printed.
    """
    out: dict[str, float] = {}
    if report_args.ngram_orders and data.train_documents is not None:
        with timer.phase("n-gram"):
            documents = data.train_documents.with_format("numpy")["input_ids"]
            lm = KneserNeyLM.fit(documents, max(report_args.ngram_orders), len(tokenizer))
            sequences = encode_texts(tokenizer, texts, add_start_token=True)  # the tokens the model is scored on
            num_bytes = [len(text.encode("utf-8")) for text in texts]
            for order in sorted(report_args.ngram_orders):
                out[f"Kneser-Ney {order}-gram"] = bits_per_byte_from_sums(lm.sequence_nll(sequences, order), num_bytes)
    with timer.phase("compressors"):
        out.update(compression_bits_per_byte(texts))
    return out


def sample_continuation(model, tokenizer, report_args: ReportArguments) -> str:
    """A seeded nucleus-sampled continuation of ``sample_prompt``; the caller's RNG is left untouched."""
    inputs = encode_prompts(tokenizer, [report_args.sample_prompt], add_bos=tokenizer.bos_token is not None)
    model.eval()
    devices = [model.device] if model.device.type == "cuda" else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(report_args.sample_seed)
        output = model.generate(
            **inputs.to(model.device),
            max_new_tokens=report_args.sample_max_new_tokens,
            pad_token_id=tokenizer.pad_token_id,
            **sampling_generate_kwargs(top_p=report_args.sample_top_p),
        )
    return tokenizer.decode(output[0], skip_special_tokens=True)


def write_and_report(run: Run, metrics: dict, baselines: dict[str, float]) -> None:
    """Write ``metrics.json`` and the model card into ``output_dir``, then print the report (the model and
    the tokenizer are there already: :func:`~hf_lmobj.recipes.runtime.after_training.save_trained_model`)."""
    output = Path(run.trainer.args.output_dir)
    write_metrics(output, metrics)
    _write_card(run, metrics, output)
    print(f"\n== {run.args.data.objective} run written to {output}")
    for key, value in metrics.items():
        if not key.startswith("baseline_"):
            print(f"  {key:32s} {value:.4f}" if isinstance(value, float) else f"  {key:32s} {value}")
    if not get_objective(run.args.data.objective).scores_text:
        loss_key = "eval_mlm_loss" if "eval_mlm_loss" in metrics else "eval_loss"  # ELECTRA: the generator's MLM loss
        print(
            f"  {loss_key} {metrics[loss_key]:.3f} vs unigram entropy of the training tokens "
            f"{metrics['train_unigram_entropy']:.3f} nats/token (a model that ignores context)"
        )
    else:
        _print_comparison(metrics, baselines)
        print_fim_comparison(metrics, run.args.fim.fim_baseline_metrics)
    _print_time(run, metrics)
    if run.sample is not None:
        print(f"  sample ({run.args.report.sample_prompt!r}, top_p={run.args.report.sample_top_p}):")
        print(run.sample)


def _write_card(run: Run, metrics: dict, output: Path) -> None:
    trainer = run.trainer
    hyperparameters = {
        **run.data.hyperparameters,
        "optimizer": type(getattr(trainer.optimizer, "optimizer", trainer.optimizer)).__name__,  # unwrapped
        "learning_rate": trainer.args.learning_rate,
        "max_steps": trainer.state.max_steps,
        "per_device_train_batch_size": trainer.args.per_device_train_batch_size,
        "parameters": trainer.model.num_parameters(),
        "vocab_size": len(run.tokenizer),
        **auxiliary_hyperparameters(run.args.auxiliary),
    }
    write_model_card(
        output,
        objective=run.args.data.objective,
        metrics=metrics,
        hyperparameters=hyperparameters,
        model_name=output.resolve().name,  # "." names the folder it is
        dataset_name=run.args.data.dataset_name or "python-stdlib",
        base_model=run.args.model.model_name_or_path,
        log_history=trainer.state.log_history,
        extra={"launch command": " ".join(sys.argv)},
    )


def _print_comparison(metrics: dict[str, float], baselines: dict[str, float]) -> None:
    print(f"  bits per byte on the same validation text ({metrics['validation_bytes']:,} bytes):")
    print(f"    {'this model':20s} {metrics['validation_bits_per_byte']:.3f}")
    ngrams = {name: rate for name, rate in baselines.items() if name.startswith("Kneser-Ney")}
    if ngrams:
        best = min(ngrams, key=ngrams.get)
        tried = ", ".join(f"{name.split()[1].split('-')[0]}: {rate:.3f}" for name, rate in ngrams.items())
        print(f"    {best:20s} {ngrams[best]:.3f}   (n chosen on this text; {tried})")
    for name, rate in baselines.items():
        if name not in ngrams:
            print(f"    {name:20s} {rate:.3f}")


def _print_time(run: Run, metrics: dict) -> None:
    threads_line = run.threads.summary() if run.threads else f"fixed at {torch.get_num_threads()}"
    print(f"  time (wall clock; torch threads {threads_line}):")
    for line in run.timer.lines():
        print(f"    {line}")
    if "train_tokens_per_second" in metrics:
        print(
            f"    training throughput {metrics['train_tokens_per_second']:,.0f} tokens/s "
            f"({metrics['train_tokens_seen']:,} tokens)"
        )
    if run.budget is not None:
        print(f"    training budget {run.budget.summary()}")
