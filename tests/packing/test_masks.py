"""Where packed documents are: document ids from position_ids, the 4D block mask, flash-attention's kwargs."""

from __future__ import annotations

import torch

from hf_lmobj.packing.masks import block_attention_mask, document_ids_from_position_ids, flash_attention_kwargs


def test_block_mask_is_block_diagonal_and_causal():
    docs = document_ids_from_position_ids(torch.tensor([[0, 1, 2, 0, 1, 0]]))
    assert docs.tolist() == [[0, 0, 0, 1, 1, 2]]
    causal = block_attention_mask(docs, causal=True)[0, 0] == 0
    full = block_attention_mask(docs, causal=False)[0, 0] == 0
    expected_full = docs[0, :, None] == docs[0, None, :]
    assert torch.equal(full, expected_full)
    assert torch.equal(causal, expected_full & torch.ones(6, 6, dtype=torch.bool).tril())
    assert block_attention_mask(docs, causal=True, dtype=torch.bfloat16).dtype == torch.bfloat16


def test_flash_kwargs_flatten_rows():
    kw = flash_attention_kwargs(torch.tensor([[0, 1, 2, 0], [1, 2, 0, 1]]))
    # row 2 starts mid-document: a row start always starts a new sequence
    assert kw["cu_seq_lens_q"].tolist() == [0, 3, 4, 6, 8]
    assert kw["max_length_k"] == 3 and kw["cu_seq_lens_q"].dtype == torch.int32
