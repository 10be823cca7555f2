"""Contamination figures: the evaluation documents' token n-grams looked up in training data.

:func:`scan_sources` reads training data named by location (:mod:`.training_locations`) and gives the score
recipe's ``contamination/...`` keys; :func:`training_contamination` scans a run's own training documents (token
ids) and gives the pre-training recipe's numeric ``contamination/...`` figures. The unit, the threshold and the
index are :mod:`hf_lmobj.contamination.index`'s.

Example:
    >>> import datasets
    >>> from hf_lmobj.corpus import build_tokenizer
    >>> tokenizer = build_tokenizer(512)
    >>> text = "def add(a, b):\\n    return a + b\\n" * 8
    >>> training = datasets.Dataset.from_dict({"input_ids": [tokenizer(text)["input_ids"]]})
    >>> training_contamination([text], ["code"], tokenizer, training, n=13)["contamination/rate"]
    1.0
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from hf_lmobj.contamination.index import ContaminationIndex
from hf_lmobj.data.random_access import DatasetSource

from .training_locations import open_contamination_sources


def scan_sources(locations: list[str], text_column: str, texts: Sequence[str], domains: Sequence[str],
                 tokenizer: Any, tokenizer_name: str) -> dict[str, Any]:  # fmt: skip
    """``contamination/...`` keys: the evaluation documents' 13-grams looked up in every training source at
    ``locations`` (``tokenizer_name``: where ``tokenizer``, the scored model's, comes from)."""
    opened = open_contamination_sources(locations, text_column, tokenizer, tokenizer_name)
    index = ContaminationIndex.build(list(texts), list(domains), opened.tokenizer)
    report = index.scan(*opened.sources, names=list(opened.names), text_column=text_column)
    return {**report.as_metrics(), "contamination/tokenizer": opened.tokenizer_from}


def training_contamination(texts: Sequence[str], domains: Sequence[str] | None, tokenizer: Any, train_documents: Any,
                           n: int) -> dict[str, float]:  # fmt: skip
    """``contamination/rate`` (and per domain) of the validation ``texts`` against ``train_documents`` (a
    ``datasets.Dataset`` of ``input_ids`` rows, as a run's report sample): token ``n``-grams, a document contaminated at half of them seen
    (hf_lmobj.contamination.index); the numeric figures only."""
    index = ContaminationIndex.build(texts, domains, tokenizer, n=n)
    found = index.scan(DatasetSource(train_documents)).as_metrics()
    return {key: value for key, value in found.items() if isinstance(value, (int, float)) and value is not None}
