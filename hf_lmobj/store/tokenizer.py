"""A token store's tokenizer: recorded in ``meta.json``, saved inside the store, checked against a run's.

The writers record the tokenizer's name and its
:func:`~hf_lmobj.store.tokenizer_fingerprint.tokenizer_fingerprint` (none for a name alone) and where it came from
(``tokenizer_origin``); with ``save_tokenizer=True`` they save it as ``tokenizer/`` inside the store, checked to load
back as itself; :meth:`~hf_lmobj.store.token_store.TokenStore.check_tokenizer` refuses a run's tokenizer of another
vocabulary size or fingerprint.

Example:
    >>> _tokenizer_meta("gpt2", None), _check_origin({"origin": "given", "name": "gpt2"})
    ({'tokenizer': 'gpt2', 'tokenizer_fingerprint': None}, {'origin': 'given', 'name': 'gpt2'})
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase

    from hf_lmobj.store.token_store import TokenStore

from hf_lmobj.checks import check_flag
from hf_lmobj.store.tokenizer_fingerprint import tokenizer_fingerprint

TOKENIZER_FOLDER = "tokenizer"  #: where ``save_tokenizer=True`` saves the tokenizer inside the store


def _tokenizer_meta(tokenizer: Any, vocab_size: int | None) -> dict[str, Any]:
    """``tokenizer`` and ``tokenizer_fingerprint`` for ``meta.json``: from a name (no fingerprint) or a tokenizer."""
    if isinstance(tokenizer, str):
        return {"tokenizer": tokenizer, "tokenizer_fingerprint": None}
    if not hasattr(tokenizer, "__len__") or not hasattr(tokenizer, "get_vocab"):
        raise TypeError(f"tokenizer must be a name (str) or a transformers tokenizer, got {type(tokenizer).__name__}")
    if vocab_size is not None and vocab_size != len(tokenizer):
        raise ValueError(
            f"vocab_size is {vocab_size} but len(tokenizer) is {len(tokenizer)}; the store's vocabulary is the "
            "tokenizer's: pass vocab_size=len(tokenizer)"
        )
    name = str(getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__)
    return {"tokenizer": name, "tokenizer_fingerprint": tokenizer_fingerprint(tokenizer)}


def _check_origin(origin: Any) -> dict[str, Any]:
    """A tokenizer's origin for ``meta.json``: a JSON object with a string ``origin``."""
    if not isinstance(origin, dict) or not isinstance(origin.get("origin"), str):
        raise TypeError(
            "tokenizer_origin must be a dict with a string 'origin' ({'origin': 'trained', ...} from "
            f"hf_lmobj.corpus.train_tokenizer, or {{'origin': 'given', 'name': ...}}), got {origin!r}"
        )
    try:
        json.dumps(origin)
    except (TypeError, ValueError) as error:
        raise TypeError(f"tokenizer_origin must be JSON-able ({error})") from None
    return origin


def _check_save_tokenizer(save_tokenizer: bool, tokenizer: Any) -> bool:
    """``save_tokenizer`` as a bool; ``True`` needs the tokenizer itself (a name cannot be saved)."""
    save_tokenizer = check_flag(save_tokenizer, "save_tokenizer")
    if save_tokenizer and isinstance(tokenizer, str):
        raise TypeError(
            f"save_tokenizer=True needs the tokenizer itself, got its name {tokenizer!r}; pass the tokenizer "
            "(AutoTokenizer.from_pretrained(...)) or save_tokenizer=False"
        )
    return save_tokenizer


def _save_tokenizer(tokenizer: PreTrainedTokenizerBase, folder: Path) -> None:
    """Save ``tokenizer`` to ``folder / "tokenizer"`` and check that it loads back as itself (same fingerprint).

    A tokenizer that reloads as another one (a slow tokenizer converted to a fast one on loading, a
    class ``AutoTokenizer`` cannot build) would be refused by :meth:`TokenStore.check_tokenizer` later,
    in the training run; it is refused here, before any text is tokenized.
    """
    from transformers import AutoTokenizer

    target = folder / TOKENIZER_FOLDER
    tokenizer.save_pretrained(target)
    fix = "save a tokenizer that reloads as itself (a fast tokenizer), or pass save_tokenizer=False"
    try:
        reloaded = AutoTokenizer.from_pretrained(target)
    except Exception as error:  # whatever transformers raises: the saved folder is not loadable
        raise ValueError(
            f"the tokenizer saved for the store does not load back with AutoTokenizer.from_pretrained "
            f"({type(error).__name__}: {error}); {fix}"
        ) from error
    expected, actual = tokenizer_fingerprint(tokenizer), tokenizer_fingerprint(reloaded)
    if actual != expected:
        raise ValueError(
            f"the tokenizer saved for the store loads back as another tokenizer ({type(reloaded).__name__}, "
            f"fingerprint {actual}, not {type(tokenizer).__name__} {expected}): a run would refuse the store "
            f"with its own tokenizer/; {fix}"
        )


def _check_run_tokenizer(store: TokenStore, tokenizer: Any, where: str = "") -> None:
    """:meth:`TokenStore.check_tokenizer`: refuse a ``tokenizer`` of another vocabulary size or fingerprint."""
    prefix = f"{where}: " if where else ""
    if not hasattr(tokenizer, "__len__") or isinstance(tokenizer, (str, bytes, os.PathLike)):
        raise TypeError(f"{prefix}tokenizer must be a transformers tokenizer, got {type(tokenizer).__name__}")
    fix = (
        "tokenize the corpus again with this tokenizer (recipes/tokenize_corpus.py --tokenizer_name ...) or "
        "train with the store's own tokenizer (--tokenizer_name <store>/tokenizer)"
    )
    size = len(tokenizer)
    if size != store.vocab_size:
        raise ValueError(
            f"{prefix}the token store {store.path} holds ids of a {store.vocab_size}-id vocabulary (meta.json "
            f"vocab_size), but the run's tokenizer has {size} ids; {fix}"
        )
    recorded = store.meta.get("tokenizer_fingerprint")
    if recorded is not None:
        actual = tokenizer_fingerprint(tokenizer)
        if actual != recorded:
            raise ValueError(
                f"{prefix}the token store {store.path} was written with another tokenizer: meta.json "
                f"tokenizer_fingerprint {recorded} ({store.meta.get('tokenizer') or 'unnamed'}), the run's "
                f"tokenizer {actual} ({getattr(tokenizer, 'name_or_path', '') or type(tokenizer).__name__}); "
                f"same vocabulary size, other ids for the same text; {fix}"
            )
