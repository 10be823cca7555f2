"""The training data a contamination scan reads, named by location: token stores, local text, Hub datasets.

``--contamination_source`` (:func:`source_list` splits comma-separated entries, :func:`merge_repeated_flag` joins a
repeated flag; :func:`open_contamination_sources` opens them): each is a token store folder (``meta.json``), a local
file or folder of text, or a Hub id (its ``train`` split, streamed); a missing one is refused by name. A token
store holds ids: the index is built with the tokenizer the store was written with, its own ``tokenizer/`` folder
(else the scored model's tokenizer, when the store's ``meta.json`` says it is the same); text sources are encoded
with that same tokenizer.

Example:
    >>> source_list("store/,data/train.jsonl")
    ['store/', 'data/train.jsonl']
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformers import AutoTokenizer

from hf_lmobj.checks import check_name, check_unique_names
from hf_lmobj.data.load_text import load_text
from hf_lmobj.store.files import META_FILE
from hf_lmobj.store.token_store import TokenStore
from hf_lmobj.store.tokenizer import TOKENIZER_FOLDER
from hf_lmobj.store.tokenizer_fingerprint import tokenizer_fingerprint


def source_list(value: Any) -> list[str] | None:
    """``--contamination_source`` as a list of distinct locations: items may hold several, comma-separated.

    Example:
        >>> source_list(["a,b", "c"]), source_list(None)
        (['a', 'b', 'c'], None)
    """
    if value is None:
        return None
    items = [value] if isinstance(value, str) else value
    if not isinstance(items, list):
        raise TypeError(f"contamination_source must be a location or a list of them, got {value!r}")
    if not items:
        raise ValueError("contamination_source is an empty list; name a source, or leave the flag out")
    names = [check_name(item, f"contamination_source[{i}]") for i, item in enumerate(items)]
    parts = [part.strip() for name in names for part in name.split(",")]
    if not all(parts):
        raise ValueError(f"contamination_source {value!r} has an empty entry (two commas, or one at an end)")
    return check_unique_names(parts, "contamination_source")


def merge_repeated_flag(argv: list[str] | None, flag: str) -> list[str]:
    """``argv`` with every occurrence of ``flag`` (or its dashed spelling, which argparse accepts too) joined under
    the first one: argparse would keep only the values of the last occurrence of a flag of several values.

    Example:
        >>> merge_repeated_flag(["--a", "1", "--my_src", "x", "--b", "--my-src=y", "z"], "--my_src")
        ['--a', '1', '--my_src', 'x', 'y', 'z', '--b']
    """
    words = list(sys.argv[1:] if argv is None else argv)
    spellings = (flag, "--" + flag[2:].replace("_", "-"))
    rest, values, place, i = [], [], None, 0
    while i < len(words):
        word = words[i]
        name = word.split("=", 1)[0]
        if name not in spellings:
            rest.append(word)
            i += 1
            continue
        place = len(rest) if place is None else place
        if "=" in word:
            values.append(word.split("=", 1)[1])
        i += 1
        while i < len(words) and not words[i].startswith("--"):
            values.append(words[i])
            i += 1
    return words if place is None else [*rest[:place], flag, *values, *rest[place:]]


@dataclass(frozen=True)
class ContaminationSources:
    """The opened training sources (token stores, ``datasets`` of text), their names, and the index's tokenizer."""

    names: tuple[str, ...]
    sources: tuple[Any, ...]
    tokenizer: Any
    tokenizer_from: str  # where the index's tokenizer comes from (a store's tokenizer/ folder, or the model's)


def open_contamination_sources(locations: list[str], text_column: str, model_tokenizer: Any,
                               model_tokenizer_name: str) -> ContaminationSources:  # fmt: skip
    """Open every source (refused by name when missing or unreadable) and choose the index's tokenizer."""
    names = check_unique_names(locations, "contamination_source")
    sources, store_tokenizers = [], []
    for location in names:
        path = Path(location).expanduser()
        if path.is_dir() and (path / META_FILE).is_file():
            store = TokenStore.open(path)
            store_tokenizers.append((location, _store_tokenizer(store, location, model_tokenizer)))
            sources.append(store)
        else:
            sources.append(_text_source(location, path, text_column))
    if not store_tokenizers:
        return ContaminationSources(tuple(names), tuple(sources), model_tokenizer, model_tokenizer_name)
    first, tokenizer = store_tokenizers[0]
    for location, other in store_tokenizers[1:]:
        if tokenizer_fingerprint(other) != tokenizer_fingerprint(tokenizer):
            raise ValueError(
                f"contamination_source: the token stores {first!r} and {location!r} were written with different "
                "tokenizers; one scan indexes the evaluation text with one tokenizer: scan them in separate runs"
            )
    return ContaminationSources(tuple(names), tuple(sources), tokenizer, f"the tokenizer of token store {first}")


def _store_tokenizer(store: TokenStore, location: str, model_tokenizer: Any) -> Any:
    """The tokenizer a store was written with: its own ``tokenizer/`` folder, else the model's if the store says so."""
    where = f"contamination_source {location!r}"
    folder = Path(store.path) / TOKENIZER_FOLDER
    tokenizer = AutoTokenizer.from_pretrained(folder) if folder.is_dir() else model_tokenizer
    try:
        store.check_tokenizer(tokenizer, where)
    except ValueError as error:
        raise ValueError(
            f"{error}. The scan reads the store's ids as they are, so the evaluation text must be encoded with the "
            f"tokenizer that wrote them: the store has no {TOKENIZER_FOLDER}/ folder to load it from; write the store "
            "with its tokenizer saved (recipes/tokenize_corpus.py does), or score with that tokenizer"
        ) from None
    return tokenizer


def _text_source(location: str, path: Path, text_column: str) -> Any:
    """The ``train`` split of a local file / folder of text (read whole) or of a Hub id (streamed)."""
    where = f"contamination_source {location!r}"
    local = path.exists()
    if not local and (_only_local(location) or (path.parent != Path(".") and path.parent.exists())):
        raise ValueError(f"{where}: no such file or folder (and not a Hub id); give an existing path, a token "
                         "store folder or a Hub dataset id")  # fmt: skip
    try:
        loaded, _ = load_text(location, streaming=not local, text_column=text_column, name=location)
    except (OSError, ValueError) as error:
        kind = "the local data" if local else "a Hub dataset (no such id, or no network?)"
        raise ValueError(f"{where}: cannot read it as {kind}: {error}") from None
    if "train" not in loaded:
        raise ValueError(f"{where} has no 'train' split (has {sorted(loaded)}); the scan reads the training side: "
                         "point it at the training files")  # fmt: skip
    return loaded["train"]


def _only_local(location: str) -> bool:
    """A location that can only be a local path (absolute, ``./``, ``~``)."""
    return os.path.isabs(location) or location.startswith(("./", "../", "~", ".\\", "..\\"))
