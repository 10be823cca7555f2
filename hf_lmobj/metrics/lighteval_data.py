"""Local text for corpus figures: ``<split>.jsonl`` folders of documents and each document's sums.

A folder holds ``<split>.jsonl`` (``split`` in :data:`SPLITS`), one JSON object per line with a non-empty
``"text"``: a document, scored whole. A document's :class:`TextSums` (NLL in nats, UTF-8 bytes, lm-eval's
words) add up to the corpus :data:`FIGURES` through the package's own ``*_from_sums`` functions.

Example:
    >>> import math
    >>> sums = [text_sums("a b", [-math.log(2), -math.log(4)]), text_sums("é", [-math.log(8)])]
    >>> [round(corpus_figure(name, sums), 6) for name in FIGURES]  # 6 bits over 5 bytes, 3 words
    [1.2, 2.297397, 4.0]
"""

from __future__ import annotations

import json
import math
import numbers
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from hf_lmobj.checks import check_name
from hf_lmobj.files import read_json_line, write_atomic
from hf_lmobj.metrics.sums import (
    bits_per_byte_from_sums,
    byte_perplexity_from_sums,
    count_words,
    total_nll,
    word_perplexity_from_sums,
)

SPLITS = ("test", "validation", "train")  # the split names datasets gives a local folder's files
FIGURES = ("bits_per_byte", "byte_perplexity", "word_perplexity")
_FROM_SUMS = {"bits_per_byte": bits_per_byte_from_sums, "byte_perplexity": byte_perplexity_from_sums}


def check_choice(value: Any, field: str, choices: Sequence[str]) -> str:
    """One of ``choices`` (strings), else a ``ValueError`` naming them."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{field} must be one of {list(choices)}, got {value!r}")
    return value


def _check_encodable(text: str, where: str) -> None:
    """Refuse a text UTF-8 cannot hold (a lone surrogate, e.g. half of an emoji cut from ``"\\ud83d\\ude00"``)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as error:
        raise ValueError(
            f"{where} holds {text[error.start : error.end]!r} at position {error.start}, a lone surrogate UTF-8 "
            "cannot encode; clean the text (e.g. text.encode('utf-8', 'replace').decode())"
        ) from None


def write_text_dataset(texts: Sequence[str], folder: str | os.PathLike, split: str = "test") -> Path:
    """Write ``texts`` to ``folder/<split>.jsonl`` (``{"text": ...}`` per line, UTF-8); return the file.

    Refuses an empty list, a text that is not a non-empty string or that UTF-8 cannot encode (a lone
    surrogate, named by index), and an existing file (never overwritten), all before writing; the file
    is written atomically, so it is either whole or absent.

    Example:
        >>> import tempfile
        >>> write_text_dataset(["def f():\\n    pass\\n"], tempfile.mkdtemp()).name
        'test.jsonl'
    """
    split = check_choice(split, "split", SPLITS)
    if isinstance(texts, str) or not isinstance(texts, Sequence):
        raise TypeError(f"texts must be a list of strings (wrap a single text in a list), got {type(texts).__name__}")
    if not texts:
        raise ValueError("texts is empty; pass at least one document")
    for i, text in enumerate(texts):
        if not isinstance(text, str) or not text:
            raise ValueError(f"texts[{i}] must be a non-empty string (a document to score), got {text!r}")
        _check_encodable(text, f"texts[{i}]")
    path = Path(folder) / f"{split}.jsonl"
    if path.exists():
        raise FileExistsError(f"{path} exists; write_text_dataset never overwrites: pass another folder or remove it")
    write_atomic(path, "".join(json.dumps({"text": text}, ensure_ascii=False) + "\n" for text in texts))
    return path


def document_text(line: Mapping[str, Any], text_column: str = "text", where: str = "a row") -> str:
    """The document of one data row: ``line[text_column]``, a non-empty string."""
    if not isinstance(line, Mapping):
        raise ValueError(f"{where} must be a JSON object with a {text_column!r} field, got {type(line).__name__}")
    if text_column not in line:
        raise ValueError(f"{where} has no {text_column!r} field (fields: {sorted(line)}); pass text_column=<field>")
    text = line[text_column]
    if not isinstance(text, str) or not text:
        raise ValueError(f"{where}: {text_column!r} must be a non-empty string (a document to score), got {text!r}")
    _check_encodable(text, f"{where}: {text_column!r}")
    return text


def check_text_dataset(data_path: str | os.PathLike, split: str = "test", text_column: str = "text") -> int:
    """Check the folder a task reads; return its number of documents.

    ``data_path`` must be a folder holding ``<split>.jsonl``, which must be the only file that
    ``datasets.load_dataset(data_path)`` puts in that split (``test-2.jsonl`` would join ``test``), hold
    at least one line, and every line must be a JSON object whose ``text_column`` is a non-empty string.
    ``FileNotFoundError`` for a missing folder or file, ``ValueError`` for the rest, naming the line.
    """
    split, text_column = check_choice(split, "split", SPLITS), check_name(text_column, "text_column")
    if not isinstance(data_path, (str, os.PathLike)):
        raise TypeError(f"data_path must be a path to a folder, got {type(data_path).__name__}")
    folder = Path(data_path)
    if not folder.exists():
        raise FileNotFoundError(f"data_path {str(folder)!r} does not exist; pass the folder that holds {split}.jsonl")
    if not folder.is_dir():
        hint = f"split={folder.stem!r}" if folder.stem in SPLITS else f"a file named <split>.jsonl, split in {SPLITS}"
        raise ValueError(f"data_path must be a folder, got the file {str(folder)!r}; pass its folder ({hint})")
    path = folder / f"{split}.jsonl"
    if not path.is_file():
        raise FileNotFoundError(f"{str(path)!r} not found: the folder needs a {split}.jsonl (write_text_dataset)")
    others = sorted(str(Path(f)) for f in _split_files(folder, split) if Path(f).resolve() != path.resolve())
    if others:
        raise ValueError(f"datasets would read {others} into the {split!r} split beside {path.name}; move them out")
    count = 0
    with open(path, "rb") as f:  # lines split on b"\n" only, as datasets' JSON lines reader does
        for number, raw in enumerate(f, start=1):
            where = f"{path}:{number}"
            line = read_json_line(raw, where, "one JSON object per line")
            document_text(line, text_column, where)
            count += 1
    if count == 0:
        raise ValueError(f"{str(path)!r} is empty: it holds no document to score")
    return count


def _split_files(folder: Path, split: str) -> list[str]:
    """The files ``datasets.load_dataset(folder)`` assigns to ``split`` (its own split inference)."""
    from datasets.data_files import DataFilesDict, get_data_patterns

    files = DataFilesDict.from_patterns(get_data_patterns(str(folder)), base_path=str(folder))
    return [str(f) for name, found in files.items() if str(name) == split for f in found]


class TextSums(NamedTuple):
    """One document's summed NLL (nats) and its lm-eval units: UTF-8 bytes and words."""

    nll: float
    num_bytes: int
    num_words: int


def text_sums(text: str, logprobs: Sequence[float]) -> TextSums:
    """The sums of one scored document: ``nll = -sum(logprobs)``, bytes and words of ``text``.

    ``logprobs`` are natural-log probabilities, each a real ``<= 0`` (``-inf`` allowed: an impossible
    token makes the NLL ``inf``, as does a sum beyond the largest float); at least one. ``text`` must
    be a non-empty string UTF-8 can encode.

    Example:
        >>> text_sums("a b", [-1e308, -1e308])
        TextSums(nll=inf, num_bytes=3, num_words=2)
        >>> text_sums("a", [0.5])
        Traceback (most recent call last):
        ...
        ValueError: logprobs[0] is 0.5; a log-probability must be <= 0 (natural log)
    """
    text = document_text({"text": text}, "text", "text_sums")
    if isinstance(logprobs, (str, bytes)) or not isinstance(logprobs, Sequence):
        raise TypeError(f"logprobs must be a list of log-probabilities, got {type(logprobs).__name__}")
    if not logprobs:
        raise ValueError("logprobs is empty: the document was not scored; pass its token log-probabilities")
    nll = []
    for i, value in enumerate(logprobs):
        if isinstance(value, bool) or not isinstance(value, numbers.Real):
            raise TypeError(f"logprobs[{i}] must be a real number (a log-probability), got {value!r}")
        if math.isnan(value) or value > 0:
            raise ValueError(f"logprobs[{i}] is {value}; a log-probability must be <= 0 (natural log)")
        nll.append(-float(value) + 0.0)
    return TextSums(total_nll(nll), len(text.encode("utf-8")), count_words(text))


def corpus_figure(name: str, items: Sequence[TextSums]) -> float:
    """Corpus figure ``name`` (one of :data:`FIGURES`) over the documents' sums, by the package's functions.

    ``bits_per_byte = sum nll / ln 2 / sum bytes``, ``byte_perplexity = exp(sum nll / sum bytes)``,
    ``word_perplexity = exp(sum nll / sum words)``; an empty list, a NaN or a zero count is refused.
    """
    name = check_choice(name, "figure", FIGURES)
    if isinstance(items, (str, bytes)) or not isinstance(items, Sequence):
        raise TypeError(f"items must be a list of TextSums (text_sums), got {type(items).__name__}")
    for i, item in enumerate(items):
        if not isinstance(item, TextSums):
            raise TypeError(f"items[{i}] must be a TextSums (text_sums), got {type(item).__name__}")
    nll = [item.nll for item in items]
    if name == "word_perplexity":
        return word_perplexity_from_sums(nll, [item.num_words for item in items])
    return _FROM_SUMS[name](nll, [item.num_bytes for item in items])


# ------------------------------------------------------------------------------------------ model
