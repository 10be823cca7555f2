"""Where a run's documents come from, which of them it holds out, and what the card says of both.

Every run, whatever its data, is a list of :class:`SourceSpec` (the embedded corpus, an in-memory
``DatasetDict``, local files or a Hub id read whole or streamed, token stores, a mixture of them), opened once
(:func:`open_sources`) into a :class:`RunSources`: the text of each source, its validation text and the
:class:`~hf_lmobj.held_out.HeldOut` rule every source applies, so that no held-out document is trained from
any source.

The validation text is the first text source's ``validation`` split when it has one (the embedded corpus's is its
published split, by a hash of each file's path: :func:`~hf_lmobj.corpus.load_stdlib_corpus`), else its documents held out
by content hash (:mod:`hf_lmobj.held_out`), at most ``max_validation_documents`` of either, in the source's
order; a run of token stores alone validates on the first store's ``held_out.jsonl``
(``recipes/tokenize_corpus.py`` writes it). Empty and whitespace-only validation texts are skipped and counted.

Example:
    >>> from hf_lmobj.data.prepare import DataArguments
    >>> [(s.kind, s.name, s.weight) for s in source_specs(DataArguments(
    ...     sources='[{"token_store": "data/store", "weight": 3}, {"dataset_name": "user/corpus", "weight": 1}]'))]
    [('token store', 'store', 3.0), ('hub', 'corpus', 1.0)]
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import datasets

from hf_lmobj.data.prepare import DataArguments
from hf_lmobj.held_out import SKIP_REASONS, HeldOut, content_hash, text_problem, texts_fingerprint
from hf_lmobj.store.token_store import TokenStore

#: The name the embedded corpus (the standard library's source) goes by in logs and cards.
EMBEDDED_NAME = "python-stdlib"


@dataclass(frozen=True)
class SourceSpec:
    """One source of a run: what it is (``kind``), what logs call it, where it is and its share of the tokens."""

    kind: str  # "embedded corpus" | "in-memory" | "local files" | "hub" | "token store"
    name: str
    location: str | None = None
    weight: float = 1.0
    dataset_config: str | None = None
    text_column: str = "text"
    streaming: bool = False

    @property
    def holds_text(self) -> bool:
        return self.kind != "token store"

    def record(self) -> dict[str, Any]:
        """What the card says of this source (its realized tokens are added after training)."""
        return {"name": self.name, "location": self.location, "kind": self.kind, "weight": self.weight,
                "streamed": self.streaming}  # fmt: skip


def source_specs(args: DataArguments, in_memory: bool = False) -> list[SourceSpec]:
    """The run's sources (one when there is no mixture); ``in_memory`` when the caller gives the text itself."""
    if args.sources:
        specs = [_entry_spec(entry, args) for entry in args.sources]
        names = [s.name for s in specs]
        if len(set(names)) != len(names):
            raise ValueError(f"sources: names must differ (got {names}); give each entry a distinct name:")
        return specs
    if args.token_store:
        return [SourceSpec("token store", _short_name(args.token_store), args.token_store)]
    if in_memory:
        return [
            SourceSpec("in-memory", args.dataset_name or "dataset", args.dataset_name, text_column=args.text_column)
        ]
    if args.dataset_name is None:
        if args.streaming:
            raise ValueError("streaming: true needs dataset_name (a Hub id or local files); or set token_store")
        return [SourceSpec("embedded corpus", EMBEDDED_NAME, "the Python standard library (Lib/*.py)")]
    return [SourceSpec(_text_kind(args.dataset_name), _short_name(args.dataset_name), args.dataset_name,
                       dataset_config=args.dataset_config, text_column=args.text_column, streaming=args.streaming)]  # fmt: skip


def _entry_spec(entry: dict[str, Any], args: DataArguments) -> SourceSpec:
    if entry.get("token_store"):
        where = entry["token_store"]
        return SourceSpec("token store", str(entry.get("name", _short_name(where))), where, float(entry["weight"]))
    where = entry["dataset_name"]
    return SourceSpec(_text_kind(where), str(entry.get("name", _short_name(where))), where, float(entry["weight"]),
                      entry.get("dataset_config"), entry.get("text_column", args.text_column), streaming=True)  # fmt: skip


def _text_kind(location: str) -> str:
    return "local files" if Path(location).exists() else "hub"


def _short_name(location: str) -> str:
    """What logs call a source: a local folder's or a Hub id's last part (``data/stdlib_store`` -> ``stdlib_store``)."""
    return Path(str(location).rstrip("/")).name or str(location)


@dataclass
class RunSources:
    """The opened sources of a run: per source its training text (or store), the validation text and the rule."""

    specs: list[SourceSpec]
    opened: list[Any]  # per spec: a datasets.Dataset / IterableDataset of text ("train" side), or a TokenStore
    validation_texts: list[str]
    validation: dict[str, Any]  # the card's record: source, location, documents, bytes, selection, fingerprint
    held_out: HeldOut
    skipped_validation: dict[str, int] = field(default_factory=dict)
    validation_domains: list[str] = field(default_factory=list)  # one per validation text (see validation_domain)

    def training_sample(self) -> Iterator[str]:
        """The training side's texts, each text source's in turn (weighted runs interleave by weight): what a
        tokenizer is trained on. Held-out, empty and whitespace-only texts are left out."""
        streams = [
            _training_texts(opened, spec, self.held_out)
            for spec, opened in zip(self.specs, self.opened)
            if spec.holds_text
        ]
        return (text for group in itertools.zip_longest(*streams) for text in group if text is not None)

    def stores(self) -> list[TokenStore]:
        return [opened for spec, opened in zip(self.specs, self.opened) if not spec.holds_text]


def _training_texts(opened: Any, spec: SourceSpec, held_out: HeldOut) -> Iterator[str]:
    for index, row in enumerate(opened):
        text = _row_text(row, spec.text_column, spec.name, index)
        if text_problem(text) is None and not held_out.holds_out(content_hash(text)):
            yield text


def open_sources(args: DataArguments, splits: datasets.DatasetDict | None = None) -> RunSources:
    """Open the run's sources (``splits``: text the caller holds in memory, with a ``train`` split and maybe a
    ``validation`` one) and choose its validation text."""
    specs = source_specs(args, in_memory=splits is not None)
    opened, validation_splits = map(list, zip(*(_open(spec, args, splits) for spec in specs)))
    texts, domains, record, held_out, skipped = _choose_validation(specs, opened, validation_splits, args)
    return RunSources(specs, opened, texts, record, held_out, skipped, domains)


def _open(spec: SourceSpec, args: DataArguments, splits: datasets.DatasetDict | None) -> tuple[Any, Any]:
    """``(train, validation or None)`` of one source; a token store is its own train side."""
    if spec.kind == "token store":
        return TokenStore.open(spec.location), None
    if spec.kind == "embedded corpus":
        from hf_lmobj.corpus import load_stdlib_corpus

        corpus = load_stdlib_corpus(args.validation_fraction, args.max_documents)
        return corpus["train"], corpus["validation"]
    loaded = splits if spec.kind == "in-memory" else _load(spec, args)
    if "train" not in loaded:
        raise ValueError(f"source {spec.name!r} ({spec.location}) has no 'train' split (has {list(loaded)})")
    train = loaded["train"]
    if args.max_documents is not None and not spec.streaming:
        train = train.select(range(min(args.max_documents, train.num_rows)))
    elif args.max_documents is not None:
        train = train.take(args.max_documents)
    return train, loaded["validation"] if "validation" in loaded else None


def _load(spec: SourceSpec, args: DataArguments) -> Any:
    """``datasets.load_dataset`` of a local or Hub source, its files checked first (bytes, schema, units), each row
    with its domain where the data says it (:func:`~hf_lmobj.data.load_text.load_text`)."""
    from hf_lmobj.data.load_text import load_text

    try:
        loaded, _ = load_text(spec.location, spec.dataset_config, streaming=spec.streaming, text_unit=args.text_unit,
                              text_column=spec.text_column, name=spec.name)  # fmt: skip
    except StopIteration:  # datasets infers the schema from the first row: an empty file has none
        raise ValueError(f"source {spec.name!r}: {spec.location} holds no rows (an empty file?); give it at least one "
                         "document") from None  # fmt: skip
    return loaded


def validation_domain(row: Any, spec: SourceSpec, index: int = 0) -> str:
    """A validation document's domain: its row's ``domain`` (a column of the data, or its file's name), the top-level
    package of an embedded-corpus file (``json/decoder.py`` -> ``json``; a single-file module -> ``(top level)``),
    else the source's name without its file extensions (``corpus.jsonl`` -> ``corpus``).

    Example:
        >>> validation_domain({"text": "x", "domain": "wiki"}, SourceSpec("local files", "corpus.jsonl"))
        'wiki'
        >>> validation_domain({"text": "x"}, SourceSpec("local files", "corpus.jsonl"))
        'corpus'
    """
    from hf_lmobj.data.load_text import DOMAIN_COLUMN, domain_of_file

    if isinstance(row, dict) and DOMAIN_COLUMN in row:
        domain = row[DOMAIN_COLUMN]
        if not isinstance(domain, str) or not domain.strip():
            raise ValueError(f"source {spec.name!r}: row {index} has {DOMAIN_COLUMN}={domain!r}; give every row a "
                             f"non-empty {DOMAIN_COLUMN} string, or drop the column")  # fmt: skip
        return domain.strip()
    if spec.kind == "embedded corpus" and isinstance(row, dict) and isinstance(row.get("path"), str):
        return row["path"].split("/")[0] if "/" in row["path"] else "(top level)"
    return domain_of_file(spec.name)


def _choose_validation(
    specs: list[SourceSpec], opened: list[Any], validation_splits: list[Any], args: DataArguments
) -> tuple[list[str], list[str], dict[str, Any], HeldOut, dict[str, int]]:
    limit = args.max_validation_documents
    first = next((i for i, spec in enumerate(specs) if spec.holds_text), None)
    skipped = dict.fromkeys(SKIP_REASONS, 0)
    if first is not None and validation_splits[first] is not None:
        spec, rows = specs[first], validation_splits[first]
        picked = _first_texts(rows, spec, limit, skipped, lambda text: True)
        selection, fraction = _named_split(spec, args.validation_fraction), 0.0
    elif first is not None:
        spec, rule = specs[first], HeldOut(args.validation_fraction)
        picked = _first_texts(opened[first], spec, limit, skipped, lambda text: rule.by_rule(content_hash(text)))
        selection = f"held out by content hash ({args.validation_fraction:.1%} of the documents)"
        fraction = args.validation_fraction
    else:
        spec, store = specs[0], opened[0]
        texts = store.held_out_texts(limit)
        if texts is None:
            raise ValueError(
                f"token store {spec.location} holds no held-out text (no held_out.jsonl): rebuild it with "
                "recipes/tokenize_corpus.py (it holds documents out by content hash), or add a text source"
            )
        picked = [(text, validation_domain({}, spec)) for text in texts if _counted(text, skipped)]
        selection, fraction = "the token store's held_out.jsonl", args.validation_fraction
    if not picked:
        raise ValueError(_no_validation_text(spec, selection, skipped, args.validation_fraction, fraction))
    texts, domains = [text for text, _ in picked], [domain for _, domain in picked]
    held_out = HeldOut(fraction, frozenset(content_hash(text) for text in texts))
    record = {"source": spec.name, "location": spec.location, "documents": len(texts),
              "bytes": sum(len(text.encode("utf-8")) for text in texts), "selection": selection,
              "fingerprint": texts_fingerprint(texts)}  # fmt: skip
    return texts, domains, record, held_out, skipped


def _named_split(spec: SourceSpec, fraction: float) -> str:
    """How a named validation split was chosen: the embedded corpus's by its files' paths, else by the dataset."""
    if spec.kind == "embedded corpus":
        return f"the corpus's validation split ({fraction:.1%} of the files, by a SHA-1 of each file's path)"
    return "the dataset's validation split"


def _first_texts(
    rows: Iterable[Any], spec: SourceSpec, limit: int, skipped: dict[str, int], chosen
) -> list[tuple[str, str]]:
    """The first ``limit`` ``(text, domain)`` of ``rows`` that ``chosen`` picks, empty / whitespace-only skipped."""
    picked: list[tuple[str, str]] = []
    for index, row in enumerate(rows):
        text = _row_text(row, spec.text_column, spec.name, index)
        if chosen(text) and _counted(text, skipped):
            picked.append((text, validation_domain(row, spec, index)))
            if len(picked) == limit:
                break
    return picked


def _no_validation_text(spec: SourceSpec, selection: str, skipped: dict[str, int], asked: float, rule: float) -> str:
    """Why a source gave no validation text, with the fix (a small corpus at a small held-out share holds none out).

    Example:
        >>> _no_validation_text(SourceSpec("local files", "notes"), "held out by content hash (2.0% ...)",
        ...                     {"empty": 0}, 0.02, 0.02)  # doctest: +ELLIPSIS
        "source 'notes' gave no validation text (held out by content hash (2.0% ...); skipped: {'empty': 0}): a ..."
    """
    why = f"source {spec.name!r} gave no validation text ({selection}; skipped: {skipped})"
    if rule > 0:
        return (f"{why}: a corpus of N documents holds about N x {asked:g} out by content hash, and none of this one's "
                "did; raise validation_fraction (e.g. 0.1 for a few hundred documents) or give a validation split")  # fmt: skip
    return f"{why}; give it non-empty validation documents"


def _counted(text: str, skipped: dict[str, int]) -> bool:
    """Whether ``text`` can be validation text; when not, its reason is counted in ``skipped``."""
    problem = text_problem(text)
    if problem is not None:
        skipped[problem] += 1
    return problem is None


def _row_text(row: Any, column: str, name: str, index: int) -> str:
    """The text of one row, refused by row and column when it is missing or not a string."""
    if not isinstance(row, dict) or column not in row:
        columns = sorted(row) if isinstance(row, dict) else type(row).__name__
        raise ValueError(
            f"source {name!r}: row {index} has no {column!r} column (columns: {columns}); name the text column with "
            "text_column="
        )
    if not isinstance(row[column], str):
        raise TypeError(f"source {name!r}: row {index} {column!r} must be a string, got {row[column]!r:.60}")
    return row[column]
