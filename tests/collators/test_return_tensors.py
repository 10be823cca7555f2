"""Every collator builds torch tensors only: ``collator(features, return_tensors="np")`` is refused by name.

``DataCollatorMixin`` routes ``return_tensors="np"`` to ``numpy_call``; before, that was an ``AttributeError``.
"""

from __future__ import annotations

import pytest
import torch

from hf_lmobj import (
    DataCollatorForCausalLM,
    DataCollatorForFillInTheMiddle,
    DataCollatorForMaskedLM,
    DataCollatorForSpanCorruption,
    DataCollatorForTextInfilling,
    DataCollatorForUL2,
)

FEATURES = [{"input_ids": list(range(300, 340))}]


def _collators(tokenizer) -> dict:
    return {
        "causal": DataCollatorForCausalLM(tokenizer, max_length=64),
        "masked": DataCollatorForMaskedLM(tokenizer, seed=0),
        "span": DataCollatorForSpanCorruption(tokenizer, input_length=64, seed=0),
        "ul2": DataCollatorForUL2(tokenizer, input_length=64, seed=0),
        "bart": DataCollatorForTextInfilling(tokenizer, seed=0),
        "fim": DataCollatorForFillInTheMiddle(tokenizer, fim_rate=0.0, fim_level="token", seed=0),
    }


@pytest.mark.parametrize("name", ["causal", "masked", "span", "ul2", "bart", "fim"])
def test_numpy_is_refused_with_the_fix(tokenizer, name):
    collator = _collators(tokenizer)[name]
    with pytest.raises(ValueError, match="torch tensors only: call it with return_tensors='pt'"):
        collator(FEATURES, return_tensors="np")


@pytest.mark.parametrize("name", ["causal", "masked", "span", "ul2", "bart", "fim"])
def test_pt_and_none_give_torch_tensors(tokenizer, name):
    collator = _collators(tokenizer)[name]
    for value in ("pt", None):
        batch = collator(FEATURES, return_tensors=value)
        assert isinstance(batch["input_ids"], torch.Tensor) and isinstance(batch["labels"], torch.Tensor)


@pytest.mark.parametrize("value", ["tf", "jax", ""])
def test_other_frameworks_are_refused_by_the_mixin(tokenizer, value):
    with pytest.raises(ValueError, match="not recognized"):
        DataCollatorForCausalLM(tokenizer, max_length=64)(FEATURES, return_tensors=value)
