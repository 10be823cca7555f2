"""Perplexity and bits per byte of any causal LM on any text dataset: per domain, with intervals, comparisons and
a contamination scan.

Supported setups: one CPU process, several CPU processes (gloo), one or many GPUs, chosen by the
accelerate config alone; each process scores its share of the texts, the main process gathers the
per-document sums (NLL, tokens, bytes, words; each document with its domain) and computes every figure from
them, so any number of processes gives the figures of one.

    accelerate launch recipes/score.py --config recipes/configs/eval/default.yaml \\
        --model_name_or_path out/causal-demo
    accelerate launch --config_file recipes/accelerate_configs/multi_process.yaml \\
        recipes/score.py --config recipes/configs/eval/default.yaml --model_name_or_path out/causal-demo
    python recipes/score.py --model_name_or_path gpt2 --dataset_name wikitext \\
        --dataset_config wikitext-2-raw-v1 --split test --max_length 1024 --stride 512
    python recipes/score.py --model_name_or_path out/causal-demo --dataset_name paloma_like/ --split train \\
        --compare_model out/other --contamination_source data/train_store

Domains: a ``--domain_column`` of the data (default ``domain``; tag paths such as ``code/python`` give every
level), else each file's name without its extensions (a local folder of several files, Paloma-style), else the
dataset's name; the embedded corpus's domain is a file's top-level stdlib package. Figures per domain, micro
(sum over sum) and macro (mean over the top-level domains), with stratified document-bootstrap percentile
intervals (``--bootstrap_samples``, ``--confidence``, ``--bootstrap_seed``); ``--compare_model`` scores a second
causal LM (its own tokenizer) on the same documents: paired differences, win rate, sign test, minimum detectable
effect, and, when the tokenizers differ, the tokenizer-free per-byte gap; ``--contamination_source`` scans
training data for the evaluation documents' 13-grams.

Every field of ``EvalArguments`` can be set in the YAML file or overridden on the command line.
The run prints a table (one row per domain, then micro and macro) and writes ``metrics.json`` (its keys are
listed in the README, "The score command and its metrics.json") and ``README.md`` (a model card carrying the
results in its ``model-index``) into ``--output_dir``.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:
    __package__ = "hf_lmobj.recipes"  # run as a file: resolve relative imports in the shipped package

import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import torch
from accelerate import PartialState
from accelerate.utils import gather_object
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from hf_lmobj.cards.writer import write_model_card
from hf_lmobj.checks import check_flag, check_length, check_name, check_number, check_seed
from hf_lmobj.config import parse_args_with_config
from hf_lmobj.data.contamination import ContaminationIndex
from hf_lmobj.data.load_text import DOMAIN_COLUMN
from hf_lmobj.data.tokenizer_fingerprint import tokenizer_fingerprint
from hf_lmobj.metrics import load as load_metric
from hf_lmobj.metrics.byte_alignment import compare_per_byte
from hf_lmobj.metrics.scoring import check_fits_context, score_texts
from hf_lmobj.metrics.slices import DocumentSums, domain_figures
from hf_lmobj.metrics.uncertainty import MAX_REPLICATE_ENTRIES

from .report.score_figures import comparison_keys, document_table, figure_keys, tokenizer_free_keys
from .report.score_report import card_extras, score_table, tokenizer_free_lines
from .runtime.after_training import write_metrics
from .runtime.score_inputs import (
    EvalDocuments,
    merge_repeated_flag,
    open_contamination_sources,
    score_documents,
    source_list,
)

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


def load_texts(args: EvalArguments) -> EvalDocuments:
    """The split's non-empty texts and their domains (:func:`.runtime.score_inputs.score_documents`)."""
    return score_documents(args)


def check_bootstrap_budget(args: EvalArguments, domains: tuple[str, ...]) -> None:
    """Refuse, before scoring, more resampled values than the bootstrap holds (samples x figure keys)."""
    if not args.bootstrap_samples:
        return
    count = len(domains)
    keys = len(domain_figures(DocumentSums(nll=[0.0] * count, tokens=[1] * count, bytes=[1] * count,
                                           words=[1] * count, doc_id=list(range(count)), domain=list(domains))))  # fmt: skip
    if args.bootstrap_samples * keys > MAX_REPLICATE_ENTRIES:
        raise ValueError(
            f"bootstrap_samples {args.bootstrap_samples} x {keys} figures = {args.bootstrap_samples * keys} resampled "
            f"values, beyond {MAX_REPLICATE_ENTRIES}; use fewer resamples (1000 is usual)"
        )


def load_compare_tokenizer(args: EvalArguments, tokenizer: Any) -> tuple[Any, bool]:
    """The compare model's own tokenizer and whether it differs from the model's (then the per-byte comparison
    runs, which needs fast tokenizers with a BOS token: checked here, before any scoring)."""
    if args.compare_model is None:
        return None, False
    try:
        other = AutoTokenizer.from_pretrained(args.compare_model)
    except (OSError, ValueError) as error:
        raise ValueError(f"compare_model {args.compare_model!r}: cannot load its tokenizer ({error})") from None
    differs = tokenizer_fingerprint(other) != tokenizer_fingerprint(tokenizer)
    for name, tok in (("model", tokenizer), ("compare_model", other)) if differs else ():
        if not getattr(tok, "is_fast", False) or tok.bos_token_id is None:
            raise ValueError(
                f"compare_model has another tokenizer than the model's, so the run compares them per byte, which needs "
                f"fast tokenizers with a BOS token; the {name}'s {type(tok).__name__} is "
                f"{'not fast' if not getattr(tok, 'is_fast', False) else 'without BOS'}: save it as a fast tokenizer "
                "with a bos_token"
            )
    return other, differs


def check_models_fit(args: EvalArguments) -> None:
    """Refuse, before any scoring, a ``--max_length`` past the context size of the model or the compare model."""
    if args.max_length is None:
        return
    for flag, path in (("model_name_or_path", args.model_name_or_path), ("compare_model", args.compare_model)):
        if path is not None:
            try:
                check_fits_context(SimpleNamespace(config=AutoConfig.from_pretrained(path)), args.max_length)
            except (OSError, ValueError) as error:
                raise ValueError(f"{flag} {path!r}: {error}") from None


def scan_contamination(args: EvalArguments, documents: EvalDocuments, tokenizer: Any) -> dict[str, Any]:
    """``contamination/...`` keys: the evaluation documents' 13-grams looked up in every training source."""
    if not args.contamination_source:
        return {}
    name = args.tokenizer_name or args.model_name_or_path
    opened = open_contamination_sources(args.contamination_source, args.text_column, tokenizer, name)
    index = ContaminationIndex.build(list(documents.texts), list(documents.domains), opened.tokenizer)
    report = index.scan(*opened.sources, names=list(opened.names), text_column=args.text_column)
    return {**report.as_metrics(), "contamination/tokenizer": opened.tokenizer_from}


def score_shard(args: EvalArguments, texts: tuple[str, ...], state: PartialState, model_path: str | None = None,
                tokenizer: Any = None) -> list[tuple[int, float, int, int, int]]:  # fmt: skip
    """``(index, nll, tokens, bytes, words)`` of this process's texts (every ``num_processes``-th one) under
    ``model_path`` (default: the model) and ``tokenizer`` (default: the model's)."""
    indices = list(range(state.process_index, len(texts), state.num_processes))
    if not indices:
        return []
    model = AutoModelForCausalLM.from_pretrained(model_path or args.model_name_or_path).to(state.device)
    if tokenizer is None:
        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer_name or args.model_name_or_path)
    scores = score_texts(
        model,
        tokenizer,
        [texts[i] for i in indices],
        max_length=args.max_length,
        stride=args.stride,
        add_start_token=args.add_start_token,
        batch_size=args.batch_size,
        progress=state.is_main_process,
    )
    return [(i, s.nll, s.num_tokens, s.num_bytes, s.num_words) for i, s in zip(indices, scores)]


def byte_gap_shard(args: EvalArguments, texts: tuple[str, ...], state: PartialState, tokenizer: Any,
                   compare_tokenizer: Any) -> list[tuple[int, float, int]]:  # fmt: skip
    """``(index, compare minus model NLL in nats, bytes)`` of this process's texts, aligned per byte
    (:func:`hf_lmobj.metrics.byte_alignment.compare_per_byte`: every token scored, a start token first)."""
    indices = list(range(state.process_index, len(texts), state.num_processes))
    if not indices:
        return []
    result = compare_per_byte([texts[i] for i in indices], args.model_name_or_path, tokenizer, args.compare_model,
                              compare_tokenizer, top_k=0, return_per_byte=True, max_length=args.max_length,
                              stride=args.stride, batch_size=args.batch_size, device=state.device,
                              progress=state.is_main_process)  # fmt: skip
    pairs = zip(indices, result["per_byte_a"], result["per_byte_b"])
    return [(i, math.fsum(np.concatenate([b, -a]).tolist()), len(a)) for i, a, b in pairs]


def compute_metrics(rows: list[tuple], split: str) -> dict[str, float]:
    """Perplexity and bits per byte from the gathered per-text sums, via the ``evaluate`` modules."""
    rows = sorted(rows)
    nll, tokens, num_bytes = [r[1] for r in rows], [r[2] for r in rows], [r[3] for r in rows]
    perplexity = load_metric("perplexity").compute(nll=nll, num_tokens=tokens)
    bits = load_metric("bits_per_byte").compute(nll=nll, num_bytes=num_bytes)
    return {
        f"{split}_perplexity": perplexity["perplexity"],
        f"{split}_bits_per_byte": bits["bits_per_byte"],
        "nll_nats": perplexity["nll"],
        f"{split}_tokens": perplexity["num_tokens"],
        f"{split}_bytes": bits["num_bytes"],
        "texts_scored": len(rows),
    }


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Score, gather, compute every figure on the main process, print the table and write the files.

    Returns the metrics (complete on the main process; the other processes return the corpus figures)."""
    (args,) = parse_args_with_config((EvalArguments,), merge_repeated_flag(argv, "--contamination_source"),
                                     description=__doc__)  # fmt: skip
    state = PartialState(cpu=args.use_cpu or not torch.cuda.is_available())
    documents = load_texts(args)
    check_bootstrap_budget(args, documents.domains)
    tokenizer = AutoTokenizer.from_pretrained(args.tokenizer_name or args.model_name_or_path)
    compare_tokenizer, per_byte = load_compare_tokenizer(args, tokenizer)
    check_models_fit(args)
    contamination = scan_contamination(args, documents, tokenizer) if state.is_main_process else {}
    rows = gather_object(score_shard(args, documents.texts, state, tokenizer=tokenizer))
    compare_rows = gather_object(score_shard(args, documents.texts, state, args.compare_model, compare_tokenizer)) if (
        compare_tokenizer is not None) else []  # fmt: skip
    gap_rows = gather_object(byte_gap_shard(args, documents.texts, state, tokenizer, compare_tokenizer)) if (
        per_byte) else []  # fmt: skip
    metrics: dict[str, Any] = compute_metrics(rows, args.split)
    if state.is_main_process:
        top = _add_figures(metrics, args, documents, rows, compare_rows, gap_rows, contamination)
        _report(args, metrics, state.num_processes, top)
    state.wait_for_everyone()
    return metrics


def _add_figures(metrics: dict[str, Any], args: EvalArguments, documents: EvalDocuments, rows: list[tuple],
                 compare_rows: list[tuple], gap_rows: list[tuple], contamination: dict[str, Any]) -> list[dict]:  # fmt: skip
    """Every figure into ``metrics`` (main process); the documents of largest tokenizer-free gap."""
    table = document_table(rows, documents.domains, {row[0] for row in rows if row[2] >= 1})
    metrics["documents_without_targets"] = len(rows) - len(table)
    metrics.update({f"documents_skipped/{reason}": count for reason, count in documents.skipped.items()})
    metrics.update(figure_keys(table, args))
    top: list[dict] = []
    if compare_rows:
        metrics.update(comparison_keys(table, compare_rows, documents.domains, args))
    if gap_rows:
        gaps, top = tokenizer_free_keys(gap_rows, documents.domains)
        metrics.update(gaps)
    metrics.update(contamination)
    return top


def _report(args: EvalArguments, metrics: dict[str, Any], num_processes: int, top: list[dict] | None = None) -> None:
    output = Path(args.output_dir)
    output.mkdir(parents=True, exist_ok=True)
    write_metrics(output, metrics)
    model_path = args.model_name_or_path
    settings = {k: v for k, v in asdict(args).items() if k not in ("output_dir", "use_cpu") and v is not None}
    samples = getattr(args, "bootstrap_samples", 0)
    method = (f"{args.confidence:.0%} stratified document bootstrap (percentile), {samples} resamples, seed "
              f"{args.bootstrap_seed}") if samples else None  # fmt: skip
    numbers, facts = card_extras(metrics, method)
    write_model_card(
        output,
        objective="causal",
        metrics=numbers,
        hyperparameters={**settings, "num_processes": num_processes},
        model_name=Path(model_path).name if os.path.isdir(model_path) else model_path,
        dataset_name=args.dataset_name or "python-stdlib",
        base_model=model_path,
        extra={"evaluated model": model_path, "split": args.split, **facts},
    )
    if any(key.startswith("bits_per_byte/") for key in metrics):
        print(score_table(metrics, _counts(metrics), args.confidence if samples else None))
    if top:
        print("\n".join(tokenizer_free_lines(metrics, top)))
    print(f"{len(metrics)} metrics written to {output / 'metrics.json'}")


def _counts(metrics: dict[str, Any]) -> dict[str, dict[str, int]]:
    """``{node: {"documents", "bytes"}}`` read back from the ``documents/<node>`` and ``bytes/<node>`` keys."""
    nodes = [key[len("documents/") :] for key in metrics if key.startswith("documents/")]
    return {node: {"documents": metrics[f"documents/{node}"], "bytes": metrics[f"bytes/{node}"]} for node in nodes}


if __name__ == "__main__":
    main()
