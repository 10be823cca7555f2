"""Documents cut into pieces that fit a row: at clean token boundaries with each piece's text, or near-equal.

A document longer than a row is cut before it is transformed (FIM, denoising) so that each piece
is transformed within one row and no transformed span crosses pieces. :func:`document_pieces`
slices a text's own tokens at boundaries that split no character and keeps each piece's text (for
character-level FIM cuts); :func:`split_documents` cuts token rows into near-equal parts (for the
denoisers, which need pieces of at least 2 tokens). No token is dropped by either.

The text is encoded with special-token parsing off (:mod:`hf_lmobj.plain_text`): a file
that mentions ``'<fim_prefix>'`` or ``'</s>'`` keeps those characters as ordinary tokens, and BOS / EOS
are added by id only, so the pieces' ids and texts always agree (as the FIM transform checks).

Example:
    >>> from hf_lmobj.corpus import build_tokenizer
    >>> tok = build_tokenizer(vocab_size=512, max_documents=20)
    >>> pieces = document_pieces(["a = 1\\nb = 2\\n"], tok, max_tokens=4)
    >>> [tok.decode(p) for p in pieces["input_ids"]], pieces["text"]
    (['<s>a = 1\\n', 'b = 2', '\\n</s>'], ['a = 1\\n', 'b = 2', '\\n'])
"""

from __future__ import annotations

from collections.abc import Sequence

import datasets
import numpy as np
from transformers import PreTrainedTokenizerBase

from hf_lmobj.checks import check_length
from hf_lmobj.plain_text import check_texts, encode_plain_with_offsets


def piece_bounds(clean: np.ndarray, max_tokens: int) -> list[int]:
    """Token indices where pieces begin: every ``max_tokens`` tokens, moved back to a clean boundary.

    ``clean[i]`` says that token ``i`` may begin a piece (it shares no character with token
    ``i - 1``: a byte-level BPE can split one multi-byte character over two tokens).

    A character spread over more than ``max_tokens`` tokens leaves no boundary to move back to: that is
    a ``ValueError`` (raise ``max_tokens``), never a piece that ends inside a character.

    >>> piece_bounds(np.array([True, True, True, False, True, True, True]), max_tokens=3)
    [0, 2, 5]
    >>> piece_bounds(np.array([True, False, False, True]), max_tokens=2)
    Traceback (most recent call last):
    ...
    ValueError: tokens 0 to 2 are one character, more than max_tokens=2 tokens a piece holds; raise max_tokens
    """
    bounds, begin, size = [0], 0, clean.size
    while size - begin > max_tokens:
        cut = begin + max_tokens
        while cut > begin + 1 and not clean[cut]:
            cut -= 1
        if not clean[cut]:
            end = cut + int(np.argmax(clean[cut:])) if clean[cut:].any() else size
            raise ValueError(
                f"tokens {begin} to {end - 1} are one character, more than max_tokens={max_tokens} tokens a piece "
                "holds; raise max_tokens"
            )
        bounds.append(cut)
        begin = cut
    return bounds


def document_pieces(texts: Sequence[str], tokenizer: PreTrainedTokenizerBase, max_tokens: int) -> dict[str, list]:
    """Each text's tokens cut into pieces of at most ``max_tokens`` (plus BOS / EOS), with each piece's text.

    The pieces' tokens are the document's own, sliced at token boundaries (never inside a
    character, read from the tokenizer's offsets), and their texts are the matching slices of the
    text. Returns the columns ``input_ids`` (the piece's tokens, BOS first in a text's first piece and
    EOS last in its last, as the text is framed in plain causal training) and ``text``. A text is
    encoded as plain characters (a special-token string in it stays text); an empty text gives one
    piece, ``[BOS, EOS]`` with text ``""``. The tokenizer needs a BOS and an EOS token.
    """
    max_tokens = check_length(max_tokens, "max_tokens", 1, why="tokens per piece; raise max_length")
    texts = check_texts(texts, "texts")
    for role in ("bos", "eos"):
        if getattr(tokenizer, f"{role}_token_id", None) is None:
            raise ValueError(
                f"document_pieces frames each text with BOS and EOS, but the tokenizer has no {role}_token; set one"
            )
    bos, eos = [tokenizer.bos_token_id], [tokenizer.eos_token_id]
    encoded_ids, encoded_offsets = encode_plain_with_offsets(tokenizer, texts)
    out: dict[str, list] = {"input_ids": [], "text": []}
    for text, ids, offsets in zip(texts, encoded_ids, encoded_offsets):
        spans = np.asarray(offsets, dtype=np.int64).reshape(-1, 2)  # (L, 2) characters of each token
        clean = np.ones(len(ids), bool)  # (L,)
        clean[1:] = spans[1:, 0] >= spans[:-1, 1]
        bounds = [*piece_bounds(clean, max_tokens), len(ids)]
        chars = [0, *(int(spans[b, 0]) for b in bounds[1:-1]), len(text)]
        for i in range(len(bounds) - 1):
            head, tail = bos if i == 0 else [], eos if i == len(bounds) - 2 else []
            out["input_ids"].append(head + ids[bounds[i] : bounds[i + 1]] + tail)
            out["text"].append(text[chars[i] : chars[i + 1]])
    return out


def split_documents(dataset: datasets.Dataset, max_tokens: int) -> datasets.Dataset:
    """One row per piece: each document's ``input_ids`` cut into near-equal pieces of <= ``max_tokens``.

    Equal cuts (rather than full pieces plus a remainder) keep every piece of a document of at
    least 2 tokens at least 2 tokens long, as the denoisers need. No token is dropped.

    Example:
        >>> ds = datasets.Dataset.from_dict({"input_ids": [list(range(10)), [7]]})
        >>> [len(row) for row in split_documents(ds, 4)["input_ids"]]
        [3, 3, 4, 1]
    """
    max_tokens = check_length(max_tokens, "max_tokens", 1, why="tokens per piece")
    if not isinstance(dataset, datasets.Dataset) or "input_ids" not in dataset.column_names:
        got = dataset.column_names if isinstance(dataset, datasets.Dataset) else type(dataset).__name__
        raise ValueError(f"split_documents takes a datasets.Dataset with an 'input_ids' column, got {got}")

    def split(batch: dict[str, list]) -> dict[str, list]:
        pieces = []
        for ids in batch["input_ids"]:
            count = max(-(-len(ids) // max_tokens), 1)
            bounds = [len(ids) * i // count for i in range(count + 1)]
            pieces += [ids[a:b] for a, b in zip(bounds, bounds[1:])]
        return {"input_ids": pieces}

    return dataset.map(split, batched=True, remove_columns=dataset.column_names, desc="split documents")
