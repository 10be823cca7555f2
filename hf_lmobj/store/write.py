"""Token ids into a token store: :func:`write_token_store`, documents in, a complete store folder out (atomically).

:func:`write_token_store` streams token ids to disk in chunks (memory: one chunk plus 8 bytes per
document); raw text is tokenized into a store by :mod:`hf_lmobj.store.tokenize_text`. Both write through
:mod:`hf_lmobj.store.writer`: everything goes into a temporary sibling folder; its files are written,
flushed to disk and the folder opened (every check of :meth:`TokenStore.open`) before it is renamed
into place, so a folder at ``path`` is always a complete store (format: :mod:`hf_lmobj.store.token_store`),
and a failed write leaves neither a half store nor the temporary folder. Every id is checked: ints
only (bools and floats are refused, not cast), in ``[0, vocab_size)``; documents are never empty
(an empty one is refused by its index, not skipped). Given the tokenizer, the writer records its
``tokenizer_fingerprint`` in ``meta.json`` so that a run can refuse another tokenizer
(:meth:`TokenStore.check_tokenizer`); with ``save_tokenizer=True`` it also saves the tokenizer as
``tokenizer/`` inside the temporary folder, checked to load back as itself, so the store appears with
its tokenizer or not at all (:mod:`hf_lmobj.store.tokenizer`). Given the documents' content hashes,
it writes ``document_hashes.npy``; given held-out texts, ``held_out.jsonl``; a stored document that the held-out
rule (or a held-out text) claims is refused: the store never trains on its own validation text.

Example:
    >>> import tempfile
    >>> write_token_store(tempfile.mkdtemp() + "/s", [[5, 6], [7]], vocab_size=512).lengths.tolist()
    [2, 1]
"""

from __future__ import annotations

import numbers
import os
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

from hf_lmobj.checks import check_flag, check_name
from hf_lmobj.held_out import HeldOut
from hf_lmobj.store.files import _as_path, _check_vocab_size
from hf_lmobj.store.token_store import TokenStore
from hf_lmobj.store.tokenizer import _check_origin, _check_save_tokenizer, _save_tokenizer, _tokenizer_meta
from hf_lmobj.store.writer import _atomic_folder, _TokenWriter

_END = object()  # an iterator's end, told apart from any value it yields


def write_token_store(
    path: str | os.PathLike,
    documents: Iterable[Sequence[int] | np.ndarray],
    vocab_size: int,
    *,
    tokenizer: str | PreTrainedTokenizerBase = "",
    add_bos: bool = False,
    add_eos: bool = False,
    text_column: str | None = None,
    overwrite: bool = False,
    save_tokenizer: bool = False,
    document_hashes: Iterable[int] | np.ndarray | None = None,
    held_out_texts: Iterable[str] | None = None,
    validation_fraction: float | None = None,
    tokenizer_origin: dict[str, Any] | None = None,
) -> TokenStore:
    """Write ``documents`` (token id sequences, streamed in chunks) as a store at ``path`` and open it.

    Memory stays bounded (one chunk of tokens plus 8 bytes per document): the corpus is never held.
    ``tokenizer`` (a name, or the tokenizer itself: then its ``tokenizer_fingerprint`` is recorded and
    ``vocab_size`` must be ``len(tokenizer)``), ``add_bos``, ``add_eos`` and ``text_column`` are
    recorded in ``meta.json``. The store appears at ``path`` only once complete: an error (or an
    exception raised by the ``documents`` iterable) leaves no folder at ``path`` (or the old store,
    with ``overwrite``) and no temporary folder beside it. ``overwrite=True`` replaces a token store
    or an empty folder, never a folder holding other files. ``save_tokenizer=True`` (``tokenizer``
    must then be the tokenizer, not a name) saves it as ``path/tokenizer/`` before the store is
    renamed into place, checked to load back with ``AutoTokenizer.from_pretrained`` as the same
    tokenizer: the store appears with its tokenizer, and a failed save leaves nothing, like any error.

    ``document_hashes`` (one :func:`~hf_lmobj.held_out.content_hash` per document, in order) are
    written as ``document_hashes.npy``; ``held_out_texts`` (streamed, each non-empty) as ``held_out.jsonl``,
    with ``validation_fraction`` (the :class:`~hf_lmobj.held_out.HeldOut` share they were chosen by,
    recorded in ``meta.json``'s ``held_out``). A document whose hash that rule holds out, or equal to a
    held-out text, is refused: a store never trains on its validation text. ``tokenizer_origin`` (a JSON
    object with a string ``origin``, e.g. :func:`~hf_lmobj.corpus.train_tokenizer`'s record) is recorded.

    Example:
        >>> import os, tempfile
        >>> from hf_lmobj.corpus import build_tokenizer
        >>> tok = build_tokenizer(512, max_documents=20)
        >>> store = write_token_store(tempfile.mkdtemp() + "/s", [[5, 6]], 512, tokenizer=tok, save_tokenizer=True)
        >>> sorted(os.listdir(store.path))
        ['meta.json', 'offsets.npy', 'tokenizer', 'tokens.bin']

    Raises:
        TypeError: a document holding something else than ints (a bool, a float, a string, None),
            ``vocab_size`` or a flag of the wrong type, ``documents`` not an iterable,
            ``save_tokenizer=True`` with a tokenizer name.
        ValueError: ``path`` exists and not ``overwrite`` (or is not a store), ``vocab_size`` outside
            ``[1, 2**32]``, an id ``< 0`` or ``>= vocab_size``, an empty document (a store refuses
            them: they carry no token) or no document at all (the message names the document index),
            a saved tokenizer that does not load back as itself; ``document_hashes`` not one per
            document or outside ``[0, 2**64)``, ``held_out_texts`` without ``validation_fraction``, an
            empty held-out text, a stored document held out by the rule or equal to a held-out text.
    """
    path = _as_path(path, "path")
    vocab_size = _check_vocab_size(vocab_size)
    _check_documents(documents)
    for name, value in (("document_hashes", document_hashes), ("held_out_texts", held_out_texts)):
        if value is not None:
            _check_iterable(value, name)
    rule = None if validation_fraction is None else HeldOut(validation_fraction)
    if held_out_texts is not None and rule is None:
        raise ValueError(
            "held_out_texts needs validation_fraction: the held-out share they were chosen by (meta.json records it)"
        )
    save_tokenizer = _check_save_tokenizer(save_tokenizer, tokenizer)
    meta = {
        **_tokenizer_meta(tokenizer, vocab_size),
        "add_bos": check_flag(add_bos, "add_bos"),
        "add_eos": check_flag(add_eos, "add_eos"),
        "text_column": check_name(text_column, "text_column", optional=True),
    }
    if tokenizer_origin is not None:
        meta["tokenizer_origin"] = _check_origin(tokenizer_origin)
    with _atomic_folder(path, check_flag(overwrite, "overwrite")) as tmp:
        if save_tokenizer:
            _save_tokenizer(tokenizer, tmp)
        _write_files(tmp, documents, vocab_size, hashes=document_hashes, held_out_texts=held_out_texts, rule=rule,
                     **meta)  # fmt: skip
    return TokenStore.open(path)


def _write_files(
    folder: Path,
    documents: Iterable[Sequence[int] | np.ndarray],
    vocab_size: int,
    *,
    hashes: Iterable[int] | None = None,
    held_out_texts: Iterable[str] | None = None,
    rule: HeldOut | None = None,
    **meta: Any,
) -> dict[str, Any]:
    """Write ``documents`` (with their content ``hashes``, when given) and ``held_out_texts`` into ``folder``."""
    writer = _TokenWriter(folder, vocab_size, rule=rule, held_out=held_out_texts is not None)
    try:
        digests = None if hashes is None else iter(hashes)
        for index, document in enumerate(documents):
            digest = None if digests is None else next(digests, _END)
            if digest is _END:
                raise ValueError(f"document_hashes ends before document {index}: give one hash per document")
            writer.add(document, None if digests is None else _check_hash(digest, f"document_hashes[{index}]"))
        if digests is not None and next(digests, _END) is not _END:
            raise ValueError(
                f"document_hashes holds more hashes than the {len(writer._lengths)} documents; give one per document"
            )
        for index, text in enumerate(held_out_texts or ()):
            writer.hold_out(text, f"held_out_texts[{index}]")
        return writer.finish(**meta)
    finally:
        writer.close()


def _check_documents(documents: Any) -> None:
    if isinstance(documents, (str, bytes, dict)) or not hasattr(documents, "__iter__"):
        raise TypeError(
            f"documents must be an iterable of token-id sequences ([[5, 6], [7]]), got {type(documents).__name__}"
        )


def _check_iterable(value: Any, field: str) -> None:
    if isinstance(value, (str, bytes, dict)) or not hasattr(value, "__iter__"):
        raise TypeError(f"{field} must be an iterable (a list, an array, a generator), got {type(value).__name__}")


def _check_hash(value: Any, field: str) -> int:
    """A content hash: an int in ``[0, 2**64)`` (numpy ints too; bools and floats refused)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{field} must be an int content hash (hf_lmobj.held_out.content_hash), got {value!r}")
    if not 0 <= int(value) < 2**64:
        raise ValueError(f"{field} must be in [0, 2**64) (a 64-bit content hash), got {value!r}")
    return int(value)
