"""DataCollatorForMaskedLM: statistics, reproducibility, layout, packing isolation, stock models."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers import ModernBertForMaskedLM, RobertaForMaskedLM, Trainer, TrainingArguments

from hf_lmobj.collators.causal import DataCollatorForCausalLM
from hf_lmobj.collators.epoch_callback import CollatorEpochCallback
from hf_lmobj.collators.masked import DataCollatorForMaskedLM
from tests.testing_utils import assert_each_document_alone, packed_documents, tiny_bert

#: select every eligible token and keep it as is: the inputs come out unchanged (layout tests)
UNCHANGED = {"mlm_probability": 1.0, "mask_replace_prob": 0.0, "random_replace_prob": 0.0}


@pytest.fixture(scope="module")
def documents(tokenizer, corpus):
    """Token ids of stdlib files (>= 2.5e5 tokens), with special tokens sprinkled in."""
    docs, total = [], 0
    specials = [
        tokenizer.bos_token_id,
        tokenizer.eos_token_id,
        tokenizer.pad_token_id,
        tokenizer.convert_tokens_to_ids("<extra_id_3>"),
        tokenizer.convert_tokens_to_ids("[X]"),
    ]
    for i, text in enumerate(corpus["train"]["text"]):
        ids = tokenizer(text)["input_ids"][:1500]
        ids[::37] = [specials[(i + j) % len(specials)] for j in range(len(ids[::37]))]
        docs.append(ids)
        total += len(ids)
        if total > 260_000:
            return docs
    raise AssertionError("corpus too small for the statistics test")


def _rows(batch: dict, lengths: list[int], key: str) -> list[list[int]]:
    return [batch[key][r, :n].tolist() for r, n in enumerate(lengths)]


def test_selection_rate_and_replacement_split(tokenizer, documents):
    collator = DataCollatorForMaskedLM(tokenizer, seed=0)
    special = set(tokenizer.all_special_ids)
    counts = dict(eligible=0, selected=0, mask=0, random=0, kept=0)
    for start in range(0, len(documents), 64):
        features = [{"input_ids": d} for d in documents[start : start + 64]]
        batch = collator(features)
        original = torch.full_like(batch["input_ids"], tokenizer.pad_token_id)
        for r, f in enumerate(features):
            original[r, : len(f["input_ids"])] = torch.tensor(f["input_ids"])
        is_special = torch.isin(original, torch.tensor(sorted(special)))
        selected = batch["labels"] != -100
        assert not (selected & is_special).any()  # includes padding: pad is special
        assert torch.equal(batch["labels"][selected], original[selected])
        assert torch.equal(batch["input_ids"][~selected], original[~selected])
        changed = batch["input_ids"][selected]
        masked = changed == tokenizer.mask_token_id
        kept = changed == original[selected]
        assert not torch.isin(changed[~masked & ~kept], torch.tensor(sorted(special))).any()
        counts["eligible"] += int((~is_special).sum())
        counts["selected"] += int(selected.sum())
        counts["mask"] += int(masked.sum())
        counts["kept"] += int(kept.sum())
        counts["random"] += int((~masked & ~kept).sum())
    assert counts["eligible"] >= 100_000
    assert abs(counts["selected"] / counts["eligible"] - 0.15) < 0.005
    for name, share in (("mask", 0.8), ("random", 0.1), ("kept", 0.1)):
        assert abs(counts[name] / counts["selected"] - share) < 0.01, (name, counts)


def test_random_replacements_cover_only_the_non_special_vocabulary(tokenizer):
    collator = DataCollatorForMaskedLM(
        tokenizer, mlm_probability=1.0, mask_replace_prob=0.0, random_replace_prob=1.0, seed=3
    )
    # identical content: the index keys each example (a content key would repeat one mask)
    batch = collator([{"input_ids": [500] * 1000, "idx": i} for i in range(100)])  # ~109 per id
    counts = torch.bincount(batch["input_ids"].flatten(), minlength=len(tokenizer))
    special = torch.tensor(sorted(set(tokenizer.all_special_ids)))
    assert counts[special].sum() == 0
    allowed = torch.ones(len(tokenizer), dtype=torch.bool)
    allowed[special] = False
    assert counts[allowed].min() > 50 and counts[allowed].max() < 180  # uniform, ~109 each


def test_same_seed_same_masks_across_batch_splits_order_and_workers(tokenizer, documents):
    docs = [d[:300] for d in documents[:24]]
    collator = DataCollatorForMaskedLM(tokenizer, seed=7, whole_word_mask=True)
    whole = collator([{"input_ids": d} for d in docs])
    reference = _rows(whole, [len(d) for d in docs], "input_ids")
    split = [collator([{"input_ids": d} for d in docs[a:b]]) for a, b in ((0, 5), (5, 6), (6, 24))]
    again = [
        row
        for b, (a, c) in zip(split, ((0, 5), (5, 6), (6, 24)))
        for row in _rows(b, [len(d) for d in docs[a:c]], "input_ids")
    ]
    assert again == reference
    reversed_batch = collator([{"input_ids": d} for d in docs[::-1]])
    assert _rows(reversed_batch, [len(d) for d in docs[::-1]], "input_ids") == reference[::-1]
    loader = torch.utils.data.DataLoader(
        [{"input_ids": d} for d in docs], batch_size=4, collate_fn=collator, num_workers=2
    )
    from_workers = [
        row for i, b in enumerate(loader) for row in _rows(b, [len(d) for d in docs[4 * i : 4 * i + 4]], "input_ids")
    ]
    assert from_workers == reference
    collator.set_epoch(1)
    assert _rows(collator([{"input_ids": d} for d in docs]), [300] * 24, "input_ids") != reference
    other_seed = DataCollatorForMaskedLM(tokenizer, seed=8, whole_word_mask=True)
    assert _rows(other_seed([{"input_ids": d} for d in docs]), [300] * 24, "input_ids") != reference


def test_index_keys_the_mask_and_unseeded_calls_differ(tokenizer):
    collator = DataCollatorForMaskedLM(tokenizer, mlm_probability=0.5, seed=0)
    same = [{"input_ids": list(range(200, 260)), "idx": i} for i in range(2)]
    batch = collator(same)
    assert not torch.equal(batch["labels"][0], batch["labels"][1])  # same text, other index
    assert torch.equal(collator([same[1]])["labels"][0], batch["labels"][1])
    unseeded = DataCollatorForMaskedLM(tokenizer, mlm_probability=0.5)
    assert not torch.equal(unseeded(same[:1])["labels"], unseeded(same[:1])["labels"])


def test_max_length_splits_examples_into_rows_with_the_same_mask(tokenizer, documents):
    doc = documents[0][:1000]
    whole = DataCollatorForMaskedLM(tokenizer, seed=1)([doc])
    split = DataCollatorForMaskedLM(tokenizer, seed=1, max_length=400, pad_to_multiple_of=64)([doc])
    assert split["input_ids"].shape == (3, 448)
    assert split["attention_mask"].sum(1).tolist() == [400, 400, 200]
    for key in ("input_ids", "labels"):
        joined = torch.cat([split[key][0, :400], split[key][1, :400], split[key][2, :200]])
        assert torch.equal(joined, whole[key][0])
    assert (split["labels"][split["attention_mask"] == 0] == -100).all()


def test_packing_keeps_every_token_once_and_restarts_positions(tokenizer):
    docs = [list(range(200, 200 + n)) for n in (50, 7, 30, 64, 20, 100)]
    collator = DataCollatorForMaskedLM(tokenizer, **UNCHANGED, packing=True, max_length=64)
    batch = collator(docs)
    real = batch["input_ids"] != tokenizer.pad_token_id
    assert sorted(batch["input_ids"][real].tolist()) == sorted(t for d in docs for t in d)
    assert batch["input_ids"].shape[0] == 5  # 271 tokens, one 100-token doc split as 64 + 36
    assert batch["attention_mask"].shape == (5, 1, 64, 64)
    pieces = [batch["input_ids"][r, a:b].tolist() for r, a, b in packed_documents(batch)]
    expected = [d for d in docs if len(d) <= 64] + [docs[5][:64], docs[5][64:]]
    assert sorted(p for p in pieces if p[0] != tokenizer.pad_token_id) == sorted(expected)


def test_flash_packing_emits_sequence_boundaries(tokenizer):
    collator = DataCollatorForMaskedLM(
        tokenizer, packing=True, max_length=16, attn_implementation="flash_attention_2", position_ids_start=2
    )
    batch = collator([[300] * 10, [301] * 6, [302] * 5])
    assert "attention_mask" not in batch
    assert batch["cu_seq_lens_q"].tolist() == [0, 10, 16, 21, 32]  # row 2: 5 tokens then padding
    assert batch["max_length_k"] == 11
    assert batch["position_ids"][0].tolist() == list(range(2, 12)) + list(range(2, 8))


def test_long_packed_rows_get_the_dense_mask_only_when_asked(tokenizer):
    docs = [[300] * 1500, [301] * 600]
    with pytest.raises(ValueError, match="packed_attention='4d_mask'"):
        DataCollatorForMaskedLM(tokenizer, **UNCHANGED, packing=True, max_length=2048)(docs)
    asked = DataCollatorForMaskedLM(tokenizer, **UNCHANGED, packing=True, max_length=2048, packed_attention="4d_mask")(
        docs
    )
    assert asked["attention_mask"].shape == (2, 1, 1500, 1500)
    flash = DataCollatorForMaskedLM(
        tokenizer, **UNCHANGED, packing=True, max_length=2048, attn_implementation="flash_attention_2"
    )(docs)
    assert "attention_mask" not in flash and flash["cu_seq_lens_q"].tolist() == [0, 1500, 2100, 3000]


def _tiny_encoder(name: str, tok, impl: str):
    """A tiny BERT, RoBERTa or ModernBERT (3 layers: sliding-window ones among them) of 80 positions, in eval
    mode, and the collator arguments it needs."""
    if name == "bert":
        return tiny_bert(tok, positions=80, attn_implementation=impl).eval(), {}
    if name == "roberta":
        model = tiny_bert(tok, positions=80, cls=RobertaForMaskedLM, attn_implementation=impl)
        return model.eval(), {"position_ids_start": tok.pad_token_id + 1}
    model = tiny_bert(tok, positions=80, layers=3, cls=ModernBertForMaskedLM, attn_implementation=impl,
                      local_attention=16, global_attn_every_n_layers=2, bos_token_id=tok.bos_token_id,
                      eos_token_id=tok.eos_token_id, cls_token_id=tok.bos_token_id,
                      sep_token_id=tok.eos_token_id)  # fmt: skip
    assert "sliding_attention" in model.config.layer_types
    return model.eval(), {"sliding_window": model.config.sliding_window}


@pytest.mark.parametrize("impl", ["eager", "sdpa"])
@pytest.mark.parametrize("name", ["bert", "roberta", "modernbert"])
def test_each_packed_document_has_its_logits_alone(tokenizer, name, impl):
    model, extra = _tiny_encoder(name, tokenizer, impl)
    gen = torch.Generator().manual_seed(0)
    docs = [torch.randint(200, len(tokenizer), (n,), generator=gen).tolist() for n in (40, 7, 23, 31, 12, 50)]
    collator = DataCollatorForMaskedLM(
        tokenizer, **UNCHANGED, packing=True, max_length=64, attn_implementation=impl, **extra
    )
    batch = collator(docs)
    batch.pop("labels")
    found = assert_each_document_alone(model, batch, docs, position_start=extra.get("position_ids_start", 0))
    with torch.no_grad():
        packed = model(**batch).logits
        unmasked = model(input_ids=batch["input_ids"], position_ids=batch["position_ids"]).logits
    naive = max((alone - unmasked[r, a:b]).abs().max().item() for r, a, b, alone in found)
    assert naive > 1e-3  # without the block mask documents do see each other
    if name == "modernbert":  # one 4D mask for all layers would widen the sliding-window layers
        wide = DataCollatorForMaskedLM(tokenizer, **UNCHANGED, packing=True, max_length=64, attn_implementation=impl)(
            docs
        )
        wide.pop("labels")
        with torch.no_grad():
            assert (model(**wide).logits - packed).abs().max().item() > 1e-4  # vs < 1e-5 above


def test_stock_bert_and_trainer_accept_the_batch_and_the_epoch_callback(tokenizer, documents, tmp_path):
    model, _ = _tiny_encoder("bert", tokenizer, "sdpa")
    collator = DataCollatorForMaskedLM(tokenizer, seed=0, return_sparse_indices=True)
    features = [{"input_ids": d[:60]} for d in documents[:4]]
    batch = collator(features)
    positions = batch.pop("masked_positions")
    assert torch.equal(positions, (batch["labels"].view(-1) != -100).nonzero().flatten())
    logits = model(**{k: v for k, v in batch.items() if k != "labels"}).logits
    sparse = F.cross_entropy(logits.view(-1, logits.shape[-1])[positions], batch["labels"].view(-1)[positions])
    torch.testing.assert_close(model(**batch).loss, sparse)
    assert "masked_positions" not in DataCollatorForMaskedLM(tokenizer)(features)

    seen = []
    stock = DataCollatorForMaskedLM(tokenizer, seed=0)

    def recording(features):
        seen.append(stock.epoch)
        return stock(features)

    args = TrainingArguments(
        output_dir=str(tmp_path),
        per_device_train_batch_size=2,
        num_train_epochs=2,
        report_to=[],
        save_strategy="no",
        use_cpu=True,
        logging_steps=100,
    )
    trainer = Trainer(
        model=model,
        args=args,
        train_dataset=features,
        data_collator=recording,
        callbacks=[CollatorEpochCallback(stock)],
    )
    result = trainer.train()
    assert seen == [0, 0, 1, 1] and torch.isfinite(torch.tensor(result.training_loss))


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"mlm_probability": 1.5}, "mlm_probability"),
        ({"mlm_probability": -0.1}, "mlm_probability"),
        ({"mask_replace_prob": 0.7, "random_replace_prob": 0.4}, "must not exceed 1"),
        ({"random_replace_prob": -0.1}, "random_replace_prob"),
        ({"packing": True}, "needs max_length"),
        ({"packed_attention": "position_ids"}, "encoders build their mask without position_ids"),
        ({"attn_implementation": "flex"}, "attn_implementation"),
        ({"max_length": 0}, "max_length"),
        ({"seed": -1}, "seed"),
        ({"mask_dtype": "int64"}, "mask_dtype"),
    ],
)
def test_bad_arguments_raise_clear_errors(tokenizer, kwargs, message):
    with pytest.raises(ValueError, match=message):
        DataCollatorForMaskedLM(tokenizer, **kwargs)


def test_bad_inputs_raise_clear_errors(tokenizer):
    from transformers import PreTrainedTokenizerFast

    no_mask = PreTrainedTokenizerFast(tokenizer_object=tokenizer.backend_tokenizer, pad_token="<pad>")
    with pytest.raises(ValueError, match="no mask token"):
        DataCollatorForMaskedLM(no_mask)
    collator = DataCollatorForMaskedLM(tokenizer)
    with pytest.raises(ValueError, match="empty batch"):
        collator([])
    with pytest.raises(ValueError, match="no tokens"):
        collator([{"input_ids": []}])
    with pytest.raises(ValueError, match=r"\['text'\]"):
        collator([{"input_ids": [5, 6], "text": "hi"}])
    with pytest.raises(ValueError, match="padded"):
        collator([{"input_ids": [5, 6], "attention_mask": [1, 0]}])
    with pytest.raises(ValueError, match="len\\(tokenizer\\)"):
        collator([[5, len(tokenizer)]])
    with pytest.raises(ValueError, match="some features but not all"):
        collator([{"input_ids": [5], "word_ids": [0]}, {"input_ids": [6]}])
    with pytest.raises(TypeError, match="feature 0"):
        collator([5])
    with pytest.raises(TypeError, match="list of ints"):
        collator([{"input_ids": [300.7, 301.2]}])
    with pytest.raises(TypeError, match="float"):
        collator([{"input_ids": torch.tensor([300.0, 301.0])}])


def test_word_ids_with_none_drive_whole_words_even_without_token_markers():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<mask>": 1, "<s>": 2, **{f"w{i}": i + 3 for i in range(20)}}
    core = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", mask_token="<mask>", bos_token="<s>")
    collator = DataCollatorForMaskedLM(tok, mlm_probability=0.5, whole_word_mask=True, seed=0)
    word_ids = [None] + [w for w in range(50) for _ in range(3)]  # 50 words of 3 tokens
    feature = {"input_ids": [2] + [3 + (t % 20) for t in range(150)], "word_ids": word_ids}
    selected = (collator([feature])["labels"][0] != -100).tolist()
    assert not selected[0]
    thirds = [selected[1 + 3 * w : 4 + 3 * w] for w in range(50)]
    assert all(len(set(t)) == 1 for t in thirds) and 10 < sum(t[0] for t in thirds) < 40
    with pytest.raises(ValueError, match="word_ids"):
        collator([{"input_ids": [3, 4, 5]}])


def test_model_supplies_attention_implementation_and_mask_dtype(tokenizer):
    """``model=`` means the same as in the causal and seq2seq collators: what the batch must match."""
    model = tiny_bert(vocab_size=len(tokenizer), width=16, layers=1, ffn=16, attn_implementation="eager")
    model = model.to(torch.bfloat16)
    collator = DataCollatorForMaskedLM(tokenizer, model=model, max_length=32, packing=True, seed=0)
    assert (collator.attn_implementation, collator.mask_dtype) == ("eager", torch.bfloat16)
    ids = tokenizer("def f(x):\n    return x\n", add_special_tokens=False)["input_ids"]
    batch = collator([{"input_ids": ids}, {"input_ids": ids[:5]}])
    assert batch["attention_mask"].dtype == torch.bfloat16  # the packed 4D mask in the model's dtype
    causal = DataCollatorForCausalLM(tokenizer, model=model, max_length=32)
    assert (causal.attn_implementation, causal.mask_dtype) == ("eager", torch.bfloat16)
    for collator_class in (DataCollatorForMaskedLM, DataCollatorForCausalLM):  # hub flash kernels, both alike
        assert collator_class(tokenizer, attn_implementation="kernels-community/flash-attn3", max_length=32)
