"""Which documents a run holds out, decided by their content, and which ones it cannot train on at all.

A document is *held out* (validation text) when the hash of its text falls in the first ``fraction``
of the hash space: a decision of the text alone, so a stream, a token store and an in-memory copy of
the same files hold out the same documents, on every rank, machine and resume, and a document held out
in one source of a mixture is held out in every other (the same text hashes the same). A run also
never trains on a document equal to one of its validation texts (a named ``validation`` split).

Some documents teach nothing and are *skipped* (counted, never an error after training): an empty or
whitespace-only text, and a document of fewer than 2 tokens (nothing to predict from it).

Example:
    >>> rule = HeldOut(fraction=0.5)
    >>> [rule.holds_out(content_hash(text)) for text in ("a", "b", "c", "d")]
    [True, False, True, False]
    >>> text_problem(""), text_problem(" \\n\\t"), text_problem("x = 1")
    ('empty', 'whitespace', None)
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from hf_lmobj.checks import check_number

#: Why a document is skipped: its text is empty, holds only whitespace, or gives fewer than 2 tokens.
SKIP_REASONS = ("empty", "whitespace", "one_token")
#: What a reader counts of the documents it leaves out of training: the skipped ones, those held out, and those that
#: hold an n-gram of the validation text when the run drops them (``drop_contaminated``).
LEFT_OUT = (*SKIP_REASONS, "held_out", "contaminated")
#: The share of a corpus held out as validation text when it names no validation split (pretrain, tokenize_corpus).
DEFAULT_VALIDATION_FRACTION = 0.02
#: What the hash of a document's content is: BLAKE2b of its UTF-8 bytes, the first 8 bytes as a big-endian uint64.
HASH_NAME = "blake2b-64"
_TOP = 2**64 - 1


def content_hash(text: str) -> int:
    """The 64-bit content hash of one text (BLAKE2b of its UTF-8 bytes; lone surrogates kept as they are).

    Example:
        >>> content_hash("def f(): pass") == content_hash("def f(): pass"), 0 <= content_hash("") < 2**64
        (True, True)
    """
    if not isinstance(text, str):
        raise TypeError(f"a document's text must be a string, got {type(text).__name__}")
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def content_hashes(texts: Iterable[str]) -> np.ndarray:
    """``(N,) uint64``: :func:`content_hash` of each text, in order."""
    return np.fromiter((content_hash(text) for text in texts), dtype=np.uint64)


def texts_fingerprint(texts: Iterable[str]) -> str:
    """16 hex digits naming a list of texts by content and order: two figures are comparable only on one text.

    Example:
        >>> texts_fingerprint(["a", "b"]) == texts_fingerprint(["a", "b"]) != texts_fingerprint(["b", "a"])
        True
    """
    digest = hashlib.blake2b(digest_size=8)
    for text in texts:
        digest.update(content_hash(text).to_bytes(8, "big"))
    return digest.hexdigest()


def text_problem(text: str) -> str | None:
    """``"empty"`` or ``"whitespace"`` when the text has nothing to learn from, else None."""
    if not text:
        return "empty"
    return "whitespace" if text.isspace() else None


@dataclass(frozen=True)
class HeldOut:
    """The documents a run keeps out of training: the held-out share by content, and its validation texts.

    Args:
        fraction: the share of documents held out by content hash, in ``[0, 1)``; 0 when the data names its own
            validation split (nothing more is held out by the rule).
        validation: the content hashes of the run's validation texts; a training document equal to one of them
            is never trained, whatever its source.
    """

    fraction: float
    validation: frozenset[int] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        fraction = check_number(self.fraction, "validation_fraction", 0.0, 1.0, high_open=True,
                                hint="the held-out share of the documents")  # fmt: skip
        object.__setattr__(self, "fraction", fraction)
        if not isinstance(self.validation, frozenset):
            raise TypeError(f"validation must be a frozenset of content hashes, got {type(self.validation).__name__}")

    @property
    def threshold(self) -> int:
        """Content hashes below this are held out by the rule (``fraction`` of the 2**64 hashes)."""
        return min(int(self.fraction * 2**64), _TOP)

    def holds_out(self, digest: int) -> bool:
        """Whether the document whose content hash is ``digest`` is kept out of training."""
        return digest < self.threshold or digest in self.validation

    def by_rule(self, digest: int) -> bool:
        """Whether the rule alone (the hash share, not the named validation texts) holds this document out."""
        return digest < self.threshold

    def mask(self, digests: np.ndarray) -> np.ndarray:
        """``(N,) bool``: which of ``digests`` (``(N,) uint64``) are kept out of training."""
        digests = np.asarray(digests, dtype=np.uint64)
        held = digests < np.uint64(self.threshold)
        if self.validation:
            held |= np.isin(digests, np.fromiter(self.validation, dtype=np.uint64, count=len(self.validation)))
        return held

    def describe(self) -> dict[str, object]:
        """What the data fingerprint and the card record of the rule."""
        return {"hash": HASH_NAME, "fraction": self.fraction, "validation_documents": len(self.validation)}
