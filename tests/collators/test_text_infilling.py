"""BART text infilling: exact mask budget, Poisson spans, one mask per span, sentence permutation."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from transformers.models.bart.modeling_bart import shift_tokens_right

from hf_lmobj.collators.text_infilling import (
    DataCollatorForTextInfilling,
    permute_sentences,
    poisson_span_lengths,
    text_infilling,
)
from tests.testing_utils import assert_right_padded, tiny_bart

MASK = 4


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def runs_between_masks(noised: list[int]) -> list[list[int]]:
    runs, current = [], []
    for token in noised:
        if token == MASK:
            runs.append(current)
            current = []
        else:
            current.append(token)
    return runs + [current]


def embeds_in_order(runs: list[list[int]], original: list[int]) -> bool:
    """Whether the kept runs occur in ``original`` in order, contiguously, without overlap."""
    cursor = 0
    for run in runs:
        for start in range(cursor, len(original) - len(run) + 1):
            if original[start : start + len(run)] == run:
                cursor = start + len(run)
                break
        else:
            return False
    return True


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(1, 400),
    ratio=st.floats(0.05, 0.9),
    rate=st.floats(0.5, 6.0),
    seed=st.integers(0, 10**6),
)
def test_exact_budget_and_one_mask_per_span(n, ratio, rate, seed):
    original = list(range(100, 100 + n))  # distinct tokens: the alignment is unambiguous
    generator = torch.Generator().manual_seed(seed)
    noised = text_infilling(torch.tensor(original), ratio, rate, MASK, generator).tolist()
    kept = [t for t in noised if t != MASK]
    assert len(kept) == n - math.ceil(ratio * n)  # exactly the budget is masked
    assert embeds_in_order(runs_between_masks(noised), original)
    previous, mask_seen = 99, False  # every run of missing tokens sits where a mask is
    for token in noised + [100 + n]:
        if token == MASK:
            mask_seen = True
            continue
        if token != previous + 1:
            assert mask_seen
        previous, mask_seen = token, False


def test_poisson_lengths_have_the_requested_mean():
    lengths = poisson_span_lengths(200_000, 3.0, torch.Generator().manual_seed(0)).float()
    assert int(lengths.sum()) == 200_000
    assert abs(float(lengths.mean()) - 3.0) < 0.05
    assert abs(float((lengths == 0).float().mean()) - math.exp(-3.0)) < 0.005  # insertions


def test_zero_length_spans_insert_masks():
    # a span of >= 1 token takes one mask, so more masks than masked tokens means insertions
    tokens = torch.arange(100, 140)  # 12 tokens masked at ratio 0.3
    masks = [
        int(text_infilling(tokens, 0.3, 0.05, MASK, torch.Generator().manual_seed(s)).eq(MASK).sum()) for s in range(20)
    ]
    assert min(masks) > 12  # rate 0.05: ~95% of the draws have length 0
    few = [
        int(text_infilling(tokens, 0.3, 3.0, MASK, torch.Generator().manual_seed(s)).eq(MASK).sum()) for s in range(20)
    ]
    assert max(few) <= 12 + 3 and sum(few) / 20 < 8  # rate 3: about 12 / 3 spans plus a few inserts


def test_sentence_permutation_keeps_every_sentence():
    tokens = torch.tensor([10, 11, 0, 12, 0, 13, 14, 15, 0, 16])
    seen = set()
    for seed in range(30):
        out = permute_sentences(tokens, torch.tensor([0]), torch.Generator().manual_seed(seed))
        parts = " ".join(map(str, out.tolist()))
        assert sorted(out.tolist()) == sorted(tokens.tolist())
        for sentence in ("10 11 0", "12 0", "13 14 15 0", "16"):
            assert sentence in parts
        seen.add(parts)
    assert len(seen) > 5


def test_collator_outputs_for_bart(tokenizer):
    model = tiny_bart(tokenizer, positions=256)
    config = model.config
    newline = tokenizer.convert_tokens_to_ids("Ċ")
    collator = DataCollatorForTextInfilling(
        tokenizer, model=model, seed=0, permute_sentences=True, sentence_end_token_ids=[newline]
    )
    texts = ["def f(x):\n    return x\n", "import os\nprint(os.sep)\n# done\n"]
    features = [{"input_ids": tokenizer(t)["input_ids"] + [tokenizer.eos_token_id]} for t in texts]
    batch = collator(features)
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    for row, feature in enumerate(features):
        label = batch["labels"][row][batch["labels"][row] != -100].tolist()
        assert label == [bos] + feature["input_ids"]  # target = the original sequence
        source = batch["input_ids"][row][batch["attention_mask"][row].bool()].tolist()
        assert source[0] == bos and source[-1] == eos and tokenizer.mask_token_id in source
    expected = shift_tokens_right(batch["labels"], config.pad_token_id, config.decoder_start_token_id)
    assert torch.equal(batch["decoder_input_ids"], expected)
    # Padding, position by position (filtering -100 above would hide a pad id among the labels,
    # which the model's loss would then train on): labels end in -100, inputs in pad under mask 0.
    pad = tokenizer.pad_token_id
    for row, feature in enumerate(features):
        inputs, labels = assert_right_padded(batch, row, pad)
        assert labels == [bos] + feature["input_ids"] and pad not in inputs
    assert batch["labels"].eq(-100).any()  # the shorter row is padded: the checks above bite


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 1000))
def test_collator_is_seeded_per_example(tokenizer, seed):
    feature = {"input_ids": list(range(300, 360))}
    a = DataCollatorForTextInfilling(tokenizer, seed=seed)([feature])["input_ids"][0]
    b = DataCollatorForTextInfilling(tokenizer, seed=seed)([{"input_ids": list(range(500, 580))}, feature])[
        "input_ids"
    ][1]
    assert torch.equal(a, b[: len(a)]) and (b[len(a) :] == tokenizer.pad_token_id).all()


def test_bad_input(tokenizer):
    for ratio in (0.0, 1.0):
        with pytest.raises(ValueError, match="mask_ratio"):
            DataCollatorForTextInfilling(tokenizer, mask_ratio=ratio)
    with pytest.raises(ValueError, match="sentence_end_token_ids"):
        DataCollatorForTextInfilling(tokenizer, permute_sentences=True)
    with pytest.raises(ValueError, match="at least 1"):
        DataCollatorForTextInfilling(tokenizer, seed=0)([{"input_ids": [tokenizer.bos_token_id]}])
    no_mask = tokenizer.__class__.from_pretrained(tokenizer.name_or_path)
    no_mask.mask_token = None
    with pytest.raises(ValueError, match="mask"):
        DataCollatorForTextInfilling(no_mask)
