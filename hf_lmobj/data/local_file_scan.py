"""One local data file read through once, as ``datasets.load_dataset`` would read it, and checked.

Text is read ``chunk_size`` bytes at a time (memory stays flat in the file's size; ``.gz``, ``.bz2`` and
``.xz`` files decompressed): every byte UTF-8, the first bad one named by line and byte. JSON Lines: every
non-blank line an object (or the file one array of objects or of strings), each row's text column a string,
no row with a column its file's first row lacks. CSV / TSV: a header naming the text column. Parquet /
Arrow: the schema (the text column of strings, without nulls) and the row count, from the footer or the
memory map. Each scan returns the file's columns and its number of documents; a refusal is a
``ValueError`` naming the file, the line or item, and the fix. Which files are read, and the checks
across them: :mod:`hf_lmobj.data.local_files`.

Example:
    >>> import tempfile
    >>> file = Path(tempfile.mkdtemp()) / "a.jsonl"
    >>> _ = file.write_text('{"text": "x", "id": 1}\\n\\n{"text": "y"}\\n')
    >>> columns, documents = _scan_json(file, "", "text", chunk_size=4)
    >>> sorted(columns), documents
    (['id', 'text'], 2)
"""

from __future__ import annotations

import bz2
import codecs
import csv
import gzip
import itertools
import json
import lzma
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

#: The ``datasets`` modules whose files are read here, and what a message calls their kind.
_READABLE = {"json": "JSON Lines", "text": "text", "csv": "CSV", "parquet": "Parquet", "arrow": "Arrow"}
_COMPRESSED = {".gz": gzip.open, ".bz2": bz2.open, ".xz": lzma.open}
_JSON_TYPES = {dict: "object", list: "array", str: "string", int: "number", float: "number", bool: "boolean"}


def _decoded(file: Path, where: str, chunk_size: int) -> Iterator[str]:
    """``file``'s text, ``chunk_size`` bytes at a time; the first byte that is not UTF-8 is named and refused."""
    decoder = codecs.getincrementaldecoder("utf-8")()
    offset = newlines = 0
    opener: Callable[..., Any] = _COMPRESSED.get(file.suffix.lower(), open)
    try:
        with opener(file, "rb") as stream:
            while True:
                chunk = stream.read(chunk_size)
                pending = decoder.getstate()[0]  # the start of a character cut by the last chunk (never a newline)
                try:
                    text = decoder.decode(chunk, final=not chunk)
                except UnicodeDecodeError as error:
                    data = pending + chunk
                    line = newlines + data.count(b"\n", 0, error.start) + 1
                    offset += error.start - len(pending)
                    unzipped = " of its decompressed text" if file.suffix.lower() in _COMPRESSED else ""
                    raise ValueError(f"{where}{file} is not UTF-8 text at line {line}, byte {offset}{unzipped} (0x"
                                     f"{data[error.start : error.end].hex()}: {error.reason}); re-encode it as UTF-8 "
                                     "(e.g. iconv -f latin1 -t utf-8)") from None  # fmt: skip
                if not chunk:
                    return
                offset, newlines = offset + len(chunk), newlines + chunk.count(b"\n")
                yield text
    except (OSError, EOFError, lzma.LZMAError) as error:
        raise ValueError(f"{where}{file} cannot be read ({error}); give a readable, complete file") from None


def _scan_json(file: Path, where: str, column: str, chunk_size: int) -> tuple[frozenset[str] | None, int]:
    """JSON Lines (or one JSON array, as datasets reads a file starting with ``[``): every row checked."""
    columns: frozenset[str] | None = None
    count = 0
    for position, row in _json_rows(file, where, chunk_size):
        if columns is None:
            columns = frozenset(row)
        _check_row(row, f"{where}{file}, {position}", column, columns)
        count += 1
    return columns, count


def _json_rows(file: Path, where: str, chunk_size: int) -> Iterator[tuple[str, dict]]:
    chunks = _decoded(file, where, chunk_size)
    head = ""
    for text in chunks:  # the first characters (a tiny chunk may hold only part of one)
        head += text
        if head:
            break
    head = head.removeprefix("\ufeff")  # a byte order mark, which datasets skips too
    if head.startswith("["):
        yield from _json_array(head + "".join(chunks), file, where)
        return
    carry, number = "", 0
    for text in itertools.chain([head], chunks):
        lines = (carry + text).split("\n")
        carry = lines.pop()
        for line in lines:
            number += 1
            if line.strip():
                yield f"line {number}", _json_object(line, f"{where}{file}, line {number}")
    if carry.strip():
        yield f"line {number + 1}", _json_object(carry, f"{where}{file}, line {number + 1}")


def _json_object(line: str, where: str) -> dict:
    try:
        value = json.loads(line)
    except json.JSONDecodeError as error:
        raise ValueError(f"{where} is not JSON ({error.msg}, column {error.colno}); one JSON object per line") from None
    except RecursionError:
        raise ValueError(f"{where} is nested too deeply to read; flatten it") from None
    if not isinstance(value, dict):
        kind = _JSON_TYPES.get(type(value), "null")
        raise ValueError(f"{where} holds a JSON {kind}, not an object; write one JSON object per line")
    return value


def _json_array(text: str, file: Path, where: str) -> Iterator[tuple[str, dict]]:
    """A file that is one JSON array: of objects (rows) or of strings (rows of ``text``), as datasets reads it."""
    try:
        items = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as error:
        reason = getattr(error, "msg", "nested too deeply")
        raise ValueError(
            f"{where}{file} starts with '[' but is not one JSON array ({reason}); write JSON Lines"
        ) from None
    if not isinstance(items, list):
        raise ValueError(f"{where}{file} starts with '[' but is not one JSON array; write JSON Lines")
    kind = type(items[0]) if items else dict
    for index, item in enumerate(items):
        if type(item) is not kind or kind not in (dict, str):
            found = _JSON_TYPES.get(type(item), "null")
            raise ValueError(
                f"{where}{file}, item {index} is a JSON {found}; the array must hold objects only or strings only"
            )
        yield f"item {index}", item if kind is dict else {"text": item}


def _check_row(row: dict, where: str, column: str, columns: frozenset[str]) -> None:
    if not row.keys() <= columns:
        extra = sorted(row.keys() - columns)
        raise ValueError(f"{where} has column(s) {extra} that the file's first row lacks (datasets takes the first "
                         "rows' columns, fails on new ones later); give every row the first row's columns")  # fmt: skip
    value = row.get(column)
    if not isinstance(value, str):
        if column not in row:
            problem = f"has no {column!r} column (its columns: {sorted(row)}); set text_column to the text's column"
        else:
            problem = f"has a JSON {_JSON_TYPES.get(type(value), 'null')} in {column!r}, not a string; make it text"
        raise ValueError(f"{where} {problem}")


def _scan_csv(file: Path, where: str, column: str, chunk_size: int, sep: str) -> tuple[frozenset[str] | None, int]:
    """A CSV / TSV file: UTF-8 throughout, a header naming ``column``, at least one row after it."""
    head, rows = "", 0
    for text in _decoded(file, where, chunk_size):
        if "\n" not in head:
            head += text
        elif not rows and text.strip():
            rows = 1
    header, _, rest = head.partition("\n")
    rows = rows or int(bool(rest.strip()))
    names = next(csv.reader([header.rstrip("\r")], delimiter=sep), [])
    if not rows and not names:
        return None, 0
    if column not in names:
        raise ValueError(f"{where}{file}, line 1 (the header) has no {column!r} column ({names}); set text_column")
    return frozenset(names), rows


def _scan_table(file: Path, where: str, column: str, module: str) -> tuple[frozenset[str], int]:
    """A Parquet or Arrow file: its schema (``column`` holding strings, no nulls) and its rows."""
    import pyarrow as pa

    try:
        schema, rows, nulls = (_parquet_facts if module == "parquet" else _arrow_facts)(file, column)
    except (pa.ArrowException, OSError) as error:
        raise ValueError(f"{where}{file} is not a readable {_READABLE[module]} file ({error}); rewrite it") from None
    if column not in schema.names:
        raise ValueError(f"{where}{file} has no {column!r} column (its columns: {schema.names}); set text_column")
    kind = schema.field(column).type
    if not (pa.types.is_string(kind) or pa.types.is_large_string(kind) or str(kind) == "string_view"):
        raise ValueError(f"{where}{file}: column {column!r} holds {kind}, not strings; store the text as strings")
    if nulls:
        raise ValueError(f"{where}{file}: column {column!r} holds {nulls} null(s); give every row a text")
    return frozenset(schema.names), rows


def _parquet_facts(file: Path, column: str) -> tuple[Any, int, int]:
    """Schema, rows and nulls in ``column`` from the footer alone (row groups' statistics, where written)."""
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(file).metadata
    leaves = [meta.schema.column(j).path for j in range(meta.num_columns)]  # a nested column has several
    stats = [meta.row_group(g).column(leaves.index(column)).statistics for g in range(meta.num_row_groups)
             if column in leaves]  # fmt: skip
    nulls = sum(s.null_count for s in stats if s is not None and s.has_null_count)
    return meta.schema.to_arrow_schema(), meta.num_rows, nulls


def _arrow_facts(file: Path, column: str) -> tuple[Any, int, int]:
    """Schema, rows and nulls in ``column``, memory-mapped: the stream format datasets writes, or the file format."""
    import pyarrow as pa

    with pa.memory_map(str(file)) as source:
        try:
            reader = pa.ipc.open_stream(source)
            batches = list(reader)
        except pa.ArrowInvalid:
            source.seek(0)
            reader = pa.ipc.open_file(source)
            batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]
        nulls = sum(b.column(column).null_count for b in batches) if column in reader.schema.names else 0
        return reader.schema, sum(b.num_rows for b in batches), nulls
