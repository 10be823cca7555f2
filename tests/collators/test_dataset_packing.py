"""pack_dataset on Dataset and IterableDataset, and the collator on its pre-packed rows."""

from __future__ import annotations

import datasets
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import BloomConfig, BloomForCausalLM, GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments

from hf_lmobj.collators.causal import DataCollatorForCausalLM
from hf_lmobj.collators.dataset_packing import pack_dataset, pack_documents
from hf_lmobj.corpus import tokenize_corpus


def rows_to_documents(rows: dict) -> list[tuple[list[int], list[int] | None]]:
    """Split packed rows back into their chunks by position_ids (independent of the packer)."""
    chunks = []
    for index, (ids, pos) in enumerate(zip(rows["input_ids"], rows["position_ids"])):
        labels = rows["labels"][index] if "labels" in rows else None
        assert pos == [p for n in _runs(pos) for p in range(n)]
        # attention_mask numbers the row's documents 1, 2, ... (what survives a Trainer's column filter)
        assert rows["attention_mask"][index] == [d + 1 for d, n in enumerate(_runs(pos)) for _ in range(n)]
        start = 0
        for n in _runs(pos):
            chunks.append((ids[start : start + n], None if labels is None else labels[start : start + n]))
            start += n
    return chunks


def _runs(pos: list[int]) -> list[int]:
    starts = [i for i, p in enumerate(pos) if p == 0] + [len(pos)]
    return [b - a for a, b in zip(starts[:-1], starts[1:])]


@settings(max_examples=300, deadline=None)
@given(
    docs=st.lists(st.lists(st.integers(0, 50), min_size=1, max_size=30), min_size=1, max_size=15),
    max_length=st.integers(2, 24),
    strategy=st.sampled_from(["best_fit", "fixed"]),
)
def test_pack_documents_loses_and_duplicates_nothing(docs, max_length, strategy):
    labels = [[t if t % 3 else -100 for t in doc] for doc in docs]
    rows = pack_documents(docs, max_length, labels, strategy)
    assert all(len(r) <= max_length for r in rows["input_ids"])
    if strategy == "fixed":  # exactly max_length except the last row
        assert all(len(r) == max_length for r in rows["input_ids"][:-1])
        assert [t for r in rows["input_ids"] for t in r] == [t for d in docs for t in d]
    chunks = rows_to_documents(rows)
    # every chunk is a contiguous piece of one document; the pieces tile the documents exactly
    assert sorted(t for ids, _ in chunks for t in ids) == sorted(t for d in docs for t in d)
    for ids, chunk_labels in chunks:
        assert chunk_labels[0] == -100
        assert chunk_labels[1:] == [t if t % 3 else -100 for t in ids[1:]]
    if strategy == "best_fit":  # only documents longer than max_length are split
        assert len(chunks) == sum(-(-len(d) // max_length) for d in docs)


def test_dataset_and_stream_give_the_same_rows(tokenizer, corpus):
    tokenized = tokenize_corpus(corpus["train"].select(range(40)), tokenizer)
    packed = pack_dataset(tokenized, max_length=256, buffer_size=16)
    assert packed.column_names == ["input_ids", "position_ids", "attention_mask"]

    def generate():  # a stream whose features are unknown up front
        yield from tokenized

    stream = datasets.IterableDataset.from_generator(generate)
    assert stream.column_names is None
    streamed = list(pack_dataset(stream, max_length=256, buffer_size=16))
    assert streamed == list(packed)
    assert list(pack_dataset(tokenized.to_iterable_dataset(), max_length=256, buffer_size=16)) == streamed
    chunks = rows_to_documents(packed.to_dict())
    assert sorted(t for ids, _ in chunks for t in ids) == sorted(t for d in tokenized["input_ids"] for t in d)
    real = sum(len(r) for r in packed["input_ids"])
    assert real / (len(packed) * 256) > 0.9  # best fit over 16 documents leaves little room


def test_prepacked_rows_keep_documents_isolated_in_the_model(tokenizer):
    docs = [[5 + (7 * i + j) % 900 for j in range(n)] for i, n in enumerate([9, 4, 12, 3, 7, 2])]
    ds = datasets.Dataset.from_dict({"input_ids": docs})
    packed = pack_dataset(ds, max_length=16)
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=2, n_head=2, n_positions=32)
    model = GPT2LMHeadModel(config).eval()
    for packing in (False, True):  # kept as rows, or re-packed: documents stay isolated
        seen = []
        batch = DataCollatorForCausalLM(tokenizer, max_length=16, packing=packing)(list(packed))
        with torch.no_grad():
            logits = model(**batch).logits
            for row in range(logits.shape[0]):
                pos = batch["position_ids"][row].tolist()
                start = 0
                for n in _runs(pos):
                    ids = batch["input_ids"][row, start : start + n]
                    if ids.tolist() in docs:
                        alone = model(input_ids=ids[None]).logits[0]
                        assert (alone - logits[row, start : start + n]).abs().max() < 1e-5
                        seen.append(ids.tolist())
                    start += n
        assert sorted(seen) == sorted(docs)


def test_stock_trainer_trains_on_packed_dataset(tokenizer, corpus, tmp_path):
    tokenized = tokenize_corpus(corpus["train"].select(range(8)), tokenizer)
    packed = pack_dataset(tokenized, max_length=64, buffer_size=8)
    config = GPT2Config(vocab_size=len(tokenizer), n_embd=32, n_layer=2, n_head=2, n_positions=64)
    args = TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=2,
        per_device_train_batch_size=4,
        report_to=[],
        use_cpu=True,
        logging_steps=1,
        save_strategy="no",
    )
    collator = DataCollatorForCausalLM(tokenizer, max_length=64)
    trainer = Trainer(model=GPT2LMHeadModel(config), args=args, train_dataset=packed, data_collator=collator)
    result = trainer.train()
    assert torch.isfinite(torch.tensor(result.training_loss))
    # remove_unused_columns kept position_ids: the batch carried document boundaries
    batch = next(iter(trainer.get_train_dataloader()))
    assert batch["position_ids"].shape == batch["input_ids"].shape and batch["use_cache"] is False
    assert "attention_mask" not in batch  # O(B x T): the model builds the block-causal mask


@pytest.mark.parametrize("streaming", (False, True))
def test_stock_trainer_that_drops_the_boundaries_fails_loudly(streaming, tokenizer, tmp_path):
    """Bloom's forward has no position_ids: remove_unused_columns=True drops them from the rows."""
    docs = [[5 + (7 * i + j) % 900 for j in range(n)] for i, n in enumerate([9, 4, 12, 3, 7, 2, 30, 20] * 4)]
    packed = pack_dataset(datasets.Dataset.from_dict({"input_ids": docs}), max_length=64)  # several per row
    if streaming:
        packed = packed.to_iterable_dataset()
    config = BloomConfig(vocab_size=len(tokenizer), hidden_size=32, n_layer=2, n_head=2)
    args = TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=1,
        per_device_train_batch_size=4,
        report_to=[],
        use_cpu=True,
        save_strategy="no",
    )
    for packing in (False, True):
        collator = DataCollatorForCausalLM(tokenizer, max_length=64, packing=packing)
        trainer = Trainer(model=BloomForCausalLM(config), args=args, train_dataset=packed, data_collator=collator)
        with pytest.raises(ValueError, match="position_ids.*remove_unused_columns=False"):
            trainer.train()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"max_length": 0}, "max_length must be an int >= 2"),
        ({"max_length": 1}, "max_length must be an int >= 2"),
        ({"max_length": 8, "buffer_size": 0}, "buffer_size must be an int >= 1"),
        ({"max_length": 8, "strategy": "greedy"}, "strategy must be one of"),
    ],
)
def test_bad_arguments(kwargs, message):
    ds = datasets.Dataset.from_dict({"input_ids": [[1, 2]]})
    with pytest.raises(ValueError, match=message):
        pack_dataset(ds, **kwargs)


def test_bad_datasets():
    with pytest.raises(ValueError, match="no 'input_ids' column"):
        pack_dataset(datasets.Dataset.from_dict({"text": ["a"]}), max_length=8)
    packed = pack_dataset(datasets.Dataset.from_dict({"input_ids": [[1, 2]]}), max_length=8)
    with pytest.raises(ValueError, match="already packed"):
        pack_dataset(packed, max_length=8)
    with pytest.raises(ValueError, match="same length"):
        pack_documents([[1, 2]], 8, labels=[[1]])
