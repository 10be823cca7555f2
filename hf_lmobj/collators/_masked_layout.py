"""The masked-LM collator's rows: the batch's documents placed in rows (:func:`_placement`; chunked, or packed
best-fit) and, when packing, each row's per-document attention inputs (:func:`_packed_masks`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from hf_lmobj.collators._attention import check_dense_mask, is_flash_attention
from hf_lmobj.packing.masks import block_attention_mask, flash_attention_kwargs
from hf_lmobj.packing.rows import Layout, chunk_documents, pack_layout


def _placement(starts: np.ndarray, lengths: np.ndarray, max_length: int | None, packing: bool) -> Layout:
    """Chunks of at most ``max_length`` tokens: best-fit-decreasing into rows when packing, else one per row."""
    if packing:
        return pack_layout(starts, lengths, max_length)
    chunk_start, chunk_len, _ = chunk_documents(starts, lengths, max_length)
    return Layout(chunk_start, chunk_len, np.arange(chunk_len.size), np.zeros_like(chunk_len), chunk_len)


def _packed_masks(
    place,
    chunk_len,
    chunk_start,
    fill,
    width,
    position_ids_start: int,
    attn_implementation: str,
    packed_attention: str,
    mask_dtype: torch.dtype,
    sliding_window: int | None,
) -> dict[str, Any]:
    """Position ids restarting per document (padding is a run of its own) and the mask."""
    tail = torch.arange(width)[None, :] - torch.from_numpy(fill)[:, None]  # (R, width)
    first = torch.from_numpy(np.repeat(chunk_start, chunk_len))  # (N,)
    within = torch.arange(first.numel()) - first  # (N,) position inside its chunk
    positions = torch.where(tail >= 0, tail, place(within, 0))  # (R, width); padding: 0, 1, ...
    out: dict[str, Any] = {"position_ids": positions + position_ids_start}
    flash = is_flash_attention(attn_implementation) and packed_attention == "auto"
    if flash or packed_attention == "cu_seq_lens":
        out.update(flash_attention_kwargs(positions))
        return out
    check_dense_mask(width, asked=packed_attention == "4d_mask")
    chunk_of_token = torch.from_numpy(np.repeat(np.arange(len(chunk_len)), chunk_len))  # (N,)
    documents = place(chunk_of_token, -1)  # (R, width), padding = -1
    mask = block_attention_mask(documents, causal=False, dtype=mask_dtype)  # (R, 1, T, T)
    if sliding_window is None:
        out["attention_mask"] = mask
        return out
    index = torch.arange(width)
    far = (index[:, None] - index[None, :]).abs() > sliding_window  # (T, T)
    local = mask.masked_fill(far, torch.finfo(mask_dtype).min)
    out["attention_mask"] = {"full_attention": mask, "sliding_attention": local}
    return out
