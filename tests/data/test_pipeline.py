"""PretrainingStream: batches of exactly batch_size rows, units disjoint, mixtures by tokens, ghosts train nothing."""

from __future__ import annotations

import datasets
import numpy as np
import pytest
import torch

from hf_lmobj import DataCollatorForCausalLM, DataCollatorForMaskedLM
from hf_lmobj.corpus import build_tokenizer
from hf_lmobj.data import PipelineLoader, PretrainingStream, RowFormat, TextStream, ghost_batch


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer(vocab_size=512, max_documents=20)


def _ids(count, seed=0, low=2, high=40):
    rng = np.random.default_rng(seed)
    return [rng.integers(5, 400, size=int(n)).tolist() for n in rng.integers(low, high, size=count)]


def test_batches_have_exactly_batch_size_rows_until_the_last(tok):
    docs = datasets.Dataset.from_dict({"input_ids": _ids(97)})
    collator = DataCollatorForCausalLM(tok, max_length=32, return_use_cache=False)
    stream = PretrainingStream([docs], RowFormat("packed", 32), collator, batch_size=4, block_documents=10)
    sizes = [batch["input_ids"].shape[0] for batch in PipelineLoader(stream)]
    assert sizes[:-1] == [4] * (len(sizes) - 1) and 1 <= sizes[-1] <= 4
    assert sum(sizes) == len(stream)


def test_text_stream_units_read_disjoint_slices_that_cover_the_stream(tok):
    texts = [f"line {i} " * (i % 7 + 1) for i in range(40)]
    stream = TextStream(datasets.Dataset.from_dict({"text": texts}).to_iterable_dataset(num_shards=3), tok)
    seen = [tuple(doc) for unit in range(4) for doc in stream.iter_documents(stream.unit_slice(unit, 4))]
    expected = [tuple(tok(t, add_special_tokens=False)["input_ids"]) for t in texts]
    assert sorted(tuple(d[1:-1]) for d in seen) == sorted(expected)  # BOS / EOS around each, once each


def test_a_mixture_follows_its_token_weights(tok):
    a = datasets.Dataset.from_dict({"input_ids": _ids(300, seed=1)})
    b = datasets.Dataset.from_dict({"input_ids": _ids(40, seed=2)})
    collator = DataCollatorForCausalLM(tok, max_length=64, return_use_cache=False)
    stream = PretrainingStream([a, b], RowFormat("packed", 64), collator, 4, weights=[3, 1], names=["a", "b"])
    loader = PipelineLoader(stream)
    for count, _ in enumerate(loader):
        if count == 60:
            break
    shares = loader.tokens_by_source / loader.tokens_by_source.sum()
    assert abs(shares[0] - 0.75) < 0.03, shares  # b (small) is read again and again: the mixture never ends


def test_ghost_batches_train_nothing(tok):
    collator = DataCollatorForMaskedLM(tok, seed=0)
    batch = collator([{"input_ids": list(range(300, 340))}])
    ghost = ghost_batch(batch)
    assert (ghost["labels"] == -100).all() and torch.equal(ghost["input_ids"], batch["input_ids"])
    assert (batch["labels"] != -100).any()


def test_planned_ghost_when_a_rank_has_no_row_left(tok):
    docs = datasets.Dataset.from_dict({"input_ids": _ids(3, low=20, high=21)})  # 3 rows of one document each
    collator = DataCollatorForCausalLM(tok, max_length=20, return_use_cache=False)
    stream = PretrainingStream([docs], RowFormat("packed", 20), collator, batch_size=1, shuffle=False)
    last = [list(stream.shard(rank, 2))[-1]["batch"] for rank in range(2)]
    assert stream.steps_per_epoch() == 2
    assert (last[0]["labels"] != -100).any() and (last[1]["labels"] == -100).all()


def test_bad_arguments_are_refused_where_they_enter(tok):
    docs = datasets.Dataset.from_dict({"input_ids": _ids(5)})
    collator = DataCollatorForCausalLM(tok, max_length=32)
    fmt = RowFormat("packed", 32)
    with pytest.raises(ValueError, match="weights"):
        PretrainingStream([docs, docs], fmt, collator, 2)
    with pytest.raises(ValueError, match="weight of source"):
        PretrainingStream([docs, docs], fmt, collator, 2, weights=[1, 0])
    with pytest.raises(ValueError, match="batch_size"):
        PretrainingStream([docs], fmt, collator, 0)
    with pytest.raises(ValueError, match="rank"):
        PretrainingStream([docs], fmt, collator, 2).shard(2, 2)
    with pytest.raises(TypeError, match="max_steps"):
        len(PretrainingStream([docs, docs], fmt, collator, 2, weights=[1, 1]))
    with pytest.raises(ValueError, match="text_column"):
        TextStream(datasets.Dataset.from_dict({"content": ["a"]}), tok)
