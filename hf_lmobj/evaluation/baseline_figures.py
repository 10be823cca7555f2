"""What a model's bits per byte is read against: Kneser-Ney n-grams of the same training tokens and compressors,
on the same held-out texts; their ``metrics.json`` keys and the baselines a report did not run.

``report_args`` is any object with the report fields these read (``recipes/report/report_arguments.py``'s
``ReportArguments``): ``ngram_orders`` (empty: no n-gram) and ``compressor_baselines`` (false: no compressor).

Example:
    >>> baseline_key("Kneser-Ney 5-gram"), baseline_key("xz -9e")
    ('baseline_kneser_ney_5_gram_bits_per_byte', 'baseline_xz_9e_bits_per_byte')
"""

from __future__ import annotations

import re
from typing import Any

from hf_lmobj.baselines.compression import compression_bits_per_byte
from hf_lmobj.baselines.ngram import KneserNeyLM
from hf_lmobj.metrics.scoring import encode_texts
from hf_lmobj.metrics.sums import bits_per_byte_from_sums


def baseline_key(name: str) -> str:
    """The metrics.json key of a baseline's bits per byte (``xz -9e`` -> ``baseline_xz_9e_bits_per_byte``)."""
    return "baseline_" + re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_") + "_bits_per_byte"


def baseline_bits_per_byte(data: Any, tokenizer, texts, report_args: Any, timer: Any) -> dict[str, float]:
    """Bits per byte of the same validation texts under Kneser-Ney n-grams (same training tokens) and compressors.

    ``data``: the run's data (:func:`hf_lmobj.data.prepare_run.prepare_run_data`'s), whose ``train_documents``
    (``input_ids`` rows, or None) the n-grams count; ``timer``: anything with a ``phase(name)`` context manager.
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


def baselines_not_run(report_args: Any, baselines: dict[str, float]) -> dict[str, str]:
    """The baselines a causal report did not run, each with why (shown in the card and the printed report).

    Example:
        >>> from types import SimpleNamespace
        >>> baselines_not_run(SimpleNamespace(ngram_orders=[], compressor_baselines=False), {})
        {'Kneser-Ney n-gram': 'not run (ngram_orders none)', 'compressors': 'not run (compressor_baselines false)'}
    """
    out = {}
    if not any(name.startswith("Kneser-Ney") for name in baselines):
        why = "ngram_orders none" if not report_args.ngram_orders else "no in-memory training tokens to count"
        out["Kneser-Ney n-gram"] = f"not run ({why})"
    if not report_args.compressor_baselines:
        out["compressors"] = "not run (compressor_baselines false)"
    return out
