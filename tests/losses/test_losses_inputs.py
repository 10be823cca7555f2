"""Adversarial inputs to the losses and ``linear_cross_entropy``: clear errors or the exact value.

Input classes: logits / hidden / weight tensors (integer, wrong shapes), label tensors (float,
bool, out of range, every integer dtype), counts (``num_items_in_batch``: negative, NaN, inf,
bool, string, 0 with targets, float tensors as ``transformers`` passes them), loss options
(label smoothing, z-loss, soft-cap: NaN, inf, out of range), ``chunk_size``, batches without a
target, and a second backward.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from hf_lmobj import causal_lm_loss, linear_cross_entropy, masked_lm_loss, seq2seq_lm_loss

V = 5
LN_V = math.log(V)
LOSSES = {"causal": causal_lm_loss, "masked": masked_lm_loss, "span": seq2seq_lm_loss}


def _uniform():
    return torch.zeros(1, 3, V), torch.tensor([[1, 2, 3]])  # (B, T, V) uniform logits, labels


# --------------------------------------------------------------------------- logits-based losses
@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize(
    "labels, error, word",
    [
        pytest.param(torch.tensor([[1.0, 2.0, 3.0]]), TypeError, "integer class indices", id="float"),
        pytest.param(torch.tensor([[1.7, 2.2, 3.9]]), TypeError, "integer class indices", id="fractional"),
        pytest.param(torch.tensor([[True, False, True]]), TypeError, "integer class indices", id="bool"),
        pytest.param([[1, 2, 3]], TypeError, "labels", id="list"),
        pytest.param(torch.tensor([[1, 2, V]]), ValueError, r"\[0, 5\)", id="past-vocab"),
        pytest.param(torch.tensor([[1, -3, 2]]), ValueError, r"\[0, 5\)", id="negative"),
        pytest.param(torch.tensor([[1, 2]]), ValueError, "shape", id="short"),
    ],
)
def test_bad_labels(name, labels, error, word):
    logits, _ = _uniform()
    with pytest.raises(error, match=word):
        LOSSES[name](logits, labels)


@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.uint8])
def test_every_integer_label_dtype_gives_ln_v(name, dtype):
    logits, labels = _uniform()
    targets = 2 if name == "causal" else 3
    loss = LOSSES[name](logits, labels.to(dtype), num_items_in_batch=targets)
    assert loss.item() == pytest.approx(LN_V, rel=1e-6)


@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize("logits", [torch.zeros(1, 3, V, dtype=torch.long), torch.zeros(1, 3, V, dtype=torch.bool)])
def test_integer_logits_are_refused(name, logits):
    with pytest.raises(TypeError, match="floating point"):
        LOSSES[name](logits, torch.tensor([[1, 2, 3]]))


@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize(
    "count, error, word",
    [
        (-1, ValueError, "num_items_in_batch"),
        (math.nan, ValueError, "num_items_in_batch"),
        (math.inf, ValueError, "num_items_in_batch"),
        (True, TypeError, "num_items_in_batch"),
        ("8", TypeError, "num_items_in_batch"),
        (torch.tensor([2, 3]), TypeError, "num_items_in_batch"),
        (0, ValueError, "is 0 but this batch has"),
        (torch.tensor(0), ValueError, "is 0 but this batch has"),
    ],
)
def test_bad_num_items_in_batch(name, count, error, word):
    logits, labels = _uniform()
    with pytest.raises(error, match=word):
        LOSSES[name](logits, labels, num_items_in_batch=count)


@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize("count", [6, 6.0, torch.tensor(6), torch.tensor(6.0), torch.tensor([6])])
def test_num_items_in_batch_is_the_exact_denominator(name, count):
    logits, labels = _uniform()
    targets = 2 if name == "causal" else 3
    assert LOSSES[name](logits, labels, num_items_in_batch=count).item() == pytest.approx(targets * LN_V / 6)


@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize("count", [None, 0, 8])
def test_a_batch_without_targets_adds_exactly_nothing(name, count):
    logits = torch.randn(1, 3, V, requires_grad=True)
    loss = LOSSES[name](logits, torch.full((1, 3), -100), num_items_in_batch=count)
    loss.backward()
    assert loss.item() == 0.0 and torch.equal(logits.grad, torch.zeros_like(logits))


@pytest.mark.parametrize("name", sorted(LOSSES))
@pytest.mark.parametrize(
    "option, error",
    [
        ({"label_smoothing": 1.0}, ValueError),
        ({"label_smoothing": -0.1}, ValueError),
        ({"label_smoothing": math.nan}, ValueError),
        ({"label_smoothing": "0.1"}, TypeError),
        ({"z_loss": math.nan}, ValueError),
        ({"z_loss": math.inf}, ValueError),
        ({"z_loss": -1e-4}, ValueError),
        ({"logit_softcap": 0.0}, ValueError),
        ({"logit_softcap": math.inf}, ValueError),
        ({"ignore_index": "pad"}, TypeError),
        ({"ignore_index": 1.5}, TypeError),
    ],
)
def test_bad_loss_options(name, option, error):
    logits, labels = _uniform()
    with pytest.raises(error, match=next(iter(option)).replace("logit_", "")):
        LOSSES[name](logits, labels, **option)


def test_causal_loss_needs_labels():
    with pytest.raises(ValueError, match="labels or shift_labels"):
        causal_lm_loss(torch.zeros(1, 3, V))


def test_ignore_index_of_another_value_is_honoured():
    logits, _ = _uniform()
    loss = masked_lm_loss(logits, torch.tensor([[0, 2, 0]]), ignore_index=0)  # 0 = not scored, 1 target
    assert loss.item() == pytest.approx(LN_V)


@settings(max_examples=50, deadline=None)
@given(
    labels=st.lists(st.integers(-1, V - 1), min_size=1, max_size=12),
    scale=st.floats(0.1, 20.0),
    seed=st.integers(0, 1000),
)
def test_masked_loss_equals_cross_entropy(labels, scale, seed):
    targets = torch.tensor([[t if t >= 0 else -100 for t in labels]])  # (1, T)
    logits = scale * torch.randn(1, len(labels), V, generator=torch.Generator().manual_seed(seed))
    ours = masked_lm_loss(logits, targets)
    if (targets == -100).all():
        assert ours.item() == 0.0
    else:
        torch.testing.assert_close(ours, F.cross_entropy(logits[0], targets[0]))


# --------------------------------------------------------------------------- linear_cross_entropy
def _head(n: int = 4, hidden: int = 3):
    g = torch.Generator().manual_seed(0)
    h = torch.randn(n, hidden, generator=g, requires_grad=True)
    w = torch.randn(V, hidden, generator=g, requires_grad=True)
    return h, w, torch.tensor([0, 4, -100, 2])[:n]


@pytest.mark.parametrize(
    "change, error, word",
    [
        (lambda h, w, t: (h, w, t.float()), TypeError, "integer class indices"),
        (lambda h, w, t: (h, w, t > 0), TypeError, "integer class indices"),
        (lambda h, w, t: (h.long(), w, t), TypeError, "hidden must be a floating"),
        (lambda h, w, t: (h, w.long(), t), TypeError, "weight must be a floating"),
        (lambda h, w, t: (h, w.T, t), ValueError, "weight must be"),
        (lambda h, w, t: (h, w, t[:-1]), ValueError, "targets shape"),
        (lambda h, w, t: (h, w, t.masked_fill(t == 4, V)), ValueError, r"targets must lie in \[0, 5\)"),
        (lambda h, w, t: (h, w, t.masked_fill(t == 4, -7)), ValueError, r"targets must lie in \[0, 5\)"),
        (lambda h, w, t: (h, w, t.tolist()), TypeError, "targets"),
    ],
)
def test_linear_cross_entropy_bad_tensors(change, error, word):
    with pytest.raises(error, match=word):
        linear_cross_entropy(*change(*_head()))


@pytest.mark.parametrize(
    "kwargs, error, word",
    [
        ({"chunk_size": 0}, ValueError, "chunk_size"),
        ({"chunk_size": 2.0}, TypeError, "chunk_size"),
        ({"chunk_size": True}, TypeError, "chunk_size"),
        ({"num_items_in_batch": -2}, ValueError, "num_items_in_batch"),
        ({"num_items_in_batch": math.nan}, ValueError, "num_items_in_batch"),
        ({"num_items_in_batch": 0}, ValueError, "num_items_in_batch"),
        ({"num_items_in_batch": "3"}, TypeError, "num_items_in_batch"),
        ({"bias": torch.zeros(V + 1)}, ValueError, "bias"),
        ({"bias": torch.zeros(V, dtype=torch.long)}, TypeError, "bias"),
        ({"label_smoothing": math.nan}, ValueError, "label_smoothing"),
        ({"logit_softcap": -1.0}, ValueError, "logit_softcap"),
        ({"z_loss": math.inf}, ValueError, "z_loss"),
        ({"ignore_index": None}, TypeError, "ignore_index"),
    ],
)
def test_linear_cross_entropy_bad_arguments(kwargs, error, word):
    with pytest.raises(error, match=word):
        linear_cross_entropy(*_head(), **kwargs)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.uint8])
@pytest.mark.parametrize("chunk_size", [None, 1, 3])
def test_linear_cross_entropy_equals_cross_entropy_for_every_integer_dtype(dtype, chunk_size):
    h, w, t = _head()
    t = t.clamp(min=0).to(dtype)
    ours = linear_cross_entropy(h, w, t, chunk_size=chunk_size)
    torch.testing.assert_close(ours, F.cross_entropy(h @ w.T, t.long()))


def test_linear_cross_entropy_second_backward_raises_clearly():
    h, w, t = _head()
    loss = linear_cross_entropy(h, w, t)
    loss.backward(retain_graph=True)
    with pytest.raises(RuntimeError, match="second backward"):
        loss.backward()


def test_linear_cross_entropy_without_targets_is_zero_with_zero_gradients():
    h, w, _ = _head()
    loss = linear_cross_entropy(h, w, torch.full((4,), -100))
    loss.backward()
    assert loss.item() == 0.0 and not h.grad.any() and not w.grad.any()


def test_linear_cross_entropy_counts_as_transformers_passes_them():
    h, w, t = _head()
    ours = linear_cross_entropy(h, w, t, num_items_in_batch=torch.tensor(6.0))  # a float tensor, as stock
    ref = F.cross_entropy(h @ w.T, t, reduction="sum") / 6
    torch.testing.assert_close(ours, ref)
