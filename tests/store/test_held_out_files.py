"""Token stores hold out by content (issue 35, points 2 and 5): what tokenize_corpus writes, and its readers.

Entry points: ``recipes/tokenize_corpus.py`` (a JSONL folder with an empty, a whitespace-only and a one-token
document: held_out.jsonl, document_hashes.npy, the counts in meta.json, the same bytes with ``--num_proc 2`` and
``--streaming true``), ``write_token_store`` (hashes and held-out texts given: refused when they disagree), and
the readers ``TokenStore.document_hashes`` / ``held_out_texts`` / ``held_out_info`` / ``skipped_documents`` /
``tokenizer_origin`` (a cut-short hashes file, held_out.jsonl with a non-object line, invalid UTF-8, no text key,
a meta.json that disagrees).
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import datasets
import numpy as np
import pytest

from hf_lmobj.held_out import HASH_NAME, HeldOut, content_hash
from hf_lmobj.store.token_store import TokenStore
from hf_lmobj.store.tokenize_text import tokenize_to_token_store
from hf_lmobj.store.write import write_token_store
from tests.testing_utils import load_recipe

WORDS = ["zorvu", "taleki", "moshi", "qaxo", "drifeyu", "penulo", "rakivu", "lezor"]
ONE_TOKEN, EMPTY, BLANK = "x", "", " \n\t "
STORE_ROOT_FILES = ["document_hashes.npy", "held_out.jsonl", "meta.json", "offsets.npy", "tokens.bin"]


def generated(count: int, seed: int = 0) -> list[str]:
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=int(rng.integers(3, 15)))) + ".\n" for _ in range(count)]


def source_texts() -> list[str]:
    """40 generated documents with an empty, a whitespace-only and a one-token one among them."""
    texts = generated(40)
    texts[3], texts[17], texts[30] = EMPTY, BLANK, ONE_TOKEN
    return texts


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """The texts as two JSONL files; ``datasets`` reads them file by file (``part-0`` then ``part-1``)."""
    root = tmp_path_factory.mktemp("corpus")
    texts = source_texts()
    for index, part in enumerate((texts[:25], texts[25:])):
        (root / f"part-{index}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in part))
    return root


def tokenize(folder: Path, output: Path, *flags: str) -> TokenStore:
    args = ["--dataset_name", str(folder), "--validation_fraction", "0.25", "--vocab_size", "400", "--no_add_bos",
            "--no_add_eos", "--output_dir", str(output)]  # fmt: skip
    return load_recipe("tokenize_corpus").main([*args, *flags])


@pytest.fixture(scope="module")
def store(folder, tmp_path_factory) -> TokenStore:
    return tokenize(folder, tmp_path_factory.mktemp("stores") / "one")


RULE = HeldOut(0.25)


def picked(texts: list[str]) -> list[str]:
    return [t for t in texts if t.strip() and RULE.by_rule(content_hash(t))]


def trained(texts: list[str]) -> list[str]:
    return [t for t in texts if t.strip() and t != ONE_TOKEN and not RULE.by_rule(content_hash(t))]


# ----------------------------------------------------------------------- what tokenize_corpus writes
def test_held_out_jsonl_holds_exactly_the_documents_the_rule_picks_in_source_order(store):
    lines = (store.path / "held_out.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line) for line in lines] == [{"text": t} for t in picked(source_texts())]
    assert store.held_out_texts() == picked(source_texts()) and len(lines) == 7
    assert store.held_out_info == {"hash": HASH_NAME, "fraction": 0.25, "documents": 7,
                                   "bytes": sum(len(t.encode()) for t in picked(source_texts())), "copies": 0}  # fmt: skip


def test_the_empty_whitespace_and_one_token_documents_are_skipped_and_counted(store, capsys):
    assert store.skipped_documents == {"empty": 1, "whitespace": 1, "one_token": 1}
    assert store.meta["skipped_documents"] == store.skipped_documents
    assert store.num_documents == len(trained(source_texts())) == 30


def test_document_hashes_are_the_content_hashes_of_the_stored_texts_and_none_is_held_out(store):
    hashes = store.document_hashes
    assert hashes.dtype == np.uint64 and hashes.shape == (store.num_documents,)
    assert hashes.tolist() == [content_hash(t) for t in trained(source_texts())]
    held = {content_hash(t) for t in store.held_out_texts()}
    assert not held & set(hashes.tolist()) and not RULE.mask(hashes).any()


def test_the_stored_documents_decode_to_the_training_texts(store):
    from transformers import AutoTokenizer

    saved = AutoTokenizer.from_pretrained(store.path / "tokenizer")
    assert [saved.decode(store.document(i)) for i in range(len(store))] == trained(source_texts())
    origin = store.tokenizer_origin  # trained on the training side: the one-token text is in its sample too
    assert origin["origin"] == "trained" and origin["sample_documents"] == 31


@pytest.mark.parametrize(
    "flags", [["--num_proc", "2"], ["--streaming", "true"], ["--num_proc", "3", "--batch_size", "4"]]
)
def test_parallel_and_streamed_runs_write_the_same_bytes(store, folder, tmp_path, flags):
    other = tokenize(folder, tmp_path / "other", *flags)
    assert sorted(p.name for p in other.path.iterdir() if p.is_file()) == STORE_ROOT_FILES
    for name in STORE_ROOT_FILES:
        assert (other.path / name).read_bytes() == (store.path / name).read_bytes(), name
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other"]  # no shard or temporary folder left


def test_a_zero_fraction_holds_nothing_out_and_writes_no_held_out_file(folder, tmp_path, capsys):
    store = tokenize(folder, tmp_path / "all", "--validation_fraction", "0")
    assert not (store.path / "held_out.jsonl").exists() and store.held_out_texts() is None
    assert store.held_out_info == {"hash": HASH_NAME, "fraction": 0.0, "documents": 0, "bytes": 0, "copies": 0}
    assert store.num_documents == 37 and store.skipped_documents == {"empty": 1, "whitespace": 1, "one_token": 1}
    assert "held out 0 documents (0 bytes, fraction 0)" in capsys.readouterr().out


def test_the_summary_line_prints_the_held_out_and_skipped_counts(folder, tmp_path, capsys):
    store = tokenize(folder, tmp_path / "s")
    out = capsys.readouterr().out
    held = store.held_out_info
    assert f"held out 7 documents ({held['bytes']:,} bytes, fraction 0.25)" in out
    assert "skipped 1 empty, 1 whitespace-only, 1 one-token" in out and "30 documents" in out


def test_every_document_held_out_or_skipped_is_refused_with_the_counts(tmp_path):
    from hf_lmobj.corpus import build_tokenizer

    tokenizer = build_tokenizer(512, max_documents=20)
    texts = [EMPTY, *picked(generated(40))[:3]]
    dataset = datasets.Dataset.from_dict({"text": texts})
    with pytest.raises(ValueError, match=r"every document was held out \(3\) or skipped \(1 empty\)"):
        tokenize_to_token_store(dataset, tokenizer, tmp_path / "s", validation_fraction=0.25)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("num_proc", [None, 2])
def test_a_text_that_is_not_a_string_is_refused_by_its_row(tmp_path, num_proc):
    from hf_lmobj.corpus import build_tokenizer

    dataset = datasets.Dataset.from_dict({"text": ["zorvu taleki", "moshi", None, "qaxo"]})
    with pytest.raises(TypeError, match=r"column 'text' must hold strings: row 2 holds NoneType"):
        tokenize_to_token_store(dataset, build_tokenizer(512, max_documents=20), tmp_path / "s", num_proc=num_proc)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"validation_fraction": 1.0}, ValueError, r"validation_fraction must be a finite number in \[0, 1\)"),
        ({"validation_fraction": True}, TypeError, r"validation_fraction must be a number"),
        ({"tokenizer_origin": {"name": "gpt2"}}, TypeError, r"tokenizer_origin must be a dict with a string 'origin'"),
        ({"tokenizer_origin": {"origin": "given", "at": object()}}, TypeError, r"tokenizer_origin must be JSON-able"),
    ],
)
def test_tokenize_to_token_store_refuses_bad_held_out_arguments(tmp_path, kwargs, error, words):
    from hf_lmobj.corpus import build_tokenizer

    dataset = datasets.Dataset.from_dict({"text": generated(4)})
    with pytest.raises(error, match=words):
        tokenize_to_token_store(dataset, build_tokenizer(512, max_documents=20), tmp_path / "s", **kwargs)
    assert list(tmp_path.iterdir()) == []


# ----------------------------------------------------------------------- write_token_store given hashes and texts
DOCS = [[5, 6, 7], [8, 9], [10, 11]]


def kept_hashes(count: int) -> list[int]:
    """``count`` content hashes of texts the 0.25 rule does not hold out."""
    return [content_hash(t) for t in trained(generated(40))[:count]]


def test_write_token_store_keeps_given_hashes_held_out_texts_and_origin(tmp_path):
    held = picked(generated(40))[:2]
    store = write_token_store(tmp_path / "s", DOCS, 512, document_hashes=np.array(kept_hashes(3), dtype=np.uint64),
                              held_out_texts=iter(held), validation_fraction=0.25,
                              tokenizer_origin={"origin": "given", "name": "mine"})  # fmt: skip
    assert store.document_hashes.tolist() == kept_hashes(3) and store.held_out_texts() == held
    assert store.held_out_texts(limit=1) == held[:1] and store.held_out_texts(limit=0) == []
    assert store.held_out_info["documents"] == 2 and store.tokenizer_origin == {"origin": "given", "name": "mine"}
    assert store.skipped_documents is None  # ids alone: nothing was skipped here
    reopened = pickle.loads(pickle.dumps(store))
    assert reopened.document_hashes.tolist() == kept_hashes(3) and reopened.held_out_texts() == held


def test_stores_without_hashes_or_held_out_text_say_none(tmp_path):
    ids = write_token_store(tmp_path / "ids", DOCS, 512)
    (tmp_path / "train.bin").write_bytes(np.array([5, 6, 1, 7, 1], dtype=np.uint16).tobytes())
    nanogpt = TokenStore.from_nanogpt_bin(tmp_path / "train.bin", eos_token_id=1, vocab_size=512)
    for store in (ids, nanogpt):
        assert (store.document_hashes, store.held_out_texts(), store.held_out_info, store.tokenizer_origin) == (
            None, None, None, None)  # fmt: skip


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"document_hashes": kept_hashes(2)}, ValueError, r"document_hashes ends before document 2"),
        ({"document_hashes": kept_hashes(4)}, ValueError, r"document_hashes holds more hashes than the 3 documents"),
        ({"document_hashes": [1, 2, -1]}, ValueError, r"document_hashes\[2\] must be in \[0, 2\*\*64\)"),
        ({"document_hashes": [1, 2, 2**64]}, ValueError, r"document_hashes\[2\] must be in \[0, 2\*\*64\)"),
        ({"document_hashes": [1, 2.0, 3]}, TypeError, r"document_hashes\[1\] must be an int content hash"),
        ({"document_hashes": [1, None, 3]}, TypeError, r"document_hashes\[1\] must be an int content hash"),
        ({"document_hashes": [True, 2, 3]}, TypeError, r"document_hashes\[0\] must be an int content hash"),
        ({"document_hashes": "123"}, TypeError, r"document_hashes must be an iterable .* got str"),
        ({"held_out_texts": ["zorvu"]}, ValueError, r"held_out_texts needs validation_fraction"),
        ({"held_out_texts": "zorvu", "validation_fraction": 0.25}, TypeError, r"held_out_texts must be an iterable"),
        ({"held_out_texts": ["zorvu", ""], "validation_fraction": 0.25}, ValueError, r"held_out_texts\[1\] is empty"),
        ({"held_out_texts": [" \n"], "validation_fraction": 0.25}, ValueError, r"held_out_texts\[0\] is whitespace"),
        ({"held_out_texts": ["zorvu", 5], "validation_fraction": 0.25}, TypeError, r"held_out_texts\[1\] must be"),
        ({"held_out_texts": ["a\ud800"], "validation_fraction": 0.25}, ValueError, r"held_out_texts\[0\] is not valid"),
        ({"validation_fraction": 1.5}, ValueError, r"validation_fraction must be a finite number in \[0, 1\)"),
        ({"tokenizer_origin": "trained"}, TypeError, r"tokenizer_origin must be a dict"),
    ],
    ids=[
        "hashes short",
        "hashes long",
        "hash negative",
        "hash too big",
        "hash a float",
        "hash None",
        "hash a bool",
        "hashes a string",
        "held-out without fraction",
        "held-out a string",
        "held-out empty",
        "held-out blank",
        "held-out an int",
        "held-out lone surrogate",
        "fraction 1.5",
        "origin a string",
    ],  # fmt: skip
)
def test_write_token_store_refuses_bad_hashes_and_held_out_texts(tmp_path, kwargs, error, words):
    with pytest.raises(error, match=words):
        write_token_store(tmp_path / "s", DOCS, 512, **kwargs)
    assert list(tmp_path.iterdir()) == []  # no half store, no temporary folder


def test_a_stored_document_that_is_held_out_is_refused(tmp_path):
    by_rule = content_hash(picked(generated(40))[0])
    with pytest.raises(ValueError, match=rf"document 1 \(content hash {by_rule}\) is held out"):
        write_token_store(tmp_path / "s", DOCS, 512, document_hashes=[kept_hashes(1)[0], by_rule, 7 * 2**61],
                          validation_fraction=0.25)  # fmt: skip
    text = trained(generated(40))[0]  # not held out by the rule, but given as a held-out text
    with pytest.raises(ValueError, match=r"document 0 \(content hash \d+\) is held out .* as a held-out text"):
        write_token_store(tmp_path / "s", DOCS[:1], 512, document_hashes=[content_hash(text)],
                          held_out_texts=[text], validation_fraction=0.25)  # fmt: skip
    assert list(tmp_path.iterdir()) == []


def test_overwrite_replaces_a_store_with_hashes_and_held_out_text(store, folder, tmp_path):
    tokenize(folder, tmp_path / "s")
    replaced = write_token_store(tmp_path / "s", [[1, 2]], 512, overwrite=True)
    assert sorted(p.name for p in replaced.path.iterdir()) == ["meta.json", "offsets.npy", "tokens.bin"]


# ----------------------------------------------------------------------- hostile files for the readers
def copy_store(store: TokenStore, tmp_path: Path) -> Path:
    import shutil

    return Path(shutil.copytree(store.path, tmp_path / "copy"))


def set_meta(folder: Path, **changes) -> None:
    meta = json.loads((folder / "meta.json").read_text()) | changes
    (folder / "meta.json").write_text(json.dumps(meta))


OPEN_REFUSALS = [
    ("hashes cut short", lambda f: (f / "document_hashes.npy").write_bytes((f / "document_hashes.npy").read_bytes()[:-8]),
     r"document_hashes\.npy: unreadable, cut short"),
    ("hashes one short", lambda f: np.save(f / "document_hashes.npy", np.load(f / "document_hashes.npy")[:-1]),
     r"document_hashes\.npy: uint64 of shape \(29,\), but the store holds 30 documents"),
    ("hashes int64", lambda f: np.save(f / "document_hashes.npy", np.load(f / "document_hashes.npy").astype(np.int64)),
     r"document_hashes\.npy: int64 of shape \(30,\)"),
    ("hashes 2-D", lambda f: np.save(f / "document_hashes.npy", np.zeros((30, 1), np.uint64)),
     r"document_hashes\.npy: uint64 of shape \(30, 1\)"),
    ("hashes of objects", lambda f: np.save(f / "document_hashes.npy", np.array([1, None], dtype=object),
                                            allow_pickle=True), r"document_hashes\.npy: unreadable"),
    ("held_out.jsonl missing", lambda f: (f / "held_out.jsonl").unlink(),
     r"held_out\.jsonl is missing, but meta\.json records 7 held-out documents"),
    ("held_out.jsonl a folder", lambda f: ((f / "held_out.jsonl").unlink(), (f / "held_out.jsonl").mkdir()),
     r"held_out\.jsonl is not a file"),
    ("held_out a list", lambda f: set_meta(f, held_out=[0.25]), r"held_out must be \{'hash': 'blake2b-64'"),
    ("held_out another hash", lambda f: set_meta(f, held_out={"hash": "sha1", "fraction": 0.25, "documents": 7,
                                                              "bytes": 1}), r"held_out must be"),
    ("held_out fraction 1", lambda f: set_meta(f, held_out={"hash": HASH_NAME, "fraction": 1, "documents": 7,
                                                            "bytes": 1}), r"held_out must be"),
    ("held_out documents -1", lambda f: set_meta(f, held_out={"hash": HASH_NAME, "fraction": 0.25, "documents": -1,
                                                              "bytes": 1}), r"held_out must be"),
    ("skipped a key short", lambda f: set_meta(f, skipped_documents={"empty": 1, "whitespace": 1}),
     r"skipped_documents must map \['empty', 'whitespace', 'one_token'\]"),
    ("skipped a float", lambda f: set_meta(f, skipped_documents={"empty": 1.0, "whitespace": 1, "one_token": 1}),
     r"skipped_documents must map"),
    ("origin without origin", lambda f: set_meta(f, tokenizer_origin={"name": "gpt2"}),
     r"tokenizer_origin must be an object with a string 'origin'"),
]  # fmt: skip


@pytest.mark.parametrize(("corrupt", "words"), [c[1:] for c in OPEN_REFUSALS], ids=[c[0] for c in OPEN_REFUSALS])
def test_open_refuses_hashes_and_held_out_metadata_that_disagree(store, tmp_path, corrupt, words):
    folder = copy_store(store, tmp_path)
    corrupt(folder)
    with pytest.raises(ValueError, match=words):
        TokenStore.open(folder)


def rewrite_line(folder: Path, number: int, data: bytes) -> None:
    lines = (folder / "held_out.jsonl").read_bytes().splitlines(keepends=True)
    lines[number - 1] = data
    (folder / "held_out.jsonl").write_bytes(b"".join(lines))


LINE_REFUSALS = [
    ("a list line", lambda f: rewrite_line(f, 2, b'["zorvu"]\n'), r"held_out\.jsonl, line 2: must be a JSON object"),
    ("a number line", lambda f: rewrite_line(f, 1, b"7\n"), r"held_out\.jsonl, line 1: must be a JSON object"),
    ("no text key", lambda f: rewrite_line(f, 3, b'{"content": "zorvu"}\n'), r"line 3: must be a JSON object"),
    ("text not a string", lambda f: rewrite_line(f, 3, b'{"text": 5}\n'), r"line 3: must be a JSON object"),
    ("invalid UTF-8", lambda f: rewrite_line(f, 2, b'{"text": "zor\xffvu"}\n'), r"line 2 is not UTF-8 text \(byte 13 of the line\)"),
    ("an empty line", lambda f: rewrite_line(f, 4, b"\n"), r"line 4 is not valid JSON"),
    ("cut mid-line", lambda f: (f / "held_out.jsonl").write_bytes((f / "held_out.jsonl").read_bytes()[:-9]),
     r"line 7 is not valid JSON \(cut short or corrupt"),
    ("a line short", lambda f: rewrite_line(f, 7, b""), r"held_out\.jsonl: 6 documents, but meta\.json records 7"),
    ("a line more", lambda f: rewrite_line(f, 7, b'{"text": "a"}\n{"text": "b"}\n'), r"8 documents, but meta"),
]  # fmt: skip


@pytest.mark.parametrize(("corrupt", "words"), [c[1:] for c in LINE_REFUSALS], ids=[c[0] for c in LINE_REFUSALS])
def test_held_out_texts_refuses_a_bad_line_naming_the_file_and_line(store, tmp_path, corrupt, words):
    folder = copy_store(store, tmp_path)
    corrupt(folder)
    reopened = TokenStore.open(folder)  # the lines are read when asked, not at open
    with pytest.raises(ValueError, match=words):
        reopened.held_out_texts()


@pytest.mark.parametrize(
    ("limit", "error", "words"),
    [(-1, ValueError, r"limit must be an int >= 0"), (1.5, TypeError, r"limit must be an int"),
     (True, TypeError, r"limit must be an int"), ("2", TypeError, r"limit must be an int")],
)  # fmt: skip
def test_held_out_texts_refuses_a_bad_limit(store, limit, error, words):
    with pytest.raises(error, match=words):
        store.held_out_texts(limit)
