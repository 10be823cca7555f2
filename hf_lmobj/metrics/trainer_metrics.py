"""``eval_perplexity`` and ``eval_bits_per_byte`` in a stock ``transformers.Trainer``, without keeping logits.

``preprocess_logits_for_metrics`` reduces each batch's logits to one ``[nll_sum, num_tokens]`` row
per sequence before the Trainer gathers them, so evaluation memory is O(rows), not
O(rows x length x vocab). ``compute_metrics`` turns the rows into corpus values; bits per byte
divides by the UTF-8 bytes of the eval texts, which :meth:`LanguageModelingMetrics.from_dataset`
reads from the eval dataset itself (its ``num_bytes`` column, as
:func:`hf_lmobj.corpus.tokenize_corpus` writes it, else its ``text`` column): the Trainer drops
those columns before collation, so the model never sees them.

Usage (any collator: one row per example, rows split at ``max_length``, or packed rows)::

    metrics = LanguageModelingMetrics.from_dataset(texts)  # the dataset with "text" (or "num_bytes")
    trainer = Trainer(..., eval_dataset=tokenized_texts,
                      preprocess_logits_for_metrics=metrics.preprocess_logits_for_metrics,
                      compute_metrics=metrics.compute_metrics)
    trainer.evaluate()  # {"eval_perplexity": ..., "eval_bits_per_byte": ..., ...}

Both ``batch_eval_metrics=False`` (default) and ``True`` work. With ``num_words`` (lm-eval's
:func:`~hf_lmobj.metrics.sums.count_words`, summed over the eval texts) the result has lm-eval's
``word_perplexity`` too (as ``byte_perplexity``, with the bytes, is lm-eval's ``exp(nll / bytes)``);
the NLL is the Trainer's, over the eval rows as collated, not lm-eval's rolling windows.
"""

from __future__ import annotations

import itertools
import math
import warnings
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import datasets
import numpy as np
import torch

from hf_lmobj.checks import check_count, check_counts, check_flag, check_labels
from hf_lmobj.losses.functional import token_nll
from hf_lmobj.metrics.sums import count_words, exp_or_inf


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
        num_rows: when given, ``compute_metrics`` checks it saw exactly that many rows: pass
            ``len(eval_dataset)`` with a collator that makes one row per example (a stock one) to
            catch rows left out (``dataloader_drop_last``) or another dataset. Leave None (the
            default, also of :meth:`from_dataset`) with a collator that splits or packs rows. Only
            this check catches rows left out or metrics built for another dataset.
        dataset_tokens: an explicit opt-in (never set by :meth:`from_dataset`): an upper bound on the
            targets the evaluation may score; ``compute_metrics`` refuses more (metrics built for a
            smaller dataset). Give it only when the collator adds no token (no BOS / EOS, no
            ``<s> ... </s>`` as BART's text infilling adds), else a right evaluation is refused.
        shift_labels: True for causal LMs whose labels align with ``input_ids`` (the model shifts);
            False when labels already align with the logits (seq2seq, masked LM, or
            ``label_names=["shift_labels"]``).
        ignore_index: the label value that is not scored.

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

    num_bytes: int | None = None
    num_rows: int | None = None
    num_words: int | None = None
    shift_labels: bool = True
    ignore_index: int = -100
    dataset_tokens: int | None = None
    _running: list = field(default_factory=lambda: [0.0, 0.0, 0], init=False, repr=False)

    def __post_init__(self) -> None:
        for name in ("num_bytes", "num_rows", "num_words", "dataset_tokens"):
            value = getattr(self, name)
            if value is not None:
                try:
                    setattr(self, name, check_count(value, name, minimum=1))
                except (TypeError, ValueError) as error:
                    raise type(error)(f"{name} must be a positive int or None ({error})") from None

    @classmethod
    def from_dataset(
        cls,
        eval_dataset: Any,
        column: str = "num_bytes",
        words_column: str = "num_words",
        *,
        text_column: str = "text",
        bits_per_byte: bool = True,
        **kwargs: Any,
    ) -> LanguageModelingMetrics:
        """Metrics for ``eval_dataset`` (a ``datasets.Dataset`` or a list of row dicts), its totals read from it.

        * ``num_bytes``: the sum of its ``column`` (``num_bytes``, as
          :func:`hf_lmobj.corpus.tokenize_corpus` writes it), else the UTF-8 bytes of its
          ``text_column``; a dataset with neither (tokenized with the text removed, or packed) is
          refused with the fix: build the metrics from the dataset of texts (rows need not match:
          the Trainer may evaluate its tokenized, split or packed form), or ``bits_per_byte=False``
          for perplexity alone. The bytes must be those of the text the rows hold: tokenize without
          truncation (split long texts with the collator's ``max_length`` or ``pack_dataset``).
        * ``num_words``: the sum of its ``words_column``, else lm-eval's word count of the texts.
        * ``num_rows`` is not set (a collator may split or pack rows); pass
          ``num_rows=len(eval_dataset)`` with a one-row-per-example collator: only then are rows
          left out (``dataloader_drop_last``) or metrics built for another dataset caught.
        * ``dataset_tokens`` is not set: a collator that adds tokens (BOS / EOS, BART's ``<s> </s>``)
          scores more targets than the dataset's ``input_ids`` hold; pass it explicitly to opt in.

        Other keyword arguments (``num_rows``, ``shift_labels``, ``ignore_index``, or a total to use
        as is) go to the constructor.

        Example:
            >>> from datasets import Dataset
            >>> texts = Dataset.from_dict({"text": ["def f(x):", "é"]})
            >>> metrics = LanguageModelingMetrics.from_dataset(texts)  # bytes and words from the text
            >>> metrics.num_bytes, metrics.num_words
            (11, 3)
            >>> LanguageModelingMetrics.from_dataset(Dataset.from_dict({"input_ids": [[5, 6]]}))  # doctest: +ELLIPSIS
            Traceback (most recent call last):
            ...
            ValueError: eval dataset has neither a 'num_bytes' column nor a 'text' column to count the UTF-8 bytes ...
            >>> LanguageModelingMetrics.from_dataset(Dataset.from_dict({"input_ids": [[5, 6]]}), bits_per_byte=False)
            LanguageModelingMetrics(num_bytes=None, num_rows=None, num_words=None, shift_labels=True, ignore_index=-100, dataset_tokens=None)
        """
        bits_per_byte = check_flag(bits_per_byte, "bits_per_byte")
        columns = _columns(eval_dataset)
        if "num_bytes" not in kwargs:
            kwargs["num_bytes"] = _byte_total(eval_dataset, columns, column, text_column) if bits_per_byte else None
        if "num_words" not in kwargs:
            if words_column in columns:
                kwargs["num_words"] = sum(_counts(eval_dataset, words_column))
            elif text_column in columns:
                kwargs["num_words"] = sum(count_words(t) for t in _texts(eval_dataset, text_column))
        return cls(**kwargs)

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
                "from the dataset you evaluate, evaluate every row (no dataloader_drop_last), or leave num_rows=None "
                "with a collator that splits or packs rows"
            )
        if self.dataset_tokens is not None and tokens > self.dataset_tokens:
            raise ValueError(
                f"compute_metrics scored {tokens:.0f} targets but the eval dataset has only {self.dataset_tokens} "
                "tokens: these metrics were built from another (smaller) dataset, or the collator adds tokens (BOS / "
                "EOS); build them from the one you evaluate, or leave dataset_tokens=None"
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


# ------------------------------------------------------------------------- reading the eval dataset
def _columns(dataset: Any) -> frozenset[str]:
    """The column names of a ``datasets.Dataset`` or of a non-empty list of row dicts; anything else refused."""
    fix = "pass a datasets.Dataset (or a list of row dicts), or give num_bytes= to LanguageModelingMetrics(...)"
    if isinstance(dataset, datasets.IterableDataset):
        raise TypeError(
            f"from_dataset needs to read whole columns, which a streaming IterableDataset cannot give; {fix}"
        )
    if isinstance(dataset, Mapping):
        raise TypeError(
            f"from_dataset takes one eval dataset, got a dict (keys {sorted(map(str, dataset))}); the Trainer "
            "evaluates each dataset of a dict separately with the same compute_metrics, so their byte totals would "
            "mix: evaluate one dataset per Trainer.evaluate(eval_dataset=...) call, each with its own metrics"
        )
    if isinstance(dataset, datasets.Dataset):
        names = dataset.column_names
    elif isinstance(dataset, Sequence) and not isinstance(dataset, (str, bytes)):
        if not all(isinstance(row, Mapping) for row in dataset):
            raise TypeError(f"eval dataset rows must be dicts of columns; {fix}")
        names = set.intersection(*(set(row) for row in dataset)) if len(dataset) else set()
    else:
        raise TypeError(f"eval_dataset must be a datasets.Dataset, got {type(dataset).__name__}; {fix}")
    if len(dataset) == 0:
        raise ValueError("the eval dataset has no rows: there is nothing to evaluate")
    return frozenset(names)


def _column(dataset: Any, name: str) -> list:
    return list(dataset[name]) if isinstance(dataset, datasets.Dataset) else [row[name] for row in dataset]


def _counts(dataset: Any, name: str) -> list[int]:
    return check_counts(_column(dataset, name), f"eval dataset column {name!r}", minimum=0)


def _texts(dataset: Any, name: str) -> Iterator[str]:
    """The strings of column ``name``, read 1000 rows at a time (a long eval set is never loaded whole)."""
    batches = (
        (row[name] for row in dataset)
        if not isinstance(dataset, datasets.Dataset)
        else itertools.chain.from_iterable(b[name] for b in dataset.select_columns([name]).iter(batch_size=1000))
    )
    for index, text in enumerate(batches):
        if not isinstance(text, str):
            raise TypeError(f"eval dataset column {name!r} must hold strings, got {type(text).__name__} in row {index}")
        yield text


def _byte_total(dataset: Any, columns: frozenset[str], column: str, text_column: str) -> int:
    """UTF-8 bytes of the eval texts: the ``column`` sum, else counted from ``text_column``."""
    if column in columns:
        total, source = sum(_counts(dataset, column)), f"column {column!r}"
    elif text_column in columns:
        total = sum(len(text.encode("utf-8")) for text in _texts(dataset, text_column))
        source = f"texts of column {text_column!r}"
    else:
        raise ValueError(
            f"eval dataset has neither a {column!r} column nor a {text_column!r} column to count the UTF-8 bytes of "
            f"its texts (columns: {sorted(columns)}); build the metrics from the dataset of texts, before tokenizing "
            "or packing (its rows need not match the evaluated ones), add a "
            f"{column!r} column (len(text.encode('utf-8')) per row; hf_lmobj.corpus.tokenize_corpus writes it), "
            "or pass bits_per_byte=False for perplexity alone"
        )
    if total == 0:
        raise ValueError(
            f"the eval dataset's {source} hold 0 bytes: bits per byte needs text; pass bits_per_byte=False"
        )
    return total
