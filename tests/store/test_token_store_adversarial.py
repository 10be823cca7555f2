"""Hostile token stores and hostile input to their writer: every file is checked before it is trusted.

Entry points: ``TokenStore.open`` (a store folder whose ``meta.json``, ``tokens.bin`` or ``offsets.npy``
is cut short, missing, of another type or inconsistent), ``from_nanogpt_bin`` and ``from_megatron``
(foreign files), ``document`` / ``document_slice`` (indices and ranges), the writer
(``write_token_store``, ``tokenize_to_token_store``: bad ids, bad documents, bad arguments, failed
writes), the tokenizer saved inside the store (``save_tokenizer=True``: there when the store appears,
a failed save leaves nothing) and ``check_tokenizer`` (a store read with another tokenizer).
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import datasets
import numpy as np
import pytest
import torch
from transformers import AutoTokenizer

from hf_lmobj.corpus import build_tokenizer
from hf_lmobj.data.prepare_run import _training_source
from hf_lmobj.data.run_sources import SourceSpec
from hf_lmobj.held_out import HeldOut
from hf_lmobj.objectives import get_objective
from hf_lmobj.store import tokenize_text as tokenize_store
from hf_lmobj.store import writer as token_store_writer
from hf_lmobj.store.token_store import TokenStore
from hf_lmobj.store.tokenize_text import tokenize_to_token_store
from hf_lmobj.store.tokenizer_fingerprint import tokenizer_fingerprint
from hf_lmobj.store.write import write_token_store

DOCUMENTS = [[5, 6, 7], [8], [9, 10]]  # offsets [0, 3, 4, 6], 6 uint16 tokens (12 bytes)
TEXTS = ["def f(x):\n    return x\n", "import os\n", "x = 1\n"]


@pytest.fixture(scope="module")
def tokenizer():
    return build_tokenizer(vocab_size=512, max_documents=20)


@pytest.fixture(scope="module")
def other_tokenizer():
    """Same vocabulary size (512), other merges: other ids for the same text."""
    return build_tokenizer(vocab_size=512, max_documents=10)


def make_store(tmp_path: Path, documents=DOCUMENTS, vocab_size: int = 512, **kwargs) -> Path:
    return write_token_store(tmp_path / "store", documents, vocab_size, **kwargs).path


def read_meta(folder: Path) -> dict:
    return json.loads((folder / "meta.json").read_text())


def set_meta(folder: Path, **changes) -> None:
    meta = read_meta(folder) | changes
    (folder / "meta.json").write_text(json.dumps(meta))


def drop_meta(folder: Path, key: str) -> None:
    meta = read_meta(folder)
    del meta[key]
    (folder / "meta.json").write_text(json.dumps(meta))


def save_offsets(folder: Path, values, dtype="<i8") -> None:
    np.save(folder / "offsets.npy", np.asarray(values, dtype=dtype))


def save_object_offsets(folder: Path) -> None:
    np.save(folder / "offsets.npy", np.array([0, None, 4, 6], dtype=object), allow_pickle=True)


def cut_file(folder: Path, name: str, drop: int) -> None:
    data = (folder / name).read_bytes()
    (folder / name).write_bytes(data[:-drop])


def make_folder(path: Path) -> None:
    path.unlink()
    path.mkdir()


# ---------------------------------------------------------------------------------- TokenStore.open
CORRUPTIONS = [
    # offsets.npy: the index of the documents
    ("offsets decrease", lambda f: save_offsets(f, [0, 4, 3, 6]), r"document 1 ends before it starts"),
    ("middle offset past tokens.bin", lambda f: save_offsets(f, [0, 3, 99, 6]), r"offsets\[2\]=99 is outside"),
    ("negative middle offset", lambda f: save_offsets(f, [0, -2, 4, 6]), r"offsets\[1\]=-2 is outside"),
    ("offset repeated: an empty document", lambda f: save_offsets(f, [0, 3, 3, 6]), r"document 1 is empty"),
    ("first offset not 0", lambda f: save_offsets(f, [1, 3, 4, 6]), r"runs from 1 to 6.*from 0"),
    ("last offset short of num_tokens", lambda f: save_offsets(f, [0, 3, 4, 5]), r"runs from 0 to 5"),
    ("one offset too many", lambda f: save_offsets(f, [0, 3, 4, 5, 6]), r"shape \(5,\).*\(4,\)"),
    ("int32 offsets", lambda f: save_offsets(f, [0, 3, 4, 6], "<i4"), r"int32 of shape"),
    ("big-endian offsets", lambda f: save_offsets(f, [0, 3, 4, 6], ">i8"), r">i8 of shape"),
    ("2-D offsets", lambda f: save_offsets(f, [[0], [3], [4], [6]]), r"shape \(4, 1\)"),
    ("0-D offsets", lambda f: save_offsets(f, 0), r"shape \(\)"),
    ("offsets.npy missing", lambda f: (f / "offsets.npy").unlink(), r"offsets\.npy is missing"),
    ("offsets.npy cut short", lambda f: cut_file(f, "offsets.npy", 8), r"offsets\.npy: unreadable, cut short"),
    ("offsets.npy not an array", lambda f: (f / "offsets.npy").write_bytes(b"hello"), r"not a \.npy array"),
    ("offsets.npy empty", lambda f: (f / "offsets.npy").write_bytes(b""), r"offsets\.npy: unreadable"),
    ("offsets.npy of Python objects", save_object_offsets, r"offsets\.npy: unreadable"),
    # meta.json: the description of the files
    ("meta.json cut short", lambda f: cut_file(f, "meta.json", 20), r"not valid JSON \(cut short"),
    ("meta.json empty", lambda f: (f / "meta.json").write_text(""), r"not valid JSON"),
    ("meta.json a list", lambda f: (f / "meta.json").write_text("[1, 2]"), r"holds a list"),
    ("meta.json not UTF-8", lambda f: (f / "meta.json").write_bytes(b'{"a": "\xff"}'), r"not UTF-8"),
    ("meta.json missing", lambda f: (f / "meta.json").unlink(), r"meta\.json is missing.*overwrite=True"),
    ("no num_tokens", lambda f: drop_meta(f, "num_tokens"), r"has no 'num_tokens'"),
    ("no vocab_size", lambda f: drop_meta(f, "vocab_size"), r"has no 'vocab_size'"),
    ("no dtype", lambda f: drop_meta(f, "dtype"), r"has no 'dtype'"),
    ("no format", lambda f: drop_meta(f, "format"), r"format None"),
    ("another format", lambda f: set_meta(f, format="megatron"), r"format 'megatron'"),
    ("version 2", lambda f: set_meta(f, version=2), r"version 2, expected"),
    ("version as a string", lambda f: set_meta(f, version="1"), r"version '1', expected"),
    ("version as a bool", lambda f: set_meta(f, version=True), r"version True, expected"),
    ("vocab_size as a string", lambda f: set_meta(f, vocab_size="512"), r"vocab_size must be an int.*'512'"),
    ("vocab_size as a bool", lambda f: set_meta(f, vocab_size=True), r"vocab_size must be an int.*True"),
    ("vocab_size 0", lambda f: set_meta(f, vocab_size=0), r"vocab_size must be an int in \[1, 2\*\*32\]"),
    ("vocab_size past 2**32", lambda f: set_meta(f, vocab_size=2**32 + 1), r"vocab_size must be an int"),
    ("negative num_documents", lambda f: set_meta(f, num_documents=-3), r"num_documents must be an int >= 1"),
    ("no document", lambda f: set_meta(f, num_documents=0), r"num_documents must be an int >= 1, got 0"),
    ("num_tokens as a float", lambda f: set_meta(f, num_tokens=6.0), r"num_tokens must be an int >= 1, got 6\.0"),
    ("fewer tokens than documents", lambda f: set_meta(f, num_tokens=2), r"2 tokens cannot fill 3 documents"),
    ("dtype too wide", lambda f: set_meta(f, dtype="uint32"), r"dtype 'uint32' does not fit vocab_size 512"),
    ("dtype a number", lambda f: set_meta(f, dtype=16), r"dtype 16 does not fit"),
    ("content_hash a number", lambda f: set_meta(f, content_hash=5), r"content_hash must be a hex string"),
    ("tokenizer_fingerprint not hex", lambda f: set_meta(f, tokenizer_fingerprint="xyz"), r"16 hex digits"),
    # tokens.bin: the ids
    ("tokens.bin missing", lambda f: (f / "tokens.bin").unlink(), r"tokens\.bin: missing"),
    ("tokens.bin a folder", lambda f: make_folder(f / "tokens.bin"), r"tokens\.bin: missing"),
    ("tokens.bin one token short", lambda f: cut_file(f, "tokens.bin", 2), r"tokens\.bin: 10 bytes.*12 bytes"),
    ("tokens.bin one byte long", lambda f: (f / "tokens.bin").write_bytes(bytes(13)), r"13 bytes"),
]


@pytest.mark.parametrize("corrupt, words", [c[1:] for c in CORRUPTIONS], ids=[c[0] for c in CORRUPTIONS])
def test_open_refuses_a_corrupt_store_by_file_and_fix(tmp_path, corrupt, words):
    folder = make_store(tmp_path)
    corrupt(folder)
    with pytest.raises(ValueError, match=words) as error:
        TokenStore.open(folder)
    assert str(folder) in str(error.value) and "overwrite" in str(error.value)  # names the file and the fix


def test_open_refuses_what_is_not_a_store_folder(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="not a folder"):
        TokenStore.open(tmp_path / "file")
    with pytest.raises(ValueError, match="not a folder"):
        TokenStore.open(tmp_path / "nowhere")
    with pytest.raises(TypeError, match="path must be a path"):
        TokenStore.open(123)


def test_an_older_store_without_a_fingerprint_and_extra_files_still_open(tmp_path):
    folder = make_store(tmp_path)
    drop_meta(folder, "tokenizer_fingerprint")
    (folder / "tokenizer").mkdir()
    (folder / "README.md").write_text("notes")
    store = TokenStore.open(folder)
    assert [store.document(i).tolist() for i in range(3)] == DOCUMENTS and store.lengths.tolist() == [3, 1, 2]


def test_offsets_are_checked_in_chunks_of_bounded_size(tmp_path, monkeypatch):
    from hf_lmobj.store import files as token_store_files

    monkeypatch.setattr(token_store_files, "_CHECK_OFFSETS", 2)  # the last document's offsets lie in another chunk
    folder = make_store(tmp_path, [[1], [2], [3], [4], [5, 6]])
    assert len(TokenStore.open(folder)) == 5
    save_offsets(folder, [0, 1, 2, 3, 6, 6])  # document 4 empty, in the last chunk
    with pytest.raises(ValueError, match="document 4 is empty"):
        TokenStore.open(folder)


# ---------------------------------------------------------------------- document / document_slice
@pytest.fixture
def store(tmp_path):
    return write_token_store(tmp_path / "store", DOCUMENTS, 512)


SLICES_REFUSED = [
    ((3, 0, 1), ValueError, r"document index 3 is out of range \[0, 3\).*holds 3 documents"),
    ((10, 0, 0), ValueError, r"document index 10 .*holds 3 documents"),
    ((-1, 0, 1), ValueError, r"document index -1 is out of range"),
    ((0, 2, 1), ValueError, r"document_slice\(0, 2, 1\): \[start, stop\) must lie within \[0, 3\]"),
    ((0, 1, 4), ValueError, r"document 0 has 3 tokens"),
    ((1, 0, 2), ValueError, r"document 1 has 1 tokens"),  # would read document 2's first token
    ((0, -1, 2), ValueError, r"document_slice\(0, -1, 2\)"),
    ((True, 0, 1), TypeError, r"document_slice index must be an int, got True"),
    ((1.0, 0, 1), TypeError, r"document_slice index must be an int, got 1\.0"),
    ((0, 0.0, 1), TypeError, r"document_slice start must be an int"),
    ((0, 0, np.float64(2)), TypeError, r"document_slice stop must be an int"),
    ((0, "0", 2), TypeError, r"document_slice start must be an int"),
]


@pytest.mark.parametrize("arguments, error, words", SLICES_REFUSED)
def test_document_slice_refuses_ranges_outside_the_document(store, arguments, error, words):
    with pytest.raises(error, match=words):
        store.document_slice(*arguments)


@pytest.mark.parametrize(
    "arguments, expected",
    [((2, 0, 2), [9, 10]), ((0, 1, 1), []), ((np.int64(0), np.int32(1), 3), [6, 7]), ((1, 0, 1), [8])],
)
def test_document_slice_reads_ranges_within_the_document(store, arguments, expected):
    ids = store.document_slice(*arguments)
    assert ids.tolist() == expected and ids.dtype == np.int64


@pytest.mark.parametrize(
    "call, error, words",
    [
        (lambda s: s.document(3), ValueError, r"document index 3 .*holds 3 documents"),
        (lambda s: s.document(True), TypeError, r"document index must be an int, got True"),
        (lambda s: s.document(0.0), TypeError, r"document index must be an int"),
        (lambda s: s.tokens(False, 2), TypeError, r"tokens start must be an int"),
        (lambda s: s.tokens(4, 2), ValueError, r"token range \[4, 2\)"),
    ],
    ids=["document past the last", "document True", "document 0.0", "tokens from False", "tokens backwards"],
)
def test_document_and_tokens_refuse_bad_indices(store, call, error, words):
    with pytest.raises(error, match=words):
        call(store)


# ------------------------------------------------------------------------------ from_nanogpt_bin
def nanogpt(tmp_path: Path, data: bytes | None, **kwargs) -> TokenStore:
    path = tmp_path / "train.bin"
    if data is not None:
        path.write_bytes(data)
    return TokenStore.from_nanogpt_bin(path, **({"eos_token_id": 2, "vocab_size": 512} | kwargs))


NANOGPT_REFUSED = [
    ("odd size for uint16", b"\x05\x00\x02", {}, ValueError, r"3 bytes is not a positive whole number of uint16"),
    ("empty file", b"", {}, ValueError, r"0 bytes is not a positive whole number"),
    ("missing file", None, {}, ValueError, r"no such file"),
    ("6 bytes as uint32", bytes(6), {"dtype": "uint32"}, ValueError, r"6 bytes .* uint32 tokens \(4 bytes each\)"),
    ("float dtype", bytes(8), {"dtype": "float32"}, ValueError, r"integer dtype"),
    ("unknown dtype", bytes(8), {"dtype": "uint17"}, ValueError, r"'uint17' is not a numpy dtype"),
    ("big-endian dtype", bytes(8), {"dtype": ">u2"}, ValueError, r"dtype >u2 is big-endian"),
    ("bool eos", bytes(8), {"eos_token_id": True}, TypeError, r"eos_token_id must be an int, got True"),
    ("no eos", bytes(8), {"eos_token_id": None}, TypeError, r"eos_token_id must be an int"),
    ("eos past the vocabulary", bytes(8), {"eos_token_id": 600}, ValueError, r"eos_token_id 600 is outside"),
    ("vocab_size a string", bytes(8), {"vocab_size": "512"}, TypeError, r"vocab_size must be an int"),
    ("vocab_size 0", bytes(8), {"vocab_size": 0}, ValueError, r"vocab_size must be an int >= 1"),
    ("id past the vocabulary", np.array([1, 2, 600], "<u2").tobytes(), {}, ValueError, r"token 2 is id 600"),
    ("negative id", np.array([1, -4], "<i2").tobytes(), {"dtype": "int16"}, ValueError, r"token 1 is id -4"),
]


@pytest.mark.parametrize(
    "data, kwargs, error, words", [c[1:] for c in NANOGPT_REFUSED], ids=[c[0] for c in NANOGPT_REFUSED]
)
def test_nanogpt_bin_refusals(tmp_path, data, kwargs, error, words):
    with pytest.raises(error, match=words):
        nanogpt(tmp_path, data, **kwargs)


def test_nanogpt_bin_refuses_a_folder_and_reads_uint32(tmp_path):
    (tmp_path / "folder.bin").mkdir()
    with pytest.raises(ValueError, match="no such file"):
        TokenStore.from_nanogpt_bin(tmp_path / "folder.bin", eos_token_id=2, vocab_size=512)
    store = nanogpt(tmp_path, np.array([70_000, 2, 5], "<u4").tobytes(), dtype="uint32", vocab_size=80_000)
    assert [store.document(i).tolist() for i in range(len(store))] == [[70_000, 2], [5]]


# --------------------------------------------------------------------------------- from_megatron
def megatron(
    tmp_path: Path,
    sequences=((1, 2, 3), (4,), (5, 6), (7, 8, 9, 10)),
    *,
    lengths=None,
    pointers=None,
    documents=(0, 2, 4),
    code: int = 8,
    version: int = 1,
    counts=None,
    cut: int = 0,
    extra: bytes = b"",
    bin_extra: bytes = b"",
) -> Path:
    """Megatron-LM's MMIDIDX files, each field overridable to build a hostile one."""
    dtype = {8: "<u2", 4: "<i4"}.get(code, "<u2")
    lengths = np.array([len(s) for s in sequences] if lengths is None else lengths, dtype="<i4")
    if pointers is None:
        pointers = np.concatenate([[0], np.cumsum([len(s) for s in sequences])[:-1]]) * np.dtype(dtype).itemsize
    documents = np.asarray(documents, dtype="<i8")
    num_sequences, num_indices = counts or (len(lengths), len(documents))
    prefix = tmp_path / "corpus"
    tokens = b"".join(np.asarray(s, dtype=dtype).tobytes() for s in sequences)
    (tmp_path / "corpus.bin").write_bytes(tokens + bin_extra)
    index = b"MMIDIDX\x00\x00" + struct.pack("<QBQQ", version, code, num_sequences, num_indices)
    index += lengths.tobytes() + np.asarray(pointers, dtype="<i8").tobytes() + documents.tobytes() + extra
    (tmp_path / "corpus.idx").write_bytes(index[: len(index) - cut])
    return prefix


MEGATRON_REFUSED = [
    ("negative length", {"lengths": [3, -1, 2, 4]}, r"sequence 1 has length -1; lengths must be > 0"),
    ("empty sequence", {"sequences": [(1, 2), (), (3,)], "documents": (0, 3)}, r"sequence 1 has length 0"),
    ("lengths disagree with .bin", {"lengths": [3, 1, 2, 3]}, r"bytes, but corpus\.idx indexes 9"),
    (".bin longer than indexed", {"bin_extra": b"\x00\x00"}, r"22 bytes, but corpus\.idx indexes 10"),
    ("pointers not following lengths", {"pointers": [0, 6, 10, 12]}, r"sequence 2 starts at byte 10"),
    ("pointers out of order", {"pointers": [8, 0, 6, 12]}, r"sequence 0 starts at byte 8"),
    ("unknown dtype code", {"code": 9}, r"dtype code 9 is not an integer token dtype"),
    ("float dtype code", {"code": 6}, r"dtype code 6"),
    ("header cut short", {"cut": 106 - 24}, r"cut short \(24 bytes; the header alone is 34\)"),
    ("version 2", {"version": 2}, r"index version 2, only version 1"),
    ("more sequences counted than stored", {"counts": (5, 3)}, r"header counts 5 sequences"),
    ("index cut short", {"cut": 8}, r"bytes, but its header counts 4 sequences"),
    ("trailing bytes", {"extra": b"\x01\x02"}, r"header counts 4 sequences and 3 document indices"),
    ("no sequence", {"sequences": [], "lengths": [], "pointers": [], "documents": (0,)}, r"holds no sequence"),
    ("no document index", {"documents": ()}, r"holds no document index"),
    ("document indices not from 0", {"documents": (1, 2, 4)}, r"document indices must run from 0"),
    ("document index past the sequences", {"documents": (0, 2, 9)}, r"document indices"),
    ("document indices decreasing", {"documents": (0, 3, 2, 4)}, r"never decreasing"),
]


@pytest.mark.parametrize("fields, words", [c[1:] for c in MEGATRON_REFUSED], ids=[c[0] for c in MEGATRON_REFUSED])
def test_megatron_refusals(tmp_path, fields, words):
    prefix = megatron(tmp_path, **fields)
    with pytest.raises(ValueError, match=words):
        TokenStore.from_megatron(prefix, vocab_size=512)


@pytest.mark.parametrize(
    "setup, words",
    [
        (lambda p: (p / "corpus.idx").write_bytes(b""), r"not a Megatron index"),
        (lambda p: (p / "corpus.idx").write_bytes(b"MMIDIDX"), r"cut short \(7 bytes"),
        (lambda p: (p / "corpus.idx").write_bytes(b"NOTMEGATRON" + bytes(40)), r"not a Megatron index"),
        (lambda p: (p / "corpus.bin").unlink(), r"corpus\.bin: no such file"),
        (lambda p: (p / "corpus.idx").unlink(), r"corpus\.idx: no such file"),
    ],
    ids=["empty index", "magic only", "another magic", "no .bin", "no .idx"],
)
def test_megatron_refuses_missing_and_foreign_files(tmp_path, setup, words):
    prefix = megatron(tmp_path)
    setup(tmp_path)
    with pytest.raises(ValueError, match=words):
        TokenStore.from_megatron(prefix, vocab_size=512)


def test_megatron_reads_sequence_modes_and_refuses_a_bad_vocab_size(tmp_path):
    prefix = megatron(tmp_path, extra=bytes(4))  # Megatron-Core's optional int8 mode per sequence
    store = TokenStore.from_megatron(str(prefix) + ".idx", vocab_size=512)
    assert [store.document(i).tolist() for i in range(len(store))] == [[1, 2, 3], [4], [5, 6], [7, 8, 9, 10]]
    assert store.meta["megatron_documents"] == 2
    with pytest.raises(TypeError, match="vocab_size must be an int"):
        TokenStore.from_megatron(prefix, vocab_size=True)


# ------------------------------------------------------------------------------------- the writer
WRITER_REFUSED = [
    ("no document", [], 512, ValueError, r"no documents to write"),
    ("an empty document", [[1], []], 512, ValueError, r"document 1 is empty"),
    ("an empty array", [[1], [2], np.zeros(0, np.int64)], 512, ValueError, r"document 2 is empty"),
    ("id equal to vocab_size", [[1, 2], [3, 512]], 512, ValueError, r"document 1: token id 512 is outside"),
    ("negative id", [[4], [-1, 2]], 512, ValueError, r"document 1: token id -1 is outside"),
    ("uint64 id past int64", [np.array([2**63], np.uint64)], 512, ValueError, r"token id 9223372036854775808"),
    ("a bool among ints", [[1, True]], 512, TypeError, r"document 0: .*got a bool at position 1"),
    ("a bool array", [np.array([True, False])], 512, TypeError, r"got dtype bool"),
    ("integral floats", [[1.0, 2.0]], 512, TypeError, r"document 0: .*got dtype float64"),
    ("a float tensor", [[3], torch.tensor([1.5])], 512, TypeError, r"got dtype torch\.float32"),
    ("a string document", ["hello"], 512, TypeError, r"got a str; tokenize first"),
    ("a None document", [[1], None], 512, TypeError, r"document 1: .*got dtype object"),
    ("a nested document", [[[1, 2]]], 512, ValueError, r"must be 1D .*shape \(1, 2\)"),
    ("one flat list", [5, 6, 7], 512, TypeError, r"document 0 is the int 5.*not one flat list"),
    ("vocab_size 0", [[1]], 0, ValueError, r"vocab_size must be an int >= 1"),
    ("negative vocab_size", [[1]], -5, ValueError, r"vocab_size must be an int >= 1"),
    ("vocab_size a bool", [[0]], True, TypeError, r"vocab_size must be an int"),
    ("vocab_size a float", [[1]], 512.0, TypeError, r"vocab_size must be an int.*512\.0"),
    ("vocab_size a string", [[1]], "512", TypeError, r"vocab_size must be an int.*'512'"),
    ("vocab_size past 2**32", [[1]], 2**32 + 1, ValueError, r"at most 2\*\*32"),
    ("documents None", None, 512, TypeError, r"documents must be an iterable.*NoneType"),
    ("documents a string", "5 6 7", 512, TypeError, r"documents must be an iterable.*str"),
]


@pytest.mark.parametrize(
    "documents, vocab_size, error, words", [c[1:] for c in WRITER_REFUSED], ids=[c[0] for c in WRITER_REFUSED]
)
def test_write_token_store_refuses_bad_documents_and_leaves_nothing(tmp_path, documents, vocab_size, error, words):
    with pytest.raises(error, match=words):
        write_token_store(tmp_path / "store", documents, vocab_size)
    assert list(tmp_path.iterdir()) == []  # no half store, no temporary folder


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        ({"overwrite": "yes"}, TypeError, r"overwrite must be True or False"),
        ({"add_bos": 1}, TypeError, r"add_bos must be True or False"),
        ({"text_column": " "}, ValueError, r"text_column must be a non-empty string"),
        ({"tokenizer": 5}, TypeError, r"tokenizer must be a name \(str\) or a transformers tokenizer"),
        ({"save_tokenizer": "yes"}, TypeError, r"save_tokenizer must be True or False"),
        ({"save_tokenizer": True}, TypeError, r"save_tokenizer=True needs the tokenizer itself, got its name ''"),
        ({"save_tokenizer": True, "tokenizer": "gpt2"}, TypeError, r"needs the tokenizer itself.*'gpt2'"),
    ],
)
def test_write_token_store_refuses_bad_arguments(tmp_path, kwargs, error, words):
    with pytest.raises(error, match=words):
        write_token_store(tmp_path / "store", DOCUMENTS, 512, **kwargs)
    assert list(tmp_path.iterdir()) == []


def test_a_failed_meta_write_leaves_no_store_and_keeps_the_old_one(tmp_path, monkeypatch):
    def failing(path, data, encoding="utf-8"):
        Path(path).write_text(data[:10])  # half a meta.json, then the disk fills up
        raise OSError("No space left on device")

    monkeypatch.setattr(token_store_writer, "write_atomic", failing)
    with pytest.raises(OSError, match="No space left"):
        write_token_store(tmp_path / "store", DOCUMENTS, 512)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    old = make_store(tmp_path, [[1, 2]])
    monkeypatch.setattr(token_store_writer, "write_atomic", failing)
    with pytest.raises(OSError, match="No space left"):
        write_token_store(tmp_path / "store", DOCUMENTS, 512, overwrite=True)
    assert [p.name for p in tmp_path.iterdir()] == ["store"] and TokenStore.open(old).document(0).tolist() == [1, 2]


def test_a_store_that_fails_its_own_checks_never_appears(tmp_path, monkeypatch):
    real = token_store_writer._meta
    monkeypatch.setattr(token_store_writer, "_meta", lambda *a, **k: real(*a, **k) | {"num_tokens": 5})
    with pytest.raises(ValueError, match=r"tokens\.bin: 12 bytes"):
        write_token_store(tmp_path / "store", DOCUMENTS, 512)
    assert list(tmp_path.iterdir()) == []


def test_overwrite_replaces_a_store_or_an_empty_folder_only(tmp_path):
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "thesis.tex").write_text("years of work")
    with pytest.raises(ValueError, match=r"holds \['thesis\.tex'\], which a token store does not"):
        write_token_store(tmp_path / "notes", DOCUMENTS, 512, overwrite=True)
    assert (tmp_path / "notes" / "thesis.tex").read_text() == "years of work"
    (tmp_path / "file").write_text("x")
    with pytest.raises(ValueError, match="is not a folder .*, not a token store"):
        write_token_store(tmp_path / "file", DOCUMENTS, 512, overwrite=True)
    with pytest.raises(ValueError, match="its parent .* is a file"):
        write_token_store(tmp_path / "file" / "store", DOCUMENTS, 512)
    (tmp_path / "empty").mkdir()
    assert len(write_token_store(tmp_path / "empty", DOCUMENTS, 512, overwrite=True)) == 3
    (tmp_path / "empty" / "tokenizer").mkdir()  # what save_tokenizer=True writes inside the store
    assert len(write_token_store(tmp_path / "empty", [[1]], 512, overwrite=True)) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "file", "notes"]


def test_a_failed_rename_puts_the_old_store_back(tmp_path):
    old = make_store(tmp_path, [[1, 2]])
    with pytest.raises(FileNotFoundError, match="vanished"):
        token_store_writer._replace(tmp_path / "vanished", old)  # the new folder cannot be renamed in
    assert TokenStore.open(old).document(0).tolist() == [1, 2] and [p.name for p in tmp_path.iterdir()] == ["store"]


def test_meta_json_is_complete_and_records_the_tokenizer_when_given(tmp_path, tokenizer):
    ids = [tokenizer.encode(text) for text in TEXTS]
    store = write_token_store(tmp_path / "a", ids, len(tokenizer), tokenizer=tokenizer)
    meta = read_meta(store.path)
    assert meta["tokenizer_fingerprint"] == tokenizer_fingerprint(tokenizer) and meta["num_documents"] == 3
    assert read_meta(write_token_store(tmp_path / "b", ids, 512).path)["tokenizer_fingerprint"] is None
    with pytest.raises(ValueError, match=r"vocab_size is 600 but len\(tokenizer\) is 512"):
        write_token_store(tmp_path / "c", ids, 600, tokenizer=tokenizer)


@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        ({"batch_size": True}, TypeError, r"batch_size must be an int"),
        ({"batch_size": 0}, ValueError, r"batch_size must be an int >= 1"),
        ({"num_proc": "2"}, TypeError, r"num_proc must be an int"),
        ({"add_eos": "yes"}, TypeError, r"add_eos must be True or False"),
        ({"text_column": None}, TypeError, r"text_column must be a string"),
        ({"save_tokenizer": 1}, TypeError, r"save_tokenizer must be True or False"),
    ],
)
def test_tokenize_to_token_store_refuses_bad_arguments(tmp_path, tokenizer, kwargs, error, words):
    dataset = datasets.Dataset.from_dict({"text": TEXTS})
    with pytest.raises(error, match=words):
        tokenize_to_token_store(dataset, tokenizer, tmp_path / "store", **kwargs)
    assert list(tmp_path.iterdir()) == []


def test_tokenize_to_token_store_refuses_no_rows_and_a_path_as_tokenizer(tmp_path, tokenizer):
    with pytest.raises(ValueError, match="no documents to write"):
        tokenize_to_token_store(datasets.Dataset.from_dict({"text": []}), tokenizer, tmp_path / "store")
    with pytest.raises(TypeError, match="tokenizer must be a name .* or a transformers tokenizer"):
        tokenize_to_token_store(datasets.Dataset.from_dict({"text": TEXTS}), b"gpt2", tmp_path / "store")
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------- the tokenizer saved inside the store
STORE_FILES = ["meta.json", "offsets.npy", "tokenizer", "tokens.bin"]
TEXT_STORE_FILES = sorted([*STORE_FILES, "document_hashes.npy"])  # a store written from text keeps content hashes


def write_with_tokenizer(tmp_path: Path, tokenizer, how: str, documents=None, **kwargs) -> TokenStore:
    """A store at ``tmp_path / "store"`` written with ``save_tokenizer=True`` by one entry point (``how``)."""
    path = tmp_path / "store"
    if how == "write_token_store":
        ids = documents if documents is not None else [tokenizer.encode(text) for text in TEXTS]
        return write_token_store(path, ids, len(tokenizer), tokenizer=tokenizer, save_tokenizer=True, **kwargs)
    dataset = datasets.Dataset.from_dict({"text": TEXTS * 2})
    if how == "streamed":
        dataset = dataset.to_iterable_dataset()
    num_proc = 2 if how == "num_proc=2" else None
    return tokenize_to_token_store(dataset, tokenizer, path, num_proc=num_proc, save_tokenizer=True, **kwargs)


WRITERS = ["write_token_store", "num_proc=1", "num_proc=2", "streamed"]


@pytest.mark.parametrize("overwrite", [False, True], ids=["new store", "over an old store"])
@pytest.mark.parametrize("how", WRITERS)
def test_the_store_holds_its_tokenizer_at_the_moment_it_appears(tmp_path, monkeypatch, tokenizer, how, overwrite):
    if overwrite:
        make_store(tmp_path, [[1, 2]])  # an old store without tokenizer/
    path, seen, rename = tmp_path / "store", [], Path.rename

    def spying_rename(self, target):
        if Path(target) == path:  # the store appears: what does it hold at that moment?
            seen.append((sorted(os.listdir(self)), sorted(os.listdir(self / "tokenizer"))))
        return rename(self, target)

    monkeypatch.setattr(Path, "rename", spying_rename)
    store = write_with_tokenizer(tmp_path, tokenizer, how, overwrite=overwrite)
    files = STORE_FILES if how == "write_token_store" else TEXT_STORE_FILES
    assert seen == [(files, ["tokenizer.json", "tokenizer_config.json"])]
    assert sorted(os.listdir(store.path)) == files and [p.name for p in tmp_path.iterdir()] == ["store"]


def fail_midway(real, other):
    """``save_pretrained`` that writes half a tokenizer, then the disk fills up."""

    def save(self, folder, **kwargs):
        Path(folder).mkdir(parents=True, exist_ok=True)
        (Path(folder) / "tokenizer.json").write_text('{"version": "1.')
        raise OSError("No space left on device")

    return save


def save_another(real, other):
    """``save_pretrained`` that saves another tokenizer (same size, other merges): it loads back as that one."""
    return lambda self, folder, **kwargs: real(other, folder, **kwargs)


def save_unloadable(real, other):
    """``save_pretrained`` whose ``tokenizer.json`` is cut short: ``AutoTokenizer`` cannot load it back."""

    def save(self, folder, **kwargs):
        written = real(self, folder, **kwargs)
        (Path(folder) / "tokenizer.json").write_text("{")
        return written

    return save


SAVE_FAILURES = [
    ("disk full while saving", fail_midway, OSError, r"No space left on device"),
    ("loads back as another tokenizer", save_another, ValueError, r"loads back as another tokenizer.*fingerprint"),
    ("does not load back", save_unloadable, ValueError, r"does not load back with AutoTokenizer.*JSONDecodeError"),
]


@pytest.mark.parametrize("overwrite", [False, True], ids=["new store", "over an old store"])
@pytest.mark.parametrize("how", ["write_token_store", "num_proc=1"])
@pytest.mark.parametrize("failure, error, words", [c[1:] for c in SAVE_FAILURES], ids=[c[0] for c in SAVE_FAILURES])
def test_a_failed_tokenizer_save_leaves_no_store_and_no_temporary_folder(
    tmp_path, monkeypatch, tokenizer, other_tokenizer, how, overwrite, failure, error, words
):
    if overwrite:
        old = write_with_tokenizer(tmp_path, tokenizer, "write_token_store", documents=[[1, 2]])
    started = []  # the tokenizer is saved (and checked) before any document is read or text tokenized

    def documents():
        started.append(True)
        yield [1, 2, 3]

    monkeypatch.setattr(tokenize_store, "_tokenize_into", lambda *a, **k: started.append(True))
    real = type(tokenizer).save_pretrained
    monkeypatch.setattr(type(tokenizer), "save_pretrained", failure(real, other_tokenizer))
    with pytest.raises(error, match=words):
        write_with_tokenizer(tmp_path, tokenizer, how, documents=documents(), overwrite=overwrite)
    assert started == []
    monkeypatch.undo()
    if not overwrite:
        assert list(tmp_path.iterdir()) == []  # no store at the path, no temporary folder beside it
        return
    assert [p.name for p in tmp_path.iterdir()] == ["store"]  # the old store, whole, with its own tokenizer
    assert TokenStore.open(old.path).document(0).tolist() == [1, 2] and sorted(os.listdir(old.path)) == STORE_FILES
    TokenStore.open(old.path).check_tokenizer(AutoTokenizer.from_pretrained(old.path / "tokenizer"))


@pytest.mark.parametrize("how", WRITERS)
def test_the_store_reopens_and_accepts_its_saved_tokenizer_reloaded(tmp_path, tokenizer, other_tokenizer, how):
    store = write_with_tokenizer(tmp_path, tokenizer, how)
    reloaded = AutoTokenizer.from_pretrained(store.path / "tokenizer")
    reopened = TokenStore.open(store.path)
    reopened.check_tokenizer(reloaded)  # the run's --tokenizer_name <store>/tokenizer is the store's tokenizer
    assert reopened.meta["tokenizer_fingerprint"] == tokenizer_fingerprint(reloaded) == tokenizer_fingerprint(tokenizer)
    texts = [reloaded.decode(reopened.document(i), skip_special_tokens=True) for i in range(len(reopened))]
    assert texts == (TEXTS if how == "write_token_store" else TEXTS * 2)
    with pytest.raises(ValueError, match="written with another tokenizer"):
        reopened.check_tokenizer(other_tokenizer)


def test_without_save_tokenizer_nothing_is_saved(tmp_path, tokenizer):
    store = tokenize_to_token_store(datasets.Dataset.from_dict({"text": TEXTS}), tokenizer, tmp_path / "store")
    assert sorted(os.listdir(store.path)) == ["document_hashes.npy", "meta.json", "offsets.npy", "tokens.bin"]


# ------------------------------------------------------------------------------- check_tokenizer
def test_a_store_of_another_vocabulary_is_refused(tmp_path, tokenizer):
    store = write_token_store(tmp_path / "store", [[5, 6, 104]], 105)  # another tokenizer's 105 ids
    with pytest.raises(ValueError, match=r"source 'web': .* 105-id vocabulary .* tokenizer has 512 ids"):
        store.check_tokenizer(tokenizer, "source 'web'")


def test_a_store_of_another_tokenizer_of_the_same_size_is_refused_by_fingerprint(tmp_path, tokenizer, other_tokenizer):
    dataset = datasets.Dataset.from_dict({"text": TEXTS})
    store = tokenize_to_token_store(dataset, tokenizer, tmp_path / "store")
    assert len(other_tokenizer) == len(tokenizer) == store.vocab_size
    with pytest.raises(ValueError, match=r"written with another tokenizer: meta\.json tokenizer_fingerprint"):
        store.check_tokenizer(other_tokenizer)
    store.check_tokenizer(tokenizer)  # its own tokenizer passes
    tokenizer.save_pretrained(tmp_path / "saved")  # saved apart from the store: its own path does not matter
    TokenStore.open(store.path).check_tokenizer(AutoTokenizer.from_pretrained(tmp_path / "saved"))


def test_parallel_tokenizing_records_the_fingerprint_too(tmp_path, tokenizer, other_tokenizer):
    dataset = datasets.Dataset.from_dict({"text": TEXTS * 2})
    store = tokenize_to_token_store(dataset, tokenizer, tmp_path / "store", num_proc=2)
    assert store.meta["tokenizer_fingerprint"] == tokenizer_fingerprint(tokenizer)
    with pytest.raises(ValueError, match="tokenizer_fingerprint"):
        store.check_tokenizer(other_tokenizer)


def test_an_older_store_is_checked_by_vocabulary_size_only(tmp_path, tokenizer, other_tokenizer):
    store = tokenize_to_token_store(datasets.Dataset.from_dict({"text": TEXTS}), tokenizer, tmp_path / "store")
    drop_meta(store.path, "tokenizer_fingerprint")
    TokenStore.open(store.path).check_tokenizer(other_tokenizer)  # same size: nothing more to compare
    set_meta(store.path, vocab_size=1024, dtype="uint16")
    with pytest.raises(ValueError, match="1024-id vocabulary"):
        TokenStore.open(store.path).check_tokenizer(other_tokenizer)


def test_foreign_files_are_checked_by_vocabulary_size(tmp_path, tokenizer):
    path = tmp_path / "train.bin"
    path.write_bytes(np.array([5, 2, 7], "<u2").tobytes())
    TokenStore.from_nanogpt_bin(path, eos_token_id=2, vocab_size=512).check_tokenizer(tokenizer)
    with pytest.raises(ValueError, match="50257-id vocabulary"):
        TokenStore.from_nanogpt_bin(path, eos_token_id=2, vocab_size=50_257).check_tokenizer(tokenizer)
    with pytest.raises(ValueError, match="600-id vocabulary"):
        TokenStore.from_megatron(megatron(tmp_path), vocab_size=600).check_tokenizer(tokenizer)


def test_check_tokenizer_refuses_what_is_not_a_tokenizer(store):
    with pytest.raises(TypeError, match="tokenizer must be a transformers tokenizer, got str"):
        store.check_tokenizer("gpt2")


def test_a_run_opening_a_store_refuses_another_tokenizer_by_source_name(tmp_path, tokenizer, other_tokenizer):
    dataset = datasets.Dataset.from_dict({"text": TEXTS})
    location = str(tokenize_to_token_store(dataset, tokenizer, tmp_path / "store").path)
    assert len(_open_store("web", location, tokenizer).lengths) == 3
    with pytest.raises(ValueError, match=r"source 'web': the token store .* another tokenizer"):
        _open_store("web", location, other_tokenizer)
    small = write_token_store(tmp_path / "small", [[5, 6, 104]], 105).path
    with pytest.raises(ValueError, match=r"source 'small': .*105-id vocabulary"):
        _open_store("small", str(small), tokenizer)


def _open_store(name: str, location: str, tokenizer):
    """The run's training source of a token store (no held-out rule), as the pre-training path opens it."""
    spec = SourceSpec("token store", name, location)
    return _training_source(spec, TokenStore.open(location), tokenizer, get_objective("causal"), None, HeldOut(0.0))[0]
