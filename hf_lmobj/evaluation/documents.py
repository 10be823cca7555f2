"""The evaluation documents of a text dataset, each with its domain: what the score recipe scores.

Evaluation documents (:func:`score_documents`). ``split="validation"`` is the held-out text ``recipes/pretrain.py``
validates on with the same data arguments (:func:`hf_lmobj.data.run_sources.open_sources`): the dataset's
validation split, else its documents held out by content hash; each document's domain is its row's ``domain``
column, else its file's name (a local folder of several files), else the top-level package of an embedded-corpus
file (``json/decoder.py`` -> ``json``; a single-file module -> ``(top level)``), else the dataset's name. Another
split is read as the dataset has it (:func:`hf_lmobj.data.load_text.load_text`), the domain from
``domain_column`` by the same rules. Empty and whitespace-only texts have nothing to predict: they are left out
and counted by reason. Every domain is checked as a tag path (:mod:`hf_lmobj.metrics.slices`) before anything is
scored.

Example:
    >>> stdlib_package("json/decoder.py"), stdlib_package("os.py")
    ('json', '(top level)')
    >>> EvalDocuments(("a b", "c"), ("code", "wiki")).skipped
    {}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hf_lmobj.corpus import load_stdlib_corpus
from hf_lmobj.data.load_text import domain_of_file, load_text
from hf_lmobj.data.prepare import DataArguments
from hf_lmobj.data.run_sources import EMBEDDED_NAME, open_sources
from hf_lmobj.held_out import text_problem
from hf_lmobj.metrics.slices import DocumentSums

#: The domain of a single-file module of the embedded corpus (``os.py``).
TOP_LEVEL = "(top level)"
#: Why a text is left out unscored (``hf_lmobj.held_out.text_problem``'s reasons).
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
    """The split's non-empty texts with their domains, the first ``max_texts`` of them (see the module docstring).

    ``args``: the score arguments (``recipes/score.py``'s ``EvalArguments``, or any object with the same fields):
    ``split``, ``dataset_name``, ``dataset_config``, ``text_column``, ``domain_column``, ``validation_fraction``,
    ``max_documents``, ``max_texts``.
    """
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
