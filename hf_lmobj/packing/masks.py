"""Where the documents of a packed row are, in the forms a model takes: document ids, a 4D mask, varlen kwargs.

A packed row holds several documents back to back. Three ways tell a model where they are (which
one a batch uses is decided by the collators, from the model's attention implementation):

* ``position_ids`` restarting at 0 for each document: transformers' ``create_causal_mask`` detects
  the packed rows (without a cache) and flash-attention derives ``cu_seqlens`` from them;
  :func:`document_ids_from_position_ids` numbers the documents from them;
* :func:`flash_attention_kwargs`: explicit ``cu_seq_lens_q/k`` and ``max_length_q/k``;
* :func:`block_attention_mask`: a 4D additive float mask ``[B, 1, T, T]`` (0 = may attend, dtype min
  = may not) that eager and sdpa attention use as given, for the models whose mask ignores
  ``position_ids`` (and encoders). transformers ignores a 4D *boolean* mask on eager attention, so
  the float form is the one that works everywhere.

Example:
    >>> import torch
    >>> doc = document_ids_from_position_ids(torch.tensor([[0, 1, 0, 1, 2]]))
    >>> doc.tolist()
    [[0, 0, 1, 1, 1]]
"""

from __future__ import annotations

import numpy as np
import torch


def document_ids_from_position_ids(position_ids: torch.Tensor) -> torch.Tensor:
    """Number the documents of each row: a new document starts wherever ``position_ids == 0``.

    Shapes: ``position_ids`` (B, T) -> (B, T) int64, starting at 0 in each row.
    """
    starts = (position_ids == 0).long()  # (B, T)
    starts[:, 0] = 1
    return starts.cumsum(dim=1) - 1  # (B, T)


def block_attention_mask(document_ids: torch.Tensor, causal: bool, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """4D additive mask letting each token attend only within its own document.

    Shapes: ``document_ids`` (B, T) -> (B, 1, T, T) with 0.0 where query t may attend key s (same
    document, and s <= t when ``causal``) and ``torch.finfo(dtype).min`` elsewhere. Every query
    sees at least itself, so no softmax row is empty.

    Example:
        >>> m = block_attention_mask(torch.tensor([[0, 0, 1]]), causal=True)
        >>> (m[0, 0] == 0).int().tolist()
        [[1, 0, 0], [1, 1, 0], [0, 0, 1]]
    """
    same = document_ids[:, :, None] == document_ids[:, None, :]  # (B, T, T)
    if causal:
        position = torch.arange(document_ids.shape[1], device=document_ids.device)  # (T,)
        same &= position[:, None] >= position[None, :]  # (B, T, T)
    allowed = torch.zeros((), dtype=dtype, device=same.device)
    blocked = torch.tensor(torch.finfo(dtype).min, dtype=dtype, device=same.device)
    return torch.where(same, allowed, blocked)[:, None]  # (B, 1, T, T)


def flash_attention_kwargs(position_ids: torch.Tensor) -> dict[str, torch.Tensor | int]:
    """``cu_seq_lens_q/k`` and ``max_length_q/k`` for flash-attention over the flattened batch.

    The whole (B, T) batch is one stream of documents; each row's first token starts a document.

    Example:
        >>> kw = flash_attention_kwargs(torch.tensor([[0, 1, 2, 0, 1]]))
        >>> kw["cu_seq_lens_q"].tolist(), kw["max_length_q"]
        ([0, 3, 5], 3)
    """
    flat = position_ids.reshape(-1).cpu().numpy()  # (B * T,)
    starts = flat == 0
    starts[:: position_ids.shape[1]] = True
    cu = np.append(np.flatnonzero(starts), flat.size).astype(np.int32)  # (S + 1,)
    longest = int(np.diff(cu).max()) if cu.size > 1 else 0
    cu = torch.from_numpy(cu).to(position_ids.device)
    return {"cu_seq_lens_q": cu, "cu_seq_lens_k": cu, "max_length_q": longest, "max_length_k": longest}
