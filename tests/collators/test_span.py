"""T5 span corruption: exact lengths, exact counts, lossless reconstruction, packing, a tiny T5."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, models
from transformers import PreTrainedTokenizerFast

from hf_lmobj.collators._noise import (
    compute_input_and_target_lengths,
    corrupted_lengths,
    random_spans_noise_mask,
    span_corrupt,
)
from hf_lmobj.collators.span import (
    DataCollatorForSpanCorruption,
    iter_packed_span_corruption,
    sentinel_token_ids,
)
from tests.testing_utils import real, reconstruct, tiny_t5

pytestmark = pytest.mark.usefixtures("one_torch_thread")


UL2_SETTINGS = [(0.15, 3.0), (0.15, 8.0), (0.5, 3.0), (0.5, 8.0), (0.15, 64.0), (0.5, 64.0)]


def reference_t5_lengths(inputs_length: int, density: float, mean: float) -> tuple[int, int]:
    """T5's ``random_spans_helper`` re-derived: scan every raw length, keep the longest that fits."""

    def inputs_targets(n: int) -> tuple[int, int]:
        noise = int(round(n * density))
        spans = int(round(noise / mean))
        return n - noise + spans + 1, noise + spans + 1

    best = max(n for n in range(inputs_length, 4 * inputs_length) if inputs_targets(n)[0] <= inputs_length)
    inputs, targets = inputs_targets(best)
    if density == 0.5 and targets > inputs:
        return best - 1, targets - 1
    return best, targets


def descending_tokenizer(num_words: int = 200, num_sentinels: int = 100) -> PreTrainedTokenizerFast:
    """A word-level tokenizer laid out like T5's: ``<extra_id_0>`` is the LAST id, ids descend."""
    vocab = {"<pad>": 0, "</s>": 1, "<unk>": 2}
    vocab.update({f"w{i}": 3 + i for i in range(num_words)})
    for k in range(num_sentinels):
        vocab[f"<extra_id_{k}>"] = 3 + num_words + num_sentinels - 1 - k
    core = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="</s>", unk_token="<unk>")


# ---------------------------------------------------------------- lengths


@pytest.mark.parametrize("inputs_length, expected", [(512, (568, 114)), (128, (141, 29)), (1024, (1137, 229))])
def test_t5_length_table(inputs_length, expected):
    assert compute_input_and_target_lengths(inputs_length, 0.15, 3.0) == expected
    assert reference_t5_lengths(inputs_length, 0.15, 3.0) == expected


@pytest.mark.parametrize("density, mean", UL2_SETTINGS)
@pytest.mark.parametrize("inputs_length", [64, 128, 256, 512, 1024, 2048])
def test_ul2_settings_lengths_match_t5_formula(density, mean, inputs_length):
    expected = reference_t5_lengths(inputs_length, density, mean)
    assert compute_input_and_target_lengths(inputs_length, density, mean) == expected


@pytest.mark.parametrize("density, mean", [(0.15, 3.0), *UL2_SETTINGS[1:]])
@pytest.mark.parametrize("inputs_length", [256, 512])
def test_fixed_length_outputs_are_exact(tokenizer, density, mean, inputs_length):
    raw, targets = compute_input_and_target_lengths(inputs_length, density, mean)
    if round(round(raw * density) / mean) > 100:  # more spans than the tokenizer's 100 sentinels
        with pytest.raises(ValueError, match="sentinels"):
            DataCollatorForSpanCorruption(tokenizer, density, mean, input_length=inputs_length)
        return
    collator = DataCollatorForSpanCorruption(tokenizer, density, mean, input_length=inputs_length, seed=0)
    assert (collator.raw_tokens_length, collator.targets_length) == (raw, targets)
    features = [{"input_ids": [300 + (i + j) % 700 for j in range(raw)]} for i in range(4)]
    batch = collator(features)
    assert batch["input_ids"].shape == (4, inputs_length)
    assert batch["labels"].shape == (4, targets)
    real_inputs, real_targets = corrupted_lengths(raw, density, mean)
    assert batch["attention_mask"].sum(1).tolist() == [real_inputs] * 4
    assert (batch["labels"] != -100).sum(1).tolist() == [real_targets] * 4
    if (inputs_length, density, mean) == (512, 0.15, 3.0):  # the T5 default fills both exactly
        assert (real_inputs, real_targets) == (512, 114)


# ---------------------------------------------------------------- counts and reconstruction


@settings(max_examples=200, deadline=None)
@given(
    length=st.integers(2, 3000),
    density=st.floats(0.01, 0.99),
    mean=st.floats(1.0, 70.0),
    seed=st.integers(0, 2**32),
)
def test_noise_mask_has_exact_counts(length, density, mean, seed):
    mask = random_spans_noise_mask(length, density, mean, torch.Generator().manual_seed(seed))
    noise = min(max(round(length * density), 1), length - 1)
    spans = min(max(round(noise / mean), 1), noise, length - noise)
    assert mask.shape == (length,) and int(mask.sum()) == noise
    assert not bool(mask[0]) and bool(mask[-1])  # starts with non-noise, ends inside noise (T5)
    starts = mask & ~torch.cat([torch.tensor([False]), mask[:-1]])
    assert int(starts.sum()) == spans


def check_reconstruction(tokenizer, tokens, density, mean, seed):
    collator = DataCollatorForSpanCorruption(tokenizer, density, mean, seed=seed)
    sentinels = sentinel_token_ids(tokenizer)
    batch = collator([{"input_ids": tokens}])
    inputs = real(batch["input_ids"][0], batch["attention_mask"][0])
    labels = real(batch["labels"][0])
    eos = tokenizer.eos_token_id
    assert inputs[-1] == eos and labels[-1] == eos
    seen_in = [t for t in inputs if t in sentinels]
    seen_out = [t for t in labels if t in sentinels]
    assert seen_in == seen_out == sentinels[: len(seen_in)]  # numbered 0, 1, 2 ... in order
    noise = min(max(round(len(tokens) * density), 1), len(tokens) - 1)
    assert len(seen_in) == min(max(round(noise / mean), 1), noise, len(tokens) - noise)
    assert len(labels) - len(seen_out) - 1 == noise
    assert reconstruct(inputs[:-1], labels, set(sentinels), eos) == tokens


token_lists = st.lists(st.integers(110, 1000), min_size=2, max_size=400)


@settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tokens=token_lists, density=st.floats(0.05, 0.9), mean=st.floats(1.0, 10.0), seed=st.integers(0, 10**6))
def test_reconstruction_ascending_sentinels(tokenizer, tokens, density, mean, seed):
    assert sentinel_token_ids(tokenizer)[:2] == sorted(sentinel_token_ids(tokenizer)[:2])
    check_reconstruction(tokenizer, tokens, density, mean, seed)


DESCENDING = descending_tokenizer()


@settings(max_examples=500, deadline=None)
@given(
    tokens=st.lists(st.integers(3, 202), min_size=2, max_size=400),
    density=st.floats(0.05, 0.9),
    mean=st.floats(1.0, 10.0),
    seed=st.integers(0, 10**6),
)
def test_reconstruction_descending_sentinels(tokens, density, mean, seed):
    ids = sentinel_token_ids(DESCENDING)
    assert ids[0] == 302 and ids[1] == 301  # T5 layout, looked up rather than assumed
    check_reconstruction(DESCENDING, tokens, density, mean, seed)


@pytest.mark.parametrize(
    "density, mean, length",
    [(0.15, 3.0, 568), (0.15, 8.0, 568), (0.5, 3.0, 568), (0.5, 8.0, 568), (0.15, 64.0, 4096), (0.5, 64.0, 4096)],
)
def test_mean_span_length_within_ten_percent(density, mean, length):
    sentinels = torch.arange(1000, 1400)
    span_lengths = []
    for seed in range(50):
        mask = random_spans_noise_mask(length, density, mean, torch.Generator().manual_seed(seed))
        _, targets = span_corrupt(torch.arange(length) + 10_000, mask, sentinels, eos_token_id=-1)
        is_sentinel = torch.isin(targets, sentinels)
        span_lengths += is_sentinel.nonzero().flatten().diff().tolist() + [
            len(targets) - 1 - int(is_sentinel.nonzero()[-1])
        ]
    observed = sum(span_lengths) / len(span_lengths) - 1  # each gap counts its sentinel once
    assert abs(observed - mean) <= 0.1 * mean


# ---------------------------------------------------------------- packing


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lengths=st.lists(st.integers(1, 200), min_size=1, max_size=6),
    input_length=st.integers(8, 128),
    seed=st.integers(0, 1000),
)
def test_packing_keeps_every_token_and_document(tokenizer, lengths, input_length, seed):
    docs = [[110 + (7 * d + i) % 800 for i in range(n)] for d, n in enumerate(lengths)]
    collator = DataCollatorForSpanCorruption(tokenizer, input_length=input_length, packing=True, seed=seed)
    if all(n == 1 for n in lengths):  # nothing to corrupt anywhere: no target, refused
        with pytest.raises(ValueError, match="no target"):
            collator([{"input_ids": d} for d in docs])
        return
    batch = collator([{"input_ids": d} for d in docs])
    assert batch["input_ids"].shape[1] == input_length
    assert batch["labels"].shape[1] == collator.targets_length
    sentinels, eos = set(sentinel_token_ids(tokenizer)), tokenizer.eos_token_id
    pieces = []
    for row in range(batch["input_ids"].shape[0]):
        inputs = real(batch["input_ids"][row], batch["attention_mask"][row])
        flat = reconstruct(inputs, real(batch["labels"][row]), sentinels, eos)
        assert flat[-1] == eos
        pieces += [list(g) for k, g in itertools.groupby(flat, lambda t: t == eos) if not k]
    # the pieces, in order, tile the documents exactly: no token lost, no span across documents
    expected_docs, cursor = iter(docs), []
    for piece in pieces:
        if not cursor:
            cursor = list(next(expected_docs))
        assert cursor[: len(piece)] == piece
        cursor = cursor[len(piece) :]
    assert not cursor and next(expected_docs, None) is None


def test_dataset_packing_carries_remainder(tokenizer):
    collator = DataCollatorForSpanCorruption(tokenizer, input_length=64, packing=True, seed=3)
    docs = [{"input_ids": list(range(200, 200 + n))} for n in (150, 20, 5, 300)]
    rows = list(iter_packed_span_corruption(docs, collator))
    assert all(len(r["input_ids"]) == 64 and len(r["labels"]) == collator.targets_length for r in rows)
    sentinels = set(sentinel_token_ids(tokenizer))
    eos = tokenizer.eos_token_id
    tokens = []
    for r in rows:
        inputs = [t for t, m in zip(r["input_ids"], r["attention_mask"]) if m]
        tokens += [t for t in reconstruct(inputs, r["labels"], sentinels, eos) if t != eos]
    assert tokens == [t for d in docs for t in d["input_ids"]]


# ---------------------------------------------------------------- seeding, decoder inputs, model


def test_seeded_masks_are_per_example_and_per_epoch(tokenizer):
    a, b = {"input_ids": list(range(200, 400))}, {"input_ids": list(range(500, 700))}
    collator = DataCollatorForSpanCorruption(tokenizer, seed=5)
    alone = collator([a])["input_ids"][0]
    together = collator([b, a])["input_ids"][1]
    assert torch.equal(alone[: len(together)], together[: len(alone)])
    assert torch.equal(DataCollatorForSpanCorruption(tokenizer, seed=5)([a])["input_ids"][0], alone)
    collator.set_epoch(1)
    assert not torch.equal(collator([a])["input_ids"][0], alone)


def test_decoder_inputs_are_labels_shifted_right(tokenizer):
    model = tiny_t5(tokenizer)
    collator = DataCollatorForSpanCorruption(tokenizer, model=model, seed=0)
    batch = collator([{"input_ids": list(range(300, 300 + n))} for n in (40, 90, 12)])
    assert torch.equal(batch["decoder_input_ids"], model._shift_right(batch["labels"]))
    other = DataCollatorForSpanCorruption(tokenizer, decoder_start_token_id=7, seed=0)
    assert (other([{"input_ids": list(range(300, 340))}])["decoder_input_ids"][:, 0] == 7).all()


def test_tiny_t5_learns_from_span_batches(tokenizer, corpus):
    torch.manual_seed(0)
    collator = DataCollatorForSpanCorruption(tokenizer, input_length=64, seed=0)
    raw = collator.raw_tokens_length
    stream = [t for text in corpus["train"]["text"][:40] for t in tokenizer(text)["input_ids"]]
    chunks = [{"input_ids": stream[i : i + raw]} for i in range(0, 36 * 16 * raw, raw)]
    held_out = collator(chunks[-16:])
    model = tiny_t5(tokenizer, seed=None)  # drawn from the test's seed 0
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)

    def loss_on(batch) -> float:
        with torch.no_grad():
            return float(model(**batch).loss)

    before = loss_on(held_out)
    model.train()
    for step in range(30):
        loss = model(**collator(chunks[16 * step : 16 * step + 16])).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    after = loss_on(held_out)
    assert after < before - 1.0, (before, after)


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize("density", [0.0, 1.0, -0.1, 1.5])
def test_noise_density_outside_open_unit_interval(tokenizer, density):
    with pytest.raises(ValueError, match="noise_density"):
        DataCollatorForSpanCorruption(tokenizer, noise_density=density)
    with pytest.raises(ValueError, match="noise_density"):
        compute_input_and_target_lengths(512, density, 3.0)


def test_mean_span_below_one(tokenizer):
    with pytest.raises(ValueError, match="mean_noise_span_length"):
        DataCollatorForSpanCorruption(tokenizer, mean_noise_span_length=0.5)


def test_tokenizer_without_sentinels_or_eos():
    no_sentinels = descending_tokenizer(num_sentinels=0)
    with pytest.raises(ValueError, match="sentinel"):
        DataCollatorForSpanCorruption(no_sentinels)
    no_eos = descending_tokenizer()
    no_eos.eos_token = None
    with pytest.raises(ValueError, match="eos"):
        DataCollatorForSpanCorruption(no_eos)


def test_short_long_and_sentinel_examples_raise(tokenizer):
    collator = DataCollatorForSpanCorruption(tokenizer, input_length=32, seed=0)
    with pytest.raises(ValueError, match="at least 2"):
        collator([{"input_ids": [300]}])
    with pytest.raises(ValueError, match="raw_tokens_length"):
        collator([{"input_ids": list(range(300, 300 + collator.raw_tokens_length + 1))}])
    with pytest.raises(ValueError, match="sentinel"):
        collator([{"input_ids": [300, sentinel_token_ids(tokenizer)[3], 301]}])
    with pytest.raises(ValueError, match="input_length"):
        DataCollatorForSpanCorruption(tokenizer, packing=True)


def test_trailing_eos_is_an_end_marker_not_content(tokenizer):
    collator = DataCollatorForSpanCorruption(tokenizer, seed=0)
    tokens = list(range(300, 380))
    plain = collator([{"input_ids": tokens, "idx": 0}])
    with_eos = collator([{"input_ids": tokens + [tokenizer.eos_token_id], "idx": 0}])
    for key in plain:
        assert torch.equal(plain[key], with_eos[key])
    assert int((plain["input_ids"][0] == tokenizer.eos_token_id).sum()) == 1


@pytest.mark.parametrize(
    "bad,error",
    [
        ([300.7, 301.2], TypeError),
        (torch.tensor([300.0, 301.0]), TypeError),
        ([5000, 301], ValueError),
        ([-7, 300], ValueError),
        ([[300, 301], [302, 303]], ValueError),
        ([], ValueError),
    ],
)
def test_bad_token_ids_are_rejected_at_the_entry_by_every_denoiser(tokenizer, bad, error):
    from hf_lmobj.collators.text_infilling import DataCollatorForTextInfilling
    from hf_lmobj.collators.ul2 import DataCollatorForUL2

    for collator_class in (DataCollatorForSpanCorruption, DataCollatorForUL2, DataCollatorForTextInfilling):
        with pytest.raises(error, match="feature 0: input_ids"):
            collator_class(tokenizer, seed=0)([{"input_ids": bad}])
