"""``LanguageModelingMetrics.from_dataset`` in a stock ``transformers.Trainer`` with no undocumented argument,
and hostile eval datasets / totals.

Issue 34's example: the documented path (``from_dataset(eval_dataset)`` + a stock ``Trainer``) needed a
``num_bytes`` column nobody had (a dataset tokenized the usual way has dropped its text) and then
``num_rows=None`` as soon as the collator split documents into rows. Now the bytes come from the
``text`` column when there is no ``num_bytes`` one, rows may be split or packed, and a dataset with
neither column is refused with the fix named.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from datasets import Dataset
from transformers import DataCollatorForLanguageModeling, EvalPrediction, Trainer, TrainingArguments

from hf_lmobj.collators.causal import DataCollatorForCausalLM
from hf_lmobj.collators.text_infilling import DataCollatorForTextInfilling
from hf_lmobj.corpus import tokenize_corpus
from hf_lmobj.metrics.sums import count_words
from hf_lmobj.metrics.trainer_metrics import LanguageModelingMetrics


@pytest.fixture(scope="module")
def texts(corpus):
    """Seven short documents (one non-ASCII), at most ~200 tokens each for the 256-position GPT-2."""
    docs = corpus["train"]["text"][:6]
    return [doc[: 60 + 50 * i] for i, doc in enumerate(docs)] + ["# 中文注释 café\n"]


def _args(tmp_path, **extra) -> TrainingArguments:
    return TrainingArguments(output_dir=str(tmp_path), per_device_eval_batch_size=3, report_to="none", use_cpu=True,
                             disable_tqdm=True, **extra)  # fmt: skip


def _evaluate(model, dataset, collator, metrics, tmp_path, **extra) -> dict[str, float]:
    trainer = Trainer(model=model, args=_args(tmp_path, **extra), eval_dataset=dataset, data_collator=collator,
                      preprocess_logits_for_metrics=metrics.preprocess_logits_for_metrics,
                      compute_metrics=metrics.compute_metrics)  # fmt: skip
    return trainer.evaluate()


def _summed_nll(model, rows: list[dict[str, torch.Tensor]]) -> tuple[float, int]:
    """NLL (nats) and target count of collated rows, by hand (labels shifted by one, -100 not scored)."""
    nll, count = 0.0, 0
    with torch.no_grad():
        for batch in rows:
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
            targets = batch["labels"][:, 1:]
            nll += F.cross_entropy(logits[:, :-1].flatten(0, 1), targets.flatten(), reduction="sum").item()
            count += int((targets != -100).sum())
    return nll, count


def test_issue_stock_trainer_with_a_tokenized_dataset_gets_bytes_from_the_texts(tiny_gpt2, tokenizer, texts, tmp_path):
    raw = Dataset.from_dict({"text": texts})
    tokenized = raw.map(lambda b: tokenizer(b["text"]), batched=True, remove_columns=["text"])
    metrics = LanguageModelingMetrics.from_dataset(raw)  # no num_bytes column, no extra argument
    result = _evaluate(tiny_gpt2, tokenized, DataCollatorForLanguageModeling(tokenizer, mlm=False), metrics, tmp_path)
    rows = [{k: torch.tensor([v]) for k, v in r.items()} for r in tokenized]
    for row in rows:
        row["labels"] = row["input_ids"]
    nll, count = _summed_nll(tiny_gpt2, rows)
    num_bytes = sum(len(t.encode("utf-8")) for t in texts)
    assert metrics.num_bytes == num_bytes and metrics.num_words == sum(count_words(t) for t in texts)
    assert result["eval_num_tokens"] == count
    assert result["eval_perplexity"] == pytest.approx(math.exp(nll / count), rel=1e-5)
    assert result["eval_bits_per_byte"] == pytest.approx(nll / math.log(2) / num_bytes, rel=1e-5)


def test_issue_a_collator_that_splits_documents_needs_no_num_rows(tiny_gpt2, tokenizer, texts, tmp_path):
    dataset = tokenize_corpus(Dataset.from_dict({"text": texts}), tokenizer)  # input_ids + num_bytes
    collator = DataCollatorForCausalLM(tokenizer, max_length=32)
    rows = [collator([feature]) for feature in dataset.remove_columns("num_bytes")]
    assert sum(r["input_ids"].shape[0] for r in rows) > len(dataset)  # more rows than documents
    metrics = LanguageModelingMetrics.from_dataset(dataset)
    result = _evaluate(tiny_gpt2, dataset, collator, metrics, tmp_path)
    nll, count = _summed_nll(tiny_gpt2, rows)
    assert result["eval_num_tokens"] == count
    assert result["eval_bits_per_byte"] == pytest.approx(nll / math.log(2) / sum(dataset["num_bytes"]), rel=1e-5)


def test_rows_left_out_are_caught_when_num_rows_is_asked_for(tiny_gpt2, tokenizer, texts, tmp_path):
    dataset = tokenize_corpus(Dataset.from_dict({"text": texts}), tokenizer)
    metrics = LanguageModelingMetrics.from_dataset(dataset, num_rows=len(dataset))
    collator = DataCollatorForLanguageModeling(tokenizer, mlm=False)
    with pytest.raises(ValueError, match="saw 6 rows but the eval dataset has 7.*dataloader_drop_last"):
        _evaluate(tiny_gpt2, dataset, collator, metrics, tmp_path, dataloader_drop_last=True)


# --------------------------------------------------------------------------- hostile eval datasets
@pytest.mark.parametrize(
    "dataset, error, message",
    [
        pytest.param(Dataset.from_dict({"input_ids": [[5, 6]]}), ValueError,
                     "neither a 'num_bytes' column nor a 'text' column.*bits_per_byte=False", id="tokenized-only"),
        pytest.param(Dataset.from_dict({"text": ["a"]}).to_iterable_dataset(), TypeError, "streaming IterableDataset",
                     id="streaming"),
        pytest.param({"valid": Dataset.from_dict({"text": ["a"]})}, TypeError, "one eval dataset", id="dict-of-sets"),
        pytest.param("texts.jsonl", TypeError, "must be a datasets.Dataset, got str", id="a-path"),
        pytest.param([["a"], ["b"]], TypeError, "rows must be dicts", id="list-of-lists"),
        pytest.param(Dataset.from_dict({"text": []}), ValueError, "has no rows", id="empty"),
        pytest.param([], ValueError, "has no rows", id="empty-list"),
        pytest.param(Dataset.from_dict({"text": ["", ""]}), ValueError, "hold 0 bytes", id="empty-texts"),
        pytest.param(Dataset.from_dict({"text": ["ab", None]}), TypeError, "must hold strings, got NoneType in row 1",
                     id="none-text"),
        pytest.param(Dataset.from_dict({"num_bytes": [4, -1]}), ValueError, r"'num_bytes'\[1\]", id="negative-bytes"),
        pytest.param(Dataset.from_dict({"num_bytes": [4.5]}), ValueError, r"'num_bytes'\[0\]", id="fractional-bytes"),
        pytest.param(Dataset.from_dict({"num_bytes": ["4"]}), TypeError, r"'num_bytes'\[0\]", id="string-bytes"),
        pytest.param(Dataset.from_dict({"text": ["ab"], "num_words": [-2]}), ValueError, r"'num_words'\[0\]",
                     id="negative-words"),
    ],
)  # fmt: skip
def test_hostile_eval_datasets_are_refused_by_name(dataset, error, message):
    with pytest.raises(error, match=message):
        LanguageModelingMetrics.from_dataset(dataset)


@pytest.mark.parametrize("flag", ["no", 0, None])
def test_bits_per_byte_is_a_flag(flag):
    with pytest.raises(TypeError, match="bits_per_byte must be True or False"):
        LanguageModelingMetrics.from_dataset(Dataset.from_dict({"text": ["ab"]}), bits_per_byte=flag)


def test_perplexity_alone_needs_no_bytes():
    metrics = LanguageModelingMetrics.from_dataset(Dataset.from_dict({"input_ids": [[5, 6, 7]]}), bits_per_byte=False)
    out = metrics.compute_metrics(EvalPrediction(np.array([[2.0, 2.0]]), None))
    assert metrics.dataset_tokens is None and sorted(out) == ["nll_per_token", "num_tokens", "perplexity"]


def test_a_list_of_row_dicts_is_a_dataset():
    metrics = LanguageModelingMetrics.from_dataset(
        [{"text": "é a", "input_ids": [5, 6]}, {"text": "b", "input_ids": [7]}]
    )
    assert (metrics.num_bytes, metrics.num_words, metrics.dataset_tokens) == (5, 3, None)


def test_columns_win_over_the_text_and_explicit_totals_over_columns():
    dataset = Dataset.from_dict({"text": ["abc", "de"], "num_bytes": [30, 20], "num_words": [7, 8]})
    metrics = LanguageModelingMetrics.from_dataset(dataset)
    assert (metrics.num_bytes, metrics.num_words) == (50, 15)
    assert LanguageModelingMetrics.from_dataset(dataset, num_bytes=9, num_words=2).num_bytes == 9


def test_more_targets_than_an_explicit_dataset_tokens_is_another_dataset():
    dataset = Dataset.from_dict({"text": ["ab cd"], "input_ids": [[5, 6, 7, 8]]})
    metrics = LanguageModelingMetrics.from_dataset(dataset, dataset_tokens=4)  # an explicit opt-in
    assert metrics.compute_metrics(EvalPrediction(np.array([[3.0, 3.0]]), None))["num_tokens"] == 3.0
    with pytest.raises(ValueError, match="scored 10 targets but the eval dataset has only 4 tokens.*adds tokens"):
        metrics.compute_metrics(EvalPrediction(np.array([[3.0, 3.0], [9.0, 7.0]]), None))


@pytest.mark.parametrize("value, error", [(-1, ValueError), (0, ValueError), ("3", TypeError), (2.5, ValueError)])
def test_dataset_tokens_is_a_positive_count(value, error):
    with pytest.raises(error, match="dataset_tokens"):
        LanguageModelingMetrics(dataset_tokens=value)


# ------------------------------------- collators that add tokens: from_dataset sets no token bound
def _scored_rows(batch: dict[str, torch.Tensor], vocab: int, metrics: LanguageModelingMetrics) -> np.ndarray:
    """``[nll_sum, num_tokens]`` rows of uniform logits over a collated batch (no model needed)."""
    logits = torch.zeros(*batch["labels"].shape, vocab)
    return metrics.preprocess_logits_for_metrics(logits, batch["labels"]).numpy()


@pytest.mark.parametrize(
    "documents, targets",
    [
        pytest.param([list(range(300, 316)), list(range(400, 416))], 34, id="issue-2x16-tokens-34-targets"),
        pytest.param([[300, 301]], 3, id="one-2-token-document"),
    ],
)
def test_issue_bos_and_eos_added_by_the_collator_are_not_another_dataset(tokenizer, documents, targets):
    dataset = Dataset.from_dict({"text": ["x y"] * len(documents), "input_ids": documents})  # tokenized without BOS
    metrics = LanguageModelingMetrics.from_dataset(dataset)
    collator = DataCollatorForCausalLM(tokenizer, add_bos=True, add_eos=True)
    batch = collator([{"input_ids": ids} for ids in documents])
    out = metrics.compute_metrics(EvalPrediction(_scored_rows(batch, len(tokenizer), metrics), None))
    assert metrics.dataset_tokens is None and out["num_tokens"] == targets > sum(map(len, documents))
    assert out["perplexity"] == pytest.approx(len(tokenizer))


def test_issue_bart_text_infilling_adds_bos_and_eos_and_is_scored(tokenizer):
    documents = [list(range(300, 316)), list(range(400, 416))]
    dataset = Dataset.from_dict({"text": ["x y", "z"], "input_ids": documents})
    metrics = LanguageModelingMetrics.from_dataset(dataset, shift_labels=False)
    batch = DataCollatorForTextInfilling(tokenizer, seed=0)([{"input_ids": ids} for ids in documents])
    out = metrics.compute_metrics(EvalPrediction(_scored_rows(batch, len(tokenizer), metrics), None))
    assert out["num_tokens"] == 36 and metrics.dataset_tokens is None  # <s> 16 </s> twice, over 32 tokens


def test_from_dataset_does_not_read_input_ids():
    dataset = [{"text": "ab", "input_ids": None}, {"text": "c", "input_ids": "5 6"}]
    assert LanguageModelingMetrics.from_dataset(dataset).dataset_tokens is None
