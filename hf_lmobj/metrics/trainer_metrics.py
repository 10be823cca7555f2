"""``eval_perplexity`` and ``eval_bits_per_byte`` in a stock ``transformers.Trainer``, without keeping logits.

``preprocess_logits_for_metrics`` reduces each batch's logits to one ``[nll_sum, num_tokens]`` row
per sequence before the Trainer gathers them, so evaluation memory is O(rows), not
O(rows x length x vocab). ``compute_metrics`` turns the rows into corpus values; bits per byte
divides by the ``num_bytes`` column of the eval dataset (:func:`hf_lmobj.corpus.tokenize_corpus`
writes it), read here from the dataset itself: the Trainer drops that column before collation, so
the model never sees it.

Usage::

    metrics = LanguageModelingMetrics.from_dataset(eval_dataset)
    trainer = Trainer(..., eval_dataset=eval_dataset,
                      preprocess_logits_for_metrics=metrics.preprocess_logits_for_metrics,
                      compute_metrics=metrics.compute_metrics)
    trainer.evaluate()  # {"eval_perplexity": ..., "eval_bits_per_byte": ..., ...}

Both ``batch_eval_metrics=False`` (default) and ``True`` work. With ``num_words`` (lm-eval's
:func:`~hf_lmobj.metrics.sums.count_words`, summed over the eval texts) the result has lm-eval's
``word_perplexity`` too (as ``byte_perplexity``, with the bytes, is lm-eval's ``exp(nll / bytes)``);
the NLL is the Trainer's, over the eval rows as collated, not lm-eval's rolling windows.

Example:
    >>> import torch
    >>> from transformers import EvalPrediction
    >>> metrics = LanguageModelingMetrics(num_bytes=6)
    >>> logits = torch.zeros(1, 3, 4)  # uniform over 4 tokens: ln 4 nats per token
    >>> rows = metrics.preprocess_logits_for_metrics(logits, torch.tensor([[0, 1, 2]]))
    >>> rows.tolist()  # two targets (the labels shift by one)
    [[2.7725887298583984, 2.0]]
    >>> {k: round(v, 4) for k, v in metrics.compute_metrics(EvalPrediction(rows.numpy(), None)).items()}
    {'perplexity': 4.0, 'nll_per_token': 1.3863, 'num_tokens': 2.0, 'bits_per_byte': 0.6667, 'byte_perplexity': 1.5874}
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass, field

import numpy as np
import torch

from hf_lmobj.losses.functional import token_nll
from hf_lmobj.metrics.sums import exp_or_inf
from hf_lmobj.validation import check_count, check_counts, check_labels

__all__ = ["mean_nll_and_perplexity", "LanguageModelingMetrics"]


def mean_nll_and_perplexity(nll: float, num_targets: float, what: str = "the eval set") -> tuple[float, float]:
    """Corpus ``(nll / num_targets, exp of that)``; inf when the exponential overflows.

    An eval set without a single target has no loss and no perplexity: ``(nan, nan)`` and a
    warning, never 0.0 (a perfect score ``metric_for_best_model="eval_loss"`` would pick).

    Example:
        >>> mean_nll_and_perplexity(2.0, 2), mean_nll_and_perplexity(1e6, 1)
        ((1.0, 2.718281828459045), (1000000.0, inf))
    """
    if num_targets <= 0:
        warnings.warn(
            f"{what} has no target (every label is -100, or no batch carried labels): loss and perplexity are "
            "reported as nan; check the eval collator and dataset",
            RuntimeWarning,
            stacklevel=2,
        )
        return math.nan, math.nan
    mean = nll / num_targets
    return mean, exp_or_inf(mean)


@dataclass
class LanguageModelingMetrics:
    """The ``preprocess_logits_for_metrics`` / ``compute_metrics`` pair for perplexity and bits per byte.

    Args:
        num_bytes: total UTF-8 bytes of the eval texts (None: report no bits / byte perplexity).
        num_words: total lm-eval words of the eval texts (None: report no word perplexity).
        num_rows: rows of the eval dataset; when given, ``compute_metrics`` checks it saw exactly as
            many (catches metrics built for another dataset). Leave None with a packing collator.
        shift_labels: True for causal LMs whose labels align with ``input_ids`` (the model shifts);
            False when labels already align with the logits (seq2seq, masked LM, or
            ``label_names=["shift_labels"]``).
        ignore_index: the label value that is not scored.
    """

    num_bytes: int | None = None
    num_rows: int | None = None
    num_words: int | None = None
    shift_labels: bool = True
    ignore_index: int = -100
    _running: list = field(default_factory=lambda: [0.0, 0.0, 0], init=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("num_bytes", "num_rows", "num_words"):
            value = getattr(self, name)
            if value is not None:
                try:
                    setattr(self, name, check_count(value, name, minimum=1))
                except (TypeError, ValueError) as error:
                    raise type(error)(f"{name} must be a positive int or None ({error})") from None

    @classmethod
    def from_dataset(
        cls, eval_dataset, column: str = "num_bytes", words_column: str = "num_words", **kwargs
    ) -> LanguageModelingMetrics:
        """Metrics whose byte total is the sum of ``eval_dataset[column]`` (and ``num_rows`` its length).

        When the dataset has ``words_column`` (per-text :func:`~hf_lmobj.metrics.sums.count_words`),
        its sum is ``num_words``.
        """
        if column not in getattr(eval_dataset, "column_names", ()):
            raise ValueError(
                f"eval dataset has no {column!r} column; build it with hf_lmobj.corpus.tokenize_corpus "
                f"or add len(text.encode('utf-8')) per row"
            )
        counts = check_counts(eval_dataset[column], f"eval dataset column {column!r}", minimum=0)
        kwargs.setdefault("num_rows", len(counts))
        if words_column in eval_dataset.column_names and "num_words" not in kwargs:
            words = check_counts(eval_dataset[words_column], f"eval dataset column {words_column!r}", minimum=0)
            kwargs["num_words"] = sum(words)
        return cls(num_bytes=sum(counts), **kwargs)

    def preprocess_logits_for_metrics(self, logits, labels) -> torch.Tensor:
        """Reduce ``(B, T, V)`` logits and ``(B, T)`` labels to ``(B, 2)`` rows of ``[nll_sum, num_tokens]``."""
        if isinstance(logits, (tuple, list)):  # (logits, past_key_values, ...) from some models
            logits = logits[0]
        if isinstance(labels, (tuple, list)):
            labels = labels[0]
        if labels is None:
            raise ValueError("the eval batches carry no labels; add them (e.g. a causal LM data collator)")
        labels = check_labels(labels, "labels", logits.shape[-1], self.ignore_index, shape=logits.shape[:-1])
        if self.shift_labels:
            logits, labels = logits[:, :-1], labels[:, 1:]  # (B, T-1, V), (B, T-1)
        labels = labels.to(logits.device)
        nll = token_nll(logits, labels, self.ignore_index)  # (B, T-1), 0 where ignored
        counts = (labels != self.ignore_index).sum(dim=1).float()  # (B,)
        return torch.stack([nll.sum(dim=1), counts], dim=1)  # (B, 2)

    def compute_metrics(self, eval_pred, compute_result: bool | None = None) -> dict[str, float]:
        """Corpus perplexity (and bits per byte) from the gathered ``[nll_sum, num_tokens]`` rows.

        With ``batch_eval_metrics=True`` the Trainer calls this per batch with ``compute_result``;
        sums are kept until the last batch, then reset.
        """
        rows = eval_pred.predictions
        rows = rows.detach().cpu().double().numpy() if isinstance(rows, torch.Tensor) else np.asarray(rows)
        if rows.ndim != 2 or rows.shape[1] != 2:
            raise ValueError(
                f"expected (rows, 2) [nll_sum, num_tokens] predictions, got shape {rows.shape}; pass "
                "preprocess_logits_for_metrics=metrics.preprocess_logits_for_metrics to the Trainer"
            )
        self._running[0] += math.fsum(rows[:, 0].tolist())
        self._running[1] += float(rows[:, 1].sum())
        self._running[2] += rows.shape[0]
        if compute_result is False:
            return {}
        nll, tokens, seen = self._running
        self._running = [0.0, 0.0, 0]
        return self._finish(nll, tokens, seen)

    def _finish(self, nll: float, tokens: float, seen: int) -> dict[str, float]:
        if self.num_rows is not None and seen != self.num_rows:
            raise ValueError(
                f"compute_metrics saw {seen} rows but the eval dataset has {self.num_rows}; build the metrics "
                "from the dataset you evaluate (or num_rows=None with a packing collator)"
            )
        if math.isnan(nll):
            raise ValueError("the eval NLL is NaN; check the model's logits")
        mean, perplexity = mean_nll_and_perplexity(nll, tokens)
        out = {"perplexity": perplexity, "nll_per_token": mean, "num_tokens": tokens}
        if self.num_bytes is not None:
            out["bits_per_byte"] = nll / math.log(2) / self.num_bytes if tokens > 0 else math.nan
            out["byte_perplexity"] = exp_or_inf(nll / self.num_bytes) if tokens > 0 else math.nan
        if self.num_words is not None:
            out["word_perplexity"] = exp_or_inf(nll / self.num_words) if tokens > 0 else math.nan
        return out
