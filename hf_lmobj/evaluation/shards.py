"""Texts scored by several processes: each scores its share into per-document rows, any process turns the gathered
rows into the corpus figures, so any number of processes gives the figures of one.

A process's share is every ``num_processes``-th text from its ``process_index`` (``state``: an
``accelerate.PartialState``, or anything with ``process_index``, ``num_processes``, ``device`` and
``is_main_process``); each row starts with the text's index in the evaluated list (the document id), so rows
gathered in any order are sorted back.

Example:
    >>> figures = corpus_figures([(1, 2.0, 2, 4, 1), (0, 1.0, 1, 2, 1)], "test")
    >>> figures["test_tokens"], figures["test_bytes"], figures["texts_scored"]
    (3, 6, 2)
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from transformers import AutoModelForCausalLM

from hf_lmobj.metrics import load as load_metric
from hf_lmobj.metrics.byte_alignment import compare_per_byte
from hf_lmobj.metrics.scoring import score_texts


def score_shard(texts: Sequence[str], state: Any, model_path: str, tokenizer: Any, *, max_length: int | None,
                stride: int | None, add_start_token: bool, batch_size: int) -> list[tuple[int, float, int, int, int]]:  # fmt: skip
    """``(index, nll, tokens, bytes, words)`` of this process's texts under the causal LM at ``model_path`` and
    ``tokenizer`` (:func:`hf_lmobj.metrics.scoring.score_texts`' windows; a tqdm bar on the main process)."""
    indices = list(range(state.process_index, len(texts), state.num_processes))
    if not indices:
        return []
    model = AutoModelForCausalLM.from_pretrained(model_path).to(state.device)
    scores = score_texts(
        model,
        tokenizer,
        [texts[i] for i in indices],
        max_length=max_length,
        stride=stride,
        add_start_token=add_start_token,
        batch_size=batch_size,
        progress=state.is_main_process,
    )
    return [(i, s.nll, s.num_tokens, s.num_bytes, s.num_words) for i, s in zip(indices, scores)]


def byte_gap_shard(texts: Sequence[str], state: Any, model_path: str, tokenizer: Any, compare_model: str,
                   compare_tokenizer: Any, *, max_length: int | None, stride: int | None,
                   batch_size: int) -> list[tuple[int, float, int]]:  # fmt: skip
    """``(index, compare minus model NLL in nats, bytes)`` of this process's texts, aligned per byte
    (:func:`hf_lmobj.metrics.byte_alignment.compare_per_byte`: every token scored, a start token first)."""
    indices = list(range(state.process_index, len(texts), state.num_processes))
    if not indices:
        return []
    result = compare_per_byte([texts[i] for i in indices], model_path, tokenizer, compare_model,
                              compare_tokenizer, top_k=0, return_per_byte=True, max_length=max_length,
                              stride=stride, batch_size=batch_size, device=state.device,
                              progress=state.is_main_process)  # fmt: skip
    pairs = zip(indices, result["per_byte_a"], result["per_byte_b"])
    return [(i, math.fsum(np.concatenate([b, -a]).tolist()), len(a)) for i, a, b in pairs]


def corpus_figures(rows: list[tuple], split: str) -> dict[str, float]:
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
