"""DataCollatorForCausalLM against independent references: the formula, stock models, hand examples."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers.processors import TemplateProcessing
from transformers import (
    BambaConfig,
    BambaForCausalLM,
    BloomConfig,
    BloomForCausalLM,
    MambaConfig,
    MambaForCausalLM,
)

from hf_lmobj.collators.causal import DataCollatorForCausalLM
from hf_lmobj.packing.bins import chunk_lengths
from tests.testing_utils import assert_each_document_alone, packed_documents, tiny_gpt2, tiny_llama, tiny_opt

IMPLS = ("eager", "sdpa")
KINDS = ("gpt2", "llama")


def tiny_model(kind: str, impl: str, vocab: int, seed: int = 0, context: int = 64):
    """Hidden 32, 2 layers, ``context`` positions, attention ``impl``. GPT-2's dropout is zeroed: it is noise,
    not a leak, and would make train-mode logits differ run to run."""
    ids = dict(bos_token_id=1, eos_token_id=2)
    if kind == "gpt2":
        return tiny_gpt2(vocab_size=vocab, positions=context, dropout=0.0, seed=seed, attn_implementation=impl, **ids)
    return tiny_llama(vocab_size=vocab, positions=context, seed=seed, attn_implementation=impl, pad_token_id=0, **ids)


def random_docs(lengths, vocab, seed=0, end=None):
    g = torch.Generator().manual_seed(seed)
    docs = [torch.randint(5, vocab, (n,), generator=g).tolist() for n in lengths]
    return [d[:-1] + [end] for d in docs] if end is not None else docs


def reference_loss(logits, tokens, trainable):
    """sum_t CE(logits[:, t], tokens[:, t+1]) * trainable[:, t+1] / sum(trainable[:, 1:])."""
    ce = F.cross_entropy(logits[:, :-1].float().transpose(1, 2), tokens[:, 1:], reduction="none")
    weight = trainable[:, 1:].float()  # (B, T-1)
    return (ce * weight).sum() / weight.sum()


@pytest.fixture(scope="module")
def pad_is_eos(tokenizer):
    tok = copy.deepcopy(tokenizer)
    tok.pad_token = tok.eos_token
    return tok


# --------------------------------------------------------------------------- padding mode
def test_padding_hand_example_trains_eos_when_pad_is_eos(pad_is_eos):
    eos = pad_is_eos.eos_token_id
    batch = DataCollatorForCausalLM(pad_is_eos)([{"input_ids": [7, 8, 9, eos]}, {"input_ids": [5, eos]}])
    assert batch["input_ids"].tolist() == [[7, 8, 9, eos], [5, eos, eos, eos]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1, 1], [1, 1, 0, 0]]
    assert batch["labels"].tolist() == [[-100, 8, 9, eos], [-100, eos, -100, -100]]
    assert batch["shift_labels"].tolist() == [[8, 9, eos, -100], [eos, -100, -100, -100]]
    assert set(batch) == {"input_ids", "attention_mask", "labels", "shift_labels"}


@pytest.mark.parametrize("kind", KINDS)
def test_model_loss_equals_reference_with_pad_eq_eos_and_prompt_labels(kind, pad_is_eos):
    eos, vocab = pad_is_eos.eos_token_id, len(pad_is_eos)
    docs = random_docs([9, 4, 13, 6], vocab, end=eos)
    features = [{"input_ids": d} for d in docs]
    features[2]["labels"] = [-100] * 5 + docs[2][5:]  # a prompt of 5 tokens is not trained
    batch = DataCollatorForCausalLM(pad_is_eos, pad_to_multiple_of=8)(features)
    width = batch["input_ids"].shape[1]
    assert width == 16
    # trainable, built from the documents alone: a real token that is not part of the prompt
    trainable = torch.zeros(len(docs), width, dtype=torch.bool)
    for row, doc in enumerate(docs):
        trainable[row, : len(doc)] = True
    trainable[2, :5] = False
    model = tiny_model(kind, "sdpa", vocab)
    out = model(**batch)
    torch.testing.assert_close(out.loss, reference_loss(out.logits, batch["input_ids"], trainable))
    without_shift = {k: v for k, v in batch.items() if k != "shift_labels"}
    torch.testing.assert_close(model(**without_shift).loss, out.loss)
    assert (batch["labels"][torch.arange(4), [len(d) - 1 for d in docs]] == eos).all()


def test_padding_respects_feature_attention_mask_and_splits_long_features(tokenizer):
    collator = DataCollatorForCausalLM(tokenizer, max_length=4)
    batch = collator([{"input_ids": [0, 0, 7, 8], "attention_mask": [0, 0, 1, 1]}, {"input_ids": [5, 6, 7, 8, 9, 10]}])
    assert batch["input_ids"].tolist() == [[0, 0, 7, 8], [5, 6, 7, 8], [9, 10, 0, 0]]
    assert batch["attention_mask"].tolist() == [[0, 0, 1, 1], [1, 1, 1, 1], [1, 1, 0, 0]]
    # 7 follows padding and 9 starts a chunk: neither is predicted from something before it
    assert batch["labels"].tolist() == [[-100, -100, -100, 8], [-100, 6, 7, 8], [-100, 10, -100, -100]]


def test_add_bos_eos_follow_the_tokenizer_and_are_idempotent(tokenizer):
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    assert DataCollatorForCausalLM(tokenizer)([{"input_ids": [7, 8]}])["input_ids"].tolist() == [[7, 8]]
    wraps = copy.deepcopy(tokenizer)  # a tokenizer that adds <s> ... </s> itself (Llama-like)
    wraps._tokenizer.post_processor = TemplateProcessing(
        single="<s> $A </s>", special_tokens=[("<s>", bos), ("</s>", eos)]
    )
    batch = DataCollatorForCausalLM(wraps)([{"input_ids": [7, 8]}, {"input_ids": [bos, 7, eos]}])
    assert batch["input_ids"].tolist() == [[bos, 7, 8, eos], [bos, 7, eos, wraps.pad_token_id]]
    assert batch["labels"].tolist() == [[-100, 7, 8, eos], [-100, 7, eos, -100]]
    explicit = DataCollatorForCausalLM(tokenizer, add_eos=True, add_bos=False)
    assert explicit([{"input_ids": [7], "labels": [-100]}])["labels"].tolist() == [[-100, eos]]


# --------------------------------------------------------------------------- packing mode
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("mode", ("train", "eval"))
def test_packed_logits_equal_each_document_alone(kind, impl, mode, tokenizer):
    vocab = len(tokenizer)
    docs = random_docs([11, 3, 7, 16, 5, 1, 9], vocab, seed=1)
    collator = DataCollatorForCausalLM(tokenizer, max_length=16, packing=True, attn_implementation=impl)
    batch = collator([{"input_ids": d} for d in docs])
    assert "attention_mask" not in batch  # O(B x T): the model builds its block-causal mask itself
    model = getattr(tiny_model(kind, impl, vocab), mode)()  # default config: use_cache=True
    assert_each_document_alone(model, batch, docs)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("mode", ("train", "eval"))
def test_packed_logits_equal_each_document_alone_at_4096(kind, impl, mode, tokenizer, one_torch_thread):
    vocab = len(tokenizer)
    docs = random_docs([2500, 1200, 3000, 900, 300, 40, 1], vocab, seed=3)
    collator = DataCollatorForCausalLM(
        tokenizer, max_length=4096, packing=True, attn_implementation=impl, pad_to_multiple_of=64
    )  # 4041 tokens in the longer row, then padding
    batch = collator([{"input_ids": d} for d in docs])
    assert batch["input_ids"].shape == (2, 4096) and "attention_mask" not in batch
    model = getattr(tiny_model(kind, impl, vocab, context=4096), mode)()
    assert_each_document_alone(model, batch, docs)


def test_long_packed_batch_is_linear_in_row_length(tokenizer):
    """T = 8192, 8 rows: a few int64 values per position, no tensor that grows with T x T."""
    width, rows = 8192, 8
    g = torch.Generator().manual_seed(4)
    lengths, total = [], 0
    while total < rows * width - 2100:  # leaves room for best fit to close 8 rows
        lengths.append(int(torch.randint(50, 2001, (), generator=g)))
        total += lengths[-1]
    docs = random_docs(lengths, len(tokenizer), seed=4)
    batch = DataCollatorForCausalLM(tokenizer, max_length=width, packing=True)([{"input_ids": d} for d in docs])
    b, t = batch["input_ids"].shape
    assert b == rows and width - 100 < t <= width
    tensors = [v for v in batch.values() if isinstance(v, torch.Tensor)]
    assert max(x.numel() for x in tensors) <= b * t
    assert sum(x.numel() * x.element_size() for x in tensors) <= 48 * b * t


@pytest.mark.parametrize("kind", KINDS)
def test_packed_loss_equals_per_document_reference_and_last_positions_get_no_gradient(kind, tokenizer):
    vocab = len(tokenizer)
    docs = random_docs([10, 6, 14, 3, 8], vocab, seed=2)
    batch = DataCollatorForCausalLM(tokenizer, max_length=16, packing=True)([{"input_ids": d} for d in docs])
    model = tiny_model(kind, "eager", vocab)
    out = model(**batch)
    out.logits.retain_grad()
    out.loss.backward()
    # reference from the documents alone: every token after the first of its document is a target
    nll, count = torch.zeros(()), 0
    with torch.no_grad():
        for doc in docs:
            ids = torch.tensor([doc])
            logits = model(input_ids=ids).logits
            nll += F.cross_entropy(logits[0, :-1], ids[0, 1:], reduction="sum")
            count += len(doc) - 1
    torch.testing.assert_close(out.loss.detach(), nll / count)
    grad = out.logits.grad  # (B, T, V)
    assert torch.equal(grad[:, -1], torch.zeros_like(grad[:, -1]))
    for row, _, end in packed_documents(batch):
        assert torch.equal(grad[row, end - 1], torch.zeros_like(grad[row, end - 1]))


@pytest.mark.parametrize("impl", IMPLS)
def test_model_whose_mask_ignores_position_ids_gets_the_4d_mask(impl, tokenizer):
    vocab = len(tokenizer)
    docs = random_docs([11, 3, 7, 16, 5], vocab, seed=5)
    model = tiny_opt(vocab, dropout=0.0, attn_implementation=impl).eval()  # its mask ignores position_ids
    plain = DataCollatorForCausalLM(tokenizer, max_length=16, packing=True, attn_implementation=impl)
    leaky = plain([{"input_ids": d} for d in docs])
    with torch.no_grad(), pytest.raises(AssertionError):  # position_ids alone: OPT mixes documents
        assert_each_document_alone(model, leaky, docs)
    collator = DataCollatorForCausalLM(tokenizer, max_length=16, packing=True, model=model)
    batch = collator([{"input_ids": d} for d in docs])
    assert batch["attention_mask"].shape[1:] == (1, 16, 16)
    assert_each_document_alone(model, batch, docs)


def test_4d_mask_is_built_for_long_rows_only_when_asked(tokenizer):
    vocab = len(tokenizer)
    model = tiny_opt(vocab, 4096, dropout=0.0, attn_implementation="sdpa")
    collator = DataCollatorForCausalLM(tokenizer, max_length=4096, packing=True, model=model)
    with pytest.raises(ValueError, match="packed_attention='4d_mask'"):
        collator([{"input_ids": [5] * 3000}, {"input_ids": [6] * 1000}])
    asked = DataCollatorForCausalLM(tokenizer, max_length=4096, packing=True, model=model, packed_attention="4d_mask")
    # a packed batch is max_length wide (4000 tokens, then a 96-token padding tail)
    assert asked([{"input_ids": [5] * 3000}, {"input_ids": [6] * 1000}])["attention_mask"].shape == (1, 1, 4096, 4096)


def test_model_that_cannot_take_packed_documents_is_refused(tokenizer):
    vocab = len(tokenizer)
    bloom = BloomForCausalLM(BloomConfig(vocab_size=vocab, hidden_size=32, n_layer=2, n_head=2))
    with pytest.raises(ValueError, match="BloomForCausalLM.*position_ids.*packing=False"):
        DataCollatorForCausalLM(tokenizer, max_length=16, packing=True, model=bloom)
    DataCollatorForCausalLM(tokenizer, max_length=16, model=bloom)  # padding mode is fine
    mamba = MambaForCausalLM(MambaConfig(vocab_size=vocab, hidden_size=32, num_hidden_layers=2, state_size=4))
    with pytest.raises(ValueError, match="MambaForCausalLM"):
        DataCollatorForCausalLM(tokenizer, max_length=16, packing=True, model=mamba)
    hybrid = BambaForCausalLM(
        BambaConfig(  # takes position_ids, but its mamba layers carry state across
            vocab_size=vocab,
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=2,
            mamba_n_heads=4,
            mamba_d_head=16,
            mamba_d_state=8,
            mamba_n_groups=1,
            attn_layer_indices=[1],
        )
    )
    with pytest.raises(ValueError, match="BambaForCausalLM has \\['linear_attention'\\] layers"):
        DataCollatorForCausalLM(tokenizer, max_length=16, packing=True, model=hybrid)


@pytest.mark.parametrize("name", ["mistral", "qwen2"])
@pytest.mark.parametrize("mode", ("train", "eval"))
def test_model_checked_for_position_ids_isolates_documents(name, mode, tokenizer):
    """Other families the code check clears for position_ids (Mistral: a sliding window of 8)."""
    from transformers import MistralForCausalLM, Qwen2ForCausalLM

    vocab = len(tokenizer)
    if name == "mistral":
        model = tiny_llama(vocab_size=vocab, kv_heads=1, cls=MistralForCausalLM, sliding_window=8)
    else:
        model = tiny_llama(vocab_size=vocab, kv_heads=1, cls=Qwen2ForCausalLM)
    docs = random_docs([11, 3, 7, 16, 5, 1, 9], vocab, seed=6)
    collator = DataCollatorForCausalLM(tokenizer, max_length=16, packing=True, model=model)
    batch = collator([{"input_ids": d} for d in docs])
    assert "attention_mask" not in batch and batch["use_cache"] is False  # the position_ids form
    assert_each_document_alone(getattr(model, mode)(), batch, docs)


def test_model_supplies_attention_implementation(tokenizer):
    llama = tiny_model("llama", "eager", len(tokenizer))
    collator = DataCollatorForCausalLM(tokenizer, max_length=16, packing=True, model=llama)
    assert collator.attn_implementation == "eager"
    batch = collator([{"input_ids": [5] * 5}, {"input_ids": [6] * 3}])
    assert batch["use_cache"] is False and "attention_mask" not in batch


def test_flash_attention_gets_cu_seq_lens_and_no_mask(tokenizer):
    collator = DataCollatorForCausalLM(tokenizer, max_length=8, packing=True, attn_implementation="flash_attention_2")
    batch = collator([{"input_ids": [5] * 5}, {"input_ids": [6] * 3}, {"input_ids": [7] * 4}])
    assert "attention_mask" not in batch
    assert batch["position_ids"].tolist() == [[0, 1, 2, 3, 4, 0, 1, 2], [0, 1, 2, 3, 0, 1, 2, 3]]
    assert batch["cu_seq_lens_q"].tolist() == [0, 5, 8, 12, 16] and batch["max_length_k"] == 5


def test_seq_lengths_rows_reach_every_packed_attention_form(tokenizer):
    """Hand-worked: rows [3 | 2] and [4] of max_length 6 -> position_ids, cu_seq_lens, a 4D mask."""
    rows = [{"input_ids": [5, 6, 7, 8, 9], "seq_lengths": [3, 2]}, {"input_ids": [5, 6, 7, 8], "seq_lengths": [4]}]
    positions = [[0, 1, 2, 0, 1, 0], [0, 1, 2, 3, 0, 1]]  # the padding tail counts on as its own document
    flash = DataCollatorForCausalLM(tokenizer, max_length=6, attn_implementation="flash_attention_2")(rows)
    assert flash["position_ids"].tolist() == positions
    assert flash["cu_seq_lens_q"].tolist() == [0, 3, 5, 6, 10, 12] and flash["max_length_q"] == 4
    mask = DataCollatorForCausalLM(tokenizer, max_length=6, packed_attention="4d_mask")(rows)["attention_mask"]
    allowed = (mask[0, 0] == 0).int().tolist()  # row 0: documents {0, 1, 2}, {3, 4}, {5}
    assert allowed == [[1, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0], [1, 1, 1, 0, 0, 0],
                       [0, 0, 0, 1, 0, 0], [0, 0, 0, 1, 1, 0], [0, 0, 0, 0, 0, 1]]  # fmt: skip
    plain = DataCollatorForCausalLM(tokenizer, max_length=6, packing=True)(rows)
    assert plain["position_ids"].tolist() == positions and plain["use_cache"] is False
    assert plain["labels"].tolist() == [[-100, 6, 7, -100, 9, -100], [-100, 6, 7, 8, -100, -100]]


@pytest.mark.parametrize("multiple", (None, 8))
def test_packed_batches_are_max_length_wide_whatever_the_fill(multiple, tokenizer):
    """dispatch_batches concatenates every process's batch: packed batches have one width per run."""
    width = 20 if multiple is None else 24
    packing = DataCollatorForCausalLM(tokenizer, max_length=20, packing=True, pad_to_multiple_of=multiple)
    rows = DataCollatorForCausalLM(tokenizer, max_length=20, pad_to_multiple_of=multiple)
    padding = DataCollatorForCausalLM(tokenizer, max_length=20, pad_to_multiple_of=multiple)
    for lengths in ([3], [7, 2], [20], [19, 1, 1], [5] * 9):
        docs = [{"input_ids": [5] * n} for n in lengths]
        assert packing(docs)["input_ids"].shape[1] == width
        packed = [{"input_ids": [5] * n, "seq_lengths": [n]} for n in lengths]
        assert rows(packed)["input_ids"].shape == (len(lengths), width)
        # padding mode on plain documents is unchanged: as wide as the longest row, rounded up
        assert padding(docs)["input_ids"].shape[1] == (max(lengths) if multiple is None else -(-max(lengths) // 8) * 8)


def test_no_pad_token_is_fine_in_packed_batches(tokenizer):
    no_pad = copy.deepcopy(tokenizer)
    no_pad.pad_token = None
    batch = DataCollatorForCausalLM(no_pad, max_length=8, packing=True)([{"input_ids": [5, 6, 7]}])
    assert batch["input_ids"].tolist() == [[5, 6, 7, 0, 0, 0, 0, 0]] and batch["labels"][0, 3:].eq(-100).all()
    assert batch["position_ids"].tolist() == [[0, 1, 2, 0, 1, 2, 3, 4]]  # the tail is its own document


def test_packed_batch_of_tensors_only_when_use_cache_is_left_out(tokenizer):
    """accelerate's dispatch_batches broadcasts tensors only: the bool can be left out."""
    collator = DataCollatorForCausalLM(tokenizer, max_length=8, packing=True, return_use_cache=False)
    batch = collator([{"input_ids": [5] * 5}, {"input_ids": [6] * 3}])
    assert set(batch) == {"input_ids", "labels", "shift_labels", "position_ids"}
    assert all(isinstance(v, torch.Tensor) for v in batch.values())


def test_packing_stats_counts_the_rectangle(tokenizer):
    collator = DataCollatorForCausalLM(tokenizer, max_length=10, packing=True)
    stats = collator.packing_stats([{"input_ids": [5] * n} for n in (6, 5, 4, 3, 2)])
    assert (stats.num_tokens, stats.num_rows, stats.row_length, stats.efficiency) == (20, 2, 10, 1.0)
    padded = DataCollatorForCausalLM(tokenizer).packing_stats([{"input_ids": [5] * n} for n in (6, 2)])
    assert padded.efficiency == 8 / 12


# --------------------------------------------------------------------------- properties
doc_lists = st.lists(st.lists(st.integers(5, 1023), min_size=1, max_size=40), min_size=1, max_size=12)


@settings(max_examples=500, deadline=None)
@given(docs=doc_lists, max_length=st.integers(2, 32), data=st.data())
def test_packing_keeps_every_token_once_and_never_predicts_across_documents(docs, max_length, data, tokenizer):
    impl = data.draw(st.sampled_from(IMPLS + ("flash_attention_2",)))
    features = []
    for doc in docs:  # labels: each token trained or not at random
        keep = data.draw(st.lists(st.booleans(), min_size=len(doc), max_size=len(doc)))
        features.append({"input_ids": doc, "labels": [t if k else -100 for t, k in zip(doc, keep)]})
    collator = DataCollatorForCausalLM(tokenizer, max_length=max_length, packing=True, attn_implementation=impl)
    # expected chunks (ids, labels with the chunk's first label unset), as a multiset
    expected = []
    for feature in features:
        start = 0
        for size in chunk_lengths(len(feature["input_ids"]), max_length):
            chunk_labels = [-100] + feature["labels"][start + 1 : start + size]
            expected.append((feature["input_ids"][start : start + size], chunk_labels))
            start += size
    if all(label == -100 for _, chunk_labels in expected for label in chunk_labels):
        with pytest.raises(ValueError, match="no target"):  # nothing to train: refused, not a silent batch
            collator(features)
        return
    batch = collator(features)
    ids, labels, shift, pos = (batch[k] for k in ("input_ids", "labels", "shift_labels", "position_ids"))
    assert ids.shape[1] <= max_length
    got = []
    for row, start, end in packed_documents(batch):
        if ids[row, start] != tokenizer.pad_token_id:  # ids are >= 5: pad (0) only pads
            got.append((ids[row, start:end].tolist(), labels[row, start:end].tolist()))
        else:
            assert (labels[row, start:end] == -100).all()
    assert sorted(got) == sorted(expected)
    assert torch.equal(shift[:, :-1], labels[:, 1:]) and (shift[:, -1] == -100).all()
    # a target at t is always the next token of the same document
    targets = shift != -100
    assert (pos[:, 1:][targets[:, :-1]] == pos[:, :-1][targets[:, :-1]] + 1).all()
    if impl in IMPLS:  # no mask: the model isolates documents from position_ids, with no cache
        assert "attention_mask" not in batch and batch["use_cache"] is False


@settings(max_examples=200, deadline=None)
@given(docs=doc_lists, max_length=st.one_of(st.none(), st.integers(2, 32)))
def test_padding_keeps_every_token_in_order(docs, max_length, tokenizer):
    collator = DataCollatorForCausalLM(tokenizer, max_length=max_length)
    if all(len(d) == 1 for d in docs):  # every row a single token: no target at all
        with pytest.raises(ValueError, match="no target"):
            collator([{"input_ids": d} for d in docs])
        return
    batch = collator([{"input_ids": d} for d in docs])
    mask = batch["attention_mask"].bool()
    rows = [batch["input_ids"][r][mask[r]].tolist() for r in range(mask.shape[0])]
    assert [t for r in rows for t in r] == [t for d in docs for t in d]
    trained = mask.clone()  # every real token but the first of its row (each row is one chunk)
    trained[:, 0] = False
    assert torch.equal(batch["labels"] != -100, trained)
    assert torch.equal(batch["labels"][trained], batch["input_ids"][trained])


# --------------------------------------------------------------------------- bad input
@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"max_length": 0}, "max_length must be an int >= 2"),
        ({"max_length": 1}, "max_length must be an int >= 2"),
        ({"max_length": -3}, "max_length must be an int >= 2"),
        ({"packing": True}, "packing=True needs max_length"),
        ({"pad_to_multiple_of": 0}, "pad_to_multiple_of"),
        ({"attn_implementation": "flex"}, "attn_implementation must be one of"),
        ({"packed_attention": "mask"}, "packed_attention must be one of"),
        ({"return_tensors": "np"}, "return_tensors"),
        ({"mask_dtype": torch.int64}, "mask_dtype"),
    ],
)
def test_bad_arguments(kwargs, message, tokenizer):
    with pytest.raises(ValueError, match=message):
        DataCollatorForCausalLM(tokenizer, **kwargs)


@pytest.mark.parametrize(
    "features, error, message",
    [
        ([], ValueError, "empty batch"),
        ([{"labels": [1, 2]}], ValueError, "no 'input_ids'"),
        ([[1, 2, 3]], TypeError, "must be a dict"),
        ([{"input_ids": [1.0, 2.0]}], TypeError, "must be a 1D list of ints"),
        ([{"input_ids": torch.tensor([1.5])}], TypeError, "must be a 1D list of ints"),
        ([{"input_ids": [True, False]}], TypeError, "must be a 1D list of ints"),
        ([{"input_ids": ["a", "b"]}], TypeError, "1D list of ints"),
        ([{"input_ids": [[1, 2], [3, 4]]}], ValueError, "must be 1D"),
        ([{"input_ids": [[1, 2], [3]]}], TypeError, "1D list of ints"),
        ([{"input_ids": torch.tensor([1, 2], dtype=torch.bfloat16)}], TypeError, "bfloat16"),
        ([{"input_ids": []}], ValueError, "is empty"),
        ([{"input_ids": [5, 1024]}], ValueError, r"\[0, len\(tokenizer\)=1024\)"),
        ([{"input_ids": [-1, 5]}], ValueError, r"\[0, len\(tokenizer\)"),
        ([{"input_ids": [5, 6], "labels": [5]}], ValueError, "labels has length 1"),
        ([{"input_ids": [5, 6], "labels": [5, 4096]}], ValueError, "labels must be -100 or in"),
        ([{"input_ids": [5, 6], "labels": [5.0, 6.0]}], TypeError, "labels must be a 1D list of ints"),
        ([{"input_ids": [5, 6], "position_ids": [0, 2]}], ValueError, "restart at 0"),
        ([{"input_ids": [5, 6], "position_ids": [0]}], ValueError, "position_ids length"),
        ([{"input_ids": [5, 6], "seq_lengths": [1]}], ValueError, "seq_lengths sum"),
    ],
)
def test_bad_features(features, error, message, tokenizer):
    with pytest.raises(error, match=message):
        DataCollatorForCausalLM(tokenizer, max_length=8, packing=True)(features)


def test_padding_in_packed_features_is_rejected(tokenizer):
    with pytest.raises(ValueError, match="must not contain padding"):
        DataCollatorForCausalLM(tokenizer, max_length=8, packing=True)(
            [{"input_ids": [5, 6, 0], "attention_mask": [1, 1, 0]}]
        )


def test_no_pad_token_only_fails_where_padding_is_needed(tokenizer):
    no_pad = copy.deepcopy(tokenizer)
    no_pad.pad_token = None
    collator = DataCollatorForCausalLM(no_pad)
    assert collator([{"input_ids": [5, 6]}, {"input_ids": [7, 8]}])["input_ids"].tolist() == [[5, 6], [7, 8]]
    with pytest.raises(ValueError, match="no pad_token"):
        collator([{"input_ids": [5, 6]}, {"input_ids": [7]}])


def test_add_bos_without_bos_token(tokenizer):
    no_bos = copy.deepcopy(tokenizer)
    no_bos.bos_token = None
    with pytest.raises(ValueError, match="no bos_token"):
        DataCollatorForCausalLM(no_bos, add_bos=True)
