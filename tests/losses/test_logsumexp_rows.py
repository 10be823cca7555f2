"""``logsumexp_rows`` (the chunked head's logsumexp into a reused block) equals ``torch.logsumexp`` bit for bit."""

from __future__ import annotations

import math

import pytest
import torch

from hf_lmobj.losses.head_chunks import logsumexp_rows

ROWS = {
    "finite": [0.0, 1.0, 2.0, -3.5],
    "all -inf": [-math.inf] * 4,
    "a +inf": [math.inf, 0.0, 1.0, 2.0],
    "+inf and -inf": [math.inf, -math.inf, 0.0, 1.0],
    "a nan": [math.nan, 0.0, 1.0, 2.0],
    "huge": [1e30, 1e30, -1e30, 0.0],
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("row", list(ROWS))
def test_logsumexp_rows_is_torch_logsumexp_bit_for_bit(row, dtype):
    generator = torch.Generator().manual_seed(0)
    logits = torch.cat([torch.tensor([ROWS[row]], dtype=dtype), torch.randn(3, 4, generator=generator, dtype=dtype)])
    work = torch.full_like(logits, 7.0)  # stale contents must not leak in
    got, want = logsumexp_rows(logits, work), torch.logsumexp(logits, dim=-1)
    assert torch.equal(got.isnan(), want.isnan()) and torch.equal(got.nan_to_num(), want.nan_to_num())
