"""The tokenizer comes from the user's data (issue 35, point 3): ``train_tokenizer`` on any texts, cached by its sample.

Entry points: ``hf_lmobj.corpus.train_tokenizer`` (the sample, its bound, its cache key, its origin record, hostile
texts and arguments), ``build_tokenizer`` (the embedded corpus's training side), ``load_stdlib_corpus`` (its published split, by
path, which a run and a store of it both hold out) and ``recipes/tokenize_corpus.py`` without ``--tokenizer_name`` (a
tokenizer trained on the training side of the very data being tokenized).
"""

from __future__ import annotations

import inspect
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from transformers import AutoTokenizer

import hf_lmobj.corpus as corpus
from hf_lmobj.corpus import (
    DEFAULT_VOCAB_SIZE,
    SPECIAL_TOKENS,
    TOKENIZER_SAMPLE_BYTES,
    build_tokenizer,
    is_validation_path,
    load_stdlib_corpus,
    train_tokenizer,
)
from hf_lmobj.held_out import DEFAULT_VALIDATION_FRACTION, HeldOut, content_hash, texts_fingerprint
from hf_lmobj.store.tokenize_text import training_texts
from hf_lmobj.store.tokenizer_fingerprint import tokenizer_fingerprint
from tests.testing_utils import load_recipe

ROOT = Path(__file__).resolve().parents[2]
SYLLABLES = ["zor", "vu", "ta", "le", "ki", "mo", "ra", "shi", "nu", "pe", "lo", "qa", "dri", "fe", "yu", "xo"]
LEAST = 256 + len(SPECIAL_TOKENS)  # the smallest vocabulary: the bytes and the special tokens


def generated_documents(seed: int = 0, count: int = 240) -> list[str]:
    """Documents in a generated language (syllable words such as 'zorvu taleki'), a few sentences each."""
    rng = np.random.default_rng(seed)
    words = ["".join(rng.choice(SYLLABLES, size=int(rng.integers(2, 4)))) for _ in range(150)]
    documents = []
    for _ in range(count):
        sentences = [
            " ".join(rng.choice(words, size=int(rng.integers(4, 12)))) + "." for _ in range(int(rng.integers(2, 8)))
        ]
        documents.append("\n".join(sentences) + "\n")
    return documents


def split(documents: list[str], fraction: float) -> tuple[list[str], list[str]]:
    """(training side, held-out side) of ``documents`` by the content rule."""
    rule = HeldOut(fraction)
    held = [rule.by_rule(content_hash(text)) for text in documents]
    return [t for t, h in zip(documents, held) if not h], [t for t, h in zip(documents, held) if h]


def tokens_per_byte(tokenizer, texts: list[str]) -> float:
    return sum(len(tokenizer(text)["input_ids"]) for text in texts) / sum(len(text.encode()) for text in texts)


def write_jsonl(folder: Path, texts: list[str], files: int = 2) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for index in range(files):
        lines = [json.dumps({"text": text}) for text in texts[index::files]]
        (folder / f"part-{index}.jsonl").write_text("\n".join(lines) + "\n")
    return folder


def ordered_texts(folder: Path, files: int = 2) -> list[str]:
    """The texts of ``write_jsonl``'s folder in the order ``datasets`` reads them (file by file)."""
    return [json.loads(line)["text"] for index in range(files) for line in (folder / f"part-{index}.jsonl").open()]


# ----------------------------------------------------------------------- the user's language
def test_a_tokenizer_trained_on_a_generated_language_beats_the_stdlib_one_on_its_held_out_text(tmp_path, tokenizer):
    train, held = split(generated_documents(), 0.1)
    assert (len(train), len(held)) == (210, 30)
    trained, origin = train_tokenizer(train, vocab_size=1024, cache_dir=tmp_path)
    ratio = tokens_per_byte(trained, held) / tokens_per_byte(tokenizer, held)  # tokenizer: build_tokenizer(1024, ...)
    assert ratio <= 0.8  # at least 20% fewer tokens per byte (measured: 0.274)
    assert round(tokens_per_byte(trained, held), 3) == 0.19
    assert origin == {"origin": "trained", "vocab_size": 1024, "sample_documents": 210, "sample_bytes": 46271,
                      "sample_fingerprint": texts_fingerprint(train)}  # fmt: skip
    assert trained.decode(trained(held[0])["input_ids"]) == held[0]
    assert set(SPECIAL_TOKENS) <= set(trained.get_vocab()) and trained.bos_token == "<s>"


# ----------------------------------------------------------------------- the cache: keyed by the sample
def test_the_same_sample_loads_the_cached_tokenizer_without_training(tmp_path, monkeypatch):
    texts = generated_documents(count=30)
    first, origin = train_tokenizer(texts, vocab_size=400, cache_dir=tmp_path)
    monkeypatch.setattr(corpus, "_train_byte_level_bpe", lambda *a: pytest.fail("retrained on a cached sample"))
    again, same = train_tokenizer(iter(texts), vocab_size=400, cache_dir=tmp_path)  # a generator of the same texts
    assert again.get_vocab() == first.get_vocab() and same == origin
    assert len(list((tmp_path / "tokenizers").iterdir())) == 1


@pytest.mark.parametrize(
    "change",
    [
        lambda texts, size: (texts[:-1], size),  # one document fewer
        lambda texts, size: (texts[::-1], size),  # the same documents in another order
        lambda texts, size: ([texts[0] + " ", *texts[1:]], size),  # one byte more in one document
        lambda texts, size: (texts, size + 1),  # another vocabulary size
    ],
    ids=["a document fewer", "another order", "one byte more", "another vocab_size"],
)
def test_another_sample_or_size_trains_a_new_tokenizer(tmp_path, change):
    texts = generated_documents(count=30)
    train_tokenizer(texts, vocab_size=400, cache_dir=tmp_path)
    other, size = change(texts, 400)
    _, origin = train_tokenizer(other, vocab_size=size, cache_dir=tmp_path)
    assert len(list((tmp_path / "tokenizers").iterdir())) == 2
    assert origin["sample_fingerprint"] == texts_fingerprint(other) and origin["vocab_size"] == size


def test_empty_and_whitespace_texts_are_not_part_of_the_sample(tmp_path):
    texts = generated_documents(count=20)
    _, plain = train_tokenizer(texts, vocab_size=400, cache_dir=tmp_path)
    _, padded = train_tokenizer(["", *texts[:10], " \n\t", *texts[10:], ""], vocab_size=400, cache_dir=tmp_path)
    assert padded == plain and plain["sample_documents"] == 20
    assert len(list((tmp_path / "tokenizers").iterdir())) == 1  # the same sample: the same cache entry


def test_the_sample_stops_at_the_first_text_reaching_max_bytes_and_reads_nothing_after(tmp_path):
    read = []

    def texts():
        for index in range(10):
            read.append(index)
            yield f"zorvu {index:04d}"  # 10 bytes each

    _, origin = train_tokenizer(texts(), vocab_size=400, max_bytes=25, cache_dir=tmp_path)
    assert read == [0, 1, 2] and (origin["sample_documents"], origin["sample_bytes"]) == (3, 30)
    assert origin["sample_fingerprint"] == texts_fingerprint(["zorvu 0000", "zorvu 0001", "zorvu 0002"])


def test_one_default_vocabulary_size_and_a_bounded_sample():
    assert DEFAULT_VOCAB_SIZE == 8192 and TOKENIZER_SAMPLE_BYTES == 64 * 2**20
    for function in (train_tokenizer, build_tokenizer):
        assert inspect.signature(function).parameters["vocab_size"].default == DEFAULT_VOCAB_SIZE
    assert inspect.signature(train_tokenizer).parameters["max_bytes"].default == TOKENIZER_SAMPLE_BYTES
    recipe = load_recipe("tokenize_corpus")
    fields = {f.name: f.default for f in recipe.TokenizeArguments.__dataclass_fields__.values()}
    assert fields["vocab_size"] == DEFAULT_VOCAB_SIZE and fields["validation_fraction"] == DEFAULT_VALIDATION_FRACTION


# ----------------------------------------------------------------------- hostile texts and arguments
@pytest.mark.parametrize(
    ("texts", "kwargs", "error", "words"),
    [
        ([], {}, ValueError, r"no text to train a tokenizer on"),
        (["", "  ", "\n\t"], {}, ValueError, r"every text given was empty or whitespace-only"),
        ("zorvu taleki", {}, TypeError, r"texts must be an iterable of strings .* got str"),
        (b"zorvu", {}, TypeError, r"texts must be an iterable of strings .* got bytes"),
        (5, {}, TypeError, r"texts must be an iterable of strings .* got int"),
        (["zorvu", None], {}, TypeError, r"texts\[1\] is a NoneType, not a string"),
        (["zorvu", b"taleki"], {}, TypeError, r"texts\[1\] is a bytes, not a string"),
        (
            ["zorvu", "ta\ud800le"],
            {},
            ValueError,
            r"texts\[1\] is not valid Unicode \(a lone surrogate at position 2\)",
        ),
        (["zorvu"], {"vocab_size": LEAST - 1}, ValueError, rf"vocab_size must be an int >= {LEAST}"),
        (["zorvu"], {"vocab_size": 512.0}, TypeError, r"vocab_size must be an int"),
        (["zorvu"], {"vocab_size": True}, TypeError, r"vocab_size must be an int"),
        (["zorvu"], {"max_bytes": 0}, ValueError, r"max_bytes must be an int >= 1"),
        (["zorvu"], {"max_bytes": "64"}, TypeError, r"max_bytes must be an int >= 1"),
    ],
    ids=[
        "none",
        "only empty",
        "a string",
        "bytes",
        "an int",
        "a None",
        "a bytes text",
        "a lone surrogate",
        "vocab too small",
        "vocab a float",
        "vocab a bool",
        "max_bytes 0",
        "max_bytes a string",
    ],  # fmt: skip
)
def test_train_tokenizer_refuses_hostile_input_by_name(tmp_path, texts, kwargs, error, words):
    with pytest.raises(error, match=words):
        train_tokenizer(texts, cache_dir=tmp_path, **kwargs)
    assert not (tmp_path / "tokenizers").exists() or not any((tmp_path / "tokenizers").iterdir())


# ----------------------------------------------------------------------- the embedded corpus: one content rule
def test_the_stdlib_split_is_its_published_path_split_and_its_training_side_is_the_build_tokenizer_sample(tmp_path):
    splits = load_stdlib_corpus(0.2, max_documents=40)
    assert all(is_validation_path(path, 0.2) for path in splits["validation"]["path"])
    assert not any(is_validation_path(path, 0.2) for path in splits["train"]["path"])
    assert splits["train"].num_rows + splits["validation"].num_rows == 40 and splits["validation"].num_rows > 0
    built = build_tokenizer(400, validation_fraction=0.2, max_documents=40, cache_dir=tmp_path)
    trained, origin = train_tokenizer(splits["train"]["text"], 400, cache_dir=tmp_path)
    assert tokenizer_fingerprint(built) == tokenizer_fingerprint(trained)
    assert (
        origin["sample_documents"] == splits["train"].num_rows and len(list((tmp_path / "tokenizers").iterdir())) == 1
    )


@pytest.mark.parametrize(
    ("kwargs", "error", "words"),
    [
        ({"validation_fraction": 1.0}, ValueError, r"validation_fraction must be a finite number in \[0, 1\)"),
        ({"validation_fraction": "0.1"}, TypeError, r"validation_fraction must be a number"),
        ({"max_documents": 0}, ValueError, r"max_documents must be an int >= 1"),
    ],
)
def test_load_stdlib_corpus_refuses_bad_arguments(kwargs, error, words):
    with pytest.raises(error, match=words):
        load_stdlib_corpus(**kwargs)


# ----------------------------------------------------------------------- tokenize_corpus trains on the user's data
def test_tokenize_corpus_trains_its_tokenizer_on_the_training_side_of_the_data_it_tokenizes(tmp_path):
    texts = generated_documents(count=120)
    folder = write_jsonl(tmp_path / "corpus", texts)
    recipe = load_recipe("tokenize_corpus")
    store = recipe.main(["--dataset_name", str(folder), "--validation_fraction", "0.1", "--vocab_size", "600",
                         "--output_dir", str(tmp_path / "store")])  # fmt: skip
    train, held = split(ordered_texts(folder), 0.1)
    assert store.held_out_texts() == held and len(held) == 15
    expected, origin = train_tokenizer(train, 600)  # the same sample: the cached tokenizer
    assert store.tokenizer_origin == origin and origin["sample_documents"] == len(train) == store.num_documents
    saved = AutoTokenizer.from_pretrained(tmp_path / "store" / "tokenizer")
    assert tokenizer_fingerprint(saved) == tokenizer_fingerprint(expected) == store.meta["tokenizer_fingerprint"]


def test_training_texts_leave_out_exactly_the_held_out_documents():
    import datasets

    texts = generated_documents(count=60)
    dataset = datasets.Dataset.from_dict({"body": texts})
    assert list(training_texts(dataset, "body", 0.3)) == split(texts, 0.3)[0]
    assert list(training_texts(dataset.to_iterable_dataset(), "body", 0.3, batch_size=7)) == split(texts, 0.3)[0]
    with pytest.raises(ValueError, match="no column 'text'"):
        next(training_texts(dataset))


def test_the_help_says_the_tokenizer_is_trained_on_the_data_being_tokenized(tmp_path):
    result = subprocess.run(
        [sys.executable, str(ROOT / "recipes" / "tokenize_corpus.py"), "--help"],
        capture_output=True, text=True, timeout=120, cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    flat = " ".join(result.stdout.split())
    assert "trains a byte-level BPE on the training side of the data being tokenized" in flat
    assert "--validation_fraction" in flat and "held_out.jsonl" in flat


@pytest.mark.parametrize(
    ("flags", "error", "words"),
    [
        (["--validation_fraction", "1"], ValueError, r"validation_fraction must be a finite number in \[0, 1\)"),
        (["--validation_fraction", "-0.1"], ValueError, r"validation_fraction must be a finite number"),
        (["--validation_fraction", "nan"], ValueError, r"validation_fraction must be a finite number"),
        (["--vocab_size", str(LEAST - 1)], ValueError, rf"vocab_size must be an int >= {LEAST}"),
    ],
)
def test_tokenize_corpus_refuses_bad_fractions_before_reading(tmp_path, monkeypatch, flags, error, words):
    recipe = load_recipe("tokenize_corpus")
    monkeypatch.setattr(recipe, "load_texts", lambda *a: pytest.fail("should not be reached"))
    with pytest.raises(error, match=words):
        recipe.main(["--output_dir", str(tmp_path / "store"), *flags])
    assert not (tmp_path / "store").exists()


def test_the_embedded_corpus_is_one_split_and_an_existing_store_is_refused_before_training(tmp_path, monkeypatch):
    recipe = load_recipe("tokenize_corpus")
    with pytest.raises(
        ValueError, match=r"--split validation: the embedded corpus is tokenized from its 'train' split"
    ):
        recipe.main(["--split", "validation", "--output_dir", str(tmp_path / "store")])
    (tmp_path / "store").mkdir()
    monkeypatch.setattr(recipe, "train_tokenizer", lambda *a, **k: pytest.fail("trained before refusing"))
    with pytest.raises(ValueError, match=r"store already exists; pass --overwrite true"):
        recipe.main(["--max_documents", "5", "--output_dir", str(tmp_path / "store")])


def test_a_store_of_the_embedded_corpus_holds_out_its_published_split_as_a_run_does(tmp_path):
    from hf_lmobj.data.prepare import DataArguments
    from hf_lmobj.data.run_sources import open_sources

    corpus = load_stdlib_corpus(0.2, max_documents=60)
    recipe = load_recipe("tokenize_corpus")
    store = recipe.main(["--max_documents", "60", "--validation_fraction", "0.2", "--vocab_size", "400",
                         "--output_dir", str(tmp_path / "store")])  # fmt: skip
    sources = open_sources(DataArguments(max_documents=60, validation_fraction=0.2))
    assert store.held_out_texts() == corpus["validation"]["text"] == sources.validation_texts
    assert sources.validation["selection"].startswith("the corpus's validation split (20.0% of the files")
    trained = set(store.document_hashes.tolist())
    assert not trained & {content_hash(text) for text in corpus["validation"]["text"]}
    copies = sum(content_hash(text) in sources.held_out.validation for text in corpus["train"]["text"])
    assert store.held_out_info["copies"] == copies
    assert store.num_documents + copies + sum(store.skipped_documents.values()) == corpus["train"].num_rows
