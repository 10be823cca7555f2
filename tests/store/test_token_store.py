"""hf_lmobj.store.token_store: the on-disk format, its refusals, tokenizing into it, and the nanoGPT / Megatron readers."""

from __future__ import annotations

import json
import pickle
import struct

import datasets
import numpy as np
import pytest

from hf_lmobj.corpus import build_tokenizer
from hf_lmobj.store import writer as token_store_writer
from hf_lmobj.store.files import TOKEN_STORE_FORMAT, token_dtype
from hf_lmobj.store.token_store import TokenStore
from hf_lmobj.store.tokenize_text import tokenize_to_token_store
from hf_lmobj.store.write import write_token_store

TEXTS = [
    "def f(x):\n    return x + 1\n",
    "import os\nprint(os.sep)\n",
    "",  # an empty text is skipped (counted), never stored
    "class A:\n    pass\n",
    "x = [i * i for i in range(10)]\n",
    "é ü — unicode\n",
    "while True:\n    break\n",
]


@pytest.fixture(scope="module")
def small_tokenizer():
    return build_tokenizer(vocab_size=512, max_documents=20)


def random_documents(seed: int, count: int, vocab_size: int) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, vocab_size, size=int(rng.integers(1, 40))) for _ in range(count)]


def read_raw(folder, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """The store's files read without TokenStore: the flat tokens and the offsets."""
    return np.fromfile(folder / "tokens.bin", dtype=dtype), np.load(folder / "offsets.npy")


@pytest.mark.parametrize("vocab_size, dtype", [(65_536, "<u2"), (65_537, "<u4")])
def test_random_documents_round_trip_with_the_dtype_of_the_vocabulary(tmp_path, vocab_size, dtype):
    documents = random_documents(0, 50, vocab_size)
    documents[7][0] = vocab_size - 1  # the largest id fits
    store = write_token_store(tmp_path / "s", iter(documents), vocab_size, tokenizer="test")
    tokens, offsets = read_raw(tmp_path / "s", dtype)
    np.testing.assert_array_equal(tokens, np.concatenate(documents))
    np.testing.assert_array_equal(offsets, np.cumsum([0] + [len(d) for d in documents]))
    assert offsets.dtype == np.int64 and store.dtype == np.dtype(dtype)
    assert [store.document(i).tolist() for i in range(len(store))] == [d.tolist() for d in documents]
    assert store.document(0).dtype == np.int64
    np.testing.assert_array_equal(store.lengths, [len(d) for d in documents])
    meta = json.loads((tmp_path / "s" / "meta.json").read_text())
    assert meta["format"] == TOKEN_STORE_FORMAT and meta["dtype"] == np.dtype(dtype).name
    assert (meta["num_documents"], meta["num_tokens"], meta["vocab_size"]) == (50, tokens.size, vocab_size)
    assert meta["tokenizer"] == "test" and isinstance(meta["content_hash"], str)


def test_token_dtype_boundaries_and_refusals():
    assert [token_dtype(v).name for v in (1, 2**16, 2**16 + 1, 2**32)] == ["uint16", "uint16", "uint32", "uint32"]
    for bad in (0, -1, 2**32 + 1):
        with pytest.raises(ValueError, match="vocab_size"):
            token_dtype(bad)


def test_writing_in_many_chunks_gives_the_same_bytes_and_names_the_bad_document(tmp_path, monkeypatch):
    documents = random_documents(1, 30, 300)
    write_token_store(tmp_path / "one", documents, 300)
    monkeypatch.setattr(token_store_writer, "_CHUNK_TOKENS", 5)  # a flush every few documents
    write_token_store(tmp_path / "many", documents, 300)
    for name in ("tokens.bin", "offsets.npy", "meta.json"):
        assert (tmp_path / "one" / name).read_bytes() == (tmp_path / "many" / name).read_bytes()
    documents[23][-1] = 300
    with pytest.raises(ValueError, match=r"document 23: token id 300 .*vocab_size=300"):
        write_token_store(tmp_path / "bad", documents, 300)


def test_document_and_token_ranges_and_their_errors(tmp_path):
    documents = random_documents(2, 10, 1000)
    store = write_token_store(tmp_path / "s", documents, 1000)
    assert store.document(0).tolist() == documents[0].tolist()
    assert store.document(9).tolist() == documents[9].tolist()
    flat = np.concatenate(documents)
    assert store.tokens(3, 17).tolist() == flat[3:17].tolist() and store.tokens(5, 5).size == 0
    for index in (10, -1):
        with pytest.raises(ValueError, match=r"out of range \[0, 10\)"):
            store.document(index)
    with pytest.raises(ValueError, match="token range"):
        store.tokens(0, flat.size + 1)


def test_reads_go_through_the_memory_map_and_pickles_carry_no_tokens(tmp_path):
    documents = random_documents(3, 2000, 512)
    store = write_token_store(tmp_path / "s", documents, 512)
    assert not store.offsets.flags.owndata  # a view of the file's map, not a copy
    with open(tmp_path / "s" / "tokens.bin", "r+b") as file:  # change document 3 on disk, after opening
        file.seek(int(store.offsets[3]) * 2)
        file.write(np.array([511], dtype="<u2").tobytes())
    assert store.document(3)[0] == 511  # read now from the file, not from a copy loaded at open
    payload = pickle.dumps(store)
    assert len(payload) < (tmp_path / "s" / "tokens.bin").stat().st_size // 10
    again = pickle.loads(payload)
    np.testing.assert_array_equal(again.document(3), store.document(3))
    assert again.fingerprint() == store.fingerprint() and len(again) == 2000


def test_a_failing_write_leaves_nothing_and_keeps_the_old_store(tmp_path):
    def failing(documents, after):
        for i, document in enumerate(documents):
            if i == after:
                raise RuntimeError("source broke")
            yield document

    documents = random_documents(4, 20, 512)
    with pytest.raises(RuntimeError, match="source broke"):
        write_token_store(tmp_path / "s", failing(documents, 12), 512)
    assert list(tmp_path.iterdir()) == []
    write_token_store(tmp_path / "s", documents[:5], 512)
    with pytest.raises(RuntimeError, match="source broke"):
        write_token_store(tmp_path / "s", failing(documents, 12), 512, overwrite=True)
    assert [p.name for p in tmp_path.iterdir()] == ["s"]
    assert TokenStore.open(tmp_path / "s").document(4).tolist() == documents[4].tolist()
    write_token_store(tmp_path / "s", documents, 512, overwrite=True)
    assert len(TokenStore.open(tmp_path / "s")) == 20 and [p.name for p in tmp_path.iterdir()] == ["s"]


def test_refusals_name_the_cause(tmp_path):
    with pytest.raises(ValueError, match=r"document 1: token id 512 .*vocab_size=512"):
        write_token_store(tmp_path / "a", [[1, 2], [3, 512]], 512)
    with pytest.raises(ValueError, match=r"document 0: token id -1"):
        write_token_store(tmp_path / "a", [[-1, 2]], 512)
    with pytest.raises(ValueError, match=r"document 1 is empty"):
        write_token_store(tmp_path / "a", [[1], []], 512)
    with pytest.raises(TypeError, match="list of ints, got dtype float64"):  # the wrong kind: never cast
        write_token_store(tmp_path / "a", [[1.5]], 512)
    with pytest.raises(ValueError, match="no documents"):
        write_token_store(tmp_path / "a", [], 512)
    assert list(tmp_path.iterdir()) == []
    store = write_token_store(tmp_path / "a", [[1, 2, 3], [4]], 512)
    with pytest.raises(ValueError, match="already exists; pass overwrite=True"):
        write_token_store(tmp_path / "a", [[1]], 512)
    (store.path / "tokens.bin").write_bytes(b"\x01\x00" * 3)  # one token short
    with pytest.raises(ValueError, match=r"tokens\.bin: 6 bytes.*overwrite=True"):
        TokenStore.open(store.path)
    np.save(store.path / "offsets.npy", np.array([0, 1, 3], dtype=np.int64))  # ends short of the 4 tokens
    (store.path / "tokens.bin").write_bytes(b"\x01\x00" * 4)
    with pytest.raises(ValueError, match=r"offsets\.npy"):
        TokenStore.open(store.path)
    (store.path / "meta.json").unlink()
    with pytest.raises(ValueError, match=r"meta\.json is missing.*overwrite=True"):
        TokenStore.open(store.path)
    with pytest.raises(ValueError, match="not a folder"):
        TokenStore.open(tmp_path / "nowhere")
    with pytest.raises(TypeError, match="TokenStore.open"):
        TokenStore()


def test_fingerprint_follows_the_content_not_the_path(tmp_path):
    documents = random_documents(5, 8, 512)
    a = write_token_store(tmp_path / "a", documents, 512)
    b = write_token_store(tmp_path / "b", documents, 512, tokenizer="another name")
    assert a.fingerprint() == b.fingerprint()
    documents[2][0] = (documents[2][0] + 1) % 512
    assert write_token_store(tmp_path / "c", documents, 512).fingerprint() != a.fingerprint()
    moved = documents[:2] + [np.concatenate([documents[2], documents[3]])] + documents[4:]  # same tokens, other split
    assert write_token_store(tmp_path / "d", moved, 512).fingerprint() != a.fingerprint()


def reference_documents(tokenizer, texts: list[str]) -> list[list[int]]:
    return [
        [tokenizer.bos_token_id, *tokenizer.encode(text, add_special_tokens=False), tokenizer.eos_token_id]
        for text in texts
    ]


def test_tokenizing_in_parallel_gives_the_same_bytes_as_one_process(tmp_path, small_tokenizer):
    dataset = datasets.Dataset.from_dict({"text": TEXTS * 3, "other": list(range(21))})
    one = tokenize_to_token_store(dataset, small_tokenizer, tmp_path / "one", batch_size=4)
    two = tokenize_to_token_store(dataset, small_tokenizer, tmp_path / "two", num_proc=2, batch_size=4)
    for name in ("tokens.bin", "offsets.npy", "meta.json", "document_hashes.npy"):
        assert (one.path / name).read_bytes() == (two.path / name).read_bytes(), name
    stored = [text for text in TEXTS * 3 if text]
    assert [one.document(i).tolist() for i in range(len(one))] == reference_documents(small_tokenizer, stored)
    assert one.skipped_documents == {"empty": 3, "whitespace": 0, "one_token": 0}
    assert one.vocab_size == len(small_tokenizer) and one.meta["text_column"] == "text" and one.meta["add_eos"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["one", "two"]  # no shard folders left


def test_a_streamed_dataset_gives_the_same_store_as_the_map_style_one(tmp_path, small_tokenizer):
    dataset = datasets.Dataset.from_dict({"text": TEXTS})
    mapped = tokenize_to_token_store(dataset, small_tokenizer, tmp_path / "m", add_bos=False, batch_size=3)
    stream = dataset.to_iterable_dataset(num_shards=2)
    streamed = tokenize_to_token_store(stream, small_tokenizer, tmp_path / "s", add_bos=False, batch_size=3)
    for name in ("tokens.bin", "offsets.npy"):
        assert (mapped.path / name).read_bytes() == (streamed.path / name).read_bytes()
    assert streamed.fingerprint() == mapped.fingerprint() and streamed.document(0)[0] != small_tokenizer.bos_token_id


def test_special_token_text_stays_text(tmp_path, small_tokenizer):
    text = "a </s> b <s> c <mask>"
    store = tokenize_to_token_store(datasets.Dataset.from_dict({"text": [text]}), small_tokenizer, tmp_path / "s")
    ids = store.document(0).tolist()
    specials = set(small_tokenizer.all_special_ids)
    assert ids[0] == small_tokenizer.bos_token_id and ids[-1] == small_tokenizer.eos_token_id
    assert not specials & set(ids[1:-1])
    assert small_tokenizer.decode(ids[1:-1]) == text


def test_tokenizing_refuses_a_missing_column_and_a_corpus_with_nothing_to_store(tmp_path, small_tokenizer):
    dataset = datasets.Dataset.from_dict({"content": ["x"]})
    with pytest.raises(ValueError, match="text_column"):
        tokenize_to_token_store(dataset, small_tokenizer, tmp_path / "s")
    dataset = datasets.Dataset.from_dict({"text": ["x", ""]})  # one token without BOS / EOS, and an empty text
    words = r"every document was held out \(0\) or skipped \(1 empty, 1 one_token\)"
    with pytest.raises(ValueError, match=words):
        tokenize_to_token_store(dataset, small_tokenizer, tmp_path / "s", add_bos=False, add_eos=False)
    with pytest.raises(ValueError, match=words):
        tokenize_to_token_store(dataset, small_tokenizer, tmp_path / "s", add_bos=False, add_eos=False, num_proc=2)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("ends_with_eos", [True, False])
def test_nanogpt_bin_documents_end_at_each_eos(tmp_path, ends_with_eos):
    eos = 50_256
    documents = [[5, 6, eos], [eos], [7, 8, 9, eos], [10, eos]]
    if not ends_with_eos:
        documents.append([11, 12])
    np.concatenate(documents).astype(np.uint16).tofile(tmp_path / "train.bin")
    store = TokenStore.from_nanogpt_bin(tmp_path / "train.bin", eos_token_id=eos, vocab_size=50_257)
    assert [store.document(i).tolist() for i in range(len(store))] == documents
    written = write_token_store(tmp_path / "same", documents, 50_257)
    assert store.fingerprint() == written.fingerprint()  # the reader indexes exactly what the writer would
    assert pickle.loads(pickle.dumps(store)).document(2).tolist() == documents[2]
    with pytest.raises(ValueError, match="outside"):
        TokenStore.from_nanogpt_bin(tmp_path / "train.bin", eos_token_id=eos, vocab_size=50_000)
    (tmp_path / "odd.bin").write_bytes(bytes(21))
    with pytest.raises(ValueError, match="whole number"):
        TokenStore.from_nanogpt_bin(tmp_path / "odd.bin", eos_token_id=eos, vocab_size=50_257)


def write_megatron(prefix, sequences: list[list[int]], dtype: str, code: int) -> None:
    """Megatron-LM's MMIDIDX layout, written from its description (header, version, dtype code, counts, arrays)."""
    lengths = np.array([len(s) for s in sequences], dtype="<i4")
    pointers = np.concatenate([[0], np.cumsum(lengths[:-1])]).astype("<i8") * np.dtype(dtype).itemsize
    document_indices = np.array([0, 2, len(sequences)], dtype="<i8")  # two documents of sequences
    with open(f"{prefix}.bin", "wb") as file:
        for sequence in sequences:
            file.write(np.asarray(sequence, dtype=dtype).tobytes())
    with open(f"{prefix}.idx", "wb") as file:
        file.write(b"MMIDIDX\x00\x00" + struct.pack("<Q", 1) + struct.pack("<B", code))
        file.write(struct.pack("<Q", len(sequences)) + struct.pack("<Q", len(document_indices)))
        file.write(lengths.tobytes() + pointers.tobytes() + document_indices.tobytes())


@pytest.mark.parametrize("dtype, code", [("<u2", 8), ("<i4", 4)])
def test_megatron_sequences_are_documents(tmp_path, dtype, code):
    sequences = [[1, 2, 3], [4], [5, 6], [70_000 if code == 4 else 7, 8, 9, 10]]
    write_megatron(tmp_path / "corpus_text_document", sequences, dtype, code)
    store = TokenStore.from_megatron(tmp_path / "corpus_text_document", vocab_size=100_000)
    assert [store.document(i).tolist() for i in range(len(store))] == sequences
    assert store.dtype == np.dtype(dtype) and store.num_tokens == 10
    assert pickle.loads(pickle.dumps(store)).document(3).tolist() == sequences[3]
    (tmp_path / "bad.bin").write_bytes(b"")
    (tmp_path / "bad.idx").write_bytes(b"NOTMEGATRON" + bytes(40))
    with pytest.raises(ValueError, match="not a Megatron index"):
        TokenStore.from_megatron(tmp_path / "bad", vocab_size=10)
    with open(tmp_path / "corpus_text_document.bin", "ab") as file:
        file.write(bytes(8))
    with pytest.raises(ValueError, match="bytes, but"):
        TokenStore.from_megatron(tmp_path / "corpus_text_document.bin", vocab_size=100_000)
