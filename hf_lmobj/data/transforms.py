"""Per-document transforms of streamed text: a text in, the documents it becomes out.

A :class:`~hf_lmobj.data.sources.TextStream` encodes each batch of texts with its ``encode``
callable (default: :func:`~hf_lmobj.plain_text.encode_texts_as_documents`, one document per
text). :class:`FimPieces` is fill-in-the-middle for code LMs: each text is cut into pieces that fit a
row (at clean token boundaries, each with its text) and each piece goes through the seeded FIM
transform, exactly as the in-memory FIM recipe prepares its data. Randomness is keyed by (seed,
epoch 0, the piece's tokens), so a piece gets the same cut on any rank, worker or resume. The text
is encoded as plain characters, as :func:`~hf_lmobj.plain_text.encode_texts_as_documents` does: a
file that mentions ``'<fim_prefix>'`` keeps those characters, and the sentinels are only ever the
transform's.

Example:
    >>> from hf_lmobj.corpus import build_tokenizer
    >>> from hf_lmobj.fim.transform import FimTransform
    >>> tok = build_tokenizer(vocab_size=512, max_documents=20)
    >>> fim = FimPieces(FimTransform(tok, fim_rate=1.0), max_tokens=8, seed=0)
    >>> [len(pieces) for pieces in fim(["a = 1\\n", "def f(x):\\n    return x\\n"])]
    [1, 2]
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from hf_lmobj.checks import check_length, check_seed
from hf_lmobj.fim.transform import FimTransform
from hf_lmobj.packing.pieces import document_pieces
from hf_lmobj.plain_text import check_texts


class FimPieces:
    """Texts -> row-sized pieces -> FIM (see the module docstring); one list of documents per text.

    ``max_tokens`` (tokens per piece) is an int >= 1 and ``seed`` an int in ``[0, 2**32)``; ``texts``
    a list of strings.
    """

    def __init__(self, fim: FimTransform, max_tokens: int, seed: int = 0) -> None:
        if not isinstance(fim, FimTransform):
            raise TypeError(f"fim must be a FimTransform, got {type(fim).__name__}")
        self.fim, self.max_tokens = fim, check_length(max_tokens, "max_tokens", why="tokens of text per piece")
        self.seed = check_seed(seed)

    def __repr__(self) -> str:  # what the data fingerprint records
        fim = self.fim
        return (f"FimPieces(fim_rate={fim.fim_rate}, spm_rate={fim.spm_rate}, fim_level={fim.fim_level!r}, "
                f"max_tokens={self.max_tokens}, seed={self.seed})")  # fmt: skip

    def __call__(self, texts: Sequence[str]) -> list[list[np.ndarray]]:
        out: list[list[np.ndarray]] = []
        for text in check_texts(texts, "texts"):
            pieces = document_pieces([text], self.fim.tokenizer, self.max_tokens)
            features = [{"input_ids": ids, "text": piece} for ids, piece in zip(pieces["input_ids"], pieces["text"])]
            out.append([np.asarray(ids, dtype=np.int64) for ids in self.fim(features, self.seed, 0)])
        return out
