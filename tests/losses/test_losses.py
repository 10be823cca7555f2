"""Functional losses against F.cross_entropy and the stock transformers loss."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from transformers.loss.loss_utils import ForCausalLMLoss

from hf_lmobj.losses.functional import causal_lm_loss, masked_lm_loss, next_token_targets, seq2seq_lm_loss

B, T, V = 3, 7, 11


def _batch(seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(B, T, V, generator=g, dtype=torch.float64, requires_grad=True)
    labels = torch.randint(0, V, (B, T), generator=g)
    labels[0, 4:] = -100  # padding
    labels[2, :2] = -100  # a prompt
    return logits, labels


def test_causal_loss_equals_transformers_for_causal_lm_loss():
    logits, labels = _batch()
    for num_items in (None, 9):
        ours = causal_lm_loss(logits, labels, num_items_in_batch=num_items)
        ref = ForCausalLMLoss(logits, labels, V, num_items_in_batch=num_items)  # computes in float32
        assert abs(ours.item() - ref.item()) / ref.item() < 1e-6


def test_shift_labels_win_over_labels():
    logits, labels = _batch()
    shift = next_token_targets(labels)
    shift[1, 3] = -100  # a document boundary the labels do not show
    ours = causal_lm_loss(logits, labels, shift_labels=shift)
    ref = F.cross_entropy(logits.reshape(-1, V), shift.reshape(-1))
    assert abs(ours.item() - ref.item()) < 1e-12
    assert abs(ours.item() - causal_lm_loss(logits, labels).item()) > 1e-6


@pytest.mark.parametrize("loss_fn", [masked_lm_loss, seq2seq_lm_loss])
def test_unshifted_losses_are_token_means_over_labels(loss_fn):
    logits, labels = _batch()
    ref = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1))
    assert abs(loss_fn(logits, labels).item() - ref.item()) < 1e-12
    count = int((labels != -100).sum())
    summed = F.cross_entropy(logits.reshape(-1, V), labels.reshape(-1), reduction="sum")
    assert (
        abs(loss_fn(logits, labels, num_items_in_batch=torch.tensor(4 * count)).item() - summed.item() / (4 * count))
        < 1e-12
    )


def test_num_items_makes_micro_batches_add_up_to_the_full_batch():
    logits, labels = _batch()
    count = (labels != -100).sum()
    parts = sum(masked_lm_loss(logits[i : i + 1], labels[i : i + 1], num_items_in_batch=count) for i in range(B))
    full = masked_lm_loss(logits, labels)
    assert abs(parts.item() - full.item()) < 1e-12
    grads_parts = torch.autograd.grad(parts, logits)[0]
    torch.testing.assert_close(grads_parts, torch.autograd.grad(full, logits)[0], rtol=1e-12, atol=1e-14)


def test_options_follow_their_formulas():
    logits, labels = _batch()
    flat, t = logits.reshape(-1, V), labels.reshape(-1)
    keep = t != -100
    smoothed = seq2seq_lm_loss(logits, labels, label_smoothing=0.1)
    assert abs(smoothed.item() - F.cross_entropy(flat, t, label_smoothing=0.1).item()) < 1e-12
    z = seq2seq_lm_loss(logits, labels, z_loss=1e-2)
    lse = torch.logsumexp(flat[keep], dim=-1)
    assert abs(z.item() - (F.cross_entropy(flat, t) + 1e-2 * lse.square().mean()).item()) < 1e-12
    capped = seq2seq_lm_loss(logits, labels, logit_softcap=1.5)
    assert abs(capped.item() - F.cross_entropy(1.5 * torch.tanh(flat / 1.5), t).item()) < 1e-12


def test_half_logits_accumulate_in_float32():
    logits, labels = _batch()
    ours = masked_lm_loss(logits.detach().bfloat16(), labels)
    assert ours.dtype == torch.float32
    ref = F.cross_entropy(logits.detach().bfloat16().float().reshape(-1, V), labels.reshape(-1))
    assert abs(ours.item() - ref.item()) < 1e-6


def test_no_targets_gives_zero_not_nan():
    logits, labels = _batch()
    assert masked_lm_loss(logits, torch.full_like(labels, -100)).item() == 0.0


def test_bad_inputs_are_named():
    logits, labels = _batch()
    with pytest.raises(ValueError, match="labels or shift_labels"):
        causal_lm_loss(logits)
    with pytest.raises(ValueError, match="labels shape"):
        masked_lm_loss(logits, labels[:, :-1])
    with pytest.raises(ValueError, match=r"\[0, 11\)"):
        masked_lm_loss(logits, labels.masked_fill(labels == -100, V))
    with pytest.raises(ValueError, match="label_smoothing"):
        seq2seq_lm_loss(logits, labels, label_smoothing=-0.1)
