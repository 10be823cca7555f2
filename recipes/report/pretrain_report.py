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
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from hf_lmobj.baselines.compression import compression_bits_per_byte
from hf_lmobj.baselines.ngram import KneserNeyLM
from hf_lmobj.cards.provenance import check_provenance
from hf_lmobj.cards.writer import write_model_card
from hf_lmobj.data.contamination import ContaminationIndex
from hf_lmobj.data.random_access import DatasetSource
from hf_lmobj.generation.sampling import encode_prompts, sampling_generate_kwargs
from hf_lmobj.metrics.position_plot import plot_loss_by_position
from hf_lmobj.metrics.positions import loss_by_position, position_buckets
from hf_lmobj.metrics.scoring import encode_texts, score_texts
from hf_lmobj.metrics.slices import DocumentSums, domain_figures
from hf_lmobj.metrics.sums import (
    bits_per_byte_from_sums,
    byte_perplexity_from_sums,
    perplexity_from_sums,
    word_perplexity_from_sums,
)
from hf_lmobj.metrics.uncertainty import bootstrap_intervals, interval_keys
from hf_lmobj.models.pretraining import auxiliary_hyperparameters
from hf_lmobj.objectives import get_objective

from ..runtime.after_training import write_metrics
from ..runtime.phase_timer import PhaseTimer
from .infilling import print_fim_comparison
from .report_arguments import ReportArguments

if TYPE_CHECKING:
    from ..runtime.pretrain_run import Run


def baseline_key(name: str) -> str:
    """The metrics.json key of a baseline's bits per byte (``xz -9e`` -> ``baseline_xz_9e_bits_per_byte``)."""
    return "baseline_" + re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_") + "_bits_per_byte"


def score_validation_texts(
    model, tokenizer, texts, data_args, report_args, progress: bool, domains: list[str] | None = None
) -> dict[str, float]:
    """Corpus perplexity and bits per byte of raw texts (every token scored once, strided windows, a tqdm bar),
    lm-eval's byte and word perplexity, and the same figures per domain (micro and macro, bootstrap intervals):
    :func:`validation_sums` then :func:`sliced_figures`.

    These ``validation_*`` figures are the ones the model-index and ``.eval_results`` keep (the whole
    held-out text, each token with its context), over ``Trainer.evaluate``'s ``eval_*`` of the same
    metric (:func:`hf_lmobj.cards.split_metrics`). A text with no token to score (empty, or a lone token
    without a start token) is skipped and counted (``validation_skipped_texts``), its bytes left out too;
    no text to score at all is a ``ValueError``.
    """
    sums, scores, skipped = validation_sums(model, tokenizer, texts, data_args, report_args, progress, domains)
    figures = {
        "validation_perplexity": perplexity_from_sums(sums.nll, sums.tokens),
        "validation_bits_per_byte": bits_per_byte_from_sums(sums.nll, sums.bytes),
        "validation_byte_perplexity": byte_perplexity_from_sums(sums.nll, sums.bytes),
        "validation_tokens": sum(sums.tokens),
        "validation_bytes": sum(sums.bytes),
        **({"validation_skipped_texts": skipped} if skipped else {}),
    }
    if sums.has_words:
        figures["validation_word_perplexity"] = word_perplexity_from_sums(sums.nll, sums.words)
    figures.update(sliced_figures(sums, report_args))
    figures.update(_position_figures(scores))
    return figures


def validation_sums(model, tokenizer, texts, data_args, report_args, progress: bool, domains=None):
    """``(DocumentSums, per-token scores, texts skipped)`` of the validation texts (``domains``: one per text)."""
    if not texts:
        raise ValueError("there is no validation text to score; check the held-out split of the data")
    domains = list(domains) if domains is not None else ["validation"] * len(texts)
    if len(domains) != len(texts):
        raise ValueError(f"domains has {len(domains)} entries for {len(texts)} texts; give one domain per text")
    window = report_args.score_max_length or data_args.max_length
    stride = report_args.score_stride or max(window // 2, 1)
    scores = score_texts(model, tokenizer, texts, max_length=window, stride=stride,
                         batch_size=report_args.score_batch_size, progress=progress, return_token_nll=True)  # fmt: skip
    kept = [i for i, score in enumerate(scores) if score.num_tokens > 0]
    if not kept:
        raise ValueError(f"none of the {len(texts)} validation texts has a token to score (empty texts?)")
    sums = DocumentSums.from_scores([scores[i] for i in kept], doc_id=kept, domain=[domains[i] for i in kept])
    return sums, [scores[i] for i in kept], len(scores) - len(kept)


def sliced_figures(sums: DocumentSums, report_args: ReportArguments) -> dict[str, float]:
    """Bits per byte, perplexity, byte and word perplexity per domain and tag level, micro and macro, with
    document-level bootstrap intervals (``bootstrap_samples`` resamples, percentile method) when asked."""
    figures = domain_figures(sums)
    if report_args.bootstrap_samples:
        figures.update(interval_keys(bootstrap_intervals(sums, report_args.bootstrap_samples, seed=0)))
    return figures


def _position_figures(scores) -> dict[str, float]:
    """Mean NLL (nats per target) per log-spaced position bucket: ``loss_by_position/<start>-<stop>``."""
    longest = max(len(score.token_nll) for score in scores)
    result = loss_by_position(scores, position_buckets(longest + 1))
    figures = {}
    for b in (b for b in result["buckets"] if b["count"]):
        figures[f"loss_by_position/{b['start']}-{b['stop']}"] = b["mean"]
        figures[f"loss_by_position/{b['start']}-{b['stop']}_targets"] = b["count"]
    return figures


def write_position_plot(metrics: dict[str, float], output: Path) -> str | None:
    """``loss_by_position.png`` in ``output`` from the ``loss_by_position/<start>-<stop>`` figures; its name."""
    buckets = []
    for key, mean in metrics.items():
        if key.startswith("loss_by_position/") and not key.endswith("_targets"):
            start, stop = (int(edge) for edge in key.split("/", 1)[1].split("-"))
            buckets.append({"start": start, "stop": stop, "mean": mean, "count": metrics[f"{key}_targets"]})
    if not buckets:
        return None
    plot_loss_by_position({"buckets": buckets}, output / "loss_by_position.png", title="validation loss by position")
    return "loss_by_position.png"


def contamination_figures(run: Run, report_args: ReportArguments, timer: PhaseTimer) -> dict[str, float]:
    """``contamination/rate`` (and per domain) of the validation text against the run's training tokens that the
    report's statistics read (all of an in-memory or token-store source, the first ``report_sample_tokens`` of a
    stream or mixture): token 13-grams, a document contaminated at half of them seen (hf_lmobj.data.contamination)."""
    if not report_args.contamination_scan:
        return {}
    with timer.phase("contamination"):
        index = ContaminationIndex.build(run.validation_texts, run.data.validation_domains, run.tokenizer,
                                         n=report_args.contamination_ngram)  # fmt: skip
        found = index.scan(DatasetSource(run.data.train_documents)).as_metrics()
    return {key: value for key, value in found.items() if isinstance(value, (int, float)) and value is not None}


def baseline_bits_per_byte(data, tokenizer, texts, report_args, timer: PhaseTimer) -> dict[str, float]:
    """Bits per byte of the same validation texts under Kneser-Ney n-grams (same training tokens) and compressors.

    Keys are display names (``"Kneser-Ney 5-gram"``, ``"xz -9e"``), in the order they are printed. A phase
    switched off (``ngram_orders`` empty, ``compressor_baselines`` false) is not run and has no key:
    :func:`baselines_not_run` says so in the card and the printed report.
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
    if report_args.compressor_baselines:
        with timer.phase("compressors"):
            out.update(compression_bits_per_byte(texts))
    return out


def baselines_not_run(report_args: ReportArguments, baselines: dict[str, float]) -> dict[str, str]:
    """The baselines a causal report did not run, each with why (shown in the card and the printed report).

    Example:
        >>> baselines_not_run(ReportArguments(ngram_orders=[], compressor_baselines=False), {})
        {'Kneser-Ney n-gram': 'not run (ngram_orders none)', 'compressors': 'not run (compressor_baselines false)'}
    """
    out = {}
    if not any(name.startswith("Kneser-Ney") for name in baselines):
        why = "ngram_orders none" if not report_args.ngram_orders else "no in-memory training tokens to count"
        out["Kneser-Ney n-gram"] = f"not run ({why})"
    if not report_args.compressor_baselines:
        out["compressors"] = "not run (compressor_baselines false)"
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
    not_run = (
        baselines_not_run(run.args.report, baselines) if get_objective(run.args.data.objective).scores_text else {}
    )
    plot = write_position_plot(metrics, output)
    _write_card(run, metrics, output, not_run, plot)
    print(f"\n== {run.args.data.objective} run written to {output}")
    for key, value in metrics.items():
        if not key.startswith("baseline_") and "/" not in key:  # the sliced figures: a table below
            print(f"  {key:32s} {value:.4f}" if isinstance(value, float) else f"  {key:32s} {value}")
    for line in data_lines(run.provenance):
        print(f"  {line}")
    if not get_objective(run.args.data.objective).scores_text:
        loss_key = "eval_mlm_loss" if "eval_mlm_loss" in metrics else "eval_loss"  # ELECTRA: the generator's MLM loss
        print(
            f"  {loss_key} {metrics[loss_key]:.3f} vs unigram entropy of the training tokens "
            f"{metrics['train_unigram_entropy']:.3f} nats/token (a model that ignores context)"
        )
    else:
        _print_comparison(metrics, baselines, not_run)
        for line in domain_lines(metrics):
            print(f"  {line}")
        print_fim_comparison(metrics, run.args.fim.fim_baseline_metrics)
    _print_time(run, metrics)
    if run.sample is not None:
        print(f"  sample ({run.args.report.sample_prompt!r}, top_p={run.args.report.sample_top_p}):")
        print(run.sample)


def _write_card(run: Run, metrics: dict, output: Path, not_run: dict[str, str], plot: str | None = None) -> None:
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
        provenance=run.provenance,
        base_model=run.args.model.model_name_or_path,
        log_history=trainer.state.log_history,
        extra={
            "launch command": " ".join(sys.argv),
            **{f"{name} baseline": why for name, why in not_run.items()},
            **({"loss by position": f"![validation loss by position]({plot})"} if plot else {}),
        },  # fmt: skip
    )


def data_lines(provenance: dict) -> list[str]:
    """The report's lines on the data, printed before the bits-per-byte table: the validation text (source,
    documents, bytes, how they were selected, fingerprint) and the skipped documents, when any.

    Example:
        >>> record = {"training": [{"name": "jsonl", "location": "/d/jsonl", "kind": "local files", "weight": 1.0}],
        ...     "validation": {"source": "jsonl", "location": "/d/jsonl", "documents": 3, "bytes": 120,
        ...                    "fingerprint": "0123456789abcdef", "selection": "held out by content hash"},
        ...     "tokenizer": {"origin": "given", "vocab_size": 512, "fingerprint": "fedcba9876543210"},
        ...     "skipped_documents": {"training": {"empty": 1, "whitespace": 0, "one_token": 0},
        ...                           "validation": {"empty": 0, "whitespace": 0, "one_token": 0}}}
        >>> for line in data_lines(record):  # doctest: +ELLIPSIS
        ...     print(line)
        validation text: 3 documents (120 bytes) of jsonl (/d/jsonl), held out by content hash; text fingerprint ...
        skipped documents (nothing to learn from): training 1 empty; validation none
    """
    record = check_provenance(provenance)
    lines = [f"validation text: {record.validation.sentence()}"]
    skipped = record.skipped_line()
    if skipped is not None:
        lines.append(f"skipped documents (nothing to learn from): {skipped}")
    return lines


def _print_comparison(metrics: dict[str, float], baselines: dict[str, float], not_run: dict[str, str]) -> None:
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
    for name, why in not_run.items():
        print(f"    {name:20s} {why}")


def domain_lines(metrics: dict[str, float]) -> list[str]:
    """The validation figures per domain (bits per byte with its interval, perplexity, contamination rate), micro and
    macro last, then the loss by position.

    Example:
        >>> domain_lines({"bits_per_byte/json": 1.5, "perplexity/json": 9.0, "bits_per_byte/micro": 1.5,
        ...               "perplexity/micro": 9.0, "contamination/json/rate": 0.0})[1].split()
        ['json', '1.500', '9.00', '0.000']
    """
    domains = [key.split("/", 1)[1] for key in metrics if key.startswith("bits_per_byte/") and "_ci_" not in key]
    if not domains:
        return []
    lines = [f"{'domain':24s} {'bits/byte':>9s} {'95% interval':>17s} {'perplexity':>10s} {'contaminated':>12s}"]
    for domain in sorted(domains, key=lambda d: (d in ("micro", "macro"), d)):
        low, high = metrics.get(f"bits_per_byte/{domain}_ci_low"), metrics.get(f"bits_per_byte/{domain}_ci_high")
        interval = f"[{low:.3f}, {high:.3f}]" if low is not None else ""
        rate = metrics.get("contamination/rate" if domain in ("micro", "macro") else f"contamination/{domain}/rate")
        rate_text = f"{rate:.3f}" if rate is not None and domain != "macro" else ""
        lines.append(f"{domain:24s} {metrics[f'bits_per_byte/{domain}']:9.3f} {interval:>17s} "
                     f"{metrics.get(f'perplexity/{domain}', float('nan')):10.2f} {rate_text:>12s}".rstrip())  # fmt: skip
    positions = {
        k.split("/", 1)[1]: v for k, v in metrics.items() if k.startswith("loss_by_position/") and "_targets" not in k
    }
    if positions:
        lines.append("loss by position (nats per token): " + ", ".join(f"{k} {v:.2f}" for k, v in positions.items()))
    return lines


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
