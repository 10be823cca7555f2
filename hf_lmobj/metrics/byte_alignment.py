"""Tokenizer-free comparison of two causal LMs: every token's NLL put on the UTF-8 bytes it covers.

Per-byte NLL. Each text is scored with :func:`.scoring.score_texts` ``(..., return_token_nll=True)`` and a
start token (BOS, or EOS under ``windows="lm_eval"`` when there is no BOS), so every token of the text is a
target. The fast tokenizer's offsets (characters) become UTF-8 byte offsets, and the text's bytes are cut
at the tokens' end offsets (made non-decreasing): a token owns the bytes after the previous token's end up
to its own, the first token the bytes before it, the last one the bytes after it (so whitespace that
offsets trim is never lost). Tokens that end on the same byte, such as byte-level BPE pieces of one
multi-byte character (é, 中, an emoji) that all report that character's span, share those bytes: the
``k`` tokens over ``m`` bytes get consecutive slices of ``m // k`` or ``m // k + 1`` bytes, in order.

Rule: a token's NLL is spread evenly over its bytes, split exactly: its float64 value ``M * 2**e``
(``M`` a 53-bit integer) gives each of its ``L`` bytes ``(M // L + (r < M % L)) * 2**e``, every share
representable, so a text's bytes add up exactly to its tokens' NLL: ``math.fsum(per_byte) ==
TokenScore.nll`` (whenever no byte is shared by two tokens, i.e. every token covers at least a byte, as in
byte-level BPE and byte-fallback tokenizers; a zero-width token's NLL is added onto a byte, to a float
rounding). Why evenly rather than on the token's last byte: a gap localised per byte (a pattern, a span,
a script) is then read from two tokenizations whose boundaries differ without piling each model's loss on
its own boundary bytes; sums over whole texts are the same under either rule.

Example:
    >>> spread_over_bytes([3.0, 1.0], byte_ends=[2, 3], num_bytes=3).tolist()
    [1.5, 1.5, 1.0]
    >>> spread_over_bytes([1.0, 2.0], byte_ends=[4, 4], num_bytes=4).tolist()  # one emoji, two pieces
    [0.5, 0.5, 1.0, 1.0]

Standard library, numpy, torch and siblings only (it can ship beside ``.scoring``).
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any

import numpy as np

from .scoring import WINDOWS, TokenScore, score_texts
from .sums import _check_int

_LN2 = math.log(2)


def _check_texts(texts: Any) -> list[str]:
    """A non-empty list of non-empty strings that encode to UTF-8 (no lone surrogates)."""
    if isinstance(texts, str) or not isinstance(texts, Sequence) or not all(isinstance(t, str) for t in texts):
        raise TypeError("texts must be a list of strings (wrap a single text in a list)")
    if not texts:
        raise ValueError("texts is empty; pass at least one text")
    for i, text in enumerate(texts):
        if not text:
            raise ValueError(f"texts[{i}] is empty: it has no byte to score; drop it")
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as error:
            raise ValueError(
                f"texts[{i}] holds a lone surrogate at {error.start}: it has no UTF-8 bytes; clean it"
            ) from None
    return list(texts)


def _check_domains(domains: Any, count: int) -> list[str] | None:
    """None, or one non-empty string per text."""
    if domains is None:
        return None
    if isinstance(domains, str) or not isinstance(domains, Sequence):
        raise TypeError(f"domains must be a list of {count} strings (one per text) or None")
    if len(domains) != count:
        raise ValueError(f"domains has {len(domains)} entries for {count} texts: give one domain per text")
    for i, domain in enumerate(domains):
        if not isinstance(domain, str) or not domain:
            raise ValueError(f"domains[{i}] must be a non-empty string, got {domain!r}")
    return list(domains)


def _resolve_tokenizer(model: Any, tokenizer: Any) -> Any:
    """The tokenizer itself: loaded when given as a path / Hub id, or from ``model``'s path when None."""
    if tokenizer is None and isinstance(model, (str, os.PathLike)):
        tokenizer = model
    if isinstance(tokenizer, (str, os.PathLike)):
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tokenizer)
    return tokenizer


def _check_fast(tokenizer: Any, name: str) -> None:
    """Refuse a tokenizer that cannot give character offsets (a slow, Python tokenizer)."""
    if not getattr(tokenizer, "is_fast", False):
        raise TypeError(
            f"{name} must be a fast tokenizer (PreTrainedTokenizerFast): the per-byte alignment reads its "
            f"offset mapping, which {type(tokenizer).__name__} does not give; load it with use_fast=True"
        )


def _check_start(tokenizer: Any, name: str, windows: str) -> None:
    """Refuse a tokenizer without the start token the window layout needs (the first token must be scored)."""
    if windows == "strided" and getattr(tokenizer, "bos_token_id", None) is None:
        raise ValueError(f"{name} has no BOS token, so a text's first token cannot be scored: set one, or pass "
                         "windows='lm_eval' (which starts from EOS)")  # fmt: skip


def token_byte_ends(tokenizer: Any, texts: Sequence[str], name: str = "tokenizer") -> list[np.ndarray]:
    """Per text, the UTF-8 byte offset where each token (no special tokens added) ends, from its char offsets."""
    _check_fast(tokenizer, name)
    encoded = tokenizer(list(texts), add_special_tokens=False, return_offsets_mapping=True)
    if "offset_mapping" not in encoded:
        raise TypeError(f"{name} returned no offset_mapping: use a fast tokenizer (use_fast=True)")
    out = []
    for text, offsets in zip(texts, encoded["offset_mapping"]):
        codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
        widths = 1 + (codes >= 0x80).astype(np.int64) + (codes >= 0x800) + (codes >= 0x10000)
        char_to_byte = np.concatenate([[0], np.cumsum(widths)])  # (chars + 1,)
        ends = np.array([end for _, end in offsets], dtype=np.int64)
        out.append(char_to_byte[ends] if len(ends) else ends)
    return out


def _owned_slices(ends: np.ndarray, num_bytes: int) -> tuple[np.ndarray, np.ndarray]:
    """``(start, length)`` of each token's bytes: cut at the non-decreasing ends, tied tokens share in order."""
    ends = np.minimum(np.maximum.accumulate(ends), num_bytes)
    if (ends > 0).any():
        ends[ends == 0] = ends[ends > 0][0]  # zero-width tokens before the first byte join the first group
    ends[ends == ends[-1]] = num_bytes  # bytes after the last token's end belong to the last group
    bounds, first, size = np.unique(ends, return_index=True, return_counts=True)
    group_start = np.concatenate([[0], bounds[:-1]])
    group = np.repeat(np.arange(len(bounds)), size)
    rank = np.arange(len(ends)) - first[group]  # j: the token's place within its group
    width, k = (bounds - group_start)[group], size[group]
    start = group_start[group] + rank * width // k
    return start, (rank + 1) * width // k - rank * width // k


def spread_over_bytes(token_nll: Any, byte_ends: Any, num_bytes: int) -> np.ndarray:
    """Per-byte NLL (float64, ``num_bytes`` long) from per-token NLLs and their byte end offsets (module rule).

    Raises ValueError when the lengths differ, an NLL is NaN or negative, or there are bytes but no token.
    """
    values = np.asarray(token_nll, dtype=np.float64)
    ends = np.asarray(byte_ends, dtype=np.int64)
    num_bytes = _check_int(num_bytes, "num_bytes", 1, "the text's UTF-8 length")
    if values.ndim != 1 or ends.shape != values.shape or not len(values):
        raise ValueError(f"token_nll and byte_ends must be 1-D, non-empty and alike, got {values.shape}, {ends.shape}")
    if np.isnan(values).any() or (values < 0).any():
        raise ValueError("token_nll holds a NaN or negative NLL: an NLL is >= 0 (inf allowed)")
    start, length = _owned_slices(ends, num_bytes)
    out = np.zeros(num_bytes, dtype=np.float64)
    wide = np.maximum(length, 1)  # a zero-width token (more tokens than bytes) lands on one byte
    owner = np.repeat(np.arange(len(values)), wide)  # (bytes, zero-width tokens counted once)
    place = np.arange(len(owner)) - np.repeat(np.cumsum(wide) - wide, wide)  # r within the token's bytes
    finite = np.isfinite(values)
    mantissa, exponent = np.frexp(np.where(finite, values, 0.0))  # value = M * 2**(exponent - 53), M an integer
    ints = np.ldexp(mantissa, 53).astype(np.int64)
    base, extra = ints // wide, ints % wide  # M = base * L + extra: `extra` bytes get base + 1, the rest base
    share = np.ldexp((base[owner] + (place < extra[owner])).astype(np.float64), exponent[owner] - 53)
    share[~finite[owner]] = math.inf
    np.add.at(out, start[owner] + place, share)
    return out


def per_byte_nll(
    model: Any, tokenizer: Any, texts: Sequence[str], name: str = "tokenizer", **score_kwargs: Any
) -> tuple[list[np.ndarray], list[TokenScore]]:
    """Per text, its per-byte NLL (:func:`spread_over_bytes`) and its :class:`.scoring.TokenScore`.

    ``score_kwargs`` go to :func:`.scoring.score_texts` (``max_length``, ``stride``, ``batch_size``, ``device``,
    ``progress``, ``windows``); a start token is always added, so every token of the text is scored.
    """
    texts, tokenizer = _check_texts(texts), _resolve_tokenizer(model, tokenizer)
    windows = score_kwargs.get("windows", "strided")
    if windows not in WINDOWS:
        raise ValueError(f"windows must be one of {WINDOWS}, got {windows!r}")
    if any(key in score_kwargs for key in ("add_start_token", "return_token_nll")):
        raise ValueError("per_byte_nll always adds a start token and returns token NLLs: leave those arguments out")
    _check_start(tokenizer, name, windows)
    ends = token_byte_ends(tokenizer, texts, name)
    scores = score_texts(model, tokenizer, texts, add_start_token=True, return_token_nll=True, **score_kwargs)
    out = []
    for i, (text, score, text_ends) in enumerate(zip(texts, scores, ends)):
        if len(score.token_nll) != len(text_ends):
            raise ValueError(f"texts[{i}]: {len(score.token_nll)} scored targets for {len(text_ends)} tokens ({name})")
        out.append(spread_over_bytes(score.token_nll, text_ends, len(text.encode("utf-8"))))
    return out, scores


def _figures(a: list[np.ndarray], b: list[np.ndarray]) -> dict:
    """Bytes, bits per byte of each model and the gap (b minus a) over some texts' per-byte arrays."""
    num_bytes = sum(len(x) for x in a)
    nll_a, nll_b = math.fsum(np.concatenate(a).tolist()), math.fsum(np.concatenate(b).tolist())
    difference = math.fsum(np.concatenate([*b, *(-x for x in a)]).tolist())  # exact b - a, rounded once
    return dict(bytes=num_bytes, bits_per_byte_a=nll_a / num_bytes / _LN2, bits_per_byte_b=nll_b / num_bytes / _LN2,
                gap=difference / num_bytes / _LN2)  # fmt: skip


def compare_per_byte(
    texts: Sequence[str],
    model_a: Any,
    tok_a: Any,
    model_b: Any,
    tok_b: Any,
    domains: Sequence[str] | None = None,
    top_k: int = 10,
    return_per_byte: bool = False,
    **score_kwargs: Any,
) -> dict:
    """Bits per byte of two causal LMs (any two tokenizers) on the same texts, and the gap ``b - a``.

    Args:
        texts: the texts (non-empty strings), scored whole by both models.
        model_a, tok_a, model_b, tok_b: each model with its fast tokenizer (paths / Hub ids work too; a tokenizer
            None is loaded from its model's path).
        domains: one domain name per text (None: no per-domain figures).
        top_k: how many texts of largest absolute gap to list (0: none).
        return_per_byte: also return both per-byte NLL arrays per text.
        score_kwargs: for :func:`.scoring.score_texts`, both models (``max_length``, ``stride``, ``windows``, ...).

    Returns:
        ``overall`` (``bytes``, ``bits_per_byte_a``, ``bits_per_byte_b``, ``gap``: micro, over all bytes),
        ``per_domain`` (the same per domain, sorted by name; ``{}`` without domains), ``per_text`` (the same
        plus ``index`` and ``domain``), ``top`` (``index``, ``domain``, ``gap`` of the ``top_k`` texts of largest
        ``|gap|``, ties by index) and, when asked, ``per_byte_a`` / ``per_byte_b``. A positive gap: b is
        worse. A model compared with itself gives exactly 0 everywhere.
    """
    texts = _check_texts(texts)
    domains = _check_domains(domains, len(texts))
    top_k = _check_int(top_k, "top_k", 0, "texts of largest gap to list")
    if not isinstance(return_per_byte, bool):
        raise TypeError(f"return_per_byte must be True or False, got {return_per_byte!r}")
    tok_a, tok_b = _resolve_tokenizer(model_a, tok_a), _resolve_tokenizer(model_b, tok_b)
    for tokenizer, name in ((tok_a, "tok_a"), (tok_b, "tok_b")):  # both checked before either model runs
        _check_fast(tokenizer, name)
        _check_start(tokenizer, name, score_kwargs.get("windows", "strided"))
    bytes_a, _ = per_byte_nll(model_a, tok_a, texts, "tok_a", **score_kwargs)
    bytes_b, _ = per_byte_nll(model_b, tok_b, texts, "tok_b", **score_kwargs)
    labels = domains or [None] * len(texts)
    per_text = [{"index": i, "domain": labels[i], **_figures([bytes_a[i]], [bytes_b[i]])} for i in range(len(texts))]
    per_domain = {}
    for domain in sorted(set(domains or ())):
        chosen = [i for i, label in enumerate(labels) if label == domain]
        per_domain[domain] = {
            "texts": len(chosen),
            **_figures([bytes_a[i] for i in chosen], [bytes_b[i] for i in chosen]),
        }
    ranked = sorted(per_text, key=lambda row: (-abs(row["gap"]), row["index"]))[:top_k]
    result = {
        "overall": {"texts": len(texts), **_figures(bytes_a, bytes_b)},
        "per_domain": per_domain,
        "per_text": per_text,
        "top": [{"index": row["index"], "domain": row["domain"], "gap": row["gap"]} for row in ranked],
    }
    if return_per_byte:
        result.update(per_byte_a=bytes_a, per_byte_b=bytes_b)
    return result
