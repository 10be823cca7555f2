"""A user's local data files, read as meant and checked before a run starts.

``--dataset_name <folder>`` (or a mixture entry's) goes to ``datasets.load_dataset``, which reads a folder
its own way; these two functions serve the recipe where that input enters. :func:`load_kwargs` reads a
``.txt`` file as one document (datasets' default is one per line, every newline lost) unless ``text_unit``
says lines or paragraphs. :func:`check_local_files` passes once over every byte that ``load_dataset`` would
read, so that bad input is refused before training, not in its middle. Refused because datasets would drop
files silently: mixed kinds (it reads only the most common: with two ``.jsonl`` and one ``.txt`` the
``.txt`` is never read; ``.csv`` with ``.tsv`` is read with one separator) and files beside split-named
ones (``other.jsonl`` beside ``train.jsonl`` is skipped). Kept as datasets does it: sub-folders are read;
hidden files and folders, ``__name`` folders, ``README.md`` and metadata files are skipped; ``.gz``,
``.bz2`` and ``.xz`` files are read decompressed. Each file's bytes, rows and columns are read by
:mod:`hf_lmobj.data.local_file_scan`.

Example:
    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> _ = (folder / "a.txt").write_text("first line\\nsecond line\\n")
    >>> check_local_files(str(folder)), load_kwargs(str(folder))
    ({'files': 1, 'bytes': 23}, {'sample_by': 'document'})
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from datasets.data_files import FILES_TO_IGNORE, DataFilesDict, EmptyDatasetError, get_data_patterns
from datasets.packaged_modules import _ALL_ALLOWED_EXTENSIONS, _EXTENSION_TO_MODULE

from hf_lmobj.checks import check_count, check_name
from hf_lmobj.data.local_file_scan import _READABLE, _decoded, _scan_csv, _scan_json, _scan_table

TEXT_UNITS = ("document", "line", "paragraph")
CHUNK_SIZE = 4 << 20  # bytes read at a time: memory stays flat in the file's size
_PACKED = (".zip", ".zst", ".zstd", ".lz4", ".7z", ".tar", ".tgz", ".rar")  # read only after unpacking
_SUFFIXES = ", ".join(ext for ext, (module, _) in _EXTENSION_TO_MODULE.items() if module in _READABLE)


def load_kwargs(location: str, text_unit: str = "document") -> dict[str, Any]:
    """The extra ``datasets.load_dataset(location, ...)`` arguments that read ``location`` as meant.

    For a local ``.txt`` file or a folder of ``.txt`` files, ``{"sample_by": text_unit}``: ``"document"``
    is one document per file with its newlines kept (CRLF read as LF), ``"paragraph"`` splits at blank
    lines, ``"line"`` is one document per line (an empty line is an empty document). For other local
    files and for a Hub id, ``{}``, and a ``text_unit`` other than ``"document"`` is a ``ValueError``:
    their documents are their rows. A ``text_unit`` not in :data:`TEXT_UNITS` is a ``ValueError``; a
    local folder with no data files or with mixed kinds is refused as in :func:`check_local_files`.

    Example:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> _ = (folder / "a.txt").write_text("one\\n\\ntwo\\n")
        >>> load_kwargs(str(folder), "paragraph"), load_kwargs("user/dataset")
        ({'sample_by': 'paragraph'}, {})
        >>> load_kwargs("user/dataset", "line")
        Traceback (most recent call last):
        ...
        ValueError: text_unit='line' splits .txt files, but user/dataset is a Hub id; leave text_unit: document
    """
    if not isinstance(text_unit, str):
        raise TypeError(f"text_unit must be a string, one of {TEXT_UNITS}; got {text_unit!r}")
    if text_unit not in TEXT_UNITS:
        raise ValueError(f"text_unit must be one of {TEXT_UNITS}, got {text_unit!r}")
    path = _local_path(location, "dataset_name")
    files = _data_files(path, "") if path is not None else []
    module = _module(files[0]) if files else None
    if module == "text":
        return {"sample_by": text_unit}
    if text_unit != "document":
        what = f"holds {_READABLE[module]} files" if module else "is a Hub id"
        raise ValueError(f"text_unit={text_unit!r} splits .txt files, but {location} {what}; leave text_unit: document")
    return {}


def load_arguments(location: str, text_unit: str = "document") -> tuple[str, dict[str, Any]]:
    """``(path, kwargs)`` for ``datasets.load_dataset(path, **kwargs)``: a folder or a Hub id by its name, one local
    file by the builder that reads it (``load_dataset(location)`` takes no single file), with :func:`load_kwargs`.

    Example:
        >>> import tempfile
        >>> file = Path(tempfile.mkdtemp()) / "a.jsonl"
        >>> _ = file.write_text('{"text": "x"}\\n')
        >>> load_arguments(str(file))[0], load_arguments("user/dataset")
        ('json', ('user/dataset', {}))
    """
    kwargs = load_kwargs(location, text_unit)
    path = _local_path(location, "dataset_name")
    if path is not None and path.is_file():
        return _module(path), {**kwargs, "data_files": {"train": str(path)}}
    return location, kwargs


def check_local_files(
    location: str, text_column: str = "text", name: str | None = None, *, chunk_size: int = CHUNK_SIZE
) -> dict[str, int]:
    """Check every data file ``datasets.load_dataset(location)`` would read; ``{"files": n, "bytes": size}``.

    ``location`` is a local data file or folder; a Hub id (``user/dataset``) returns ``{}``, checked by nobody
    here; a missing path that can only be local (absolute, ``./``, ``~``, a data-file suffix) is refused.
    Files are found as datasets finds them; mixed kinds, files it would skip, archives and kinds other than
    JSON, text, CSV / TSV, Parquet and Arrow are refused. Text files are read once, ``chunk_size`` bytes at
    a time: every byte UTF-8. In JSON files every non-blank line is an object (or the file is one array of
    objects or of strings), each row's ``text_column`` a string, no row has a column its file's first row
    lacks, and each file's first row has the first file's columns; CSV headers and Parquet / Arrow schemas
    must agree alike, ``text_column`` a column of strings without nulls. No data files, an empty file or
    only empty files: "holds no documents". ``bytes`` is the files' size on disk. Each refusal is a
    ``ValueError`` naming the source ``name``, the file, the line or item, and the fix.

    Example:
        >>> import tempfile
        >>> folder = Path(tempfile.mkdtemp())
        >>> _ = (folder / "a.jsonl").write_bytes(b'{"text": "caf\\xc3\\xa9"}\\n{"text": "na\\xefve"}\\n')
        >>> check_local_files(str(folder), name="mine")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: source 'mine': .../a.jsonl is not UTF-8 text at line 2, byte 30 (0xef: invalid ...); re-encode ...
    """
    text_column = check_name(text_column, "text_column")
    name = check_name(name, "name", optional=True)
    chunk_size = check_count(chunk_size, "chunk_size", minimum=1)
    path = _local_path(location, "dataset_name")
    if path is None:
        return {}
    where = f"source {name!r}: " if name else ""
    files = _data_files(path, where)
    first: tuple[Path, frozenset[str]] | None = None
    documents = 0
    for file in files:
        columns, count = _scan(file, where, text_column, chunk_size)
        documents += count
        if columns is not None and first is None:
            first = (file, columns)
        elif columns is not None and columns != first[1]:
            (other, known), only = first, f"only in {file.name}: {sorted(columns - first[1])}"
            raise ValueError(f"{where}{file} has columns {sorted(columns)} but {other} has {sorted(known)} "
                             f"({only}; only in {other.name}: {sorted(known - columns)}); datasets takes the first "
                             "file's columns and fails on the others: give every file the same columns")  # fmt: skip
    if not documents:
        raise ValueError(f"{where}{path} holds no documents (its data files are empty); give it at least one")
    return {"files": len(files), "bytes": sum(file.stat().st_size for file in files)}


def _local_path(location: Any, field: str) -> Path | None:
    """``location`` as a local path; None for a Hub id; a missing path that can only be local is refused."""
    location = check_name(os.fspath(location) if isinstance(location, os.PathLike) else location, field)
    path = Path(location).expanduser()
    if path.exists():
        return path
    only_local = os.path.isabs(location) or location.startswith(("./", "../", "~", ".\\", "..\\"))
    if only_local or path.suffix.lower() in _EXTENSION_TO_MODULE or location in (".", ".."):
        raise ValueError(f"{field} {location!r}: no such file or folder; give an existing path or a Hub id")
    return None


def _data_files(path: Path, where: str) -> list[Path]:
    """The files ``load_dataset(path)`` reads, in its order; refused if it would skip any or mix kinds."""
    if path.is_file():
        files = [path]
    else:
        try:
            patterns = get_data_patterns(path.as_posix())
        except EmptyDatasetError:
            patterns = {}
        found = DataFilesDict.from_patterns(patterns, path.as_posix(), allowed_extensions=_ALL_ALLOWED_EXTENSIONS)
        files = list(dict.fromkeys(Path(file) for split in found.values() for file in split))
        if not files:
            raise ValueError(f"{where}{path} holds no documents: no data files ({_SUFFIXES}) in it or below")
        skipped = sorted(set(_walk(path)) - {file.resolve() for file in files})
        if skipped:
            splits = ", ".join(f"{split}: {len(found[split])}" for split in found)
            raise ValueError(
                f"{where}datasets would read only the files named after a split in {path} ({splits}) and skip "
                f"{len(skipped)} other(s): {', '.join(map(str, skipped[:3]))}; name every file after its split or none"
            )
    kinds: dict[str, list[Path]] = {}
    for file in files:  # a kind is what datasets reads it with: .csv and .tsv differ by their separator
        _module(file, where)
        kinds.setdefault(str(_EXTENSION_TO_MODULE[_suffix(file)]), []).append(file)
    if len(kinds) > 1:
        counts = "; ".join(f"{len(group)} like {group[0].name}" for group in kinds.values())
        raise ValueError(f"{where}{path} mixes kinds of data file ({counts}); datasets would read only the most "
                         "common kind and skip the others; keep one kind per folder (one source each)")  # fmt: skip
    return files


def _walk(folder: Path) -> Iterator[Path]:
    """Every data file under ``folder``, skipping what datasets skips (hidden, ``__name`` folders, metadata)."""
    for root, folders, names in os.walk(folder):
        folders[:] = [f for f in folders if not f.startswith((".", "__"))]
        for name in names:
            suffixes = {s.lower() for s in Path(name).suffixes}
            if not name.startswith(".") and name not in FILES_TO_IGNORE and suffixes & set(_ALL_ALLOWED_EXTENSIONS):
                yield (Path(root) / name).resolve()


def _suffix(file: Path) -> str:
    """The suffix datasets reads ``file`` by (``a.v2.jsonl.gz`` -> ``.jsonl``); '' for none."""
    return next((s for s in reversed([s.lower() for s in file.suffixes]) if s in _EXTENSION_TO_MODULE), "")


def _module(file: Path, where: str = "") -> str:
    """The datasets module that reads ``file`` (``json``, ``text``, ...); other kinds and archives refused."""
    if file.suffix.lower() in _PACKED:
        raise ValueError(f"{where}{file} is an archive; unpack it first (.gz, .bz2 and .xz files are read as they are)")
    suffix = _suffix(file)
    module = _EXTENSION_TO_MODULE[suffix][0] if suffix else None
    if module not in _READABLE:
        read_as = f" (datasets reads it as {module!r})" if module else ""
        raise ValueError(f"{where}{file} is not a text data file{read_as}; move it out, or give {_SUFFIXES} files")
    return module


def _scan(file: Path, where: str, text_column: str, chunk_size: int) -> tuple[frozenset[str] | None, int]:
    """One file's columns (None: no rows) and its number of documents (for text: 1 unless empty)."""
    module = _module(file, where)
    if module == "json":
        return _scan_json(file, where, text_column, chunk_size)
    if module == "csv":
        return _scan_csv(file, where, text_column, chunk_size, _EXTENSION_TO_MODULE[_suffix(file)][1].get("sep", ","))
    if module == "text":
        if text_column != "text":
            raise ValueError(
                f"{where}{file}: .txt files give one column, 'text', not {text_column!r}; set text_column: text"
            )
        return None, int(max((len(text) for text in _decoded(file, where, chunk_size)), default=0) > 0)
    return _scan_table(file, where, text_column, module)
