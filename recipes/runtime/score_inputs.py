"""What the score recipe reads: the evaluation documents with their domains, and the training data it scans.

Evaluation documents (:func:`score_documents`). ``--split validation`` is the held-out text ``recipes/pretrain.py``
validates on with the same data arguments (:func:`hf_lmobj.data.run_sources.open_sources`): the dataset's
validation split, else its documents held out by content hash; each document's domain is its row's ``domain``
column, else its file's name (a local folder of several files), else the top-level package of an embedded-corpus
file (``json/decoder.py`` -> ``json``; a single-file module -> ``(top level)``), else the dataset's name. Another
split is read as the dataset has it (:func:`hf_lmobj.data.load_text.load_text`), the domain from
``--domain_column`` by the same rules. Empty and whitespace-only texts have nothing to predict: they are left out
and counted by reason. Every domain is checked as a tag path (:mod:`hf_lmobj.metrics.slices`) before anything is
scored.

Contamination sources (``--contamination_source``: :func:`source_list` splits comma-separated entries,
:func:`merge_repeated_flag` joins a repeated flag; :func:`open_contamination_sources` opens them): each is a token store folder (``meta.json``), a local
file or folder of text, or a Hub id (its ``train`` split, streamed); a missing one is refused by name. A token
store holds ids: the index is built with the tokenizer the store was written with, its own ``tokenizer/`` folder
(else the scored model's tokenizer, when the store's ``meta.json`` says it is the same); text sources are encoded
with that same tokenizer.

Example:
    >>> stdlib_package("json/decoder.py"), stdlib_package("os.py")
    ('json', '(top level)')
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from transformers import AutoTokenizer

from hf_lmobj.checks import check_name, check_unique_names
from hf_lmobj.corpus import load_stdlib_corpus
from hf_lmobj.data.held_out import text_problem
from hf_lmobj.data.load_text import domain_of_file, load_text
from hf_lmobj.data.prepare import DataArguments
from hf_lmobj.data.run_sources import EMBEDDED_NAME, open_sources
from hf_lmobj.data.token_store import TokenStore
from hf_lmobj.data.token_store_files import META_FILE
from hf_lmobj.data.token_store_tokenizer import TOKENIZER_FOLDER
from hf_lmobj.data.tokenizer_fingerprint import tokenizer_fingerprint
from hf_lmobj.metrics.slices import DocumentSums

#: The domain of a single-file module of the embedded corpus (``os.py``).
TOP_LEVEL = "(top level)"
#: Why a text is left out unscored (``hf_lmobj.data.held_out.text_problem``'s reasons).
SKIPPED = ("empty", "whitespace")


@dataclass(frozen=True)
class EvalDocuments:
    """The texts to score, one domain each, and the texts left out by reason (``empty``, ``whitespace``)."""

    texts: tuple[str, ...]
    domains: tuple[str, ...]
    skipped: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if len(self.texts) != len(self.domains):
            raise ValueError(f"{len(self.texts)} texts but {len(self.domains)} domains: one domain per text")
        if not self.texts:
            raise ValueError("no text to score")


def stdlib_package(path: str) -> str:
    """An embedded-corpus file's domain: its top-level package, or :data:`TOP_LEVEL` for a single-file module."""
    return path.split("/")[0] if "/" in path else TOP_LEVEL


def dataset_label(location: str | None) -> str:
    """What a dataset is called as a domain: a local file's name without its extensions, a folder's or a Hub id's
    last part; the embedded corpus's name."""
    if location is None:
        return EMBEDDED_NAME
    if Path(location).expanduser().is_file():
        return domain_of_file(location)
    return Path(str(location).rstrip("/")).name or str(location)


def score_documents(args: Any) -> EvalDocuments:
    """The split's non-empty texts with their domains, the first ``max_texts`` of them (see the module docstring)."""
    if args.split == "validation":
        data_args = DataArguments(dataset_name=args.dataset_name, dataset_config=args.dataset_config,
                                  text_column=args.text_column, validation_fraction=args.validation_fraction,
                                  max_documents=args.max_documents, max_validation_documents=args.max_texts or 2**62)  # fmt: skip
        sources = open_sources(data_args)
        texts, domains = list(sources.validation_texts), list(sources.validation_domains)
        skipped = {reason: sources.skipped_validation.get(reason, 0) for reason in SKIPPED}
        where = f"the validation split of {dataset_label(args.dataset_name)}"
    else:
        texts, domains, skipped = _named_split(args)
        where = f"split {args.split!r} of {dataset_label(args.dataset_name)}"
    check_document_domains(domains, where)
    return EvalDocuments(tuple(texts), tuple(domains), skipped)


def _named_split(args: Any) -> tuple[list[str], list[str], dict[str, int]]:
    """Texts, domains and skipped counts of a split other than ``validation``."""
    if args.dataset_name is None:
        splits, column = load_stdlib_corpus(args.validation_fraction, args.max_documents), "path"
    else:
        splits, column = load_text(args.dataset_name, args.dataset_config, text_column=args.text_column,
                                   domain_column=args.domain_column)  # fmt: skip
    if args.split not in splits:
        raise ValueError(f"split {args.split!r} not found; the dataset has {sorted(splits)}")
    rows = splits[args.split]
    if args.text_column not in rows.column_names:
        raise ValueError(f"split {args.split!r} has no column {args.text_column!r} (has {rows.column_names}); "
                         "set --text_column")  # fmt: skip
    labels = rows[column] if column is not None else None
    texts, domains, skipped = [], [], dict.fromkeys(SKIPPED, 0)
    for i, text in enumerate(rows[args.text_column]):
        if not isinstance(text, str):
            raise TypeError(f"split {args.split!r}: row {i} column {args.text_column!r} holds {text!r:.60}, not text; "
                            "fix or drop the row")  # fmt: skip
        problem = text_problem(text)
        if problem is not None:
            skipped[problem] += 1
            continue
        texts.append(text)
        domains.append(_row_domain(labels, i, args))
        if len(texts) == args.max_texts:
            break
    if not texts:
        raise ValueError(f"split {args.split!r} has no non-empty text in column {args.text_column!r}")
    return texts, domains, skipped


def _row_domain(labels: list | None, row: int, args: Any) -> str:
    if labels is None:
        return dataset_label(args.dataset_name)
    if args.dataset_name is None:
        return stdlib_package(labels[row])
    value = labels[row]
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"split {args.split!r}: row {row} has domain {value!r} in column {args.domain_column!r}; "
                         "every row needs a non-empty string domain (or drop the column: the file name is used)")  # fmt: skip
    return value.strip()


def check_document_domains(domains: list[str], where: str) -> None:
    """Refuse a domain that cannot name figures (a reserved tag, a tag holding documents and sub-domains), before
    anything is scored: the checks of :class:`~hf_lmobj.metrics.slices.DocumentSums`, naming the document."""
    count = len(domains)
    try:
        DocumentSums(nll=[0.0] * count, tokens=[1] * count, bytes=[1] * count, words=[0] * count,
                     doc_id=list(range(count)), domain=list(domains))  # fmt: skip
    except (TypeError, ValueError) as error:
        raise type(error)(f"{where}: {error} (domain[i]: the i-th document scored)") from None


# ------------------------------------------------------------------------------------------ contamination sources
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
