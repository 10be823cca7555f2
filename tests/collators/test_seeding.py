"""One seeding rule for every random collator: an example's randomness is a function of
(seed, epoch, example) only, never of its batch company; ``seed=None`` is fresh on every call."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from hf_lmobj.collators.masked import DataCollatorForMaskedLM
from hf_lmobj.collators.seeding import example_seeds
from hf_lmobj.collators.span import DataCollatorForSpanCorruption
from hf_lmobj.collators.text_infilling import DataCollatorForTextInfilling
from hf_lmobj.collators.ul2 import DataCollatorForUL2
from hf_lmobj.fim.collator import DataCollatorForFillInTheMiddle

pytestmark = pytest.mark.usefixtures("one_torch_thread")

COLLATORS = {
    "masked": lambda tok, **kw: DataCollatorForMaskedLM(tok, mlm_probability=0.5, **kw),
    "span": lambda tok, **kw: DataCollatorForSpanCorruption(tok, noise_density=0.3, **kw),
    "ul2": lambda tok, **kw: DataCollatorForUL2(tok, **kw),
    "bart": lambda tok, **kw: DataCollatorForTextInfilling(tok, **kw),
    "fim": lambda tok, **kw: DataCollatorForFillInTheMiddle(tok, fim_rate=1.0, fim_level="token", **kw),
}

X = {"input_ids": list(range(300, 364))}  # the example followed through every batch (no index)
X_INDEXED = {"input_ids": list(range(300, 364)), "idx": 17}  # the same tokens, keyed by its index
OTHERS = [{"input_ids": list(range(400 + 7 * i, 440 + 9 * i))} for i in range(6)]


def per_example(batch: dict) -> list[tuple[list[int], ...]]:
    """Each row's corruption: its real input ids (and its targets where the batch has labels)."""
    rows = []
    for i in range(batch["input_ids"].shape[0]):
        real = batch["attention_mask"][i].bool()
        inputs = batch["input_ids"][i][real[: batch["input_ids"].shape[1]]].tolist()
        labels = batch["labels"][i]
        rows.append((inputs, labels[labels != -100].tolist()))
    return rows


@pytest.mark.parametrize("name", sorted(COLLATORS))
@pytest.mark.parametrize("x", [X, X_INDEXED], ids=["content-keyed", "index-keyed"])
def test_an_example_gets_the_same_corruption_in_any_batch(tokenizer, name, x):
    collator = COLLATORS[name](tokenizer, seed=3)
    alone = per_example(collator([x]))[0]
    indexed = [{**f, "idx": 100 + i} for i, f in enumerate(OTHERS[:3])]
    batches = {
        "with index-keyed company": ([indexed[0], x, indexed[1]], 1),
        "with content-keyed company": ([OTHERS[3], OTHERS[4], x], 2),
        "with mixed company, first": ([x, indexed[2], OTHERS[5]], 0),
        "in a batch of one's own copies": ([x, x], 1),
    }
    for label, (features, position) in batches.items():
        assert per_example(collator(features))[position] == alone, label
    assert per_example(COLLATORS[name](tokenizer, seed=3)([x]))[0] == alone  # another instance
    collator.set_epoch(1)
    assert per_example(collator(OTHERS[:2] + [x]))[2] == per_example(collator([x]))[0]


@pytest.mark.parametrize("name", sorted(COLLATORS))
def test_epochs_and_seeds_change_the_corruption(tokenizer, name):
    features = [X, *OTHERS]
    collator = COLLATORS[name](tokenizer, seed=3)
    reference = per_example(collator(features))
    collator.set_epoch(1)
    assert per_example(collator(features)) != reference
    collator.set_epoch(0)
    assert per_example(collator(features)) == reference
    assert per_example(COLLATORS[name](tokenizer, seed=4)(features)) != reference


@pytest.mark.parametrize("name", sorted(COLLATORS))
def test_unseeded_collators_draw_afresh_on_every_call(tokenizer, name):
    features = [X, *OTHERS]
    collator = COLLATORS[name](tokenizer)  # seed=None
    first, second = per_example(collator(features)), per_example(collator(features))
    assert first != second
    assert per_example(COLLATORS[name](tokenizer)(features)) != first


def test_example_seeds_key_by_index_else_content_and_never_by_company():
    a, b = {"input_ids": [5, 6, 7]}, {"input_ids": [5, 6, 7], "idx": 2}
    alone = example_seeds([a], seed=0, epoch=0)[0]
    assert example_seeds([b, a], 0, 0)[1] == alone  # an index-keyed neighbour changes nothing
    assert example_seeds([b, a], 0, 0)[0] != alone  # same tokens, keyed by its index instead
    assert example_seeds([{"input_ids": [9], "idx": 2}], 0, 0)[0] == example_seeds([b], 0, 0)[0]
    same_content = [{"input_ids": torch.tensor([5, 6, 7], dtype=torch.int32)}, {"input_ids": np.array([5, 6, 7])}]
    assert example_seeds(same_content, 0, 0) == [alone, alone]  # container and dtype do not matter
    assert example_seeds([{"input_ids": [9], "index": np.int64(2)}], 0, 0) == example_seeds([b], 0, 0)
    assert example_seeds([{"input_ids": [9], "idx": torch.tensor(2)}], 0, 0) == example_seeds([b], 0, 0)
    variants = [
        example_seeds([{"input_ids": [5, 6, 8]}], 0, 0),  # one token changed
        example_seeds([{"input_ids": [6, 5, 7]}], 0, 0),  # two tokens swapped
        example_seeds([{"input_ids": [5, 6]}], 0, 0),  # a prefix
        example_seeds([a], 1, 0),  # another seed
        example_seeds([a], 0, 1),  # another epoch
        example_seeds([{"input_ids": [2]}], 0, 0),  # content [2] is not index 2
    ]
    assert all(v[0] != alone for v in variants)
    assert all(0 <= s < 2**63 for s in example_seeds([a, b], 2**62, 10**9))


def test_example_seeds_with_contents_match_the_features_own_ids():
    features = [{"input_ids": [5, 6, 7]}, {"input_ids": [8, 9], "idx": 4}]
    flat = np.array([5, 6, 7, 8, 9], dtype=np.int64)
    contents = [flat[:3], flat[3:]]
    assert example_seeds(features, 1, 2, contents=contents) == example_seeds(features, 1, 2)


def test_example_seeds_without_seed_are_fresh_per_call_but_still_per_example():
    a = {"input_ids": [5, 6, 7]}
    first, second = example_seeds([a, a], None, 0), example_seeds([a, a], None, 0)
    assert first[0] == first[1]  # one fresh base seed per call, keyed per example as usual
    assert first != second


@pytest.mark.parametrize(
    "features, kwargs, error, field",
    [
        ([{"input_ids": [5], "idx": -1}], {}, ValueError, "idx"),
        ([{"input_ids": [5], "index": 1.5}], {}, ValueError, "index"),
        ([{"input_ids": [5], "idx": "3"}], {}, TypeError, "idx"),
        ([{"input_ids": [5], "idx": True}], {}, TypeError, "idx"),
        ([{"text": "x"}], {}, ValueError, "input_ids"),
        ([{"input_ids": [5.5]}], {}, TypeError, "input_ids"),
        ([[5, 6]], {}, TypeError, "feature 0"),
        ([{"input_ids": [5]}], {"seed": -1}, ValueError, "seed"),
        ([{"input_ids": [5]}], {"epoch": -1}, ValueError, "epoch"),
        ([{"input_ids": [5]}], {"contents": []}, ValueError, "contents"),
    ],
)
def test_example_seeds_reject_bad_input_naming_the_field(features, kwargs, error, field):
    kwargs = {"seed": 0, "epoch": 0, **kwargs}
    with pytest.raises(error, match=field):
        example_seeds(features, **kwargs)
