"""linear_cross_entropy against the float64 reference cross_entropy(hidden @ weight.T + bias)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from hf_lmobj.losses.linear_cross_entropy import linear_cross_entropy, linear_token_losses

N, H, V = 29, 8, 37


def _inputs(seed: int = 0, ignore_every: int = 3):
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(N, H, generator=g, dtype=torch.float64, requires_grad=True)
    weight = torch.randn(V, H, generator=g, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(V, generator=g, dtype=torch.float64, requires_grad=True)
    targets = torch.randint(0, V, (N,), generator=g)
    targets[::ignore_every] = -100
    return hidden, weight, bias, targets


def _reference(hidden, weight, bias, targets, *, num_items=None, label_smoothing=0.0, z_loss=0.0, logit_softcap=None):
    """The textbook formula on the full logits."""
    logits = hidden @ weight.T + (bias if bias is not None else 0.0)
    if logit_softcap is not None:
        logits = logit_softcap * torch.tanh(logits / logit_softcap)
    keep = targets != -100
    total = F.cross_entropy(logits, targets, reduction="sum", label_smoothing=label_smoothing)
    total = total + z_loss * torch.logsumexp(logits[keep], dim=-1).square().sum()
    return total / (num_items if num_items is not None else keep.sum())


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm().clamp_min(1e-300)).item()


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"label_smoothing": 0.1},
        {"z_loss": 1e-2},
        {"logit_softcap": 2.5},
        {"label_smoothing": 0.2, "z_loss": 1e-3, "logit_softcap": 4.0},
    ],
)
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("chunk_size", [1, 4, 1000])
def test_value_and_grads_match_float64_reference(options, with_bias, chunk_size):
    hidden, weight, bias, targets = _inputs()
    bias = bias if with_bias else None
    params = (hidden, weight) + ((bias,) if with_bias else ())
    ours = linear_cross_entropy(hidden, weight, targets, bias=bias, chunk_size=chunk_size, **options)
    ref = _reference(hidden, weight, bias, targets, **options)
    assert ours.dtype == torch.float64
    assert abs(ours.item() - ref.item()) / abs(ref.item()) < 1e-6
    for g_ours, g_ref in zip(torch.autograd.grad(ours, params), torch.autograd.grad(ref, params)):
        assert _rel(g_ours, g_ref) < 1e-6
    # ignored rows get exactly zero gradient
    assert (
        torch.autograd.grad(linear_cross_entropy(hidden, weight, targets), hidden)[0][targets == -100].abs().max() == 0
    )


@pytest.mark.parametrize("num_items", [7, 100, torch.tensor(55)])
def test_num_items_in_batch_is_the_denominator_of_the_token_sum(num_items):
    hidden, weight, bias, targets = _inputs()
    ours = linear_cross_entropy(hidden, weight, targets, bias=bias, num_items_in_batch=num_items)
    ref = _reference(hidden, weight, bias, targets, num_items=float(num_items))
    assert abs(ours.item() - ref.item()) / abs(ref.item()) < 1e-12
    g_ours = torch.autograd.grad(ours, weight)[0]
    g_ref = torch.autograd.grad(ref, weight)[0]
    assert _rel(g_ours, g_ref) < 1e-12


def test_split_batches_with_global_count_add_up_to_the_full_batch():
    """The gradient-accumulation identity: sum over parts of (part sum / global count) == full mean."""
    hidden, weight, bias, targets = _inputs()
    full = linear_cross_entropy(hidden, weight, targets, bias=bias)
    count = int((targets != -100).sum())
    parts = sum(
        linear_cross_entropy(hidden[i : i + 5], weight, targets[i : i + 5], bias=bias, num_items_in_batch=count)
        for i in range(0, N, 5)
    )
    assert abs(parts.item() - full.item()) < 1e-12
    naive = sum(linear_cross_entropy(hidden[i : i + 5], weight, targets[i : i + 5], bias=bias) for i in range(0, N, 5))
    assert abs(naive.item() / 6 - full.item()) > 1e-3  # per-part means would be wrong: the rows can tell


def test_all_targets_ignored_gives_zero_loss_and_zero_grads():
    hidden, weight, _, targets = _inputs()
    loss = linear_cross_entropy(hidden, weight, torch.full_like(targets, -100))
    g_h, g_w = torch.autograd.grad(loss, (hidden, weight))
    assert loss.item() == 0.0 and g_h.abs().max() == 0 and g_w.abs().max() == 0


def test_leading_dims_and_custom_ignore_index():
    hidden, weight, _, targets = _inputs()
    t = targets.masked_fill(targets == -100, 5)
    t[::4] = 7  # 7 is now the ignored class
    ours = linear_cross_entropy(hidden[:28].reshape(4, 7, H), weight, t[:28].reshape(4, 7), ignore_index=7)
    ref = F.cross_entropy(hidden[:28] @ weight.T, t[:28], ignore_index=7)
    assert abs(ours.item() - ref.item()) < 1e-12


def test_half_precision_inputs_accumulate_in_float32():
    """bf16 weights: bf16 logits (as a stock bf16 lm_head makes them), float32 loss and sums."""
    hidden, weight, _, targets = _inputs()
    h16, w16 = hidden.detach().bfloat16().requires_grad_(), weight.detach().bfloat16().requires_grad_()
    ours = linear_cross_entropy(h16, w16, targets, chunk_size=3)
    stock = F.cross_entropy((h16 @ w16.T).float(), targets)  # what a bf16 model's loss computes
    assert ours.dtype == torch.float32
    assert abs(ours.item() - stock.item()) < 1e-5
    g_h, g_w = torch.autograd.grad(ours, (h16, w16))
    assert g_h.dtype == torch.bfloat16 and g_w.dtype == torch.bfloat16
    ref_h, ref_w = torch.autograd.grad(_reference(hidden, weight, None, targets), (hidden, weight))
    assert _rel(g_h.double(), ref_h) < 2e-2 and _rel(g_w.double(), ref_w) < 2e-2


def test_matches_torch_linear_cross_entropy_where_both_apply():
    hidden, weight, bias, targets = _inputs()
    theirs = F.linear_cross_entropy(hidden, weight, targets, linear_bias=bias)
    ours = linear_cross_entropy(hidden, weight, targets, bias=bias)
    assert abs(ours.item() - theirs.item()) < 1e-12


class _LargestTensor(TorchDispatchMode):
    """Records the largest tensor any op produces."""

    def __init__(self):
        super().__init__()
        self.largest = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.largest = max(self.largest, t.numel())
        return out


def test_full_logits_never_exist():
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(64, 4, generator=g, requires_grad=True)  # logits would be 64 x 500
    weight = torch.randn(500, 4, generator=g, requires_grad=True)
    targets = torch.randint(0, 500, (64,), generator=g)
    with _LargestTensor() as mode:
        linear_cross_entropy(hidden, weight, targets, chunk_size=8).backward()
    assert mode.largest <= 8 * 500  # one chunk's block (the weight itself has 2000 elements)
    with _LargestTensor() as mode:
        F.cross_entropy(hidden @ weight.T, targets).backward()
    assert mode.largest == 64 * 500  # the reference does build them


class _OpCounter(TorchDispatchMode):
    """Counts matrix products (the head's forward and both gradients are matrix products)."""

    def __init__(self):
        super().__init__()
        self.products = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.products += func.overloadpacket in (torch.ops.aten.mm, torch.ops.aten.addmm, torch.ops.aten.addmm_)
        return func(*args, **(kwargs or {}))


def test_no_grad_computes_the_value_only():
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(64, 4, generator=g, requires_grad=True)
    weight = torch.randn(500, 4, generator=g, requires_grad=True)
    targets = torch.randint(0, 500, (64,), generator=g)
    with _OpCounter() as counted:
        with_grad = linear_cross_entropy(hidden, weight, targets, chunk_size=16)
    with torch.no_grad(), _OpCounter() as evaluated:
        value = linear_cross_entropy(hidden, weight, targets, chunk_size=16)
    assert evaluated.products == 4  # one logits block per chunk, no gradient work
    assert counted.products == 3 * 4  # logits, grad of hidden, grad of weight per chunk
    assert not value.requires_grad
    torch.testing.assert_close(value, with_grad.detach())


def test_token_losses_match_reference_nll():
    hidden, weight, bias, targets = _inputs()
    ours = linear_token_losses(hidden.reshape(1, N, H), weight, targets.reshape(1, N), bias=bias, chunk_size=5)
    ref = F.cross_entropy(hidden @ weight.T + bias, targets, reduction="none")
    assert ours.shape == (1, N)
    torch.testing.assert_close(ours[0], ref.detach(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"label_smoothing": 1.0}, ValueError, "label_smoothing"),
        ({"z_loss": -1.0}, ValueError, "z_loss"),
        ({"logit_softcap": 0.0}, ValueError, "logit_softcap"),
        ({"chunk_size": 0}, ValueError, "chunk_size"),
        ({"num_items_in_batch": -1}, ValueError, "num_items_in_batch"),
        ({"num_items_in_batch": "8"}, TypeError, "num_items_in_batch"),
        ({"bias": torch.zeros(3)}, ValueError, "bias"),
    ],
)
def test_bad_arguments_are_named(kwargs, error, match):
    hidden, weight, _, targets = _inputs()
    with pytest.raises(error, match=match):
        linear_cross_entropy(hidden, weight, targets, **kwargs)


def test_bad_shapes_and_targets_are_named():
    hidden, weight, _, targets = _inputs()
    with pytest.raises(ValueError, match="weight must be"):
        linear_cross_entropy(hidden, weight.T, targets)
    with pytest.raises(ValueError, match="targets shape"):
        linear_cross_entropy(hidden, weight, targets[:-1])
    with pytest.raises(ValueError, match=r"targets must lie in \[0, 37\)"):
        linear_cross_entropy(hidden, weight, targets.masked_fill(targets == -100, V))
