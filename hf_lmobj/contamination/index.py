"""Contamination: which evaluation documents a run's training data holds, by shared n-grams.

:meth:`ContaminationIndex.build` indexes the n-grams of the evaluation documents (with their domains);
:meth:`ContaminationIndex.scan` reads training sources (a token store, a text stream, an in-memory
``Dataset`` of text, a tokenized :class:`~hf_lmobj.data.DatasetSource`, a list of texts, or several of them:
a mixture; each kind read by :mod:`hf_lmobj.contamination.sources`) and returns a
:class:`~hf_lmobj.contamination.report.ContaminationReport`: per evaluation document the share of its
n-grams seen in training, the contaminated documents, the rate overall and per domain.
:meth:`ContaminationIndex.contaminated` is the pipeline's filter: a training document with any evaluation n-gram.

**The unit.** ``unit="tokens"`` (default): n-grams of the run's token ids, the evaluation texts encoded as the
pipeline encodes training text (:func:`hf_lmobj.plain_text.encode_plain`: no BOS / EOS, special-token strings
kept as text). A token store holds ids, not text, so this unit scans it as it lies, with neither decoding nor
tokenizing (~28M tokens per CPU-second, ``benchmarks/contamination.md``, where running a tokenizer alone gives
~2M); a text source is encoded with the index's tokenizer (a store's or stream's must be the same: checked).
It does **not** normalise: a copy with other case or spacing gives other ids (an embedded copy also loses
the first n-gram or two, where the tokenizer merges across its edge). ``unit="words"``: n-grams of
normalised words, as Paloma and lm-evaluation-harness did: lower-cased, runs of word characters
(``\\w+``: punctuation and whitespace dropped), so a copy with changed case, spacing or punctuation is
found; token ids are decoded first (slower), and a word that no evaluation document holds is one "unknown"
code that matches nothing.

**n = 13** (both units), as GPT-3, lm-evaluation-harness and Paloma's decontamination: 13 consecutive
units rarely recur by chance outside shared boilerplate, while a copy of a few lines still yields dozens.
A document shorter than n units has no n-gram: it is excluded from the rates and counted apart
(``short_documents``).

**Exactness.** Hits are exact (:mod:`hf_lmobj.contamination.ngrams`): a vectorised 64-bit polynomial
hash finds a candidate entry, and the n ids are then compared one by one, so the false-positive rate of the
index is **0** (not merely the ``n_index * n_scanned / 2**64`` expected collisions of a hash-only index, about
1.1e-6 for 1e6 evaluation n-grams against 2e7 training windows): a reported hit is always a real shared n-gram.
N-grams never cross a training document's boundary: a copy is a copy within one document.

**The threshold.** An evaluation document is contaminated when at least ``threshold`` (default 0.5) of its
n-gram positions are seen in training: a copy of half the document or more. Any-hit rules (GPT-3) flag
documents that share one licence header or idiom with the corpus (common in code); 0.5 sits between
Llama 2's "dirty" (80% of tokens) and any hit, and a planted copy scores ~1.0. ``fractions`` keep every
value, so any other threshold can be read from the report.

Example:
    >>> index = ContaminationIndex.build(
    ...     ["the quick brown fox jumps over the lazy dog", "a b"], ["web", "web"], n=3, unit="words")
    >>> report = index.scan(["Intro. The QUICK brown fox   jumps over the lazy dog!", "nothing here at all"])
    >>> report.fractions.tolist()[0], report.short_documents, report.rate, report.as_metrics()["contamination/web/rate"]
    (1.0, 1, 1.0, 1.0)
    >>> index.contaminated("some fox jumps over the lazy cat"), index.contaminated("a b c d")
    (True, False)

Why: a very low loss means something only against evaluation text the model did not train on.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np
from transformers import PreTrainedTokenizerBase

from hf_lmobj.checks import check_length, check_name, check_number, check_unique_names, id_sequence
from hf_lmobj.contamination.ngrams import CHUNK_TOKENS, NgramTable
from hf_lmobj.contamination.report import ContaminationReport, SourceScan
from hf_lmobj.contamination.sources import _SOURCE_KINDS, SourceReader
from hf_lmobj.data import TextStream
from hf_lmobj.plain_text import check_texts, encode_plain
from hf_lmobj.store import TokenStore
from hf_lmobj.store.tokenizer_fingerprint import tokenizer_fingerprint

UNITS = ("tokens", "words")
DEFAULT_N = 13
DEFAULT_THRESHOLD = 0.5
_WORD = re.compile(r"\w+")


def normalized_words(text: str) -> list[str]:
    """The words of ``text`` as the word unit sees them: lower-cased runs of word characters.

    >>> normalized_words("Don't  PANIC,\\nmostly_harmless!")
    ['don', 't', 'panic', 'mostly_harmless']
    """
    return _WORD.findall(text.lower())


class ContaminationIndex:
    """The n-grams of the evaluation documents; build with :meth:`build` (texts) or :meth:`from_token_ids`.

    Attributes: ``n``, ``unit``, ``threshold``, ``tokenizer`` (None for a word index built without one),
    ``domains`` (one per document, or None), ``num_documents``, ``table`` (the
    :class:`~hf_lmobj.contamination.ngrams.NgramTable`).
    """

    def __init__(self, table: NgramTable, unit: str, threshold: float, tokenizer: Any, domains: Any, words: Any):
        self.table, self.unit, self.threshold, self.tokenizer = table, unit, threshold, tokenizer
        self.n, self.num_documents = table.n, table.num_documents
        self.domains: tuple[str, ...] | None = domains
        self._words: dict[str, int] | None = words  # word -> code (1, 2, ...) for the word unit
        self._tokenizer_id = None if tokenizer is None else tokenizer_fingerprint(tokenizer)

    @classmethod
    def build(
        cls,
        texts: Sequence[str],
        domains: Sequence[str] | None,
        tokenizer: PreTrainedTokenizerBase | None = None,
        *,
        n: int = DEFAULT_N,
        unit: str = "tokens",
        threshold: float = DEFAULT_THRESHOLD,
    ) -> ContaminationIndex:
        """Index the evaluation ``texts`` (``domains``: one name per text, or None) in ``unit`` n-grams.

        ``tokenizer`` is the run's (required for ``unit="tokens"``; for ``"words"`` only to scan token ids).

        Raises:
            TypeError: ``texts`` not a list of strings, a domain not a string, ``tokenizer`` not a tokenizer,
                ``n`` not an int, ``threshold`` not a number.
            ValueError: no text, ``domains`` of another length or holding a blank name, ``n < 1``, ``unit`` not
                ``"tokens"`` / ``"words"``, ``threshold`` outside ``(0, 1]``, no text with ``n`` units.
        """
        texts = check_texts(texts, "texts")
        unit = _check_unit(unit)
        tokenizer = _check_tokenizer(tokenizer, required=unit == "tokens")
        if unit == "tokens":
            return cls.from_token_ids(encode_plain(tokenizer, texts), domains, tokenizer, n=n, threshold=threshold)
        vocabulary: dict[str, int] = {}
        codes = [[vocabulary.setdefault(w, len(vocabulary) + 1) for w in normalized_words(t)] for t in texts]
        return cls._make(codes, domains, tokenizer, n, "words", threshold, vocabulary)

    @classmethod
    def from_token_ids(
        cls,
        documents: Sequence[Sequence[int]],
        domains: Sequence[str] | None,
        tokenizer: PreTrainedTokenizerBase | None = None,
        *,
        n: int = DEFAULT_N,
        threshold: float = DEFAULT_THRESHOLD,
    ) -> ContaminationIndex:
        """Index evaluation documents already tokenized (``unit="tokens"``); ids are checked (ints >= 0, below
        ``len(tokenizer)`` when given)."""
        if isinstance(documents, (str, bytes)) or not isinstance(documents, Sequence):
            raise TypeError(f"documents must be a list of token-id sequences, got {type(documents).__name__}")
        tokenizer = _check_tokenizer(tokenizer, required=False)
        ids = [id_sequence(doc, "token ids", f"evaluation document {i}") for i, doc in enumerate(documents)]
        limit = len(tokenizer) if tokenizer is not None else np.iinfo(np.int64).max
        for i, doc in enumerate(ids):
            if doc.size and (doc.min() < 0 or doc.max() >= limit):
                raise ValueError(
                    f"evaluation document {i}: token ids must lie in [0, {limit}), got [{doc.min()}, {doc.max()}]"
                )
        return cls._make(ids, domains, tokenizer, n, "tokens", threshold, None)

    @classmethod
    def _make(cls, docs, domains, tokenizer, n, unit, threshold, words) -> ContaminationIndex:
        n = check_length(n, "n", 1, "units per n-gram")
        threshold = check_number(
            threshold, "threshold", 0.0, 1.0, low_open=True, hint="the share of a document's n-grams"
        )
        if not docs:
            raise ValueError("the evaluation set is empty: give at least one evaluation text")
        domains = _check_domains(domains, len(docs))
        lengths = np.fromiter((len(doc) for doc in docs), np.int64, len(docs))
        if int(lengths.max()) < n:
            raise ValueError(
                f"none of the {len(docs)} evaluation documents has n={n} {unit} (the longest has {int(lengths.max())}); "
                "lower n, or evaluate on longer documents"
            )
        offsets = np.concatenate([[0], np.cumsum(lengths)])
        flat = np.concatenate([np.asarray(doc, dtype=np.int64) for doc in docs])
        return cls(NgramTable.build(flat, offsets, n), unit, threshold, tokenizer, domains, words)

    # ------------------------------------------------------------------------------------------ scanning
    def scan(
        self,
        *sources: Any,
        names: Sequence[str] | None = None,
        text_column: str = "text",
        batch_size: int = 1000,
        chunk_tokens: int = CHUNK_TOKENS,
    ) -> ContaminationReport:
        """Scan training ``sources`` (one, or several: a mixture) and report per evaluation document.

        Each source is a :class:`~hf_lmobj.store.TokenStore`, a :class:`~hf_lmobj.data.TextStream`, a
        :class:`~hf_lmobj.data.DatasetSource` (token ids), a ``datasets.Dataset`` / ``IterableDataset`` of text
        (``text_column``) or a list of texts. A text ``Dataset`` is read whole (pass the training
        side); a :class:`~hf_lmobj.data.TextStream` yields what it trains (its held-out texts left out). A token
        store is read ``chunk_tokens`` ids at a time (memory: the index plus one chunk); texts ``batch_size`` at a
        time. ``names`` (unique, one per source) name them in the report; default ``source 0``, ``source 1``...

        Raises:
            TypeError: a source of another type, a text that is not a string (the row named).
            ValueError: no source, ``names`` of another length or repeated, a token store or stream written
                with another tokenizer than the index's, a ``Dataset`` without ``text_column``.
        """
        if not sources:
            raise ValueError(f"scan needs at least one training source ({_SOURCE_KINDS})")
        names = [f"source {i}" for i in range(len(sources))] if names is None else check_unique_names(names, "names")
        if len(names) != len(sources):
            raise ValueError(f"names has {len(names)} entries for {len(sources)} sources; give one name per source")
        text_column = check_name(text_column, "text_column")
        batch_size = check_length(batch_size, "batch_size", 1, "documents per step")
        chunk_tokens = check_length(chunk_tokens, "chunk_tokens", 1, "ids per step of a token store")
        readers = [
            self._reader(source, name, text_column, batch_size, chunk_tokens) for source, name in zip(sources, names)
        ]
        seen = np.zeros(self.table.num_ngrams, bool)
        scans = tuple(self._run(kind, name, batches, seen) for (kind, batches), name in zip(readers, names))
        fractions = self.table.seen_fractions(seen)
        return ContaminationReport(self.n, self.unit, self.threshold, fractions, self.domains, scans)

    def _reader(self, source: Any, name: str, column: str, batch_size: int, chunk: int) -> tuple[str, Iterator]:
        """``(kind, batches)`` of one source (:class:`~hf_lmobj.contamination.sources.SourceReader`; batches as
        :meth:`_run` reads them); its tokenizer checked first."""
        where = f"source {name!r}"
        if isinstance(source, TokenStore):
            self._check_store_tokenizer(source, where)
        elif isinstance(source, TextStream):
            if self.unit == "tokens" and tokenizer_fingerprint(source.tokenizer) != self._require_tokenizer(where):
                raise ValueError(
                    f"{where}: the stream encodes with another tokenizer than the index's; build the index with the "
                    "stream's tokenizer"
                )
        reader = SourceReader(self.n, self.unit, self._units_of_texts, self._units_of_ids)
        return reader.batches(source, where, column, batch_size, chunk)

    def _run(self, kind: str, name: str, batches: Iterator, seen: np.ndarray) -> SourceScan:
        """Mark in ``seen`` the evaluation n-grams found in ``batches``; each batch is ``(ids, starts, windows,
        first_document, documents, units)``: ids back to back, where each document starts in them (the first may
        have started in an earlier batch), the windows to test, the index of the first document, and how many
        documents and units the batch adds to the counts."""
        documents = units = hit = 0
        last_hit = -1  # a document hit in two chunks of a store is counted once
        for ids, starts, windows, first_document, count, size in batches:
            positions, entries = self.table.hits(ids, starts[1:], windows)
            seen[entries] = True
            hit_docs = np.unique(np.searchsorted(starts, positions, side="right") - 1 + first_document)
            hit += int(hit_docs.size) - int(hit_docs.size > 0 and hit_docs[0] == last_hit)
            last_hit = int(hit_docs[-1]) if hit_docs.size else last_hit
            documents, units = documents + count, units + size
        return SourceScan(name, kind, documents, units, hit)

    def _units_of_texts(self, texts: list[str]) -> list[np.ndarray]:
        if self.unit == "tokens":
            self._require_tokenizer("text")
            return [np.asarray(ids, dtype=np.int64) for ids in encode_plain(self.tokenizer, texts)]
        get = self._words.get
        return [np.fromiter((get(w, 0) for w in normalized_words(t)), np.int64) for t in texts]

    def _units_of_ids(self, docs: list[np.ndarray]) -> list[np.ndarray]:
        if self.unit == "tokens":
            return [np.asarray(doc, dtype=np.int64) for doc in docs]
        self._require_tokenizer("a word index decodes token ids")
        return self._units_of_texts(self.tokenizer.batch_decode([d.tolist() for d in docs], skip_special_tokens=True))

    # ---------------------------------------------------------------------------------- filter, identity
    def contaminated(self, document: str | Sequence[int] | np.ndarray) -> bool:
        """True when the training ``document`` (its text, or its token ids) holds any evaluation n-gram.

        The pipeline's filter: drop such a document (Paloma drops a document on any hit). Deterministic.
        """
        if isinstance(document, str):
            (units,) = self._units_of_texts([document])
        else:
            ids = id_sequence(document, "document")
            if ids.size and ids.min() < 0:
                raise ValueError(f"document: token ids must be >= 0, got {int(ids.min())}")
            (units,) = self._units_of_ids([ids])
        positions, _ = self.table.hits(units, np.zeros(0, np.int64), max(units.size - self.n + 1, 0))
        return bool(positions.size)

    def describe(self) -> dict[str, Any]:
        """What the index is, for a data fingerprint: unit, n, threshold, counts, tokenizer and a content hash."""
        digest = hashlib.blake2b(digest_size=8)
        head = [self.unit, self.n, self.threshold, self._tokenizer_id, list(self._words or ())]
        digest.update(json.dumps(head).encode())
        digest.update(self.table.ids.tobytes())
        positions = np.bincount(self.table.position_doc, minlength=self.num_documents)  # (D,) n-grams per document
        digest.update(positions.tobytes())
        return {
            "unit": self.unit,
            "n": self.n,
            "threshold": self.threshold,
            "documents": self.num_documents,
            "short_documents": int((positions == 0).sum()),
            "ngrams": self.table.num_ngrams,
            "tokenizer": self._tokenizer_id,
            "fingerprint": digest.hexdigest(),
        }

    def _require_tokenizer(self, what: str) -> str:
        """The tokenizer's fingerprint; an index without a tokenizer is refused (it can neither encode nor decode)."""
        if self._tokenizer_id is None:
            raise ValueError(f"{what}: this index has no tokenizer to encode or decode with; build it with the run's")
        return self._tokenizer_id

    def _check_store_tokenizer(self, store: TokenStore, where: str) -> None:
        if self.tokenizer is not None:
            store.check_tokenizer(self.tokenizer, where)
        elif self.unit == "words":
            self._require_tokenizer(f"{where}: a word index decodes a token store")


def _check_unit(unit: Any) -> str:
    if unit not in UNITS:
        raise ValueError(f"unit must be one of {UNITS}, got {unit!r}")
    return unit


def _check_tokenizer(tokenizer: Any, required: bool) -> PreTrainedTokenizerBase | None:
    if tokenizer is None and not required:
        return None
    if not isinstance(tokenizer, PreTrainedTokenizerBase):
        need = "the run's tokenizer (unit='tokens' encodes the texts with it)" if required else "a tokenizer or None"
        raise TypeError(f"tokenizer must be {need}, got {type(tokenizer).__name__}")
    return tokenizer


def _check_domains(domains: Any, count: int) -> tuple[str, ...] | None:
    if domains is None:
        return None
    if isinstance(domains, (str, bytes)) or not isinstance(domains, Sequence):
        raise TypeError(f"domains must be a list with one domain name per text (or None), got {type(domains).__name__}")
    if len(domains) != count:
        raise ValueError(f"domains has {len(domains)} entries for {count} evaluation texts; give one domain per text")
    return tuple(check_name(domain, f"domains[{i}]") for i, domain in enumerate(domains))
