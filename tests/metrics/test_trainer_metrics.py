"""eval_perplexity / eval_bits_per_byte from a stock transformers.Trainer equal hand-computed corpus values."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from datasets import Dataset
from transformers import (
    DataCollatorForLanguageModeling,
    EvalPrediction,
    Trainer,
    TrainingArguments,
)

from hf_lmobj.corpus import tokenize_corpus
from hf_lmobj.metrics.trainer_metrics import LanguageModelingMetrics


@pytest.fixture(scope="module")
def gpt2(tiny_gpt2):
    return tiny_gpt2


@pytest.fixture(scope="module")
def eval_dataset(corpus, tokenizer):
    """Up to six documents of different lengths (one non-ASCII), tokenized whole with their num_bytes."""
    docs = corpus["validation"]["text"][:6]
    texts = [doc[: 40 + 45 * i] for i, doc in enumerate(docs)] + ["# 中文注释 café\n"]
    return tokenize_corpus(Dataset.from_dict({"text": texts}), tokenizer), texts


def hand_computed(model, dataset, texts) -> tuple[float, float]:
    """Corpus perplexity and bits per byte, one document at a time, no Trainer."""
    nll, tokens = 0.0, 0
    with torch.no_grad():
        for ids in dataset["input_ids"]:
            ids = torch.tensor([ids])
            logits = model(input_ids=ids).logits  # (1, T, V)
            nll += F.cross_entropy(logits[0, :-1], ids[0, 1:], reduction="sum").item()
            tokens += ids.shape[1] - 1
    num_bytes = sum(len(t.encode("utf-8")) for t in texts)
    return math.exp(nll / tokens), nll / math.log(2) / num_bytes


@pytest.mark.parametrize("batch_eval_metrics", [False, True])
def test_stock_trainer_reports_corpus_perplexity_and_bits_per_byte(
    gpt2, tokenizer, eval_dataset, tmp_path, batch_eval_metrics
):
    dataset, texts = eval_dataset
    metrics = LanguageModelingMetrics.from_dataset(dataset)
    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_eval_batch_size=3,
        report_to="none",
        use_cpu=True,
        batch_eval_metrics=batch_eval_metrics,
    )
    trainer = Trainer(
        model=gpt2,
        args=args,
        eval_dataset=dataset,
        data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
        preprocess_logits_for_metrics=metrics.preprocess_logits_for_metrics,
        compute_metrics=metrics.compute_metrics,
    )
    result = trainer.evaluate()
    perplexity, bits_per_byte = hand_computed(gpt2, dataset, texts)
    assert result["eval_perplexity"] == pytest.approx(perplexity, rel=1e-5)
    assert result["eval_bits_per_byte"] == pytest.approx(bits_per_byte, rel=1e-5)
    assert result["eval_num_tokens"] == sum(len(ids) - 1 for ids in dataset["input_ids"])
    # a second evaluation starts from zero (no sums carried over)
    assert trainer.evaluate()["eval_perplexity"] == pytest.approx(perplexity, rel=1e-5)


def test_rows_are_per_sequence_sums_not_logits():
    metrics = LanguageModelingMetrics()
    logits = torch.randn(2, 5, 7)  # (B, T, V)
    labels = torch.tensor([[1, 2, 3, -100, -100], [4, 5, 6, 0, 1]])
    rows = metrics.preprocess_logits_for_metrics((logits, "past"), labels)
    assert rows.shape == (2, 2)
    expected = -torch.log_softmax(logits[0, :2], -1)[torch.arange(2), torch.tensor([2, 3])].sum()
    assert rows[0].tolist() == pytest.approx([expected.item(), 2.0], rel=1e-6)
    assert rows[1, 1].item() == 4.0


def test_mismatched_dataset_and_missing_column_raise(eval_dataset):
    dataset, _ = eval_dataset
    metrics = LanguageModelingMetrics.from_dataset(dataset, num_rows=len(dataset))  # one row per example: checked
    with pytest.raises(ValueError, match=f"saw 2 rows but the eval dataset has {len(dataset)}"):
        metrics.compute_metrics(EvalPrediction(np.ones((2, 2)), None))
    with pytest.raises(ValueError, match="neither a 'num_bytes' column nor a 'text' column"):
        LanguageModelingMetrics.from_dataset(dataset.remove_columns("num_bytes"))
    with pytest.raises(ValueError, match="num_bytes must be a positive int"):
        LanguageModelingMetrics(num_bytes=-4)
    with pytest.raises(ValueError, match=r"\(rows, 2\)"):
        LanguageModelingMetrics().compute_metrics(EvalPrediction(np.ones((2, 5, 7)), None))


def test_lm_eval_units_give_word_and_byte_perplexity():
    texts = ["def f(x):\n    return x", " a  é "]
    dataset = Dataset.from_dict(
        {
            "num_bytes": [len(t.encode("utf-8")) for t in texts],
            "num_words": [len(re.split(r"\s+", t)) for t in texts],
        }
    )
    metrics = LanguageModelingMetrics.from_dataset(dataset)
    assert metrics.num_words == 4 + 4
    out = metrics.compute_metrics(EvalPrediction(np.array([[3.0, 2.0], [5.0, 4.0]]), None))
    num_bytes = sum(dataset["num_bytes"])
    assert out["word_perplexity"] == pytest.approx(math.exp(8.0 / 8))
    assert out["byte_perplexity"] == pytest.approx(math.exp(8.0 / num_bytes))
    assert out["byte_perplexity"] == pytest.approx(2 ** out["bits_per_byte"])
    assert "word_perplexity" not in LanguageModelingMetrics(num_bytes=3).compute_metrics(
        EvalPrediction(np.array([[3.0, 2.0]]), None)
    )
