"""Pure tensor functions behind BERT-style masking: eligibility, word starts, selection, 80/10/10.

Everything works on one flat stream of ``N`` tokens (all examples of a batch back to back) and
costs O(N) time and memory: no ``B x L x L`` tensor is ever built. The collator lays the result
out in rows afterwards.

* :func:`vocabulary_tables` looks at a tokenizer once: which ids are special, which ids may be
  drawn as random replacements, and which ids start a word.
* :func:`word_starts_from_tokens` / :func:`word_starts_from_word_ids` mark the first token of
  every word, from token strings (WordPiece ``##``, byte-level BPE ``Ġ``, SentencePiece ``▁``)
  or from a fast tokenizer's ``word_ids()``.
* :func:`select_positions` draws each word (or token) with probability ``p`` from the uniform
  drawn at its first token, so every token is selected with probability ``p`` and a word is
  selected whole or not at all.
* :func:`corrupt` applies the mask / random / keep split to the selected tokens.

Example:
    >>> ids = torch.tensor([7, 8, 9, 10])
    >>> u = torch.tensor([0.05, 0.9, 0.1, 0.5], dtype=torch.float64)
    >>> selected = select_positions(u, torch.ones(4, dtype=torch.bool), None, 0.15)
    >>> selected.tolist()
    [True, False, True, False]
    >>> action = torch.tensor([0.1, 0.0, 0.95, 0.0], dtype=torch.float64)
    >>> inputs, labels = corrupt(ids, selected, action, 4, torch.arange(5, 20), 0.8, 0.1)
    >>> inputs.tolist(), labels.tolist()
    ([4, 8, 9, 10], [7, -100, 9, -100])
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

WORD_RULES = ("wordpiece", "byte_level", "metaspace")
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)  # SplitMix64 increment and finalizer constants
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)
_BYTE_LEVEL_WHITESPACE = " \t\n\r\x0b\x0c"


@dataclass(frozen=True)
class VocabularyTables:
    """Per-id lookups built once from a tokenizer (``V = len(tokenizer)``).

    Attributes:
        special: (V,) bool, True for every special / added-special id (never selected or drawn).
        replacement_ids: (R,) int64, the non-special ids random replacements are drawn from.
        word_rule: one of :data:`WORD_RULES`, or None when whole-word masking is not used.
        starts_word: (V,) bool, the token begins a new word (its own marker says so).
        whitespace: (V,) bool, byte-level tokens made only of whitespace (None for other rules).
    """

    special: torch.Tensor
    replacement_ids: torch.Tensor
    word_rule: str | None = None
    starts_word: torch.Tensor | None = None
    whitespace: torch.Tensor | None = None


def _byte_level_chars(text: str) -> set[str]:
    """The GPT-2 byte-level alphabet's images of the bytes of ``text`` (e.g. ``" "`` -> ``"Ġ"``)."""
    printable = set(range(ord("!"), ord("~") + 1)) | set(range(0xA1, 0xAD)) | set(range(0xAE, 0x100))
    shifted = [b for b in range(256) if b not in printable]
    image = {b: chr(b) for b in printable} | {b: chr(256 + n) for n, b in enumerate(shifted)}
    return {image[b] for b in text.encode("utf-8")}


def detect_word_rule(tokenizer: Any) -> str:
    """Which marker tells word starts apart: ``"wordpiece"``, ``"byte_level"`` or ``"metaspace"``.

    Read from a fast tokenizer's model / pre-tokenizer; otherwise the marker most of the vocabulary
    carries (``##``, ``Ġ`` or ``▁``). Raises ValueError when none applies.
    """
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        state = json.loads(backend.to_str())
        if (state.get("model") or {}).get("type") == "WordPiece":
            return "wordpiece"
        text = json.dumps([state.get("pre_tokenizer"), state.get("decoder")])
        if '"ByteLevel"' in text:
            return "byte_level"
        if '"Metaspace"' in text:
            return "metaspace"
    vocab = tokenizer.get_vocab()
    counts = {
        "wordpiece": sum(t.startswith("##") for t in vocab),
        "byte_level": sum(t.startswith("Ġ") for t in vocab),
        "metaspace": sum(t.startswith("▁") for t in vocab),
    }
    rule, count = max(counts.items(), key=lambda item: item[1])
    if count < 0.01 * max(len(vocab), 1):
        raise ValueError(
            "whole_word_mask=True: cannot tell word starts from this tokenizer's tokens (no ##, Ġ or"
            " ▁ markers); pass each feature's `word_ids` (from a fast tokenizer's .word_ids())"
        )
    return rule


def vocabulary_tables(tokenizer: Any, word_rule: str | None = None) -> VocabularyTables:
    """Build the per-id lookups; ``word_rule`` ("auto" to detect) adds the word-start tables.

    Example:
        >>> from hf_lmobj.corpus import build_tokenizer
        >>> tables = vocabulary_tables(build_tokenizer(vocab_size=512, max_documents=20), "auto")
        >>> tables.word_rule, bool(tables.special[4]), 4 in tables.replacement_ids.tolist()
        ('byte_level', True, False)
    """
    size = len(tokenizer)
    special = torch.zeros(size, dtype=torch.bool)
    special_ids = set(tokenizer.all_special_ids)
    decoder = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    special_ids |= {i for i, token in decoder.items() if getattr(token, "special", False)}
    special[[i for i in special_ids if 0 <= i < size]] = True
    replacement_ids = torch.nonzero(~special).flatten()
    if word_rule is None:
        return VocabularyTables(special, replacement_ids)
    if word_rule == "auto":
        word_rule = detect_word_rule(tokenizer)
    if word_rule not in WORD_RULES:
        raise ValueError(f"word_rule must be one of {WORD_RULES} or 'auto', got {word_rule!r}")
    tokens = [t or "" for t in tokenizer.convert_ids_to_tokens(list(range(size)))]
    whitespace = None
    if word_rule == "wordpiece":
        starts = [not t.startswith("##") for t in tokens]
    elif word_rule == "metaspace":
        starts = [t.startswith("▁") for t in tokens]
    else:
        blank = _byte_level_chars(_BYTE_LEVEL_WHITESPACE)
        starts = [t[:1] in blank for t in tokens]
        whitespace = torch.tensor([bool(t) and set(t) <= blank for t in tokens], dtype=torch.bool)
    starts_word = torch.tensor(starts, dtype=torch.bool)
    return VocabularyTables(special, replacement_ids, word_rule, starts_word, whitespace)


def counter_uniforms(seeds: Sequence[int], lengths: Sequence[int], streams: int = 2) -> torch.Tensor:
    """Uniforms in [0, 1) that depend only on an example's seed and a token's position in it.

    Uniform ``j`` of token ``t`` of an example is the ``(streams * t + j + 1)``-th output of
    SplitMix64 started at the example's seed, computed for the whole batch at once (counter-based,
    so no generator per example and no dependence on the batch, padding or the example's length).

    Shapes: ``seeds`` (B,) ints in [0, 2^64), ``lengths`` (B,) -> (streams, N = sum(lengths)) float64.

    Example:
        >>> u = counter_uniforms([1, 2], [3, 1])
        >>> u.shape, bool(((u >= 0) & (u < 1)).all())
        (torch.Size([2, 4]), True)
        >>> torch.equal(counter_uniforms([2], [1]), u[:, 3:])
        True
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    starts = np.cumsum(lengths) - lengths  # (B,)
    position = np.arange(int(lengths.sum()), dtype=np.int64) - np.repeat(starts, lengths)  # (N,)
    base = np.repeat(np.asarray(seeds, dtype=np.uint64), lengths)  # (N,)
    step = position.astype(np.uint64)[None, :] * np.uint64(streams)  # (1, N)
    step = step + np.arange(1, streams + 1, dtype=np.uint64)[:, None]  # (S, N)
    with np.errstate(over="ignore"):  # uint64 arithmetic wraps modulo 2^64, as SplitMix64 wants
        z = _mix64(base[None, :] + step * _GOLDEN)  # (S, N)
    top = (z >> np.uint64(11)).view(np.int64)  # 53 bits; int64 -> float64 converts fast, uint64 does not
    return torch.from_numpy(top.astype(np.float64) * 2.0**-53)  # (S, N)


def _mix64(z: np.ndarray) -> np.ndarray:
    """SplitMix64's output function on uint64 arrays (wrapping arithmetic)."""
    z = (z ^ (z >> np.uint64(30))) * _MIX1
    z = (z ^ (z >> np.uint64(27))) * _MIX2
    return z ^ (z >> np.uint64(31))


def _force_boundaries(starts: torch.Tensor, doc_starts: torch.Tensor, eligible: torch.Tensor) -> torch.Tensor:
    """A word also starts at every document start, every ineligible token and right after one."""
    after = torch.ones_like(eligible)  # (N,)
    after[1:] = ~eligible[:-1]
    return starts | doc_starts | ~eligible | after  # (N,)


def word_starts_from_tokens(
    ids: torch.Tensor, doc_starts: torch.Tensor, eligible: torch.Tensor, tables: VocabularyTables
) -> torch.Tensor:
    """Mark the first token of every word from the token strings' markers.

    WordPiece: every token not prefixed ``##``. SentencePiece: every token prefixed ``▁``.
    Byte-level BPE: every token whose first byte is whitespace, except a whitespace-only token
    right after another whitespace-only one (GPT-2's regex keeps whitespace runs in one word).
    Punctuation glued to a word without a marker joins the word before it, so a group is always
    one or more whole words of the tokenizer and never part of one.

    Shapes: ``ids``, ``doc_starts``, ``eligible`` (N,) -> (N,) bool.

    Example:
        >>> from hf_lmobj.corpus import build_tokenizer
        >>> tok = build_tokenizer(vocab_size=512, max_documents=20)
        >>> tables = vocabulary_tables(tok, "byte_level")
        >>> ids = torch.tensor(tok("def f(x):  return self")["input_ids"])
        >>> first = torch.zeros_like(ids, dtype=torch.bool); first[0] = True
        >>> starts = word_starts_from_tokens(ids, first, torch.ones_like(first), tables)
        >>> " ".join("|" * s + t for t, s in zip(tok.convert_ids_to_tokens(ids), starts.tolist()))
        '|de f |Ġf ( x ): |Ġ |Ġreturn |Ġself'
    """
    if tables.starts_word is None:
        raise ValueError("tables were built without a word rule; pass word_rule= to vocabulary_tables")
    starts = tables.starts_word.index_select(0, ids)  # (N,)
    if tables.whitespace is not None:
        blank = tables.whitespace.index_select(0, ids)  # (N,)
        inside_run = blank.clone()
        inside_run[0] = False
        inside_run[1:] &= blank[:-1]
        starts = starts & ~inside_run
    return _force_boundaries(starts, doc_starts, eligible)


def word_starts_from_word_ids(word_ids: torch.Tensor, doc_starts: torch.Tensor, eligible: torch.Tensor) -> torch.Tensor:
    """Mark the first token of every word from ``word_ids`` (float, NaN where the id is None).

    Shapes: (N,) -> (N,) bool. A token starts a word when its id differs from the previous one.

    Example:
        >>> w = torch.tensor([float("nan"), 0, 0, 1, float("nan")])
        >>> ok = torch.tensor([False, True, True, True, False])
        >>> word_starts_from_word_ids(w, torch.tensor([True] + [False] * 4), ok).tolist()
        [True, True, False, True, True]
    """
    starts = torch.ones_like(eligible)  # (N,)
    starts[1:] = word_ids[1:] != word_ids[:-1]  # NaN != NaN: a None id stands alone
    return _force_boundaries(starts, doc_starts, eligible)


def select_positions(
    uniform: torch.Tensor, eligible: torch.Tensor, word_starts: torch.Tensor | None, probability: float
) -> torch.Tensor:
    """Select each eligible token (or each word, when ``word_starts`` is given) with ``probability``.

    A word is selected when the uniform at its first token is below ``probability``, so each
    token's selection probability is exactly ``probability`` and words are never split.

    Shapes: ``uniform``, ``eligible``, ``word_starts`` (N,) -> (N,) bool.
    """
    if word_starts is None:
        return eligible & (uniform < probability)  # (N,)
    positions = torch.arange(uniform.numel(), device=uniform.device)  # (N,)
    first = torch.where(word_starts, positions, 0).cummax(dim=0).values  # (N,) start of own word
    return eligible & (uniform.index_select(0, first) < probability)  # (N,)


def corrupt(
    ids: torch.Tensor,
    selected: torch.Tensor,
    uniform: torch.Tensor,
    mask_token_id: int | None,
    replacement_ids: torch.Tensor,
    mask_replace_prob: float,
    random_replace_prob: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Replace selected tokens: ``uniform < m`` -> mask, ``< m + r`` -> random id, else kept.

    The random id reuses the same uniform, rescaled to [0, 1) inside its band (use float64
    uniforms so that every one of up to ~10^9 replacement ids stays reachable).

    Shapes: ``ids``, ``selected``, ``uniform`` (N,) -> (inputs (N,), labels (N,) with -100
    wherever not selected).
    """
    labels = torch.where(selected, ids, -100)  # (N,)
    inputs = ids  # (N,)
    if mask_replace_prob > 0:
        inputs = torch.where(selected & (uniform < mask_replace_prob), mask_token_id, ids)
    if random_replace_prob > 0:
        band = selected & (uniform >= mask_replace_prob)
        band &= uniform < mask_replace_prob + random_replace_prob
        where = torch.nonzero(band).flatten()  # (K,)
        scaled = (uniform.index_select(0, where) - mask_replace_prob) / random_replace_prob  # (K,)
        count = replacement_ids.numel()
        pick = (scaled * count).long().clamp_(0, count - 1)  # (K,) uniform over the ids
        inputs = inputs.clone() if inputs is ids else inputs
        inputs.scatter_(0, where, replacement_ids.index_select(0, pick))
    return inputs, labels
