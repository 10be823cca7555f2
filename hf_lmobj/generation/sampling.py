"""The decoding step: temperature, top-k, top-p and min-p in one ``LogitsProcessor``.

``SamplingLogitsProcessor`` applies, in this order, temperature, top-k, top-p, min-p, setting every
filtered score to ``-inf``. Temperature 0 is greedy (only the argmax survives). Each parameter is a
scalar or one value per batch row; ``top_k`` 0/None, ``top_p`` 1.0/None and ``min_p`` 0/None switch
a step off. Nothing else is applied: with :func:`sampling_generate_kwargs`, ``model.generate``
samples with exactly these settings (its default ``top_k=50`` and other warpers switched off).

Example:
    >>> logits = torch.tensor([[2.0, 1.0, 0.1]])
    >>> scores = SamplingLogitsProcessor(top_p=0.9)(None, logits)
    >>> [round(p, 3) for p in scores.softmax(-1)[0].tolist()]
    [0.731, 0.269, 0.0]
    >>> sample_next_token(logits, temperature=0).tolist()
    [0]
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch
from transformers import LogitsProcessor, LogitsProcessorList

from hf_lmobj.checks import check_length, check_per_row
from hf_lmobj.generation._filters import greedy_filter, min_p_filter, top_k_filter, top_p_filter

Param = int | float | torch.Tensor | Sequence[float] | None
_HALF = (torch.float16, torch.bfloat16)
_HINTS = {
    "temperature": "use 0 for greedy decoding, 1.0 to leave the logits as they are",
    "top_k": "use 0 or None to switch top-k off",
    "top_p": "use 1.0 or None to switch top-p off (temperature=0 for greedy decoding)",
    "min_p": "use 0 or None to switch min-p off",
}


class SamplingLogitsProcessor(LogitsProcessor):
    """Temperature -> top-k -> top-p -> min-p, filtered scores set to ``-inf``.

    Args:
        temperature: >= 0; 0 keeps only the argmax (greedy). Scalar or one value per row.
        top_k: keep the k best tokens (ties with the k-th kept); 0 or None = off. Int or per row.
        top_p: keep the smallest set of best tokens whose probability reaches ``top_p``, in (0, 1];
            1.0 or None = off.
        min_p: drop tokens below ``min_p`` x the top probability, in [0, 1]; 0 or None = off.
        min_tokens_to_keep: no step keeps fewer tokens than this (greedy rows keep one).

    A per-row tensor may also have one value per prompt when ``generate`` expands each prompt into
    ``n`` consecutive rows (``num_return_sequences``, beams): it is repeated to match. The work is
    done in float32 (float64 input stays float64) and scores come back in the input dtype;
    float16/bfloat16 rows are shifted by their maximum (softmax unchanged) so that a small
    temperature cannot overflow. NaN or +inf scores raise ``ValueError``; rows that
    are entirely ``-inf`` pass through unchanged.

    Example:
        >>> proc = SamplingLogitsProcessor(temperature=torch.tensor([1.0, 0.0]), top_k=2)
        >>> proc(None, torch.tensor([[1.0, 3.0, 2.0], [1.0, 3.0, 2.0]])).tolist()
        [[-inf, 3.0, 2.0], [-inf, 3.0, -inf]]
    """

    def __init__(
        self,
        temperature: Param = 1.0,
        top_k: Param = None,
        top_p: Param = None,
        min_p: Param = None,
        min_tokens_to_keep: int = 1,
    ) -> None:
        self.min_tokens_to_keep = check_length(min_tokens_to_keep, "min_tokens_to_keep")
        self.temperature = check_per_row(
            temperature, "temperature", 0.0, math.inf, integer=False, hint=_HINTS["temperature"]
        )
        self.top_k = check_per_row(top_k, "top_k", 0, math.inf, integer=True, hint=_HINTS["top_k"])
        self.top_p = check_per_row(top_p, "top_p", 0.0, 1.0, integer=False, low_open=True, hint=_HINTS["top_p"])
        self.min_p = check_per_row(min_p, "min_p", 0.0, 1.0, integer=False, hint=_HINTS["min_p"])

    def __repr__(self) -> str:
        names = ("temperature", "top_k", "top_p", "min_p", "min_tokens_to_keep")
        return f"{type(self).__name__}(" + ", ".join(f"{n}={getattr(self, n)!r}" for n in names) + ")"

    def __call__(self, input_ids: torch.LongTensor | None, scores: torch.Tensor) -> torch.Tensor:
        """Filter ``scores`` (B, V); ``input_ids`` is unused (the ``LogitsProcessor`` signature)."""
        scores = _whole_rows(scores)  # a vocabulary-sharded DTensor: gathered, a plain tensor comes back
        _check_scores_tensor(scores)
        # (B, V) in float32 (float64 stays float64); every step is out of place: the input is kept
        x = scores if scores.dtype == torch.float64 else scores.float()
        _check_scores(x.amax(-1))
        rows, device, dtype = x.shape[0], x.device, x.dtype
        greedy = None
        if not _is_off(self.temperature, 1.0):
            t = _per_row(self.temperature, "temperature", rows, device, torch.float64)  # (B,) exact zeros
            greedy = t == 0
            x = apply_temperature(x, torch.where(greedy, 1.0, t))  # (B, V)
        if greedy is not None and bool(greedy.any()):
            x = greedy_filter(x, greedy)
        k = self.min_tokens_to_keep
        if not _is_off(self.top_k, 0):
            x = top_k_filter(x, _per_row(self.top_k, "top_k", rows, device, torch.long), k)
        if not _is_off(self.top_p, 1.0):  # the cut is decided in float64: top_p near 1 is never missed
            x = top_p_filter(x, _per_row(self.top_p, "top_p", rows, device, torch.float64), k)
        if not _is_off(self.min_p, 0.0):
            x = min_p_filter(x, _per_row(self.min_p, "min_p", rows, device, dtype), k)
        if scores.dtype in _HALF:
            top = x.amax(-1, keepdim=True)  # (B, 1)
            x = x - torch.where(top.isfinite(), top, 0.0)
        return x.to(scores.dtype)

    def sample(self, logits: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """Draw one token id per row (B,) from the filtered distribution of ``logits`` (B, V).

        Example:
            >>> g = torch.Generator().manual_seed(0)
            >>> SamplingLogitsProcessor(top_k=1).sample(torch.tensor([[0.0, 5.0, 1.0]]), g).tolist()
            [1]
        """
        scores = self(None, logits)  # (B, V)
        empty = ~scores.isfinite().any(-1)  # (B,)
        if bool(empty.any()):
            bad = empty.nonzero().squeeze(1).tolist()
            raise ValueError(
                f"rows {bad} have no finite score (every token was masked before sampling); "
                "check the logits processors that run before this one"
            )
        probs = scores.float().softmax(-1)  # (B, V), as generate() computes it
        return torch.multinomial(probs, 1, generator=generator).squeeze(1)

    def generate_kwargs(self, logits_processor: Sequence[LogitsProcessor] = ()) -> dict[str, Any]:
        """Keyword arguments for ``model.generate``: sample with this processor and nothing else.

        The built-in warpers are switched off explicitly (``top_k=0`` stops ``generate`` from adding
        its default ``top_k=50``); ``logits_processor`` (e.g. a repetition penalty) runs first.

        Example:
            >>> kwargs = SamplingLogitsProcessor(top_p=0.9).generate_kwargs()
            >>> kwargs["do_sample"], kwargs["top_k"], kwargs["top_p"], kwargs["temperature"]
            (True, 0, 1.0, 1.0)
        """
        return {
            "do_sample": True,
            "temperature": 1.0,
            "top_k": 0,
            "top_p": 1.0,
            "min_p": None,
            "typical_p": 1.0,
            "epsilon_cutoff": 0.0,
            "eta_cutoff": 0.0,
            "top_h": None,
            "logits_processor": LogitsProcessorList([*logits_processor, self]),
        }


def sampling_generate_kwargs(
    temperature: Param = 1.0,
    top_k: Param = None,
    top_p: Param = None,
    min_p: Param = None,
    min_tokens_to_keep: int = 1,
) -> dict[str, Any]:
    """``model.generate(**inputs, **sampling_generate_kwargs(top_p=0.9), max_new_tokens=...)``.

    Shorthand for ``SamplingLogitsProcessor(...).generate_kwargs()``.

    Example:
        >>> kwargs = sampling_generate_kwargs(temperature=0.7, top_p=0.9)
        >>> kwargs["logits_processor"][0]  # doctest: +NORMALIZE_WHITESPACE
        SamplingLogitsProcessor(temperature=0.7, top_k=None, top_p=0.9, min_p=None,
                                min_tokens_to_keep=1)
    """
    processor = SamplingLogitsProcessor(temperature, top_k, top_p, min_p, min_tokens_to_keep)
    return processor.generate_kwargs()


def sample_next_token(
    logits: torch.Tensor,
    temperature: Param = 1.0,
    top_k: Param = None,
    top_p: Param = None,
    min_p: Param = None,
    min_tokens_to_keep: int = 1,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """One sampling step for a custom loop: next-token logits (B, V) -> token ids (B,).

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> sample_next_token(torch.tensor([[0.0, 9.0], [9.0, 0.0]]), top_k=1, generator=g).tolist()
        [1, 0]
    """
    processor = SamplingLogitsProcessor(temperature, top_k, top_p, min_p, min_tokens_to_keep)
    return processor.sample(logits, generator=generator)


def _is_off(value: int | float | torch.Tensor | None, off: float) -> bool:
    """True when a parameter switches its step off for every row."""
    if value is None:
        return True
    if isinstance(value, torch.Tensor):
        return bool((value == off).all())
    return value == off


def _per_row(
    value: int | float | torch.Tensor,
    name: str,
    rows: int,
    device: torch.device,
    dtype: torch.dtype,
) -> torch.Tensor:
    """The parameter as one value per row (rows,); per-prompt values repeat as in ``generate``."""
    if not isinstance(value, torch.Tensor):
        return torch.full((rows,), value, dtype=dtype, device=device)
    value = value.to(device=device, dtype=dtype)
    if rows % value.numel():
        raise ValueError(
            f"{name} has {value.numel()} values but the batch has {rows} rows; pass one value per "
            "row (or per prompt when generate expands each prompt into consecutive rows)"
        )
    return value.repeat_interleave(rows // value.numel())


def apply_temperature(x: torch.Tensor, temperature: torch.Tensor) -> torch.Tensor:
    """``x / temperature`` per row (x: (B, V) float32 / float64; temperature: (B,) float64, > 0).

    A row whose division overflows (a tiny temperature, huge scores) is divided after shifting
    its maximum to 0, in float64: the softmax is the same and nothing becomes ``+inf`` or NaN
    (tokens far below the maximum become ``-inf``: their probability is 0 at that precision).

    Example:
        >>> apply_temperature(torch.tensor([[1.0, 3.0], [1e30, 0.0]]), torch.tensor([0.5, 1e-10])).tolist()
        [[2.0, 6.0], [0.0, -inf]]
    """
    scaled = x / temperature.to(x.dtype)[:, None]  # (B, V)
    row_max = x.amax(-1)  # (B,)
    broken = row_max.isfinite() & ~scaled.amax(-1).isfinite()  # (B,) overflowed (or underflowed) rows
    if not bool(broken.any()):
        return scaled
    shifted = (x[broken].double() - row_max[broken, None].double()) / temperature[broken, None]  # (R, V)
    return scaled.index_put((broken.nonzero().squeeze(1),), shifted.to(x.dtype))


def _whole_rows(scores: Any) -> Any:
    """Tensor-parallel scores (a ``DTensor`` sharded over the vocabulary) gathered: every filter needs whole rows.

    A plain tensor cannot say it is one rank's shard: scores must cover the vocabulary (gather a
    ``ColwiseParallel`` head's output with ``output_layouts=Replicate()``, as ``tp_plan="auto"`` does).
    """
    return scores.full_tensor() if hasattr(scores, "full_tensor") else scores


def _check_scores_tensor(scores: Any) -> None:
    """Scores must be a floating (B, V) tensor: integer or bool scores cannot hold -inf."""
    if not isinstance(scores, torch.Tensor):
        raise TypeError(f"scores must be a torch.Tensor (batch, vocab), got {type(scores).__name__}")
    if not scores.is_floating_point():
        raise TypeError(
            f"scores must be floating point (logits), got dtype {scores.dtype}: filtered tokens are set to -inf, "
            "which an integer tensor cannot hold; pass scores.float()"
        )
    if scores.dim() != 2:
        raise ValueError(f"scores must be (batch, vocab), got shape {tuple(scores.shape)}")


def _check_scores(row_max: torch.Tensor) -> None:
    """NaN or +inf scores have no distribution: fail here with the rows named."""
    bad = row_max.isnan() | (row_max == math.inf)  # (B,)
    if bool(bad.any()):
        which = bad.nonzero().squeeze(1).tolist()
        raise ValueError(
            f"scores contain NaN or +inf in rows {which}; the model's logits overflowed or are "
            "invalid (compute the final projection in float32, or check the previous processors)"
        )


def encode_prompts(tokenizer, prompts: list[str], add_bos: bool) -> dict[str, torch.Tensor]:
    """Left-padded batch of prompts (decoder-only models continue from the right edge).

    Pads with EOS when the tokenizer has no pad token; ``add_bos`` puts BOS first.
    """
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError("the tokenizer has neither a pad nor an eos token to pad prompts with")
        tokenizer.pad_token = tokenizer.eos_token
    if add_bos and tokenizer.bos_token is None:
        raise ValueError("add_bos needs a tokenizer with a BOS token; pass add_bos=False")
    texts = [tokenizer.bos_token + p if add_bos else p for p in prompts]
    tokenizer.padding_side = "left"
    return tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
