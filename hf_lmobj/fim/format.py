"""How a fill-in-the-middle document is laid out: sentinels found by name, PSM / SPM order, the inverse.

A document cut into three parts, ``prefix``, ``middle`` and ``suffix``, is re-ordered around three sentinels so
that a causal model learns to produce the middle after seeing both sides:

* **PSM** (prefix-suffix-middle): ``<fim_prefix> prefix <fim_suffix> suffix <fim_middle> middle``
* **SPM** (suffix-prefix-middle): ``<fim_prefix> <fim_suffix> suffix <fim_middle> prefix middle``

The SPM order is "variant 2" of Bavarian et al. 2022 (appendix D), as StarCoder and Code Llama use
it: both sentinels open the sequence, and prefix and middle are contiguous, so the prefix is plain
left-to-right context for the middle.

Sentinels are looked up by name in the tokenizer (StarCoder's names by default; pass the names
of your tokenizer's own tokens otherwise), never assumed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

FIM_PREFIX, FIM_MIDDLE, FIM_SUFFIX, FIM_PAD = "<fim_prefix>", "<fim_middle>", "<fim_suffix>", "<fim_pad>"
FIM_TOKENS = (FIM_PREFIX, FIM_MIDDLE, FIM_SUFFIX, FIM_PAD)  # StarCoder's names, in its vocabulary order


@dataclass(frozen=True)
class FimTokens:
    """Names of the FIM sentinel tokens in a tokenizer (StarCoder's by default).

    ``pad`` is optional: a truncation-free transform never pads, so only prefix, middle and
    suffix must exist. For Code Llama's tokenizer use ``FimTokens("▁<PRE>", "▁<MID>", "▁<SUF>", None)``.

    Example:
        >>> from hf_lmobj.corpus import build_tokenizer
        >>> tok = build_tokenizer(vocab_size=512, max_documents=20)  # it holds StarCoder's FIM tokens
        >>> FimTokens()
        FimTokens(prefix='<fim_prefix>', middle='<fim_middle>', suffix='<fim_suffix>', pad='<fim_pad>')
        >>> fim_token_ids(tok, FimTokens())  # found by name, never assumed
        FimTokenIds(prefix=108, middle=109, suffix=110, pad=111)
        >>> FimTokens("<fim_prefix>", "<fim_prefix>", "<fim_suffix>")
        Traceback (most recent call last):
        ...
        ValueError: FimTokens needs three different tokens, got '<fim_prefix>', '<fim_prefix>', '<fim_suffix>'
    """

    prefix: str = FIM_PREFIX
    middle: str = FIM_MIDDLE
    suffix: str = FIM_SUFFIX
    pad: str | None = FIM_PAD

    def __post_init__(self) -> None:
        for name in ("prefix", "middle", "suffix"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise TypeError(f"FimTokens.{name} must be a non-empty token name, got {value!r}")
        if len({self.prefix, self.middle, self.suffix}) != 3:
            raise ValueError(
                f"FimTokens needs three different tokens, got {self.prefix!r}, {self.middle!r}, {self.suffix!r}"
            )


@dataclass(frozen=True)
class FimTokenIds:
    """The ids of the sentinels in one tokenizer; ``pad`` is None when the tokenizer has none."""

    prefix: int
    middle: int
    suffix: int
    pad: int | None = None

    @property
    def sentinels(self) -> tuple[int, int, int]:
        """The three ids a FIM'd document is built with (prefix, middle, suffix)."""
        return (self.prefix, self.middle, self.suffix)


def fim_token_ids(tokenizer: PreTrainedTokenizerBase, tokens: FimTokens | None = None) -> FimTokenIds:
    """Look the sentinels up by name; a ``ValueError`` names any that the tokenizer lacks.

    Example:
        >>> from hf_lmobj.corpus import build_tokenizer
        >>> tok = build_tokenizer(vocab_size=512, max_documents=20)
        >>> ids = fim_token_ids(tok)
        >>> tok.convert_ids_to_tokens(list(ids.sentinels))
        ['<fim_prefix>', '<fim_middle>', '<fim_suffix>']
        >>> fim_token_ids(tok, FimTokens(prefix="<PRE>", middle="<MID>", suffix="<SUF>"))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: the tokenizer has no FIM token '<PRE>' (FimTokens.prefix), nor '<MID>' (FimTokens.middle), ...
    """
    tokens = FimTokens() if tokens is None else tokens
    if not isinstance(tokens, FimTokens):
        raise TypeError(f"fim_tokens must be a FimTokens, got {type(tokens).__name__}")
    vocab = tokenizer.get_vocab()  # includes added tokens
    missing = [f"{getattr(tokens, n)!r} (FimTokens.{n})" for n in ("prefix", "middle", "suffix")
               if getattr(tokens, n) not in vocab]  # fmt: skip
    if missing:
        raise ValueError(
            f"the tokenizer has no FIM token {', nor '.join(missing)}; add them "
            "(tokenizer.add_special_tokens({'additional_special_tokens': [...]}) then "
            "model.resize_token_embeddings(len(tokenizer))) or pass fim_tokens=FimTokens(...) naming "
            "the tokenizer's own FIM tokens"
        )
    ids = FimTokenIds(vocab[tokens.prefix], vocab[tokens.middle], vocab[tokens.suffix],
                      vocab.get(tokens.pad) if tokens.pad is not None else None)  # fmt: skip
    for role in ("bos", "eos", "pad"):
        clash = getattr(tokenizer, f"{role}_token_id", None)
        if clash is not None and clash in ids.sentinels:
            raise ValueError(f"FIM token id {clash} is also the tokenizer's {role}_token; FIM needs its own tokens")
    return ids


def fim_layout(
    prefix: Sequence[int], middle: Sequence[int], suffix: Sequence[int], ids: FimTokenIds, spm: bool
) -> list[int]:
    """PSM (``spm=False``) or SPM order of the three parts around the sentinels (see the module doc).

    Example:
        >>> ids = FimTokenIds(prefix=1, middle=2, suffix=3)
        >>> fim_layout([10, 11], [20], [30, 31], ids, spm=False)
        [1, 10, 11, 3, 30, 31, 2, 20]
        >>> fim_layout([10, 11], [20], [30, 31], ids, spm=True)
        [1, 3, 30, 31, 2, 10, 11, 20]
        >>> undo_fim([1, 3, 30, 31, 2, 10, 11, 20], ids)
        [10, 11, 20, 30, 31]
    """
    if spm:
        return [ids.prefix, ids.suffix, *suffix, ids.middle, *prefix, *middle]
    return [ids.prefix, *prefix, ids.suffix, *suffix, ids.middle, *middle]


def fim_mode(tokens: Sequence[int], ids: FimTokenIds) -> str | None:
    """``"psm"`` or ``"spm"`` for a sequence laid out by :func:`fim_layout`, ``None`` for a plain one.

    With an empty prefix the two orders give the same sequence; it reads as ``"spm"`` (and
    :func:`undo_fim` gives the same document either way).

    Example:
        >>> ids = FimTokenIds(prefix=1, middle=2, suffix=3)
        >>> fim_mode([1, 3, 2], ids), fim_mode([1, 9, 3, 2], ids), fim_mode([9], ids)
        ('spm', 'psm', None)
    """
    tokens = list(tokens)
    if ids.prefix not in tokens:
        return None
    start = tokens.index(ids.prefix)
    return "spm" if tokens[start + 1 : start + 2] == [ids.suffix] else "psm"


def undo_fim(tokens: Sequence[int], ids: FimTokenIds, eos_token_id: int | None = None) -> list[int]:
    """The document before the permutation: ``head + prefix + middle + suffix (+ EOS)``.

    ``head`` is whatever precedes ``<fim_prefix>`` (a BOS). With ``eos_token_id``, a final EOS (the
    end-of-middle token) goes back to the end of the document. A sequence without sentinels comes
    back unchanged. Raises ``ValueError`` when the sentinels are not in PSM or SPM order.

    Example:
        >>> ids = FimTokenIds(prefix=1, middle=2, suffix=3)
        >>> undo_fim([0, 1, 10, 3, 30, 2, 20, 9], ids, eos_token_id=9)  # PSM with BOS 0 and EOS 9
        [0, 10, 20, 30, 9]
    """
    tokens = list(tokens)
    if fim_mode(tokens, ids) is None:
        return tokens
    tail = [tokens.pop()] if eos_token_id is not None and tokens[-1:] == [eos_token_id] else []
    start = tokens.index(ids.prefix)
    head, body = tokens[:start], tokens[start + 1 :]
    found = [t for t in body if t in ids.sentinels]
    if fim_mode(tokens, ids) == "spm":
        if found != [ids.suffix, ids.middle]:
            raise ValueError(f"not an SPM sequence: sentinels after <fim_prefix> are {found}")
        mid = body.index(ids.middle)
        return head + body[mid + 1 :] + body[1:mid] + tail  # (prefix + middle) + suffix
    if found != [ids.suffix, ids.middle]:
        raise ValueError(f"not a PSM sequence: sentinels after <fim_prefix> are {found}")
    suf, mid = body.index(ids.suffix), body.index(ids.middle)
    return head + body[:suf] + body[mid + 1 :] + body[suf + 1 : mid] + tail
