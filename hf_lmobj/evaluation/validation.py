"""Held-out text scored into per-document sums, and every figure read from them: corpus, per domain, intervals.

:func:`validation_sums` scores raw texts (every token once, strided windows) into
:class:`~hf_lmobj.metrics.slices.DocumentSums` (one domain per text); :func:`validation_figures` gives the
``validation_*`` figures of a pre-training run's held-out text, its :func:`sliced_figures` (per domain and tag
level, micro and macro, bootstrap intervals) and its loss by position (:mod:`.loss_positions`).

Example:
    >>> from hf_lmobj.metrics.slices import DocumentSums
    >>> sums = DocumentSums(nll=[2.0, 4.0], tokens=[2, 2], bytes=[4, 4], words=[1, 1], doc_id=[0, 1],
    ...                     domain=["code", "wiki"])
    >>> round(sliced_figures(sums, bootstrap_samples=0)["bits_per_byte/micro"], 4)
    1.082
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hf_lmobj.metrics.scoring import score_texts
from hf_lmobj.metrics.slices import DocumentSums, domain_figures
from hf_lmobj.metrics.sums import (
    bits_per_byte_from_sums,
    byte_perplexity_from_sums,
    perplexity_from_sums,
    word_perplexity_from_sums,
)
from hf_lmobj.metrics.uncertainty import bootstrap_intervals, interval_keys

from .loss_positions import position_figures


def validation_figures(model, tokenizer, texts: Sequence[str], *, max_length: int, stride: int, batch_size: int,
                       bootstrap_samples: int, progress: bool,
                       domains: Sequence[str] | None = None) -> dict[str, float]:  # fmt: skip
    """Corpus perplexity and bits per byte of raw texts (every token scored once, windows of ``max_length`` tokens
    moving by ``stride``, a tqdm bar when ``progress``), lm-eval's byte and word perplexity, and the same figures
    per domain (micro and macro, ``bootstrap_samples`` document-bootstrap intervals; 0 = none):
    :func:`validation_sums` then :func:`sliced_figures`, then the loss by position.

    These ``validation_*`` figures are the ones the model-index and ``.eval_results`` keep (the whole
    held-out text, each token with its context), over ``Trainer.evaluate``'s ``eval_*`` of the same
    metric (:func:`hf_lmobj.cards.split_metrics`). A text with no token to score (empty, or a lone token
    without a start token) is skipped and counted (``validation_skipped_texts``), its bytes left out too;
    no text to score at all is a ``ValueError``.
    """
    sums, scores, skipped = validation_sums(model, tokenizer, texts, max_length=max_length, stride=stride,
                                            batch_size=batch_size, progress=progress, domains=domains)  # fmt: skip
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
    figures.update(sliced_figures(sums, bootstrap_samples))
    figures.update(position_figures(scores))
    return figures


def validation_sums(model, tokenizer, texts: Sequence[str], *, max_length: int, stride: int, batch_size: int,
                    progress: bool, domains: Sequence[str] | None = None) -> tuple[DocumentSums, list[Any], int]:  # fmt: skip
    """``(DocumentSums, per-token scores, texts skipped)`` of the validation texts (``domains``: one per text)."""
    if not texts:
        raise ValueError("there is no validation text to score; check the held-out split of the data")
    domains = list(domains) if domains is not None else ["validation"] * len(texts)
    if len(domains) != len(texts):
        raise ValueError(f"domains has {len(domains)} entries for {len(texts)} texts; give one domain per text")
    scores = score_texts(model, tokenizer, texts, max_length=max_length, stride=stride,
                         batch_size=batch_size, progress=progress, return_token_nll=True)  # fmt: skip
    kept = [i for i, score in enumerate(scores) if score.num_tokens > 0]
    if not kept:
        raise ValueError(f"none of the {len(texts)} validation texts has a token to score (empty texts?)")
    sums = DocumentSums.from_scores([scores[i] for i in kept], doc_id=kept, domain=[domains[i] for i in kept])
    return sums, [scores[i] for i in kept], len(scores) - len(kept)


def sliced_figures(sums: DocumentSums, bootstrap_samples: int) -> dict[str, float]:
    """Bits per byte, perplexity, byte and word perplexity per domain and tag level, micro and macro, with
    document-level bootstrap intervals (``bootstrap_samples`` resamples, percentile method) when asked."""
    figures = domain_figures(sums)
    if bootstrap_samples:
        figures.update(interval_keys(bootstrap_intervals(sums, bootstrap_samples, seed=0)))
    return figures
