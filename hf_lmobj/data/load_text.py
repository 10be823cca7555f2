"""A text source loaded with ``datasets``, each row with its domain: a column of the data, else its file's name.

Where evaluation slices a corpus by domain (Paloma-style folders: one file per domain, or a ``domain`` field),
the loader must say which file a row came from, and ``datasets.load_dataset(folder)`` does not. A local folder
of several files whose rows carry no ``domain_column`` is therefore loaded file by file, in the order
``load_dataset(folder)`` reads them (the same rows in the same order), each file's rows tagged with the file's
name without its extensions (``wiki.jsonl.gz`` -> ``wiki``). Local files are checked first
(:func:`~hf_lmobj.data.local_files.check_local_files`).

Example:
    >>> import json, tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> for name in ("wiki", "code"):
    ...     _ = (folder / f"{name}.jsonl").write_text(json.dumps({"text": f"a {name} text"}) + "\\n")
    >>> loaded, column = load_text(str(folder))
    >>> column, sorted(zip(loaded["train"]["domain"], loaded["train"]["text"]))
    ('domain', [('code', 'a code text'), ('wiki', 'a wiki text')])
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import datasets

from hf_lmobj.data.local_files import _data_files, _local_path, check_local_files, load_arguments

#: The column a row's domain is read from (or written to, from its file's name).
DOMAIN_COLUMN = "domain"
_DATA_SUFFIXES = (".jsonl", ".json", ".txt", ".csv", ".tsv", ".parquet", ".arrow", ".gz", ".bz2", ".xz")


def domain_of_file(path: str | Path) -> str:
    """A file's name without its data and compression extensions (``wiki.en.jsonl.gz`` -> ``wiki.en``)."""
    name = Path(path).name
    while Path(name).suffix.lower() in _DATA_SUFFIXES:
        name = Path(name).stem
    return name or Path(path).name


def load_text(
    location: str,
    config: str | None = None,
    *,
    streaming: bool = False,
    text_unit: str = "document",
    text_column: str = "text",
    domain_column: str = DOMAIN_COLUMN,
    name: str | None = None,
) -> tuple[Any, str | None]:
    """``(splits, domain column or None)``: ``location`` loaded (streamed or not) with ``datasets``.

    The domain column is ``domain_column`` when the data has it; for a local folder of several files without it,
    a ``domain_column`` added from each file's name; else None (one domain: the source itself).
    """
    check_local_files(location, text_column, name)
    path = _local_path(location, "dataset_name")
    files = _data_files(path, "") if path is not None and path.is_dir() else []
    path_or_builder, kwargs = load_arguments(location, text_unit)
    loaded = datasets.load_dataset(path_or_builder, config, streaming=streaming, **kwargs)
    if _has_column(loaded, domain_column) or len(files) < 2 or set(loaded) != {"train"}:
        return loaded, domain_column if _has_column(loaded, domain_column) else None
    parts = [_file_split(file, text_unit, streaming, domain_column) for file in files]
    splits = datasets.IterableDatasetDict if streaming else datasets.DatasetDict
    return splits(train=datasets.concatenate_datasets(parts)), domain_column


def _has_column(loaded: Any, column: str) -> bool:
    split = next(iter(loaded.values()), None)
    names = getattr(split, "column_names", None) or []
    return column in names


def _file_split(file: Path, text_unit: str, streaming: bool, column: str) -> Any:
    """One file's rows, tagged with its domain (``text_unit`` passed ``load_arguments`` of the whole folder)."""
    builder, kwargs = load_arguments(str(file), text_unit)
    rows = datasets.load_dataset(builder, streaming=streaming, **kwargs)["train"]
    domain = domain_of_file(file)
    if streaming:
        return rows.map(lambda row: {column: domain})
    return rows.add_column(column, [domain] * rows.num_rows)
