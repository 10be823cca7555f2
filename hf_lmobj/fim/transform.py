"""The per-document fill-in-the-middle transform: seeded cuts, PSM or SPM, nothing truncated.

With probability ``fim_rate`` a document is cut at two sorted uniform points (so any of the parts
may be empty) into ``prefix``, ``middle`` and ``suffix``, laid out PSM or (with probability
``spm_rate``) SPM around the sentinels (:mod:`hf_lmobj.fim.format`), then EOS: the
end-of-middle token that ``generate()`` stops at. Other documents pass through unchanged.
``fim_level`` says where the cuts fall:

* ``"char"`` (default): uniformly over the characters; needs the document's text (the ``text``
  column, or ``text_column=``). The parts are encoded on their own, as an infilling prompt is: the
  text is kept exactly, the tokens change only where a cut splits a token or a word. In SPM the
  prefix and the middle are encoded as *one* text, so no token is split there (an SPM prompt is
  healed instead: :mod:`hf_lmobj.fim.prompting`). Why the default: the FIM paper's
  choice (Bavarian et al. 2022), so that the model learns to complete a token cut in two.
* ``"line"``: uniformly over the line starts (0, every position after a ``"\\n"``, and the end):
  whole-line parts, encoded as at ``"char"``; needs the text. Why: it matches line-based
  infilling, which character cuts rarely show a small model.
* ``"token"``: uniformly over the tokens; the parts are slices of ``input_ids``, so the document's
  tokens are preserved exactly (apart from the sentinels and the end-of-middle EOS).

Text stays text: at ``"char"`` and ``"line"`` level the parts are encoded with special-token
parsing off (:mod:`hf_lmobj.plain_text`), so a document that mentions ``'<fim_prefix>'`` or
``'<|endoftext|>'`` keeps those characters as ordinary tokens; sentinels and EOS are only ever
inserted by id. At those levels the ids (less a leading BOS and a trailing EOS) must hold no control
token and be the text's own tokens (they decode to the text, or the text encodes to them), else a
``ValueError`` names the feature (usually ``input_ids`` truncated while the text was kept whole: cut
long documents with :func:`~hf_lmobj.packing.pieces.document_pieces` instead). Ids that
already hold a FIM sentinel are refused at every level.

Nothing is truncated: a transformed document is 4 tokens longer (3 sentinels and EOS, one less when
it already ended with EOS), plus any re-tokenization at the character cuts. A leading BOS stays
first and a trailing EOS is the end-of-middle token. Randomness is keyed by ``(seed, epoch,
example)`` (:mod:`hf_lmobj.collators.seeding`: the feature's ``idx`` / ``index``, else its tokens):
an example gets the same cut in whatever batch, worker or process it lands.

Example:
    >>> from hf_lmobj.corpus import build_tokenizer
    >>> tok = build_tokenizer(vocab_size=512, max_documents=20)
    >>> fim = FimTransform(tok, fim_rate=1.0, spm_rate=0.0)
    >>> text = "x = 1\\n"
    >>> ids = [tok.bos_token_id, *tok(text)["input_ids"], tok.eos_token_id]
    >>> out = fim.permute(ids, text, FimDraw(apply=True, spm=False, start=2, end=4))  # middle "= "
    >>> tok.decode(out)
    '<s><fim_prefix>x <fim_suffix>1\\n<fim_middle>= </s>'
    >>> doc, other = {"input_ids": ids, "text": text}, {"input_ids": ids[:3], "text": "x ="}
    >>> fim([doc], seed=0) == fim([other, doc], seed=0)[1:]  # the same cut in any batch
    True
"""

from __future__ import annotations

import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase

from hf_lmobj.collators.features import token_ids
from hf_lmobj.collators.seeding import example_seeds
from hf_lmobj.fim.format import FimTokenIds, FimTokens, fim_layout, fim_token_ids
from hf_lmobj.plain_text import encode_plain, special_ids

FIM_LEVELS = ("char", "line", "token")
TEXT_LEVELS = ("char", "line")  # levels that cut the document's text (and re-encode the parts)


@dataclass(frozen=True)
class FimDraw:
    """One document's draw: whether it is FIM'd, in which order, and where its middle lies.

    ``start`` / ``end`` bound the middle in the document's characters (``"char"``, ``"line"``) or
    content tokens (``"token"``): prefix ``[0, start)``, middle ``[start, end)``, suffix ``[end, length)``.
    """

    apply: bool
    spm: bool = False
    start: int = 0
    end: int = 0

    def __post_init__(self) -> None:
        if self.apply and not 0 <= self.start <= self.end:
            raise ValueError(f"FimDraw needs 0 <= start <= end, got start={self.start}, end={self.end}")


def draw_fim(length: int, fim_rate: float, spm_rate: float, generator: torch.Generator) -> FimDraw:
    """Draw whether to FIM a document of ``length`` units, PSM or SPM, and its two sorted cuts.

    Two uniforms decide FIM (``< fim_rate``) and SPM (``< spm_rate``); only a FIM'd document then
    draws its cuts, so raising ``fim_rate`` adds FIM'd documents without moving anyone's cut.

    Example:
        >>> draw_fim(10, 1.0, 0.0, torch.Generator().manual_seed(0))
        FimDraw(apply=True, spm=False, start=3, end=8)
    """
    u = torch.rand(2, generator=generator, dtype=torch.float64)  # (2,): FIM?, SPM?
    if not float(u[0]) < fim_rate:
        return FimDraw(apply=False)
    cuts = torch.randint(0, length + 1, (2,), generator=generator).sort().values  # (2,) in [0, length]
    return FimDraw(True, float(u[1]) < spm_rate, int(cuts[0]), int(cuts[1]))


def line_starts(text: str) -> list[int]:
    """Character positions where a line-level cut may fall: 0, after every newline, and the end.

    >>> line_starts("a\\nbc\\n"), line_starts("a\\nbc"), line_starts("")
    ([0, 2, 5], [0, 2, 4], [0])
    """
    starts = [0, *(i + 1 for i, char in enumerate(text) if char == "\n")]
    return starts if starts[-1] == len(text) else [*starts, len(text)]


def check_rate(name: str, value: Any) -> float:
    """A probability in [0, 1], or a ValueError naming the field.

    >>> check_rate("fim_rate", 1.5)
    Traceback (most recent call last):
    ...
    ValueError: fim_rate must be a number in [0, 1] (a probability), got 1.5
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not 0.0 <= float(value) <= 1.0:
        raise ValueError(f"{name} must be a number in [0, 1] (a probability), got {value!r}")
    return float(value)


@dataclass
class FimTransform:
    """Fill-in-the-middle on a list of documents, one seeded draw per document.

    Args:
        tokenizer: must hold the FIM tokens (looked up by name) and an EOS (the end-of-middle token).
        fim_rate: share of documents transformed (StarCoder 0.5, Code Llama 0.9).
        spm_rate: share of the transformed documents laid out SPM rather than PSM (StarCoder 0.5).
        fim_level: ``"char"`` (cuts between characters, needs the text), ``"line"`` (at line starts,
            needs the text) or ``"token"`` (between tokens).
        fim_tokens: the sentinels' names (StarCoder's by default).
        text_column: the feature key holding each document's text (``"char"`` level).
    """

    tokenizer: PreTrainedTokenizerBase
    fim_rate: float = 0.5
    spm_rate: float = 0.5
    fim_level: str = "char"
    fim_tokens: FimTokens = field(default_factory=FimTokens)
    text_column: str = "text"

    def __post_init__(self) -> None:
        self.fim_rate = check_rate("fim_rate", self.fim_rate)
        self.spm_rate = check_rate("spm_rate", self.spm_rate)
        if self.fim_level not in FIM_LEVELS:
            raise ValueError(f"fim_level must be one of {FIM_LEVELS}, got {self.fim_level!r}")
        if not isinstance(self.text_column, str) or not self.text_column:
            raise TypeError(
                f"text_column must be a non-empty string (the feature key of the text), got {self.text_column!r}"
            )
        self.ids: FimTokenIds = fim_token_ids(self.tokenizer, self.fim_tokens)
        if self.tokenizer.eos_token_id is None:
            raise ValueError("FIM needs an end-of-middle token: the tokenizer has no eos_token (set one)")
        self._sentinels = np.array(self.ids.sentinels, dtype=np.int64)
        # control tokens that a document's text can never encode to (an unknown character may give unk)
        unknown = {self.tokenizer.unk_token_id}
        self._controls = np.array(sorted(special_ids(self.tokenizer) - unknown), dtype=np.int64)
        self._vocab_size = len(self.tokenizer)

    # ----------------------------------------------------------------------------- one document
    def permute(self, ids: Sequence[int], text: str | None, draw: FimDraw) -> list[int]:
        """The transformed ids of one document for a given draw (``text`` is needed at char level)."""
        array = token_ids({"input_ids": ids}, 0, self._vocab_size)
        head, content = self._split_specials(array, 0)
        if self.fim_level in TEXT_LEVELS:
            self._check_texts([content], [self._text({self.text_column: text}, 0)], [0])
        if not draw.apply:
            return array.tolist()
        parts = self._parts(content, text, draw, 0)
        if self.fim_level in TEXT_LEVELS:
            parts = self._encode(parts)
        return self._assemble(head, parts, draw.spm)

    # ----------------------------------------------------------------------------- a batch
    def __call__(self, features: Sequence[Mapping[str, Any]], seed: int | None, epoch: int = 0) -> list[list[int]]:
        """The transformed ``input_ids`` of each feature (new lists; the features are not modified).

        ``seed=None`` draws a fresh seed from the OS for this call (unseeded, but not the global RNG).
        """
        seeds = example_seeds(features, seed, epoch)  # seed=None: one fresh seed for this call
        arrays = [token_ids(feature, index, self._vocab_size) for index, feature in enumerate(features)]  # (L,) each
        split = [self._split_specials(array, index) for index, array in enumerate(arrays)]
        if self.fim_level in TEXT_LEVELS:  # every document's text must be its ids' text, FIM'd or not
            documents = [self._text(feature, index) for index, feature in enumerate(features)]
            self._check_texts([content for _, content in split], documents, list(range(len(features))))
        plans: list[tuple[list[int], Any, bool] | list[int]] = []
        texts: list[str] = []
        for index, feature in enumerate(features):
            array, (head, content) = arrays[index], split[index]
            generator = torch.Generator().manual_seed(seeds[index])
            draw = self._draw(feature, content, index, generator)
            if not draw.apply:
                plans.append(array.tolist())
                continue
            parts = self._parts(content, feature.get(self.text_column), draw, index)
            if self.fim_level in TEXT_LEVELS:  # encoded below, all documents' parts in one call
                texts.extend(parts)
                parts = len(texts) - 3
            plans.append((head, parts, draw.spm))
        encoded = self._encode(texts) if texts else []
        out = []
        for plan in plans:
            if isinstance(plan, list):
                out.append(plan)
                continue
            head, parts, spm = plan
            if isinstance(parts, int):
                parts = encoded[parts : parts + 3]
            out.append(self._assemble(head, parts, spm))
        return out

    # ----------------------------------------------------------------------------- the three parts
    def _draw(self, feature: Mapping[str, Any], content: np.ndarray, index: int, generator: torch.Generator) -> FimDraw:
        """One document's draw, its cuts in characters (``"char"``, ``"line"``) or tokens (``"token"``)."""
        if self.fim_level == "token":
            return draw_fim(content.size, self.fim_rate, self.spm_rate, generator)
        text = self._text(feature, index)
        if self.fim_level == "char":
            return draw_fim(len(text), self.fim_rate, self.spm_rate, generator)
        starts = line_starts(text)  # the cuts are drawn among these
        draw = draw_fim(len(starts) - 1, self.fim_rate, self.spm_rate, generator)
        return FimDraw(True, draw.spm, starts[draw.start], starts[draw.end]) if draw.apply else draw

    def _split_specials(self, array: np.ndarray, index: int) -> tuple[list[int], np.ndarray]:
        """(``[BOS]`` or ``[]``, the content between a leading BOS and a trailing EOS)."""
        if np.isin(array, self._sentinels).any():
            found = int(array[np.isin(array, self._sentinels)][0])
            raise ValueError(
                f"feature {index}: input_ids already contains the FIM token id {found} "
                f"({self.tokenizer.convert_ids_to_tokens(found)!r}); FIM tokens are reserved for the transform. "
                "If the document's text mentions that token as a string, encode it with special-token parsing "
                "off (tokenizer(text, split_special_tokens=True), or document_pieces()) so it stays characters"
            )
        bos, eos = self.tokenizer.bos_token_id, self.tokenizer.eos_token_id
        start = 1 if bos is not None and array[0] == bos else 0
        stop = array.size - 1 if array.size > start and array[-1] == eos else array.size
        return array[:start].tolist(), array[start:stop]

    def _text(self, feature: Mapping[str, Any], index: int) -> str:
        text = feature.get(self.text_column)
        if not isinstance(text, str):
            got = "no such key" if text is None else f"a {type(text).__name__}"
            raise ValueError(
                f"feature {index}: fim_level={self.fim_level!r} cuts the document's text and needs it "
                f"in feature[{self.text_column!r}] ({got}); keep the text column (a Trainer drops it "
                "unless remove_unused_columns=False), set text_column=<key>, or use fim_level='token'"
            )
        return text

    def _check_texts(self, contents: Sequence[np.ndarray], texts: Sequence[str], indices: Sequence[int]) -> None:
        """Each document's ids (less BOS / EOS) are its text's own tokens, or a ValueError naming the feature.

        They hold no control token (the text is encoded as plain characters), and they decode to the
        text (up to surrounding whitespace, which a SentencePiece decode may drop) or the text
        encodes to exactly them (a normalizing tokenizer).
        """
        for content, index in zip(contents, indices):
            inside = np.isin(content, self._controls)
            if inside.any():
                at = int(np.flatnonzero(inside)[0])
                found = int(content[at])
                name = self.tokenizer.convert_ids_to_tokens(found)
                raise ValueError(
                    f"feature {index}: input_ids hold the control token {name!r} "
                    f"(id {found}) inside the document (content position {at}), but fim_level={self.fim_level!r} "
                    "re-encodes the text with special-token strings as plain characters, so ids and text would "
                    "disagree; tokenize the text the same way (tokenizer(text, add_special_tokens=False, "
                    "split_special_tokens=True), BOS / EOS added by id) or use fim_level='token'"
                )
        decoded = self.tokenizer.batch_decode([c.tolist() for c in contents], clean_up_tokenization_spaces=False)
        for content, text, ids_text, index in zip(contents, texts, decoded, indices):
            if ids_text == text or ids_text.strip() == text.strip():
                continue
            if encode_plain(self.tokenizer, [text])[0] == content.tolist():
                continue
            at = next((i for i, (a, b) in enumerate(zip(ids_text, text)) if a != b), min(len(ids_text), len(text)))
            raise ValueError(
                f"feature {index}: input_ids and {self.text_column!r} are not the same document: the ids (less "
                f"BOS / EOS) decode to {len(ids_text)} characters, the text has {len(text)}, and they differ from "
                f"character {at} ({ids_text[at : at + 20]!r} vs {text[at : at + 20]!r}). fim_level={self.fim_level!r} "
                "cuts and re-encodes the text, so it must be the text of these very ids: were the ids truncated "
                "(truncation=True / max_length) and the text kept whole? Tokenize without truncation and cut long "
                "documents with document_pieces() (ids and text cut together), or use fim_level='token'"
            )

    def _parts(self, content: np.ndarray, text: Any, draw: FimDraw, index: int) -> list[Any]:
        """(prefix, middle, suffix) as strings (char and line levels) or token lists (token level).

        SPM at the text levels gives ``(prefix + middle, "", suffix)``: the two are contiguous in the
        SPM layout and are encoded as one text (as Code Llama does), so no token is split between them.
        """
        if self.fim_level in TEXT_LEVELS:
            text = self._text({self.text_column: text}, index)
            if draw.spm:
                return [text[: draw.end], "", text[draw.end :]]
            return [text[: draw.start], text[draw.start : draw.end], text[draw.end :]]
        tokens = content.tolist()
        return [tokens[: draw.start], tokens[draw.start : draw.end], tokens[draw.end :]]

    def _encode(self, texts: list[str]) -> list[list[int]]:
        return encode_plain(self.tokenizer, texts)  # special-token strings in the text stay characters

    def _assemble(self, head: list[int], parts: Sequence[Sequence[int]], spm: bool) -> list[int]:
        prefix, middle, suffix = parts
        return [*head, *fim_layout(prefix, middle, suffix, self.ids, spm), self.tokenizer.eos_token_id]
