"""A tokenizer's identity by content: the same vocabulary, merges and special tokens give the same hash.

A tokenizer is fingerprinted by what it maps text to, never by the path it was loaded from: the same
tokenizer saved under ``./tok/`` and ``tok`` (or copied elsewhere) has one fingerprint, and a tokenizer
retrained with one more merge has another. A fast tokenizer hashes its backend's JSON (vocabulary,
merges, normaliser, pre-tokenizer, added tokens) with the model's ``model_max_length`` and special
tokens; a slow one hashes its vocabulary and special tokens.

Example:
    >>> from hf_lmobj.corpus import build_tokenizer
    >>> tokenizer = build_tokenizer(512)
    >>> len(tokenizer_fingerprint(tokenizer)), tokenizer_fingerprint(tokenizer) == tokenizer_fingerprint(tokenizer)
    (16, True)

Why: a run resumed with the same tokenizer under another path spelling must resume, and a token store
read with another tokenizer must be refused; both need identity by content.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any


def tokenizer_fingerprint(tokenizer: Any) -> str:
    """16 hex digits of BLAKE2b over the tokenizer's content (see the module docstring)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        content = json.loads(backend.to_str())
        content.pop("truncation", None)  # run-time settings, not the mapping from text to ids
        content.pop("padding", None)
    elif hasattr(tokenizer, "get_vocab"):
        content = {"vocab": sorted(tokenizer.get_vocab().items())}
    else:
        raise TypeError(f"tokenizer must be a transformers tokenizer, got {type(tokenizer).__name__}")
    specials = getattr(tokenizer, "special_tokens_map", {})
    text = json.dumps({"content": content, "specials": specials, "class": type(tokenizer).__name__.removesuffix("Fast")},
                      sort_keys=True, default=str)  # fmt: skip
    return hashlib.blake2b(text.encode("utf-8"), digest_size=8).hexdigest()
