"""The depth modules of multi-token prediction: a rotary causal block within documents, and one MTP depth.

Kept apart from :mod:`hf_lmobj.models.mtp` (the config, the wrapper model and its checks): these are plain
``nn.Module`` building blocks, configured by an ``MTPConfig``.

Example:
    >>> from hf_lmobj.models.mtp import MTPConfig
    >>> block = CausalBlock(MTPConfig(hidden_size=16, num_attention_heads=2, intermediate_size=32))
    >>> x, pos = torch.zeros(1, 3, 16), torch.arange(3)[None]
    >>> block(x, pos, torch.zeros(1, 3, dtype=torch.long)).shape
    torch.Size([1, 3, 16])
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.nn.functional as F
from torch import nn

from hf_lmobj.packing.masks import block_attention_mask

if TYPE_CHECKING:
    from hf_lmobj.models.mtp import MTPConfig


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of x (B, heads, T, d) with cos / sin (B, 1, T, d / 2)."""
    x1, x2 = x.chunk(2, dim=-1)  # (B, heads, T, d / 2) each
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1)


class CausalBlock(nn.Module):
    """One pre-norm transformer block: rotary causal self-attention within documents, then SwiGLU.

    ``forward(x, positions, documents)``: x (B, T, H), positions and documents (B, T) -> (B, T, H).
    """

    def __init__(self, config: MTPConfig) -> None:
        super().__init__()
        hidden, inter = config.hidden_size, config.intermediate_size
        self.num_heads = config.num_attention_heads
        self.rope_theta = config.rope_theta
        self.attention_norm = nn.RMSNorm(hidden, eps=config.rms_norm_eps)
        self.qkv = nn.Linear(hidden, 3 * hidden, bias=False)
        self.attention_out = nn.Linear(hidden, hidden, bias=False)
        self.mlp_norm = nn.RMSNorm(hidden, eps=config.rms_norm_eps)
        self.gate_up = nn.Linear(hidden, 2 * inter, bias=False)
        self.down = nn.Linear(inter, hidden, bias=False)

    def forward(self, x: torch.Tensor, positions: torch.Tensor, documents: torch.Tensor) -> torch.Tensor:
        b, t, h = x.shape
        head_dim = h // self.num_heads
        q, k, v = self.qkv(self.attention_norm(x)).view(b, t, 3, self.num_heads, head_dim).unbind(2)  # (B, T, n, d)
        q, k, v = (z.transpose(1, 2) for z in (q, k, v))  # (B, n, T, d)
        exponents = torch.arange(0, head_dim, 2, device=x.device, dtype=torch.float32) / head_dim  # (d / 2,)
        angles = positions[:, None, :, None].float() * self.rope_theta**-exponents  # (B, 1, T, d / 2)
        cos, sin = angles.cos().to(q.dtype), angles.sin().to(q.dtype)
        q, k = _rotate(q, cos, sin), _rotate(k, cos, sin)
        if bool((documents == documents[:, :1]).all()):  # one document per row: plain causal attention
            attended = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # (B, n, T, d)
        else:
            mask = block_attention_mask(documents, causal=True, dtype=q.dtype)  # (B, 1, T, T)
            attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # (B, n, T, d)
        x = x + self.attention_out(attended.transpose(1, 2).reshape(b, t, h))  # (B, T, H)
        gate, up = self.gate_up(self.mlp_norm(x)).chunk(2, dim=-1)  # (B, T, I) each
        return x + self.down(F.silu(gate) * up)  # (B, T, H)


class MTPModule(nn.Module):
    """One extra depth: (sequential only) norm + projection of [previous; next-token embedding],
    one ``CausalBlock``, and the RMSNorm applied before the shared output head.

    ``forward(previous, next_embeddings, positions, documents)`` returns ``(h_k, RMSNorm(h_k))``,
    both (B, T, H): the first feeds the next depth, the second the head.
    """

    def __init__(self, config: MTPConfig) -> None:
        super().__init__()
        self.sequential = config.architecture == "sequential"
        if self.sequential:
            self.hidden_norm = nn.RMSNorm(config.hidden_size, eps=config.rms_norm_eps)
            self.embedding_norm = nn.RMSNorm(config.embedding_size, eps=config.rms_norm_eps)
            self.projection = nn.Linear(config.hidden_size + config.embedding_size, config.hidden_size, bias=False)
        self.block = CausalBlock(config)
        self.output_norm = nn.RMSNorm(config.hidden_size, eps=config.rms_norm_eps)

    def forward(
        self,
        previous: torch.Tensor,
        next_embeddings: torch.Tensor | None,
        positions: torch.Tensor,
        documents: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        x = previous  # (B, T, H)
        if self.sequential:
            if next_embeddings is None:
                raise ValueError("a sequential MTP module needs the embeddings of the next tokens")
            joined = torch.cat(
                [self.hidden_norm(previous), self.embedding_norm(next_embeddings)], dim=-1
            )  # (B, T, H + E)
            x = self.projection(joined)  # (B, T, H)
        h = self.block(x, positions, documents)  # (B, T, H)
        return h, self.output_norm(h)


def _initialize(modules: nn.Module, std: float, seed: int) -> None:
    """Normal(0, std) linear weights, unit norms, from an explicit generator."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in modules.modules():
            if isinstance(module, nn.Linear):
                module.weight.copy_(torch.empty(module.weight.shape).normal_(0.0, std, generator=generator))
            elif isinstance(module, nn.RMSNorm):
                module.weight.fill_(1.0)
