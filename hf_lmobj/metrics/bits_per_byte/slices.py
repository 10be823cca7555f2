# Generated from hf_lmobj/metrics/slices.py by hf_lmobj.metrics.export_space: do not edit here.
# Edit the package file, then run `python -c "import hf_lmobj.metrics as m; m.sync_space_copies()"`.
"""Figures per domain and per tag level, micro and macro, from per-document sums.

Contract. A :class:`DocumentSums` table holds, per evaluated document, its summed negative
log-likelihood ``nll`` (nats), its scored ``tokens``, its UTF-8 ``bytes``, its lm-eval ``words`` (0 for
every document when words were not counted), a unique ``doc_id`` and a ``domain``: a tag path such as
``code/python/email`` whose ``/`` separates levels. Every figure is computed exactly from these sums
(``math.fsum`` over the documents, :func:`.sums.nll_per_unit`), so a table merged from ranks
(:func:`merge`) gives the very figures of one process.

Figures (:func:`figures`, per node in :func:`domain_figures`): ``perplexity = exp(sum nll / sum
tokens)``, ``bits_per_byte = sum nll / sum bytes / ln 2``, ``byte_perplexity = exp(sum nll / sum
bytes)``, ``word_perplexity = exp(sum nll / sum words)`` (only when words were counted).

Micro and macro (:func:`domain_figures`). A node is a domain and, with ``levels``, every prefix of
one (``code``, ``code/python``, ``code/python/email``). A node's micro figure (key
``<figure>/<node>``) is sum over sum over all of its documents. A node with sub-domains also gets a
macro figure (``<figure>/<node>/macro``): the unweighted mean over its direct children of their
micro figures. The overall ``<figure>/micro`` is sum over sum over every document;
``<figure>/macro`` is the unweighted mean over the top-level domains (first tag) of their micro
figures, with or without ``levels``.

What a macro figure averages: the per-unit log-loss, never the perplexity itself. ``bits_per_byte``
averages bits per byte; ``perplexity`` is ``exp`` of the mean over children of nats per token (so the
geometric mean of their perplexities); ``byte_perplexity`` and ``word_perplexity`` likewise from nats
per byte / per word. This is Levanter's ``TaggedEvaluator`` (macro loss = mean of the per-set mean
per-token losses, macro bpb = mean of per-set bpb), not an arithmetic mean of the per-domain
perplexities (the other reading of a macro perplexity, as in a plain average of Paloma's per-domain
table): a mean of log-losses keeps ``byte_perplexity =
2 ** bits_per_byte`` true for macro figures as for micro ones, and one badly fitted domain does not
outweigh all the others by its exponential. For ``bits_per_byte`` the two conventions coincide.

Reserved names (:mod:`.domain_tags`: what a tag path may be): no tag may be ``micro`` or ``macro``, or end with
``_ci_low`` / ``_ci_high`` (those name figures and interval bounds in the same flat keys), and a tag that has
sub-domains holds no documents of its own (a macro over its children would leave those out).

Standard library and the siblings :mod:`.sums` and :mod:`.domain_tags` only: this file can ship in a Space folder.

Example (bits per byte 2 on ``code/py``, 1 on ``code/c`` and on ``wiki``; ``code/py`` has half the bytes of ``code``):
    >>> table = DocumentSums(nll=[4 * LN2, 2 * LN2, 3 * LN2], tokens=[2, 2, 3], bytes=[2, 2, 3],
    ...                      words=[0, 0, 0], doc_id=[0, 1, 2], domain=["code/py", "code/c", "wiki"])
    >>> out = domain_figures(table)
    >>> [(key[14:], round(value, 4)) for key, value in out.items() if key.startswith("bits_per_byte")]
    [('code', 1.5), ('code/macro', 1.5), ('code/c', 1.0), ('code/py', 2.0), ('wiki', 1.0), ('micro', 1.2857), ('macro', 1.25)]
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from .domain_tags import _check_tag_path, _check_tree, _prefixes
from .sums import INT64_MAX, _as_list, _check_counts, _check_nll_sums, _is_bool, exp_or_inf, nll_per_unit

LN2 = math.log(2)
#: The figures, in the order of the keys.
_FIGURES = ("perplexity", "bits_per_byte", "byte_perplexity", "word_perplexity")


def _check_doc_ids(values: Any) -> tuple:
    """Unique document ids, all strings (non-empty) or all ints (bools refused)."""
    out = []
    for i, value in enumerate(_as_list(values, "doc_id")):
        if isinstance(value, str):
            if not value:
                raise ValueError(f"doc_id[{i}] is an empty string; give every document an id")
            value = str(value)
        elif _is_bool(value) or not isinstance(value, numbers.Integral):
            raise TypeError(f"doc_id[{i}] must be a string or an int, got {value!r}")
        else:
            value = int(value)
        out.append(value)
    if out and len({type(value) for value in out}) > 1:
        raise TypeError("doc_id mixes strings and ints; use one kind for every document (they are sorted together)")
    seen: set = set()
    for i, value in enumerate(out):
        if value in seen:
            raise ValueError(
                f"doc_id[{i}] is {value!r}, already given to another document; each document is counted once "
                "(drop the duplicates a distributed sampler pads with before merging)"
            )
        seen.add(value)
    return tuple(out)


def _check_int64(counts: Sequence[int], name: str) -> None:
    for i, count in enumerate(counts):
        if count > INT64_MAX:
            raise ValueError(f"{name}[{i}] is {count}, beyond {INT64_MAX}; split the document")


@dataclass(frozen=True)
class DocumentSums:
    """Per-document sums: ``nll`` (nats), ``tokens``, ``bytes``, ``words``, ``doc_id`` and ``domain``.

    Checked on construction, every entry: ``nll`` finite reals ``>= 0``; ``tokens`` and ``bytes``
    whole numbers ``>= 1`` (a document that scored nothing has no figure); ``words`` whole numbers,
    either all 0 (not counted) or all ``>= 1``; ``doc_id`` unique, all strings or all ints;
    ``domain`` tag paths (see the module's reserved names); the six of equal length, at least one
    document. ``TypeError`` for a value of the wrong kind, ``ValueError`` for a bad value. Stored as
    tuples (an equal table compares equal).

    Example:
        >>> DocumentSums(nll=[1.0], tokens=[0], bytes=[3], words=[0], doc_id=["a"], domain=["wiki"])
        Traceback (most recent call last):
        ...
        ValueError: tokens[0] is 0; it must be >= 1; a document that scored no token has no figure: leave it out and report it
    """

    nll: Sequence[float]
    tokens: Sequence[int]
    bytes: Sequence[int]
    words: Sequence[int]
    doc_id: Sequence[Any]
    domain: Sequence[str]

    def __post_init__(self) -> None:
        nll = _check_nll_sums(self.nll, "nll")
        for i, value in enumerate(nll):
            if math.isinf(value):
                raise ValueError(
                    f"nll[{i}] is inf (a document the model cannot produce); every figure and interval would be "
                    "inf: score it with a model that gives it a non-zero probability, or leave it out and report it"
                )
        tokens = _check_counts(self.tokens, "tokens", 1, "a document that scored no token has no figure: "
                               "leave it out and report it")  # fmt: skip
        nbytes = _check_counts(self.bytes, "bytes", 1, "an empty text has no bits per byte: leave it out")
        words = _check_counts(self.words, "words", 0)
        doc_id = _check_doc_ids(self.doc_id)
        domain = tuple(
            _check_tag_path(value, f"domain[{i}]") for i, value in enumerate(_as_list(self.domain, "domain"))
        )
        lengths = {"nll": len(nll), "tokens": len(tokens), "bytes": len(nbytes), "words": len(words),
                   "doc_id": len(doc_id), "domain": len(domain)}  # fmt: skip
        if len(set(lengths.values())) > 1:
            raise ValueError(f"the columns must have one entry per document each, got lengths {lengths}")
        if not nll:
            raise ValueError("the table is empty; pass at least one scored document")
        for name, counts in (("tokens", tokens), ("bytes", nbytes), ("words", words)):
            _check_int64(counts, name)
        counted = [count > 0 for count in words]
        if any(counted) and not all(counted):
            first = counted.index(not counted[0])
            raise ValueError(
                f"words: document {doc_id[0]!r} has {words[0]} and document {doc_id[first]!r} has {words[first]}; "
                "count words for every document (count_words) or for none (all 0)"
            )
        _check_tree(domain)
        for name, value in (("nll", nll), ("tokens", tokens), ("bytes", nbytes), ("words", words),
                            ("doc_id", doc_id), ("domain", domain)):  # fmt: skip
            object.__setattr__(self, name, tuple(value))

    def __len__(self) -> int:
        return len(self.nll)

    @property
    def has_words(self) -> bool:
        """Whether words were counted (then every document has ``words >= 1``)."""
        return self.words[0] > 0

    @classmethod
    def from_scores(cls, scores: Sequence[Any], doc_id: Sequence[Any], domain: Sequence[str]) -> DocumentSums:
        """A table from :class:`.scoring.TextScore` s (``nll``, ``num_tokens``, ``num_bytes``, ``num_words``).

        Example:
            >>> from collections import namedtuple
            >>> Score = namedtuple("Score", "nll num_tokens num_bytes num_words")
            >>> DocumentSums.from_scores([Score(2.0, 3, 5, 0)], doc_id=[7], domain=["wiki"]).bytes
            (5,)
        """
        if isinstance(scores, (str, bytes)) or not hasattr(scores, "__len__"):
            raise TypeError(f"scores must be a list of TextScore, got {type(scores).__name__}")
        for i, score in enumerate(scores):
            if not all(hasattr(score, name) for name in ("nll", "num_tokens", "num_bytes", "num_words")):
                raise TypeError(
                    f"scores[{i}] must be a TextScore (nll, num_tokens, num_bytes, num_words), got {score!r}"
                )
        return cls(
            nll=[s.nll for s in scores],
            tokens=[s.num_tokens for s in scores],
            bytes=[s.num_bytes for s in scores],
            words=[s.num_words for s in scores],
            doc_id=doc_id,
            domain=domain,
        )


def _check_table(sums: Any, name: str = "sums") -> DocumentSums:
    if not isinstance(sums, DocumentSums):
        raise TypeError(f"{name} must be a DocumentSums table, got {type(sums).__name__}")
    return sums


def _rates(nll: Sequence[float], tokens: Sequence[int], nbytes: Sequence[int], words: Sequence[int] | None) -> dict:
    """Per-unit log-losses, exactly: nats per token, bits per byte, nats per byte, nats per word.

    Bit for bit :func:`.sums.nll_per_unit` (one ``fsum`` shared by the four; its exact fallback where
    a total overflows a float).
    """
    try:
        total: float | None = math.fsum(nll)
    except OverflowError:
        total = None

    def per(counts: Sequence[int], scale: float = 1.0) -> float:
        if total is not None:
            try:
                return total / scale / sum(counts)
            except OverflowError:
                pass
        return nll_per_unit(nll, counts, scale)

    rates = {"perplexity": per(tokens), "bits_per_byte": per(nbytes, LN2), "byte_perplexity": per(nbytes)}
    if words is not None:
        rates["word_perplexity"] = per(words)
    return rates


def rate_to_figure(name: str, rate: float) -> float:
    """A figure from its per-unit log-loss: ``exp`` for perplexities, bits per byte as it is.

    Example:
        >>> rate_to_figure("perplexity", math.log(4)), rate_to_figure("bits_per_byte", 0.5)
        (4.0, 0.5)
    """
    return rate if name == "bits_per_byte" else exp_or_inf(rate)


def figures(sums: DocumentSums) -> dict[str, float]:
    """The corpus figures of the whole table, exactly from its sums (``word_perplexity`` only with words).

    Example:
        >>> table = DocumentSums(nll=[2 * LN2], tokens=[2], bytes=[4], words=[1], doc_id=[0], domain=["x"])
        >>> {name: round(value, 4) for name, value in figures(table).items()}
        {'perplexity': 2.0, 'bits_per_byte': 0.5, 'byte_perplexity': 1.4142, 'word_perplexity': 4.0}
    """
    sums = _check_table(sums)
    rates = _rates(sums.nll, sums.tokens, sums.bytes, sums.words if sums.has_words else None)
    return {name: rate_to_figure(name, rate) for name, rate in rates.items()}


@dataclass(frozen=True)
class DomainTree:
    """The nodes of a table's domains: their documents, children and the top level (sorted, deterministic).

    ``leaves``: the distinct domains; ``nodes``: the keyed nodes (every prefix with ``levels``, else
    the leaves); ``members[node]``: the leaves under a node; ``parents``: the nodes with sub-domains
    (empty without ``levels``) and their direct children; ``top``: the top-level tags.
    """

    leaves: tuple[str, ...]
    nodes: tuple[str, ...]
    members: dict[str, tuple[str, ...]]
    parents: dict[str, tuple[str, ...]]
    top: tuple[str, ...]


def domain_tree(domains: Iterable[str], levels: bool = True) -> DomainTree:
    """The :class:`DomainTree` of checked domains.

    Example:
        >>> tree = domain_tree(["code/py", "code/c", "wiki"])
        >>> tree.nodes, tree.parents, tree.top
        (('code', 'code/c', 'code/py', 'wiki'), {'code': ('code/c', 'code/py')}, ('code', 'wiki'))
    """
    leaves = tuple(sorted(set(domains)))
    everything = sorted({prefix for leaf in leaves for prefix in _prefixes(leaf)})
    members: dict[str, list[str]] = {node: [] for node in everything}
    for leaf in leaves:  # sorted, so each node's members are too
        for prefix in _prefixes(leaf):
            members[prefix].append(leaf)
    children: dict[str, list[str]] = {}
    for node in everything:
        if "/" in node:
            children.setdefault(node.rsplit("/", 1)[0], []).append(node)
    top = tuple(node for node in everything if "/" not in node)
    if levels:
        kept = {node: tuple(leaves_of) for node, leaves_of in members.items()}
        return DomainTree(leaves, tuple(everything), kept, {k: tuple(v) for k, v in children.items()}, top)
    kept = {**{leaf: (leaf,) for leaf in leaves}, **{t: tuple(members[t]) for t in top}}
    return DomainTree(leaves, leaves, kept, {}, top)


def _check_levels(levels: Any) -> bool:
    if not _is_bool(levels):
        raise TypeError(f"levels must be True or False, got {levels!r}")
    return bool(levels)


def domain_figures(sums: DocumentSums, levels: bool = True) -> dict[str, float]:
    """Every figure per domain (and per tag level), micro and macro, in the score recipe's flat keys.

    Keys, for each figure ``f`` of :data:`_FIGURES` (``word_perplexity`` only when words were
    counted), in this order: ``f/<node>`` (micro: sum over sum over the node's documents) for every
    node in sorted order, followed right after a parent node by ``f/<node>/macro`` (mean over its
    direct children's micro log-losses; only with ``levels``); then ``f/micro`` (every document) and
    ``f/macro`` (mean over the top-level domains' micro log-losses). Without ``levels`` the nodes are
    the domains as given (no prefix keys, no per-parent macro); ``f/macro`` is still over the top
    level. See the module docstring for what a macro averages.

    Example:
        >>> table = DocumentSums(nll=[2 * LN2, 6 * LN2], tokens=[2, 2], bytes=[2, 2], words=[0, 0],
        ...                      doc_id=["a", "b"], domain=["x", "y"])
        >>> {k: round(v, 9) for k, v in domain_figures(table).items() if k.startswith("perplexity")}
        {'perplexity/x': 2.0, 'perplexity/y': 8.0, 'perplexity/micro': 4.0, 'perplexity/macro': 4.0}
    """
    sums, levels = _check_table(sums), _check_levels(levels)
    tree = domain_tree(sums.domain, levels)
    by_leaf: dict[str, list[int]] = {leaf: [] for leaf in tree.leaves}
    for i, domain in enumerate(sums.domain):
        by_leaf[domain].append(i)
    words = sums.words if sums.has_words else None

    def node_rates(leaves: Sequence[str]) -> dict[str, float]:
        rows = sorted(i for leaf in leaves for i in by_leaf[leaf])
        pick = lambda column: [column[i] for i in rows]
        return _rates(pick(sums.nll), pick(sums.tokens), pick(sums.bytes), None if words is None else pick(words))

    micro = {node: node_rates(tree.members[node]) for node in sorted({*tree.nodes, *tree.top})}
    overall = _rates(sums.nll, sums.tokens, sums.bytes, words)
    out: dict[str, float] = {}
    for name in overall:
        for node in tree.nodes:
            out[f"{name}/{node}"] = rate_to_figure(name, micro[node][name])
            if node in tree.parents:
                mean = math.fsum(micro[child][name] for child in tree.parents[node]) / len(tree.parents[node])
                out[f"{name}/{node}/macro"] = rate_to_figure(name, mean)
        out[f"{name}/micro"] = rate_to_figure(name, overall[name])
        mean = math.fsum(micro[top][name] for top in tree.top) / len(tree.top)
        out[f"{name}/macro"] = rate_to_figure(name, mean)
    return out


def merge(tables: Sequence[DocumentSums]) -> DocumentSums:
    """One table from per-rank tables, ordered by ``doc_id`` (a document on two ranks is refused by name).

    Example:
        >>> one = DocumentSums(nll=[1.0], tokens=[1], bytes=[1], words=[0], doc_id=[2], domain=["x"])
        >>> two = DocumentSums(nll=[3.0], tokens=[2], bytes=[4], words=[0], doc_id=[1], domain=["y"])
        >>> merge([one, two]).doc_id
        (1, 2)
    """
    if isinstance(tables, DocumentSums) or not isinstance(tables, Sequence) or isinstance(tables, (str, bytes)):
        raise TypeError(f"tables must be a list of DocumentSums (one per rank), got {type(tables).__name__}")
    if not tables:
        raise ValueError("tables is empty; pass one DocumentSums per rank")
    for i, table in enumerate(tables):
        _check_table(table, f"tables[{i}]")
    rows = [(table, i) for table in tables for i in range(len(table))]
    kinds = {type(table.doc_id[0]) for table in tables}
    if len(kinds) > 1:
        raise TypeError("the tables' doc_id mix strings and ints; use one kind of id on every rank")
    rows.sort(key=lambda row: row[0].doc_id[row[1]])
    column = lambda name: [getattr(table, name)[i] for table, i in rows]
    return DocumentSums(**{name: column(name) for name in ("nll", "tokens", "bytes", "words", "doc_id", "domain")})
