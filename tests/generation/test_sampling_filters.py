"""The filters behind SamplingLogitsProcessor: fast top-p against the full sort, partial sorts."""

from __future__ import annotations

import math

import pytest
import torch

from hf_lmobj.generation import _filters as sampling_filters
from hf_lmobj.generation._filters import sorted_top_values, top_p_filter, top_p_filter_full_sort
from hf_lmobj.generation.sampling import SamplingLogitsProcessor


def test_fast_top_p_equals_full_sort_exactly():
    g = torch.Generator().manual_seed(0)
    vocab = 20000
    zipf = -1.1 * torch.arange(1, vocab + 1).float().log()
    rows = [
        zipf[torch.randperm(vocab, generator=g)] + 0.1 * torch.randn(vocab, generator=g),  # heavy tail
        8.0 * torch.randn(vocab, generator=g),  # peaked
        0.01 * torch.randn(vocab, generator=g),  # almost flat
        torch.zeros(vocab),  # all tied
    ]
    x = torch.stack(rows * 4)  # (16, V)
    x[4:8, 100:] = -math.inf  # rows already cut by top-k
    top_p = torch.rand(16, generator=g) * 0.95 + 0.04
    top_p[-1] = 1.0  # switched off
    for keep in (1, 5):
        assert torch.equal(top_p_filter(x, top_p, keep), top_p_filter_full_sort(x, top_p, keep))


@pytest.mark.parametrize("initial, growth", [(1, 2), (3, 8), (64, 8)])
def test_fast_top_p_grows_a_prefix_that_falls_short(monkeypatch, initial, growth):
    """Small first prefixes force the retry path; every row still ends on the full sort's cutoff."""
    x = torch.randn(8, 3000, generator=torch.Generator().manual_seed(2))
    x[0] = 0.0  # all tied: no prefix short of the whole row covers it
    top_p = torch.linspace(0.1, 0.99, 8)
    expected = top_p_filter_full_sort(x, top_p, 2)
    monkeypatch.setattr(sampling_filters, "INITIAL_TOP_P_TOKENS", initial)
    monkeypatch.setattr(sampling_filters, "GROWTH", growth)
    assert torch.equal(top_p_filter(x, top_p, 2), expected)
    assert expected.isfinite().sum(-1).max() > 256  # the cutoff lay beyond several regrowths


def test_numpy_partial_sort_equals_torch_topk():
    x = torch.randn(5, 700, generator=torch.Generator().manual_seed(11)).round(decimals=1)  # ties
    x[1, ::3] = -math.inf
    for k in (1, 64, 699, 700):
        assert torch.equal(sorted_top_values(x, k), x.topk(k, dim=-1).values)  # CPU path is numpy
        assert torch.equal(sorted_top_values(x.double(), k), x.double().topk(k, dim=-1).values)


def test_ties_at_the_boundary_are_all_kept():
    scores = SamplingLogitsProcessor(top_p=0.5)(None, torch.zeros(1, 10))
    assert scores.isfinite().all()  # every token ties with the one that reaches 0.5


@pytest.mark.parametrize("seed", range(12))
def test_fast_top_p_equals_full_sort_on_mixed_rows_and_retries(monkeypatch, seed):
    """Rows of every shape in one batch, tiny first prefixes: groups split, regroup and retry."""
    g = torch.Generator().manual_seed(seed)
    scale = torch.tensor([0.01, 0.3, 1.0, 3.0, 10.0])[torch.randint(5, (6,), generator=g)]
    x = scale[:, None] * torch.randn(6, 2000, generator=g)  # (6, 2000)
    top_p = torch.rand(6, generator=g) * 0.98 + 0.01
    expected = top_p_filter_full_sort(x, top_p)
    monkeypatch.setattr(sampling_filters, "INITIAL_TOP_P_TOKENS", int(torch.randint(1, 64, (1,), generator=g)))
    assert torch.equal(top_p_filter(x, top_p), expected)


def test_rows_that_regroup_out_of_order_keep_their_own_cutoff(monkeypatch):
    """Rows retried in another order than they started (groups by size) still get their cutoff."""
    x = 0.01 * torch.randn(2, 2000, generator=torch.Generator().manual_seed(13))  # nearly flat
    top_p = torch.tensor([0.5, 0.9])
    expected = top_p_filter_full_sort(x, top_p)

    def sizes(probs, mass, p):  # round 1: row 0 -> 100, row 1 -> 20; then both the whole row
        if probs.shape[-1] == 4:
            return torch.where(p < 0.7, 100, 20)
        return torch.full_like(p, 2000, dtype=torch.long)

    monkeypatch.setattr(sampling_filters, "INITIAL_TOP_P_TOKENS", 4)
    monkeypatch.setattr(sampling_filters, "predicted_size", sizes)
    assert torch.equal(top_p_filter(x, top_p), expected)
