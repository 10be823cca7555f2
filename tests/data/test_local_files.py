"""A user's local files, read as meant and checked up front (issue 35, point 5).

Entry points: ``load_kwargs`` (how ``datasets.load_dataset`` reads a folder of ``.txt`` files: one
document per file unless ``text_unit`` says lines or paragraphs) and ``check_local_files`` (bytes that
are not UTF-8, JSON lines that are not objects, rows and files whose columns differ, a text column that
is missing or not a string, Parquet / Arrow / CSV schemas, folders datasets would read only in part, and
locations that hold no documents), each refusal a ``ValueError`` naming the file and the fix.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hf_lmobj.data.local_files import TEXT_UNITS, check_local_files, load_kwargs


def build(folder: Path, files: dict[str, bytes | str]) -> str:
    """Write ``files`` (relative name -> content) under ``folder``; return the folder as a string."""
    for name, content in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content.encode() if isinstance(content, str) else content)
    return str(folder)


def lines(*rows) -> str:
    return "".join(json.dumps(row) + "\n" for row in rows)


def parquet(path: Path, table: dict) -> bytes:
    """Write ``table`` as Parquet at ``path``; return its bytes."""
    pq.write_table(pa.table(table), path)
    return path.read_bytes()


def arrow_stream(table: dict) -> bytes:
    sink = pa.BufferOutputStream()
    table = pa.table(table)
    with pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    return sink.getvalue().to_pybytes()


ROW = lines({"text": "a"})
TEXT_FILES = {"a.txt": b"one\ntwo\n\nthree\n", "b.txt": b"x\r\ny\r\n\r\nz", "c.txt": b""}  # CRLF; an empty file


# --- load_kwargs: a folder of .txt files --------------------------------------------------------------


@pytest.mark.parametrize(
    ("unit", "rows"),
    [
        ("document", ["one\ntwo\n\nthree\n", "x\ny\n\nz", ""]),  # newlines kept, CRLF read as LF; empty file: ""
        ("paragraph", ["one\ntwo", "three\n", "x\ny", "z"]),  # split at blank lines
        ("line", ["one", "two", "", "three", "x", "y", "", "z"]),  # datasets' own default
    ],
)
def test_text_units_stream_as_documents_paragraphs_lines(tmp_path, unit, rows):
    folder = build(tmp_path, TEXT_FILES)
    kwargs = load_kwargs(folder, unit)
    assert kwargs == {"sample_by": unit}
    assert [row["text"] for row in datasets.load_dataset(folder, streaming=True, **kwargs)["train"]] == rows
    assert check_local_files(folder) == {"files": 3, "bytes": 24}


def test_default_unit_is_one_document_per_file_for_a_single_file(tmp_path):
    build(tmp_path, {"notes.txt": "a\n\nb\n"})
    kwargs = load_kwargs(str(tmp_path / "notes.txt"))
    assert kwargs == {"sample_by": "document"} and TEXT_UNITS == ("document", "line", "paragraph")
    loaded = datasets.load_dataset("text", data_files=str(tmp_path / "notes.txt"), streaming=True, **kwargs)
    assert [row["text"] for row in loaded["train"]] == ["a\n\nb\n"]


@pytest.mark.parametrize("kind", ["jsonl folder", "parquet file", "Hub id"])
def test_rows_are_documents_for_other_kinds(tmp_path, kind):
    folder = build(tmp_path / "jsonl", {"a.jsonl": ROW})
    pq.write_table(pa.table({"text": ["a"]}), tmp_path / "b.parquet")
    location = {"jsonl folder": folder, "parquet file": str(tmp_path / "b.parquet"), "Hub id": "user/dataset"}
    assert load_kwargs(location[kind]) == {}


@pytest.mark.parametrize(
    ("files", "location", "unit", "error", "match"),
    [
        ({"a.jsonl": lines({"text": "a"})}, None, "line", ValueError, "text_unit='line' splits .txt files"),
        ({}, "user/dataset", "paragraph", ValueError, "is a Hub id"),
        (TEXT_FILES, None, "sentence", ValueError, r"one of \('document', 'line', 'paragraph'\)"),
        (TEXT_FILES, None, None, TypeError, "text_unit must be a string"),
        ({}, None, "document", ValueError, "holds no documents"),
        ({"a.txt": "a", "b.jsonl": lines({"text": "b"})}, None, "document", ValueError, "mixes kinds"),
    ],
)
def test_load_kwargs_refusals(tmp_path, files, location, unit, error, match):
    folder = build(tmp_path, files)
    with pytest.raises(error, match=match):
        load_kwargs(location or folder, unit)


# --- check_local_files: bytes that are not UTF-8 -------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "content", "line", "byte"),
    [
        ("a.txt", b"\xffabc", 1, 0),  # the first byte
        ("a.txt", b"ab\ncd\xfe\nef", 2, 5),  # the middle
        ("a.txt", b"ab\ncd\xc3", 2, 5),  # the last byte: a character cut short
        ("a.txt", b"ab\xc3(", 1, 2),  # a lead byte ends chunk 1, a wrong continuation starts chunk 2
        ("a.txt", b"a\xf0\x9f\x98(\n", 1, 1),  # a 4-byte character cut by two chunk boundaries, then wrong
        ("a.txt", b"x\n\xed\xa0\x80", 2, 2),  # an encoded surrogate
        ("a.txt", b"\xc0\xaf", 1, 0),  # an overlong encoding of '/'
        ("a.jsonl", b'{"text": "a"}\n\n{"text": "caf\xe9"}\n', 3, 28),  # latin-1 in JSON lines
        ("a.csv", b"text\nok\nna\xefve\n", 3, 10),
    ],
)
def test_bytes_that_are_not_utf8_are_named_by_line_and_offset(tmp_path, name, content, line, byte):
    folder = build(tmp_path, {name: content})
    with pytest.raises(ValueError, match=rf"source 'mine': .*{name} is not UTF-8 text at line {line}, byte {byte} .*"
                       r"re-encode it as UTF-8"):  # fmt: skip
        check_local_files(folder, name="mine", chunk_size=3)


def test_a_bad_byte_is_found_at_the_same_place_for_every_chunk_size(tmp_path):
    folder = build(tmp_path, {"a.txt": "é€😀\n".encode() * 3 + b"tail\x80"})
    messages = set()
    for chunk_size in range(1, 12):
        with pytest.raises(ValueError, match="line 4, byte 34 ") as caught:
            check_local_files(folder, chunk_size=chunk_size)
        messages.add(str(caught.value))
    assert len(messages) == 1


def test_characters_cut_by_every_chunk_boundary_are_read_whole(tmp_path):
    folder = build(tmp_path, {"a.jsonl": lines({"text": "é€😀 naïve"}, {"text": "中文"})})
    size = Path(folder, "a.jsonl").stat().st_size
    assert {str(check_local_files(folder, chunk_size=n)) for n in range(1, 9)} == {str({"files": 1, "bytes": size})}


def test_a_compressed_file_is_checked_decompressed(tmp_path):
    folder = build(tmp_path, {"a.jsonl.gz": gzip.compress(b'{"text": "ok"}\n{"text": "\xff"}\n')})
    with pytest.raises(ValueError, match=r"line 2, byte 25 of its decompressed text"):
        check_local_files(folder)


# --- check_local_files: JSON lines ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ('{"text": "a"}\n[1, 2]\n', r"line 2 holds a JSON array, not an object"),
        ('{"text": "a"}\n3\n', r"line 2 holds a JSON number"),
        ('{"text": "a"}\n{"text": \n', r"line 2 is not JSON \(Expecting value"),  # cut short
        ('{"text": "a"} {"text": "b"}\n', r"line 1 is not JSON \(Extra data"),  # two objects on one line
        ('{"text": "a"}\n{"text": "b", "x": ' + "[" * 100_000 + "\n", r"line 2 is nested too deeply"),
        ('{"text": "a"}\n{"text": 3}\n', r"line 2 has a JSON number in 'text', not a string"),
        ('{"text": "a"}\n\n{"text": null}\n', r"line 3 has a JSON null in 'text'"),
        ('{"body": "a"}\n', r"line 1 has no 'text' column \(its columns: \['body'\]\); set text_column"),
        ('{"text": "a", "id": 1}\n{"id": 2}\n', r"line 2 has no 'text' column"),
        ('{"text": "a"}\n{"text": "b", "id": 2}\n', r"line 2 has column\(s\) \['id'\] that the file's first row lacks"),
    ],
)
def test_json_lines_that_are_not_rows_of_text_are_refused(tmp_path, content, match):
    folder = build(tmp_path, {"a.jsonl": content})
    with pytest.raises(ValueError, match=match):
        check_local_files(folder)


@pytest.mark.parametrize(
    ("content", "column"),
    [
        ('\n{"text": "a"}\n   \n\t\n{"text": "b"}', "text"),  # blank lines, no final newline
        ('{"text": "a"}\r\n{"text": "b"}\r\n', "text"),  # CRLF
        ('\ufeff{"text": "a"}\n', "text"),  # a byte order mark, which datasets skips
        ('{"text": "a", "id": 1}\n{"text": "b"}\n', "text"),  # a later row without a column: read as null
        ('{"content": "a"}\n', "content"),
        ('[{"text": "a"}, {"text": "b"}]', "text"),  # one JSON array of objects
        ('["a", "b"]', "text"),  # one JSON array of strings: rows of 'text'
    ],
)
def test_json_files_datasets_reads_are_accepted(tmp_path, content, column):
    folder = build(tmp_path, {"a.json": content})
    assert check_local_files(folder, text_column=column) == {"files": 1, "bytes": len(content.encode())}


@pytest.mark.parametrize(
    ("content", "match"),
    [
        ('[{"text": "a"}, "b"]', r"item 1 is a JSON string; the array must hold objects only or strings only"),
        ("[1, 2]", r"item 0 is a JSON number"),
        ('[{"text": "a"}', r"starts with '\[' but is not one JSON array"),
    ],
)
def test_json_arrays_that_are_not_rows_are_refused(tmp_path, content, match):
    folder = build(tmp_path, {"a.json": content})
    with pytest.raises(ValueError, match=match):
        check_local_files(folder)


def test_files_whose_columns_differ_are_named_with_the_difference(tmp_path):
    folder = build(tmp_path, {"a.jsonl": lines({"text": "a", "id": 1}), "b.jsonl": lines({"text": "b", "url": "u"})})
    pattern = r"b.jsonl has columns \['text', 'url'\] but .*a.jsonl has \['id', 'text'\] \(only in b.jsonl: \['url'\]; "
    with pytest.raises(ValueError, match=pattern + r"only in a.jsonl: \['id'\]\).*give every file the same columns"):
        check_local_files(folder)


# --- check_local_files: folders ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("files", "expected_files"),
    [
        ({"a.jsonl": ROW, "sub/b.jsonl": ROW, "sub/deep/c.jsonl": ROW}, 3),  # sub-folders are read
        ({"a.jsonl": lines({"text": "a"}), ".h.jsonl": b"\xff", ".git/x.jsonl": "[", "__pycache__/y.jsonl": "{",
          "README.md": "# card", "run.py": b"\xff", "config.json": "[1]"}, 1),  # hidden, __name, metadata skipped
        ({"train.jsonl": lines({"text": "a"}), "test.jsonl": lines({"text": "b"})}, 2),  # splits: both checked
        ({"a.txt": "text", "b.txt": ""}, 2),  # an empty .txt beside others is an empty document (skipped later)
        ({"a.jsonl": lines({"text": "a"}), "b.jsonl": ""}, 2),  # an empty JSON lines file beside others: no rows
        ({"a.jsonl.gz": gzip.compress(lines({"text": "a"}).encode()), "b.jsonl": lines({"text": "b"})}, 2),
        ({"a.csv": "text,id\nhello,1\n", "b.csv": 'id,text\n2,"multi\nline"\n'}, 2),
        ({"a.tsv": "text\tid\nhello\t1\n"}, 1),
    ],
)  # fmt: skip
def test_folders_are_read_as_datasets_reads_them(tmp_path, files, expected_files):
    folder = build(tmp_path, files)
    counted = check_local_files(folder)
    assert counted["files"] == expected_files and counted["bytes"] > 0


@pytest.mark.parametrize(
    ("files", "column", "match"),
    [
        ({"a.jsonl": lines({"text": "a"}), "b.jsonl": lines({"text": "b"}), "c.txt": "c"}, "text",
         r"mixes kinds of data file \(2 like a.jsonl; 1 like c.txt\); datasets would read only the most common"),
        ({"a.csv": "text\na\n", "b.tsv": "text\nb\n"}, "text",
         r"mixes kinds of data file \(1 like a.csv; 1 like b.tsv\)"),
        ({"train.jsonl": lines({"text": "a"}), "other.jsonl": lines({"text": "b"})}, "text",
         r"read only the files named after a split .*\(train: 1\) and skip 1 other\(s\): .*other.jsonl"),
        ({"a.jsonl": lines({"text": "a"}), "b.jsonl": lines({"text": "b"}), "notes.md": "# notes"}, "text",
         r"notes.md is not a text data file \(datasets reads it as 'harbor'\); move it out"),
        ({"a.zip": b"PK\x05\x06" + bytes(18)}, "text", r"a.zip is an archive; unpack it first"),
        ({"a.jsonl.gz": b"\x1f\x8b\x08\x00cut"}, "text", r"a.jsonl.gz cannot be read"),
        ({"a.txt": "text"}, "body", r".txt files give one column, 'text', not 'body'; set text_column: text"),
        ({"a.csv": "body,id\nx,1\n"}, "text", r"a.csv, line 1 \(the header\) has no 'text' column"),
        ({}, "text", r"holds no documents: no data files"),
        ({"a.py": "x = 1\n", "notes.log": "log"}, "text", r"holds no documents: no data files"),
        ({"a.jsonl": "", "b.jsonl": "\n \n"}, "text", r"holds no documents \(its data files are empty\)"),
        ({"a.txt": "", "b.txt": ""}, "text", r"holds no documents"),
        ({"a.csv": "text\n", "b.csv": "text\n\n"}, "text", r"holds no documents"),  # headers, no rows
    ],
)  # fmt: skip
def test_folders_datasets_would_misread_are_refused(tmp_path, files, column, match):
    folder = build(tmp_path, files)
    with pytest.raises(ValueError, match=match):
        check_local_files(folder, text_column=column)


def test_datasets_itself_skips_the_less_common_kind(tmp_path):
    """Why mixed kinds are refused: datasets reads the two .jsonl files and never the .txt, silently."""
    folder = build(tmp_path, {"a.jsonl": lines({"text": "a"}), "b.jsonl": lines({"text": "b"}), "c.txt": "c"})
    assert [row["text"] for row in datasets.load_dataset(folder, streaming=True)["train"]] == ["a", "b"]


@pytest.mark.parametrize(
    ("location", "result"),
    [
        ("user/dataset", {}),  # a Hub id: not local, nothing checked
        ("./missing_folder", "no such file or folder"),
        ("/no/such/folder", "no such file or folder"),
        ("data/train.jsonl", "no such file or folder"),  # a data file's name can only be local
    ],
)
def test_a_location_that_is_not_local(tmp_path, monkeypatch, location, result):
    monkeypatch.chdir(tmp_path)
    if isinstance(result, dict):
        assert check_local_files(location) == result
    else:
        with pytest.raises(ValueError, match=f"dataset_name '{location}': {result}"):
            check_local_files(location)


@pytest.mark.parametrize("name", ["a.jsonl", "a.txt", "a.parquet"])
def test_an_empty_file_holds_no_documents(tmp_path, name):
    path = tmp_path / name
    if name.endswith(".parquet"):
        pq.write_table(pa.table({"text": pa.array([], pa.string())}), path)
    else:
        path.write_bytes(b"")
    with pytest.raises(ValueError, match=rf"{name} holds no documents"):
        check_local_files(str(path))


# --- check_local_files: Parquet and Arrow -----------------------------------------------------------------


def test_parquet_and_arrow_files_are_read_by_their_schemas(tmp_path):
    build(tmp_path / "p", {"a.parquet": parquet(tmp_path / "x.parquet", {"text": ["a", "b"], "id": [1, 2]})})
    build(tmp_path / "p", {"b.parquet": parquet(tmp_path / "y.parquet", {"id": [3], "text": ["c"]})})
    assert check_local_files(str(tmp_path / "p"))["files"] == 2
    build(tmp_path / "a", {"a.arrow": arrow_stream({"text": ["a"]})})
    assert check_local_files(str(tmp_path / "a"))["files"] == 1


@pytest.mark.parametrize(
    ("name", "tables", "match"),
    [
        ("parquet", [{"text": ["a"]}, {"text": ["b"], "id": [1]}], r"give every file the same columns"),
        ("parquet", [{"text": [1, 2]}], r"column 'text' holds int64, not strings"),
        ("parquet", [{"text": ["a", None]}], r"column 'text' holds 1 null\(s\); give every row a text"),
        ("parquet", [{"body": ["a"]}], r"has no 'text' column \(its columns: \['body'\]\)"),
        ("arrow", [{"text": ["a", None, None]}], r"column 'text' holds 2 null\(s\)"),
        ("arrow", [{"text": [1.5]}], r"holds double, not strings"),
    ],
)
def test_parquet_and_arrow_schemas_that_do_not_hold_text_are_refused(tmp_path, name, tables, match):
    folder = tmp_path / "data"
    folder.mkdir()
    for index, table in enumerate(tables):
        path = folder / f"{index}.{name}"
        path.write_bytes(parquet(path, table) if name == "parquet" else arrow_stream(table))
    with pytest.raises(ValueError, match=match):
        check_local_files(str(folder))


def test_a_file_that_is_not_parquet_is_refused_by_name(tmp_path):
    folder = build(tmp_path, {"a.parquet": b"not parquet at all"})
    with pytest.raises(ValueError, match=r"a.parquet is not a readable Parquet file"):
        check_local_files(folder)
