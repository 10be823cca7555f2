"""Issue 34: pack_dataset rows keep their document boundaries through a stock ``transformers.Trainer``.

A stock ``Trainer`` (``remove_unused_columns=True``, its default) keeps only the columns the model's
``forward`` takes: ``seq_lengths`` is dropped for every model, ``attention_mask`` is kept for every
language model. pack_dataset numbers each row's documents in ``attention_mask`` (2, 2, 3, ...), and
the collator turns the numbers into per-document ``position_ids`` / ``labels`` / ``shift_labels``
(never handing them to the model), keeps every row as one batch row in both modes, and refuses a
model that cannot isolate packed documents (Bloom, ALiBi, no ``position_ids``) by name.

Expected batches are built from the dataset's own ``seq_lengths`` (written beside the mask), never
from the collator's reading of the mask.
"""

from __future__ import annotations

import re
import warnings

import datasets
import numpy as np
import pytest
import torch
from transformers import BloomConfig, BloomForCausalLM, Trainer, TrainingArguments

from hf_lmobj.collators.causal import DataCollatorForCausalLM
from hf_lmobj.fim.collator import DataCollatorForFillInTheMiddle
from hf_lmobj.packing.dataset import pack_dataset
from tests.testing_utils import assert_each_document_alone, tiny_gpt2

ROW = 32
LENGTHS = [9, 4, 12, 3, 7, 2, 30, 20, 5, 1, 16, 11]


@pytest.fixture(scope="module")
def docs(tokenizer) -> list[list[int]]:
    """Distinct documents (ids in the tokenizer's range), one of them longer than a row in the fixed strategy."""
    rng = np.random.default_rng(34)
    return [rng.integers(5, len(tokenizer), n).tolist() for n in LENGTHS]


@pytest.fixture(scope="module")
def gpt2(tokenizer):
    return tiny_gpt2(vocab_size=len(tokenizer), positions=ROW, dropout=0.0).eval()


@pytest.fixture(scope="module")
def bloom(tokenizer):
    return BloomForCausalLM(BloomConfig(vocab_size=len(tokenizer), hidden_size=32, n_layer=2, n_head=2)).eval()


def _packed(docs, strategy="best_fit", labels=None):
    columns = {"input_ids": docs} if labels is None else {"input_ids": docs, "labels": labels}
    return pack_dataset(datasets.Dataset.from_dict(columns), max_length=ROW, strategy=strategy)


def _trainer(model, dataset, collator, tmp_path, remove_unused_columns=True, **extra) -> Trainer:
    args = TrainingArguments(output_dir=str(tmp_path), remove_unused_columns=remove_unused_columns, report_to=[],
                             use_cpu=True, save_strategy="no", per_device_train_batch_size=4, **extra)  # fmt: skip
    return Trainer(model=model, args=args, train_dataset=dataset, data_collator=collator)


def _expected(rows: dict, width: int = ROW) -> dict[str, list[list[int]]]:
    """The batch one row per stored row: per-document positions and targets, read from seq_lengths."""
    out = {"input_ids": [], "labels": [], "shift_labels": [], "position_ids": []}
    for index, (ids, sizes) in enumerate(zip(rows["input_ids"], rows["seq_lengths"])):
        given = rows["labels"][index] if "labels" in rows else ids
        starts = set(np.cumsum([0, *sizes[:-1]]).tolist())
        labels = [-100 if t in starts else given[t] for t in range(len(ids))] + [-100] * (width - len(ids))
        out["input_ids"].append(ids + [0] * (width - len(ids)))
        out["labels"].append(labels)
        out["shift_labels"].append(labels[1:] + [-100])
        out["position_ids"].append([p for n in sizes for p in range(n)] + list(range(width - len(ids))))
    return out


def _assert_batch(batch: dict, rows: dict, pad_id: int, width: int = ROW) -> None:
    expected = _expected(rows, width)
    real = [[len(ids) > t for t in range(width)] for ids in rows["input_ids"]]
    assert [[t if r else pad_id for t, r in zip(row, keep)] for row, keep in zip(expected["input_ids"], real)] == (
        batch["input_ids"].tolist()
    )
    for key in ("labels", "shift_labels", "position_ids"):
        assert batch[key].tolist() == expected[key], key
    assert "attention_mask" not in batch and batch["use_cache"] is False  # the numbers never reach the model


# ----------------------------------------------------------------------------- the Trainer's column filter
@pytest.mark.parametrize("with_labels", (False, True))
@pytest.mark.parametrize("model_name", ("gpt2", "bloom"))
def test_stock_trainer_keeps_attention_mask_and_drops_seq_lengths(model_name, with_labels, docs, request, tmp_path):
    model = request.getfixturevalue(model_name)
    labels = [[-100, *d[1:]] for d in docs] if with_labels else None
    packed = _packed(docs, labels=labels)
    kept = _trainer(model, packed, None, tmp_path)._remove_unused_columns(packed)
    assert sorted(kept.column_names) == sorted(["input_ids", "attention_mask"] + (["labels"] if with_labels else []))
    assert kept["attention_mask"] == packed["attention_mask"]


# ----------------------------------------------------------------------------- GPT-2: boundaries reach the model
@pytest.mark.parametrize("strategy", ("best_fit", "fixed"))
@pytest.mark.parametrize("packing", (False, True))
def test_gpt2_rows_through_the_stock_filter_collate_per_document(packing, strategy, docs, gpt2, tokenizer, tmp_path):
    """Before: seq_lengths dropped, each row read as one document (targets across documents, and in
    packing mode two rows re-packed into one)."""
    packed = _packed(docs, strategy)
    collator = DataCollatorForCausalLM(tokenizer, max_length=ROW, packing=packing)
    kept = _trainer(gpt2, packed, collator, tmp_path)._remove_unused_columns(packed)
    batch = collator(list(kept))
    assert batch["input_ids"].shape == (len(packed), ROW)  # one row per stored row: never re-packed
    _assert_batch(batch, packed.to_dict(), tokenizer.pad_token_id)


@pytest.mark.parametrize("packing", (False, True))
def test_gpt2_documents_attend_only_within_themselves(packing, docs, gpt2, tokenizer, tmp_path):
    packed = _packed(docs)
    collator = DataCollatorForCausalLM(tokenizer, max_length=ROW, packing=packing, model=gpt2)
    batch = collator(list(_trainer(gpt2, packed, collator, tmp_path)._remove_unused_columns(packed)))
    assert_each_document_alone(gpt2, batch, docs)


@pytest.mark.parametrize("packing", (False, True))
def test_seq_lengths_kept_or_dropped_give_the_same_batch(packing, docs, gpt2, tokenizer, tmp_path):
    packed = _packed(docs)
    collator = DataCollatorForCausalLM(tokenizer, max_length=ROW, packing=packing)
    dropped = collator(list(_trainer(gpt2, packed, collator, tmp_path)._remove_unused_columns(packed)))
    kept_rows = _trainer(gpt2, packed, collator, tmp_path, remove_unused_columns=False)._remove_unused_columns(packed)
    assert "seq_lengths" in kept_rows.column_names
    kept = collator(list(kept_rows))  # mask and seq_lengths both read: they agree
    assert dropped.keys() == kept.keys()
    assert all(torch.equal(dropped[k], kept[k]) for k in dropped if isinstance(dropped[k], torch.Tensor))


def test_rows_with_user_labels_keep_them_and_unset_every_document_start(docs, gpt2, tokenizer, tmp_path):
    labels = [[-100] * min(3, len(d)) + d[3:] for d in docs]  # a 3-token prompt in each document, not trained
    packed = _packed(docs, labels=labels)
    collator = DataCollatorForCausalLM(tokenizer, max_length=ROW)
    batch = collator(list(_trainer(gpt2, packed, collator, tmp_path)._remove_unused_columns(packed)))
    _assert_batch(batch, packed.to_dict(), tokenizer.pad_token_id)
    assert int((batch["shift_labels"] != -100).sum()) == sum(max(len(d) - 3, 0) for d in docs)


def test_get_train_dataloader_batches_restart_positions_per_document(docs, gpt2, tokenizer, tmp_path):
    packed = _packed(docs)
    collator = DataCollatorForCausalLM(tokenizer, max_length=ROW, packing=True)
    batch = next(iter(_trainer(gpt2, packed, collator, tmp_path).get_train_dataloader()))  # shuffled rows
    stored = {tuple(ids): index for index, ids in enumerate(packed["input_ids"])}
    order = [next(i for k, i in stored.items() if tuple(row[: len(k)]) == k) for row in batch["input_ids"].tolist()]
    expected = _expected(packed.select(order).to_dict())
    assert batch["position_ids"].tolist() == expected["position_ids"]
    assert batch["shift_labels"].tolist() == expected["shift_labels"]


def test_a_streamed_pack_dataset_keeps_its_boundaries_through_the_remove_columns_collator(
    docs, gpt2, tokenizer, tmp_path
):
    """An IterableDataset is filtered per batch by the Trainer's RemoveColumnsCollator, not by remove_columns."""
    stream = pack_dataset(datasets.Dataset.from_dict({"input_ids": docs}).to_iterable_dataset(), max_length=ROW)
    seen = []

    def recording(features):
        seen.append(sorted(features[0]))
        return DataCollatorForCausalLM(tokenizer, max_length=ROW)(features)

    trainer = _trainer(gpt2, stream, recording, tmp_path, max_steps=1)
    batch = next(iter(trainer.get_train_dataloader()))
    assert seen[0] == ["attention_mask", "input_ids"]  # seq_lengths was dropped on the way
    rows = _packed(docs).select(range(4)).to_dict()  # the stream packs the same rows in the same order
    _assert_batch(batch, rows, tokenizer.pad_token_id)


def test_trainer_trains_a_few_steps_with_the_default_filter(docs, tokenizer, tmp_path):
    model = tiny_gpt2(vocab_size=len(tokenizer), positions=ROW, dropout=0.0)
    packed = _packed(docs)
    collator = DataCollatorForCausalLM(tokenizer, max_length=ROW, model=model)
    batches = []
    trainer = _trainer(model, packed, lambda f: batches.append(collator(f)) or batches[-1], tmp_path, max_steps=3)
    result = trainer.train()
    assert trainer.state.global_step == 3 and np.isfinite(result.training_loss)
    starts = {tuple(np.cumsum([0, *s[:-1]]).tolist()) for s in packed["seq_lengths"]}
    for batch in batches:  # every row's positions restart exactly where a stored row's documents start
        for row, positions in zip(batch["input_ids"], batch["position_ids"].tolist()):
            real = int((row != tokenizer.pad_token_id).sum())
            assert tuple(i for i, p in enumerate(positions[:real]) if p == 0) in starts


# ----------------------------------------------------------------------------- rows never re-packed
def test_one_document_rows_are_never_repacked(tokenizer, tmp_path, gpt2):
    """Two rows of one short document each (they would fit one row): both stay rows in packing mode."""
    packed = pack_dataset(
        datasets.Dataset.from_dict({"input_ids": [[7] * 20, [8] * 10]}), max_length=ROW, buffer_size=1
    )
    assert packed["attention_mask"] == [[2] * 20, [2] * 10]
    collator = DataCollatorForCausalLM(tokenizer, max_length=ROW, packing=True)
    batch = collator(list(_trainer(gpt2, packed, collator, tmp_path)._remove_unused_columns(packed)))
    assert batch["input_ids"].shape == (2, ROW)
    _assert_batch(batch, packed.to_dict(), tokenizer.pad_token_id)


# ----------------------------------------------------------------------------- Bloom: refused by name
@pytest.mark.parametrize("with_labels", (False, True))
def test_bloom_padding_mode_refuses_the_rows_and_says_what_to_do(with_labels, docs, bloom, tokenizer, tmp_path):
    labels = [list(d) for d in docs] if with_labels else None
    packed = _packed(docs, labels=labels)
    collator = DataCollatorForCausalLM(tokenizer, max_length=ROW, model=bloom)
    trainer = _trainer(bloom, packed, collator, tmp_path)
    with pytest.raises(ValueError, match="pre-packed rows .*BloomForCausalLM.forward takes no position_ids.*"
                                         "skip pack_dataset.*packing=False"):  # fmt: skip
        next(iter(trainer.get_train_dataloader()))


def test_bloom_packing_mode_is_refused_when_the_collator_is_built(bloom, tokenizer):
    with pytest.raises(ValueError, match="BloomForCausalLM.forward takes no position_ids.*packing=False"):
        DataCollatorForCausalLM(tokenizer, max_length=ROW, packing=True, model=bloom)


def test_bloom_still_takes_unpacked_documents(docs, bloom, tokenizer):
    batch = DataCollatorForCausalLM(tokenizer, max_length=ROW, model=bloom)([{"input_ids": d} for d in docs[:3]])
    assert batch["attention_mask"].tolist() == [[1] * len(d) + [0] * (12 - len(d)) for d in docs[:3]]


# ----------------------------------------------------------------------------- the three boundary forms
IDS = [5, 6, 7, 8, 9]


@pytest.mark.parametrize(
    "extra",
    [
        {"attention_mask": [2, 2, 2, 3, 3]},  # pack_dataset's numbering
        {"attention_mask": [1, 1, 1, 2, 2]},  # axolotl's (and older pack_dataset rows')
        {"attention_mask": torch.tensor([2, 2, 2, 3, 3], dtype=torch.int16)},
        {"attention_mask": np.array([2, 2, 2, 3, 3], dtype=np.int8)},
        {"attention_mask": [2, 2, 2, 3, 3], "seq_lengths": [3, 2]},
        {"attention_mask": [2, 2, 2, 3, 3], "position_ids": [0, 1, 2, 0, 1]},
        {"seq_lengths": [3, 2]},
    ],
    ids=["from-2", "from-1", "int16-tensor", "int8-array", "with-seq-lengths", "with-position-ids", "seq-lengths"],
)
@pytest.mark.parametrize("packing", (False, True))
def test_every_boundary_form_gives_the_same_rows(extra, packing, tokenizer):
    batch = DataCollatorForCausalLM(tokenizer, max_length=8, packing=packing)([{"input_ids": IDS, **extra}] * 2)
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 1, 0, 1, 2]] * 2
    assert batch["labels"].tolist() == [[-100, 6, 7, -100, 9, -100, -100, -100]] * 2


@pytest.mark.parametrize(
    "feature, error, message",
    [
        ({"attention_mask": [2, 2, 3]}, ValueError, "attention_mask has length 3 but input_ids has 5"),
        ({"attention_mask": [3, 3, 3, 4, 4]}, ValueError, "from 3; number them 1, 2"),
        ({"attention_mask": [2, 2, 3, 2, 2]}, ValueError, "stay or go up by 1 .*got 2 after 3 .*offset 3"),
        ({"attention_mask": [2, 2, 4, 4, 4]}, ValueError, "got 4 after 2"),
        ({"attention_mask": [2, 2, 0, 3, 3]}, ValueError, "holds 0 \\(padding\\).*offset 2"),
        ({"attention_mask": [2, 2, 2, 3, 0]}, ValueError, "holds 0 \\(padding\\).*offset 4"),
        ({"attention_mask": [0, 2, 2, 3, 3]}, ValueError, "holds 0 \\(padding\\).*offset 0"),
        ({"attention_mask": [2, 2, -1, 3, 3]}, ValueError, "attention_mask must hold 0 \\(padding\\), 1"),
        ({"attention_mask": [2.0, 2.0, 2.0, 3.0, 3.0]}, TypeError, "attention_mask must be a 1D list of ints"),
        ({"attention_mask": torch.tensor([2.0, 2.0, 2.0, 3.0, 3.0])}, TypeError, "got dtype torch.float32"),
        ({"attention_mask": [True, True, True, 2, 2]}, TypeError, "attention_mask .*got a bool at position 0"),
        ({"attention_mask": [2, 2, 3, 3, 3], "seq_lengths": [3, 2]}, ValueError, "lengths \\[2, 3\\] .*seq_lengths"),
        ({"attention_mask": [2, 2, 2, 2, 2], "position_ids": [0, 1, 2, 0, 1]}, ValueError, "must agree"),
        ({"seq_lengths": [True, 4]}, TypeError, "seq_lengths .*bool"),
        ({"seq_lengths": [3.0, 2.0]}, TypeError, "seq_lengths"),
        ({"seq_lengths": []}, ValueError, "seq_lengths is empty"),
        ({"seq_lengths": [3, 3]}, ValueError, "seq_lengths sum to 6, not 5"),
        ({"seq_lengths": [5, 0]}, ValueError, "seq_lengths must be positive"),
    ],
)
def test_malformed_boundaries_are_refused_by_feature_and_field(feature, error, message, tokenizer):
    good = {"input_ids": IDS, "attention_mask": [2, 2, 2, 3, 3]}
    for packing in (False, True):
        collator = DataCollatorForCausalLM(tokenizer, max_length=8, packing=packing)
        with pytest.raises(error, match=f"feature 1: .*{message}" if error is ValueError else message):
            collator([good, {"input_ids": IDS, **feature}])


def test_a_padded_plain_feature_beside_a_numbered_row_is_refused(tokenizer):
    with pytest.raises(ValueError, match="must not contain padding"):
        DataCollatorForCausalLM(tokenizer, max_length=8)(
            [{"input_ids": IDS, "attention_mask": [2, 2, 2, 3, 3]}, {"input_ids": IDS, "attention_mask": [1] * 4 + [0]}]
        )


# ----------------------------------------------------------------------------- what pack_dataset writes and reads
@pytest.mark.parametrize(
    "max_length, dtype",
    [(4, "int16"), (64, "int16"), (126, "int16"), (127, "int16"), (32766, "int16"), (32767, "int32")],
)
def test_the_mask_is_int16_up_to_rows_of_32766_and_int32_above(max_length, dtype):
    """Before: int8 up to rows of 126, so packed sets of 64 and 256 had different features."""
    packed = pack_dataset(datasets.Dataset.from_dict({"input_ids": [[1]] * 3}), max_length=max_length)
    assert packed.features["attention_mask"].feature.dtype == dtype
    assert packed.to_dict() == {"input_ids": [[1, 1, 1]], "attention_mask": [[2, 3, 4]], "seq_lengths": [[1, 1, 1]]}


# ----------------------------------------------------------------------------- packed sets of different max_length
SHORT, LONG = 64, 256
MIXED_LENGTHS = [70, 9, 130, 33, 64, 1, 200, 17]  # 524 tokens: 3 documents split into rows of 64, none of 256


def _short_and_long(tokenizer) -> tuple[datasets.Dataset, datasets.Dataset]:
    rng = np.random.default_rng(64)
    ds = datasets.Dataset.from_dict({"input_ids": [rng.integers(5, len(tokenizer), n).tolist() for n in MIXED_LENGTHS]})
    return pack_dataset(ds, max_length=SHORT), pack_dataset(ds, max_length=LONG)


def _interleaved(short: dict, long: dict) -> dict:
    """interleave_datasets' default order: one row of each in turn until the shorter set is done."""
    n = min(len(short["input_ids"]), len(long["input_ids"]))
    return {key: [rows[key][i] for i in range(n) for rows in (short, long)] for key in short}


@pytest.mark.parametrize("combine", ("concatenate", "interleave"))
@pytest.mark.parametrize("packing", (False, True))
def test_packed_sets_of_64_and_256_combine_and_collate_per_document(combine, packing, tokenizer, gpt2, tmp_path):
    """Before: an int8 mask (rows of 64) beside an int16 one (rows of 256): "features can't be aligned"."""
    short, long = _short_and_long(tokenizer)
    assert (len(short), len(long)) == (9, 3)
    if combine == "concatenate":
        combined = datasets.concatenate_datasets([short, long])
        rows = {key: short.to_dict()[key] + long.to_dict()[key] for key in short.column_names}
    else:
        combined = datasets.interleave_datasets([short, long])
        rows = _interleaved(short.to_dict(), long.to_dict())
    assert combined.features == short.features == long.features
    assert combined.features["attention_mask"].feature.dtype == "int16"
    assert combined.to_dict() == rows
    collator = DataCollatorForCausalLM(tokenizer, max_length=LONG, packing=packing)
    batch = collator(list(_trainer(gpt2, combined, collator, tmp_path)._remove_unused_columns(combined)))
    assert batch["input_ids"].shape == (len(combined), LONG)  # one batch row per stored row, never re-packed
    _assert_batch(batch, rows, tokenizer.pad_token_id, width=LONG)


def test_packed_sets_across_32766_combine_after_the_documented_cast():
    ds = datasets.Dataset.from_dict({"input_ids": [[1], [2, 3]]})
    short, long = pack_dataset(ds, max_length=SHORT), pack_dataset(ds, max_length=32767)
    with pytest.raises(ValueError, match="can't be aligned"):
        datasets.concatenate_datasets([short, long])
    short = short.cast_column("attention_mask", datasets.Sequence(datasets.Value("int32")))
    combined = datasets.concatenate_datasets([short, long])
    assert combined.features["attention_mask"].feature.dtype == "int32"
    assert combined["attention_mask"] == [[2, 2, 3]] * 2


@pytest.mark.parametrize(
    "mask, message",
    [([[2, 2, 3]], "packed already"), ([[1, 1, 0]], "0s \\(padding\\)"), ([[True, False, True]], "0s \\(padding\\)")],
)
@pytest.mark.parametrize("streaming", (False, True))
def test_pack_dataset_refuses_packed_or_padded_input(mask, message, streaming):
    ds = datasets.Dataset.from_dict({"input_ids": [[1, 2, 3]], "attention_mask": mask})
    with pytest.raises(ValueError, match=f"'attention_mask' column .*{message}"):
        list(pack_dataset(ds.to_iterable_dataset() if streaming else ds, max_length=4))


def test_pack_dataset_replaces_a_tokenizers_all_ones_mask(tokenizer):
    ds = datasets.Dataset.from_dict({"text": ["a = 1\n", "def f():\n    pass\n"]}).map(lambda r: tokenizer(r["text"]))
    packed = pack_dataset(ds, max_length=ROW)
    sizes = [len(ids) for ids in ds["input_ids"]]
    assert packed.column_names == ["input_ids", "attention_mask", "seq_lengths"]
    assert packed["attention_mask"] == [[2] * sizes[1] + [3] * sizes[0]]  # best fit: the longer one first


def test_the_fim_collator_refuses_a_numbered_row_as_packed(tokenizer):
    collator = DataCollatorForFillInTheMiddle(tokenizer, fim_rate=1.0, fim_level="token", seed=0)
    with pytest.raises(ValueError, match="feature 0 is a packed row .*numbers documents.*fim_dataset"):
        collator([{"input_ids": IDS, "attention_mask": [2, 2, 2, 3, 3]}])


# ----------------------------------------------------------------------------- unchecked position_ids: warned once
UNCHECKED = "position_ids only.*Bloom, ALiBi.*model=.*packed_attention='position_ids'.*silences"


def _unchecked_warnings(record) -> list[warnings.WarningMessage]:
    return [w for w in record if issubclass(w.category, UserWarning) and "position_ids only" in str(w.message)]


def _collate_all(trainer: Trainer, epochs: int = 2) -> list[warnings.WarningMessage]:
    """Every batch of ``epochs`` passes of the Trainer's own train DataLoader; the unchecked-position warnings."""
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        batches = [batch for _ in range(epochs) for batch in trainer.get_train_dataloader()]
    assert len(batches) >= 2 * epochs  # several batches from one collator instance
    return _unchecked_warnings(record)


@pytest.mark.parametrize("packing", (False, True))
@pytest.mark.parametrize("model_name", ("gpt2", "bloom"))
def test_unchecked_position_ids_warn_once_through_the_stock_trainer(model_name, packing, docs, request, tokenizer,
                                                                    tmp_path):  # fmt: skip
    """Before: Bloom (forward ignores position_ids, ALiBi) trained across documents without a word."""
    model = request.getfixturevalue(model_name)
    collator = DataCollatorForCausalLM(tokenizer, max_length=ROW, packing=packing)  # no model=: nothing checked
    packed = _packed(docs + docs)  # 8+ rows: 2+ batches of 4 per epoch
    caught = _collate_all(_trainer(model, packed, collator, tmp_path))
    assert len(caught) == 1
    assert re.search(UNCHECKED, str(caught[0].message), re.DOTALL)
    assert str(caught[0].message).startswith("DataCollatorForCausalLM: ")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"model": "gpt2"},  # checked: GPT-2's mask builders read position_ids
        {"packed_attention": "position_ids"},  # the user's word that the model reads them
        {"packed_attention": "4d_mask"},
        {"attn_implementation": "flash_attention_2"},  # cu_seq_lens, not position_ids alone
    ],
    ids=["model-gpt2", "stated-position-ids", "4d-mask", "flash-cu-seq-lens"],
)
@pytest.mark.parametrize("packing", (False, True))
def test_checked_or_stated_forms_do_not_warn(kwargs, packing, docs, gpt2, tokenizer, tmp_path):
    kwargs = {k: gpt2 if v == "gpt2" else v for k, v in kwargs.items()}
    collator = DataCollatorForCausalLM(tokenizer, max_length=ROW, packing=packing, **kwargs)
    assert _collate_all(_trainer(gpt2, _packed(docs + docs), collator, tmp_path)) == []


def test_padding_mode_batches_of_unpacked_documents_do_not_warn(docs, bloom, tokenizer, tmp_path):
    plain = datasets.Dataset.from_dict({"input_ids": docs})  # one document per row: attention_mask batches
    collator = DataCollatorForCausalLM(tokenizer, max_length=ROW)
    assert _collate_all(_trainer(bloom, plain, collator, tmp_path)) == []


def test_padding_mode_warns_at_its_first_pre_packed_row_then_never_again(docs, tokenizer):
    collator = DataCollatorForCausalLM(tokenizer, max_length=ROW)
    row = {"input_ids": IDS, "attention_mask": [2, 2, 2, 3, 3]}
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        collator([{"input_ids": d} for d in docs[:3]])  # plain documents: an attention_mask batch
        assert _unchecked_warnings(record) == []
        collator([{"input_ids": docs[0]}, row])  # a pre-packed row: its documents rest on position_ids
        collator([row, row])
    caught = _unchecked_warnings(record)
    assert len(caught) == 1 and caught[0].filename == __file__  # stacklevel: the line that called the collator


def test_each_collator_instance_warns_once(tokenizer):
    features = [{"input_ids": IDS}]
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for collator in [DataCollatorForCausalLM(tokenizer, max_length=8, packing=True) for _ in range(2)]:
            collator(features)
            collator(features)
    assert len(_unchecked_warnings(record)) == 2


def test_the_warning_is_no_false_alarm_bloom_mixes_the_documents_it_was_sent(docs, bloom, gpt2, tokenizer):
    collator = DataCollatorForCausalLM(tokenizer, max_length=ROW, packing=True)
    with pytest.warns(UserWarning, match=UNCHECKED):
        batch = collator([{"input_ids": d} for d in docs[:4]])
    assert_each_document_alone(gpt2, batch, docs[:4])  # GPT-2 reads the restarting position_ids
    with pytest.raises(AssertionError):
        assert_each_document_alone(bloom, batch, docs[:4])  # Bloom ignores them: documents attend to each other


@pytest.mark.parametrize("packed_attention", ("auto", "position_ids", "cu_seq_lens", "4d_mask"))
def test_bloom_given_as_model_is_refused_whatever_form_is_named(packed_attention, bloom, tokenizer, tmp_path, docs):
    with pytest.raises(ValueError, match="BloomForCausalLM.forward takes no position_ids"):
        DataCollatorForCausalLM(tokenizer, max_length=ROW, packing=True, packed_attention=packed_attention, model=bloom)
    collator = DataCollatorForCausalLM(tokenizer, max_length=ROW, packed_attention=packed_attention, model=bloom)
    with pytest.raises(ValueError, match="pre-packed rows .*BloomForCausalLM.forward takes no position_ids"):
        next(iter(_trainer(bloom, _packed(docs), collator, tmp_path).get_train_dataloader()))


@pytest.mark.parametrize(
    "kwargs, count",
    [({}, 1), ({"model": "gpt2"}, 0), ({"packed_attention": "position_ids"}, 0)],
    ids=["unchecked", "model-gpt2", "stated-position-ids"],
)
def test_the_fim_collator_packing_warns_once_unless_checked_or_stated(kwargs, count, gpt2, tokenizer):
    docs = [{"input_ids": tokenizer(t)["input_ids"] + [tokenizer.eos_token_id]} for t in ("a = 1\n", "b = [2]\n")]
    if "packed_attention" in kwargs:
        causal = DataCollatorForCausalLM(tokenizer, max_length=ROW, packing=True, **kwargs)
        collator = DataCollatorForFillInTheMiddle(tokenizer, fim_rate=1.0, fim_level="token", seed=0, causal=causal)
    else:
        model = {"model": gpt2} if kwargs else {}
        collator = DataCollatorForFillInTheMiddle(tokenizer, fim_rate=1.0, fim_level="token", seed=0, max_length=ROW,
                                                  packing=True, **model)  # fmt: skip
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        for _ in range(3):
            assert collator(docs)["position_ids"].shape == (1, ROW)
    assert len(_unchecked_warnings(record)) == count


def test_the_fim_collator_padding_mode_never_warns(tokenizer):
    docs = [{"input_ids": tokenizer(t)["input_ids"] + [tokenizer.eos_token_id]} for t in ("a = 1\n", "b = [2]\n")]
    collator = DataCollatorForFillInTheMiddle(tokenizer, fim_rate=1.0, fim_level="token", seed=0)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        assert "attention_mask" in collator(docs)
    assert _unchecked_warnings(record) == []
