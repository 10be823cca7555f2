"""Where a run's data came from, as its card, model-index and ``.eval_results`` name it.

A pre-training run records its data's provenance (``run.provenance``, a JSON-able dict): the training
sources (name, location, kind, mixture weight, realized tokens), the validation set (source, documents,
bytes, how it was selected, the fingerprint of its texts), the tokenizer's origin and the documents skipped.
:func:`check_provenance` reads that record into a :class:`Provenance`, refusing a missing key, an unknown
key or a wrong value by its key (:mod:`.provenance_text` puts it into the card's words); :meth:`Provenance.named`
is the one-dataset record of a caller that has only a dataset's name (fine-tuning, scoring). Each source is named in the metadata by its id
(:func:`~hf_lmobj.cards.dataset_ids.dataset_id`: a Hub id as it is, a local path by its own name, the
embedded corpus as ``hf-lmobj/<name>``).

Example:
    >>> record = {
    ...     "training": [{"name": "jsonl", "location": "/data/jsonl", "kind": "local files", "weight": 1.0,
    ...                   "tokens": 5000}],
    ...     "validation": {"source": "jsonl", "location": "/data/jsonl", "documents": 3, "bytes": 120,
    ...                    "fingerprint": "0123456789abcdef", "selection": "held out by content hash"},
    ...     "tokenizer": {"origin": "trained", "vocab_size": 512, "fingerprint": "fedcba9876543210"},
    ...     "skipped_documents": {"training": {"empty": 1, "whitespace": 0, "one_token": 0},
    ...                           "validation": {"empty": 0, "whitespace": 0, "one_token": 0}}}
    >>> provenance = check_provenance(record)
    >>> provenance.training_ids, provenance.validation_id
    (['jsonl'], 'jsonl')
    >>> provenance.skipped_line()
    'training 1 empty; validation none'
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import InitVar, asdict, dataclass, replace
from typing import Any

from hf_lmobj.cards.dataset_ids import NO_LOCATION_KINDS, SOURCE_KINDS, dataset_id, infer_kind
from hf_lmobj.cards.provenance_text import (
    data_summary,
    skipped_documents_line,
    tokenizer_sentence,
    training_data_markdown,
    validation_sentence,
)
from hf_lmobj.checks import (
    check_count,
    check_flag,
    check_length,
    check_name,
    check_number,
    check_unique_names,
    check_weights,
)
from hf_lmobj.held_out import SKIP_REASONS

#: Where the tokenizer came from (``run.provenance["tokenizer"]["origin"]``).
TOKENIZER_ORIGINS = ("trained", "given", "token store")
_SIDES = ("training", "validation")
_FINGERPRINT = re.compile(r"[0-9a-f]{16}")
_KEYS = {  # record part -> (required keys, optional keys)
    "provenance": (
        ("training", "validation", "tokenizer", "skipped_documents"),
        ("held_out_training_documents", "contaminated_training_documents"),
    ),
    "training source": (("name", "location", "kind", "weight"), ("tokens", "streamed")),
    "validation": (("source", "location", "documents", "bytes", "fingerprint", "selection"), ()),
    "tokenizer": (
        ("origin", "vocab_size", "fingerprint"),
        ("name", "sample_documents", "sample_bytes", "sample_fingerprint", "trained_on"),
    ),
}


def check_content_fingerprint(value: Any, field: str) -> str:
    """A content fingerprint: 16 lowercase hex digits (``texts_fingerprint``, ``tokenizer_fingerprint``).

    >>> check_content_fingerprint("0123456789abcdef", "validation_fingerprint")
    '0123456789abcdef'
    >>> check_content_fingerprint("0123", "validation_fingerprint")
    Traceback (most recent call last):
    ...
    ValueError: validation_fingerprint must be 16 lowercase hex digits (texts_fingerprint's), got '0123'
    """
    if not isinstance(value, str):
        raise TypeError(f"{field} must be a string of 16 hex digits, got {type(value).__name__}: {value!r}")
    if not _FINGERPRINT.fullmatch(value):
        raise ValueError(f"{field} must be 16 lowercase hex digits (texts_fingerprint's), got {value!r}")
    return value


def _text(value: Any, field: str, optional: bool = False) -> str | None:
    """A name or location: a non-empty string that UTF-8 can hold (it goes into YAML and the card)."""
    value = check_name(value, field, optional=optional)
    if value is not None:
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as error:
            raise ValueError(f"{field} holds a lone surrogate at position {error.start} ({value!r}); "
                             "pass the dataset's real name") from None  # fmt: skip
    return value


def _choice(value: Any, field: str, choices: Sequence[str]) -> str:
    if value not in choices:
        raise ValueError(f"{field} must be one of {list(choices)}, got {value!r}")
    return value


@dataclass(frozen=True)
class TrainingSource:
    """One training source: its name, location (path or Hub id), kind, mixture weight and realized tokens."""

    name: str
    location: str | None  # a path or Hub id; None only for the embedded corpus and an in-memory dataset
    kind: str
    weight: float = 1.0
    tokens: int | None = None  # the training tokens drawn from it (None: not recorded)
    streamed: bool | None = None
    where: InitVar[str] = "source"

    def __post_init__(self, where: str) -> None:
        _text(self.name, f"{where}['name']")
        _choice(self.kind, f"{where}['kind']", SOURCE_KINDS)
        _text(self.location, f"{where}['location']", optional=self.kind in NO_LOCATION_KINDS)
        weight = check_number(self.weight, f"{where}['weight']", 0.0, hint="a mixture weight")
        object.__setattr__(self, "weight", weight)
        if self.tokens is not None:
            object.__setattr__(self, "tokens", check_count(self.tokens, f"{where}['tokens']"))
        object.__setattr__(self, "streamed", check_flag(self.streamed, f"{where}['streamed']", optional=True))

    @property
    def dataset_id(self) -> str:
        return dataset_id(self.name, self.location, self.kind)


@dataclass(frozen=True)
class ValidationSet:
    """The text the run's figures are measured on: its source, size, how it was chosen and its fingerprint."""

    source: str
    location: str | None
    documents: int
    bytes: int
    fingerprint: str
    selection: str
    where: InitVar[str] = "validation"

    def __post_init__(self, where: str) -> None:
        _text(self.source, f"{where}['source']")
        _text(self.location, f"{where}['location']", optional=True)
        _text(self.selection, f"{where}['selection']")
        check_content_fingerprint(self.fingerprint, f"{where}['fingerprint']")
        documents = check_count(self.documents, f"{where}['documents']", 1, fix="a run needs validation text")
        size = check_count(self.bytes, f"{where}['bytes']", 1, fix="a run needs validation text")
        if size < documents:
            raise ValueError(f"{where}['bytes'] is {size} for {documents} documents; every validation document "
                             "holds at least one byte (empty ones are skipped)")  # fmt: skip
        object.__setattr__(self, "documents", documents)
        object.__setattr__(self, "bytes", size)

    def sentence(self, markdown: bool = False) -> str:
        """``37 documents (12,345 bytes) of jsonl (/data/jsonl), held out by ...; text fingerprint ...``."""
        return validation_sentence(self, markdown)


@dataclass(frozen=True)
class TokenizerOrigin:
    """Where the tokenizer came from: trained on the run's training side, given, or the token store's."""

    origin: str
    vocab_size: int
    fingerprint: str
    name: str | None = None
    sample_documents: int | None = None
    sample_bytes: int | None = None
    sample_fingerprint: str | None = None
    trained_on: tuple[str, ...] | None = None  # the training sources it was trained on (a name or a list of them)
    where: InitVar[str] = "tokenizer"

    def __post_init__(self, where: str) -> None:
        _choice(self.origin, f"{where}['origin']", TOKENIZER_ORIGINS)
        object.__setattr__(self, "vocab_size", check_length(self.vocab_size, f"{where}['vocab_size']"))
        check_content_fingerprint(self.fingerprint, f"{where}['fingerprint']")
        if self.sample_fingerprint is not None:
            check_content_fingerprint(self.sample_fingerprint, f"{where}['sample_fingerprint']")
        _text(self.name, f"{where}['name']", optional=True)
        if self.trained_on is not None:
            names = [self.trained_on] if isinstance(self.trained_on, str) else self.trained_on
            if not isinstance(names, (list, tuple)) or not names:
                raise TypeError(f"{where}['trained_on'] must be a source's name or a non-empty list of them, "
                                f"got {self.trained_on!r}")  # fmt: skip
            object.__setattr__(self, "trained_on", tuple(_text(n, f"{where}['trained_on'][{i}]")
                                                         for i, n in enumerate(names)))  # fmt: skip
        for key in ("sample_documents", "sample_bytes"):
            if getattr(self, key) is not None:
                object.__setattr__(self, key, check_count(getattr(self, key), f"{where}[{key!r}]"))

    def sentence(self, markdown: bool = False) -> str:
        """``trained on a sample of the training side (...); vocabulary 4,096; fingerprint ...``."""
        return tokenizer_sentence(self, markdown)


def _skipped(value: Any, where: str) -> dict[str, dict[str, int]]:
    """``{"training": {reason: count}, "validation": {...}}``, every side and reason of SKIP_REASONS present."""
    _keys(value, where, _SIDES, ())
    out = {}
    for side in _SIDES:
        counts = _keys(value[side], f"{where}[{side!r}]", SKIP_REASONS, ())
        out[side] = {reason: check_count(count, f"{where}[{side!r}][{reason!r}]") for reason, count in counts.items()}
    return out


def _keys(value: Any, where: str, required: Sequence[str], optional: Sequence[str]) -> dict[str, Any]:
    """``value`` as a dict with every required key and no unknown one (each named by ``where[key]``)."""
    if not isinstance(value, Mapping):
        raise TypeError(f"{where} must be a dict, got {type(value).__name__}: {value!r}")
    missing = [key for key in required if key not in value]
    if missing:
        raise ValueError(f"{where} has no {', '.join(repr(k) for k in missing)}; the record needs {list(required)}")
    unknown = [key for key in value if key not in (*required, *optional)]
    if unknown:
        raise ValueError(f"{where} has the unknown key(s) {', '.join(repr(k) for k in unknown)}; it holds "
                         f"{list(required) + list(optional)} (nothing else would reach the card)")  # fmt: skip
    return dict(value)


@dataclass(frozen=True)
class Provenance:
    """A run's data as its card names it (read a run's record with :func:`check_provenance`).

    ``validation``, ``tokenizer`` and ``skipped_documents`` are None only in a :meth:`named` record (a
    caller that knows a dataset's name and nothing more); the model-index then measures on that dataset.
    Weights are normalised to sum 1 (the share of the mixture each source is drawn with).
    """

    training: tuple[TrainingSource, ...]
    validation: ValidationSet | None = None
    tokenizer: TokenizerOrigin | None = None
    skipped_documents: dict[str, dict[str, int]] | None = None
    held_out_training_documents: int | None = None  # training-side documents passed over as held out
    contaminated_training_documents: int | None = None  # dropped for holding validation n-grams (drop_contaminated)

    def __post_init__(self) -> None:
        sources = tuple(self.training) if isinstance(self.training, (list, tuple)) else ()
        if not all(isinstance(s, TrainingSource) for s in sources):
            raise TypeError(f"provenance['training'] must be a list of TrainingSource, got {self.training!r}")
        if not sources:
            raise ValueError("provenance['training'] is empty; a run trains on at least one source")
        check_unique_names([s.name for s in sources], "provenance['training'] names")
        shares = check_weights([s.weight for s in sources], "provenance['training'] weights")
        object.__setattr__(self, "training", tuple(replace(s, weight=w) for s, w in zip(sources, shares)))
        if self.held_out_training_documents is not None:
            held = check_count(self.held_out_training_documents, "provenance['held_out_training_documents']")
            object.__setattr__(self, "held_out_training_documents", held)
        if self.contaminated_training_documents is not None:
            dropped = check_count(self.contaminated_training_documents, "provenance['contaminated_training_documents']")
            object.__setattr__(self, "contaminated_training_documents", dropped)

    @classmethod
    def named(cls, dataset_name: Any) -> Provenance:
        """The record of a caller that knows only its dataset's name (kind from :func:`infer_kind`).

        >>> Provenance.named("python-stdlib").training_ids
        ['hf-lmobj/python-stdlib']
        """
        if dataset_name is None:
            raise ValueError("dataset_name must be a non-empty string, got None; or pass provenance= (a run's record)")
        name = _text(dataset_name, "dataset_name")
        return cls((TrainingSource(name, name, infer_kind(name), where="dataset_name"),))

    @property
    def training_ids(self) -> list[str]:
        """The model-index's ``datasets``: every training source's id, once each, in order."""
        return list(dict.fromkeys(source.dataset_id for source in self.training))

    def _validation_source(self) -> TrainingSource:
        """The source the figures are measured on: the training source of the validation set's name (the only one
        of a :meth:`named` record), else one built from the validation set's own name and location."""
        if self.validation is None:
            return self.training[0]
        same = next((s for s in self.training if s.name == self.validation.source), None)
        location = self.validation.location
        kind = infer_kind(location) if location is not None else "in-memory"
        return same or TrainingSource(self.validation.source, location, kind, where="provenance['validation']")

    @property
    def validation_name(self) -> str:
        return self._validation_source().name

    @property
    def validation_kind(self) -> str:
        return self._validation_source().kind

    @property
    def validation_id(self) -> str:
        """The id each model-index result and ``.eval_results`` entry names: the validation set's source."""
        return self._validation_source().dataset_id

    def summary(self) -> str:
        """The card's first line names the data: ```jsonl``` or ``a mixture of `a` (0.3) and `b` (0.7)``."""
        return data_summary(self)

    def skipped_line(self) -> str | None:
        """``training 1 empty, 1 whitespace-only; validation none``; None when nothing was skipped or counted."""
        return skipped_documents_line(self.skipped_documents)

    def markdown(self) -> str:
        """The card's "Training data" section body (:func:`~.provenance_text.training_data_markdown`)."""
        return training_data_markdown(self)

    def as_dict(self) -> dict[str, Any]:
        """The record as plain data (the templates' ``provenance``)."""
        return asdict(self)


def check_provenance(record: Any) -> Provenance:
    """A run's provenance record (``run.provenance``), checked key by key, as a :class:`Provenance`.

    The record holds ``training`` (a list of ``{name, location, kind, weight, tokens?, streamed?}``),
    ``validation`` (``{source, location, documents, bytes, fingerprint, selection}``), ``tokenizer``
    (``{origin, vocab_size, fingerprint, name?, sample_documents?, sample_bytes?, sample_fingerprint?,
    trained_on?}``), ``skipped_documents`` (``{training: {empty, whitespace, one_token}, validation: {...}}``)
    and, optionally, ``held_out_training_documents``. ``location`` may be None for the embedded corpus and an
    in-memory dataset, and for the validation set. A missing or unknown key is a
    ``ValueError``, a value of the wrong type a ``TypeError``, a wrong value a ``ValueError``, each naming the
    key (``provenance['training'][1]['weight']``). A :class:`Provenance` passes through as it is.

    >>> check_provenance({"training": []})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: provenance has no 'validation', 'tokenizer', 'skipped_documents'; the record needs [...]
    """
    if isinstance(record, Provenance):
        return record
    top = _keys(record, "provenance", *_KEYS["provenance"])
    sources = top["training"]
    if not isinstance(sources, (list, tuple)):
        raise TypeError(f"provenance['training'] must be a list of sources, got {type(sources).__name__}")
    if not sources:
        raise ValueError("provenance['training'] is empty; a run trains on at least one source")
    training = []
    for i, entry in enumerate(sources):
        where = f"provenance['training'][{i}]"
        training.append(TrainingSource(**_keys(entry, where, *_KEYS["training source"]), where=where))
    validation = ValidationSet(**_keys(top["validation"], "provenance['validation']", *_KEYS["validation"]),
                               where="provenance['validation']")  # fmt: skip
    tokenizer = TokenizerOrigin(**_keys(top["tokenizer"], "provenance['tokenizer']", *_KEYS["tokenizer"]),
                                where="provenance['tokenizer']")  # fmt: skip
    skipped = _skipped(top["skipped_documents"], "provenance['skipped_documents']")
    return Provenance(tuple(training), validation, tokenizer, skipped, top.get("held_out_training_documents"),
                      top.get("contaminated_training_documents"))  # fmt: skip


def resolve_provenance(provenance: Any = None, dataset_name: Any = None) -> Provenance:
    """What a writer was given: a run's record (checked), or only a dataset's name (:meth:`Provenance.named`).

    >>> resolve_provenance(dataset_name="Salesforce/wikitext").validation_id
    'Salesforce/wikitext'
    """
    if provenance is not None and dataset_name is not None:
        raise ValueError("pass provenance (a run's record) or dataset_name (only a name), not both: the card names "
                         "the data once")  # fmt: skip
    return check_provenance(provenance) if provenance is not None else Provenance.named(dataset_name)
