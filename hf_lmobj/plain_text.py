"""Document text encoded as plain characters: a special-token string inside the text stays text.

Every entry point of the fill-in-the-middle family that encodes a document's text (the FIM transform
and collator, :func:`~hf_lmobj.packing.pieces.document_pieces`, ``FimPieces``,
``fim_prompts`` / ``infill``, the infilling evaluation) encodes it with special-token parsing **off**,
so a string such as ``'<fim_prefix>'``, ``'<|endoftext|>'`` or ``'[MASK]'`` becomes ordinary tokens;
control tokens (BOS, EOS, the FIM sentinels) are only ever inserted by id. Why: code corpora mention
control tokens (a tokenizer's own tests and docs). This is what
:func:`encode_texts_as_documents` does for every source's text, and what
``tokenizer(texts, add_special_tokens=False, split_special_tokens=True)`` gives.

A fast tokenizer's Rust backend is called directly with ``encode_special_tokens`` set for the call
and restored after it (as ``encode_texts_as_documents`` does); other tokenizers go through
``split_special_tokens=True``.

Example:
    >>> from hf_lmobj.corpus import build_tokenizer
    >>> tok = build_tokenizer(vocab_size=512, max_documents=20)
    >>> (ids,) = encode_plain(tok, ["s = '<fim_prefix>'"])
    >>> tok.convert_tokens_to_ids("<fim_prefix>") in ids, tok.decode(ids)
    (False, "s = '<fim_prefix>'")
    >>> tok.convert_tokens_to_ids("<fim_prefix>") in tok("'<fim_prefix>'")["input_ids"]  # parsing on: a sentinel
    True
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from hf_lmobj.checks import check_flag

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

Offsets = list[tuple[int, int]]


def check_texts(texts: Any, field: str) -> list[str]:
    """``texts`` as a list of strings: a lone string (which would be read character by character) and
    non-string entries are refused with a ``TypeError`` naming ``field``.

    >>> check_texts(("a", "b"), "texts")
    ['a', 'b']
    >>> check_texts("ab", "texts")
    Traceback (most recent call last):
    ...
    TypeError: texts must be a list of strings, got a str ('ab'); wrap one text in a list: ['ab']
    """
    if isinstance(texts, (str, bytes)):
        raise TypeError(
            f"{field} must be a list of strings, got a {type(texts).__name__} ({texts!r}); wrap one text in a list: "
            f"[{texts!r}]"
        )
    if not isinstance(texts, Sequence):
        raise TypeError(f"{field} must be a list of strings, got {type(texts).__name__}")
    texts = list(texts)
    for i, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"{field}[{i}] must be a string, got {type(text).__name__} ({text!r})")
    return texts


def _backend(tokenizer: PreTrainedTokenizerBase) -> Any:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return backend if backend is not None and hasattr(backend, "encode_special_tokens") else None


def _encode(tokenizer: PreTrainedTokenizerBase, texts: list[str], offsets: bool) -> list[Any]:
    backend = _backend(tokenizer)
    before = backend.encode_special_tokens
    backend.encode_special_tokens = True  # "<fim_prefix>" in the text stays characters
    try:
        if offsets:
            return backend.encode_batch(texts, add_special_tokens=False)
        return backend.encode_batch_fast(texts, add_special_tokens=False)
    finally:
        backend.encode_special_tokens = before


def encode_plain(tokenizer: PreTrainedTokenizerBase, texts: Sequence[str]) -> list[list[int]]:
    """The token ids of each text, no BOS / EOS added, special-token strings encoded as their characters."""
    texts = list(texts)
    if not texts:
        return []
    if _backend(tokenizer) is not None and hasattr(tokenizer.backend_tokenizer, "encode_batch_fast"):
        return [encoding.ids for encoding in _encode(tokenizer, texts, offsets=False)]
    return tokenizer(texts, add_special_tokens=False, split_special_tokens=True)["input_ids"]


def encode_plain_with_offsets(
    tokenizer: PreTrainedTokenizerBase, texts: Sequence[str]
) -> tuple[list[list[int]], list[Offsets]]:
    """As :func:`encode_plain`, with each token's ``(start, end)`` characters in its text."""
    texts = list(texts)
    if not texts:
        return [], []
    if _backend(tokenizer) is not None:
        encodings = _encode(tokenizer, texts, offsets=True)
        return [e.ids for e in encodings], [list(e.offsets) for e in encodings]
    out = tokenizer(texts, add_special_tokens=False, split_special_tokens=True, return_offsets_mapping=True)
    return out["input_ids"], out["offset_mapping"]


def special_ids(tokenizer: PreTrainedTokenizerBase) -> frozenset[int]:
    """Ids of every special (control) token: the named ones (BOS, EOS, pad, mask, unk, ...) and every
    added token marked ``special`` (sentinels, FIM tokens). None of them is text.

    >>> from hf_lmobj.corpus import build_tokenizer
    >>> tok = build_tokenizer(vocab_size=512, max_documents=20)
    >>> {tok.eos_token_id, tok.convert_tokens_to_ids("<fim_middle>")} <= special_ids(tok)
    True
    """
    ids = set(getattr(tokenizer, "all_special_ids", []) or [])
    decoder = getattr(tokenizer, "added_tokens_decoder", None) or {}
    ids.update(i for i, token in decoder.items() if getattr(token, "special", False))
    return frozenset(int(i) for i in ids if i is not None)


def check_document_tokenizer(tokenizer: Any, add_bos: bool, add_eos: bool) -> None:
    """``tokenizer`` is a transformers tokenizer with the BOS / EOS tokens the documents get (else an error naming
    the flag to turn off)."""
    from transformers import PreTrainedTokenizerBase

    if not isinstance(tokenizer, PreTrainedTokenizerBase):
        raise TypeError(f"tokenizer must be a transformers tokenizer, got {type(tokenizer).__name__}")
    for flag, role in ((add_bos, "bos"), (add_eos, "eos")):
        if flag and getattr(tokenizer, f"{role}_token_id") is None:
            raise ValueError(f"add_{role}=True but the tokenizer has no {role}_token; pass add_{role}=False")


def encode_texts_as_documents(
    tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], add_bos: bool, add_eos: bool
) -> list[np.ndarray]:
    """Token ids of each text with BOS / EOS by id; special-token strings in the text stay text.

    The one encoder of documents: a text stream, an in-memory source and a token store's writer all call it. The
    text is encoded by :func:`encode_plain` (a fast tokenizer's Rust ``encode_batch_fast``, no offsets, no
    Python-side ``BatchEncoding``). ``texts`` must be a list of strings (a lone string is refused, not read
    character by character).

    Example:
        >>> from hf_lmobj.corpus import build_tokenizer
        >>> tok = build_tokenizer(vocab_size=512, max_documents=20)
        >>> [doc.tolist()[0] == tok.bos_token_id for doc in encode_texts_as_documents(tok, ["a", "b c"], True, True)]
        [True, True]
    """
    add_bos, add_eos = check_flag(add_bos, "add_bos"), check_flag(add_eos, "add_eos")
    check_document_tokenizer(tokenizer, add_bos, add_eos)
    rows = encode_plain(tokenizer, check_texts(texts, "texts"))
    head = [tokenizer.bos_token_id] if add_bos else []
    tail = [tokenizer.eos_token_id] if add_eos else []
    return [np.array(head + row + tail, dtype=np.int64) for row in rows]
