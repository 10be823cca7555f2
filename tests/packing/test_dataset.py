"""pack_dataset on Dataset and IterableDataset, and the collator on its pre-packed rows."""

from __future__ import annotations

import os

import datasets
import numpy as np
import pyarrow as pa
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import BloomConfig, BloomForCausalLM, Trainer, TrainingArguments

from hf_lmobj.collators.causal import DataCollatorForCausalLM
from hf_lmobj.corpus import tokenize_corpus
from hf_lmobj.packing.dataset import pack_dataset, pack_documents
from tests.testing_utils import assert_each_document_alone, tiny_gpt2, tiny_opt


def rows_to_documents(rows: dict) -> list[tuple[list[int], list[int] | None]]:
    """Split packed rows back into their chunks by seq_lengths (independent of the packer); the
    attention_mask numbers the same chunks 2, 3, ..."""
    assert set(rows) <= {"input_ids", "attention_mask", "seq_lengths", "labels"}  # ids, numbers (and labels)
    chunks = []
    for index, (ids, sizes) in enumerate(zip(rows["input_ids"], rows["seq_lengths"])):
        labels = rows["labels"][index] if "labels" in rows else None
        assert sum(sizes) == len(ids) and min(sizes) > 0
        assert rows["attention_mask"][index] == [2 + k for k, n in enumerate(sizes) for _ in range(n)]
        start = 0
        for n in sizes:
            chunks.append((ids[start : start + n], None if labels is None else labels[start : start + n]))
            start += n
    return chunks


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
    assert packed.column_names == ["input_ids", "attention_mask", "seq_lengths"]
    assert packed.features["input_ids"].feature.dtype == packed.features["seq_lengths"].feature.dtype == "int32"
    assert packed.features["attention_mask"].feature.dtype == "int16"  # rows of 256: numbers up to 257

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


def _tiny_model(form: str, vocab: int):
    if form == "4d_mask":  # OPT's mask ignores position_ids: the collator gives it a [B, 1, T, T] mask
        return tiny_opt(vocab, 32, dropout=0.0).eval()
    return tiny_gpt2(vocab_size=vocab, positions=32).eval()


def _cpu_args(tmp_path, max_steps: int, **extra) -> TrainingArguments:
    """A Trainer's CPU arguments: ``max_steps`` steps of 4 rows, no report, no checkpoint."""
    return TrainingArguments(output_dir=str(tmp_path), max_steps=max_steps, per_device_train_batch_size=4,
                             report_to=[], use_cpu=True, save_strategy="no", **extra)  # fmt: skip


@pytest.mark.parametrize("form", ("position_ids", "4d_mask"))
def test_prepacked_rows_keep_documents_isolated_in_the_model(form, tokenizer):
    docs = [[5 + (7 * i + j) % 900 for j in range(n)] for i, n in enumerate([9, 4, 12, 3, 7, 2])]
    ds = datasets.Dataset.from_dict({"input_ids": docs})
    packed = pack_dataset(ds, max_length=16)
    model = _tiny_model(form, len(tokenizer))
    for packing in (False, True):  # rows kept as they are in both modes: documents stay isolated
        batch = DataCollatorForCausalLM(tokenizer, max_length=16, packing=packing, model=model)(list(packed))
        assert batch["input_ids"].shape == (len(packed), 16)  # one row per feature, max_length wide
        assert ("attention_mask" in batch) == (form == "4d_mask")  # the 4D mask, or nothing (O(B x T))
        assert_each_document_alone(model, batch, docs)


def test_stock_trainer_trains_on_packed_dataset(tokenizer, corpus, tmp_path):
    tokenized = tokenize_corpus(corpus["train"].select(range(8)), tokenizer)
    packed = pack_dataset(tokenized, max_length=64, buffer_size=8)
    args = _cpu_args(tmp_path, 2, logging_steps=1)
    args.remove_unused_columns = False  # keeps seq_lengths beside the numbered attention_mask: both read, they agree
    collator = DataCollatorForCausalLM(tokenizer, max_length=64)
    trainer = Trainer(
        model=tiny_gpt2(vocab_size=len(tokenizer)), args=args, train_dataset=packed, data_collator=collator
    )
    result = trainer.train()
    assert torch.isfinite(torch.tensor(result.training_loss))
    # seq_lengths reached the collator: position_ids restart where the rows' documents start
    batch = next(iter(trainer.get_train_dataloader()))  # 4 shuffled rows: find each among the stored ones
    stored = {tuple(row["input_ids"]): row["seq_lengths"] for row in packed}
    for ids, positions in zip(batch["input_ids"].tolist(), batch["position_ids"].tolist()):
        sizes = next(v for k, v in stored.items() if tuple(ids[: len(k)]) == k)
        assert positions == [p for n in sizes for p in range(n)] + list(range(64 - sum(sizes)))
    assert batch["use_cache"] is False
    assert "attention_mask" not in batch  # O(B x T): the model builds the block-causal mask


@pytest.mark.parametrize("remove_unused_columns", (True, False))
@pytest.mark.parametrize("streaming", (False, True))
def test_stock_trainer_with_a_model_that_cannot_isolate_the_rows_fails_loudly(
    streaming, remove_unused_columns, tokenizer, tmp_path
):
    """Bloom's forward has no position_ids: given model=, the collator refuses its pre-packed rows, whether
    the Trainer kept seq_lengths or dropped it (the numbered attention_mask survives every filter)."""
    docs = [[5 + (7 * i + j) % 900 for j in range(n)] for i, n in enumerate([9, 4, 12, 3, 7, 2, 30, 20] * 4)]
    packed = pack_dataset(datasets.Dataset.from_dict({"input_ids": docs}), max_length=64)  # several per row
    if streaming:
        packed = packed.to_iterable_dataset()
    model = BloomForCausalLM(BloomConfig(vocab_size=len(tokenizer), hidden_size=32, n_layer=2, n_head=2))
    args = _cpu_args(tmp_path, 1, remove_unused_columns=remove_unused_columns)
    collator = DataCollatorForCausalLM(tokenizer, max_length=64, model=model)
    trainer = Trainer(model=model, args=args, train_dataset=packed, data_collator=collator)
    with pytest.raises(ValueError, match="pre-packed rows .*, but BloomForCausalLM.*skip pack_dataset"):
        trainer.train()
    with pytest.raises(ValueError, match="BloomForCausalLM"):  # packing mode refuses the model up front
        DataCollatorForCausalLM(tokenizer, max_length=64, packing=True, model=model)


def test_rows_of_an_older_pack_dataset_that_lost_their_position_ids_keep_their_documents(tokenizer):
    """Older pack_dataset rows (and axolotl's) number their documents 1, 2, ... in attention_mask: read as such."""
    old_row = {"input_ids": [5, 6, 7, 8, 9], "attention_mask": [1, 1, 1, 2, 2]}
    for packing in (False, True):
        batch = DataCollatorForCausalLM(tokenizer, max_length=8, packing=packing)([old_row])
        assert batch["labels"].tolist() == [[-100, 6, 7, -100, 9, -100, -100, -100]]
        assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 1, 0, 1, 2]]
    kept = DataCollatorForCausalLM(tokenizer, max_length=8)([{**old_row, "position_ids": [0, 1, 2, 0, 1]}])
    assert kept["labels"].tolist() == [[-100, 6, 7, -100, 9, -100, -100, -100]]


def _short_documents(count: int, seed: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(5, 1000, int(n)).tolist() for n in rng.integers(1, 40, count)]


@pytest.mark.parametrize("packing", (False, True))
def test_prepacked_rows_are_never_repacked_and_batches_have_one_shape(packing, tokenizer):
    """Short documents packed to 64, collated 4 rows at a time: 4 rows, 64 wide, each row as stored."""
    packed = pack_dataset(datasets.Dataset.from_dict({"input_ids": _short_documents(1500, 0)}), 64)
    rows = packed.to_dict()
    assert len(set(map(len, rows["input_ids"]))) > 1  # rows of different fills
    collator = DataCollatorForCausalLM(tokenizer, max_length=64, packing=packing, pad_to_multiple_of=8)
    for start in range(0, len(packed) - 3, 4):  # every batch of 4 (hundreds of them)
        features = [
            {"input_ids": rows["input_ids"][i], "seq_lengths": rows["seq_lengths"][i]} for i in range(start, start + 4)
        ]
        batch = collator(features)
        assert batch["input_ids"].shape == (4, 64)
        for row, feature in enumerate(features):  # row r is feature r: ids, then the padding tail
            n, sizes = len(feature["input_ids"]), feature["seq_lengths"]
            assert batch["input_ids"][row, :n].tolist() == feature["input_ids"]
            assert batch["position_ids"][row].tolist() == [p for s in sizes for p in range(s)] + list(range(64 - n))
            assert (batch["labels"][row, n:] == -100).all()


def test_prepacked_row_longer_than_max_length_is_refused(tokenizer):
    row = {"input_ids": [5] * 10, "seq_lengths": [6, 4]}
    for packing in (False, True):
        with pytest.raises(ValueError, match="feature 0 is a pre-packed row of 10 tokens.*max_length=8.*pack_dataset"):
            DataCollatorForCausalLM(tokenizer, max_length=8, packing=packing)([row])
    assert DataCollatorForCausalLM(tokenizer)([row])["input_ids"].shape == (1, 10)  # no max_length: as wide as it


def test_cache_holds_at_most_6_5_bytes_per_token(tmp_path):
    """ids (int32), document numbers (int16 for rows of 2048) and seq_lengths: about 6 bytes per token
    in the Arrow cache the map writes."""
    rng = np.random.default_rng(0)
    lengths = rng.integers(50, 1200, 400)  # (D,) ~250k tokens
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    ids = pa.array(rng.integers(0, 50_000, int(lengths.sum()), dtype=np.int64))  # int64 in: int32 out
    datasets.Dataset(pa.table({"input_ids": pa.ListArray.from_arrays(offsets, ids)})).save_to_disk(tmp_path / "docs")
    packed = pack_dataset(datasets.load_from_disk(tmp_path / "docs"), max_length=2048)
    written = sum(os.path.getsize(f["filename"]) for f in packed.cache_files)
    assert str(tmp_path) in packed.cache_files[0]["filename"]  # the map's own cache file, on disk
    assert sum(map(len, packed["input_ids"])) == int(lengths.sum())
    assert written / int(lengths.sum()) <= 6.5


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
