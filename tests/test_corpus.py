from __future__ import annotations

import datasets
import pytest

from hf_lmobj.corpus import (
    SENTINELS,
    build_tokenizer,
    is_validation_path,
    iter_stdlib_sources,
    load_stdlib_corpus,
    tokenize_corpus,
)


def test_split_is_deterministic_and_about_two_percent():
    paths = [path for path, _ in iter_stdlib_sources()]
    held_out = [p for p in paths if is_validation_path(p)]
    assert held_out == [p for p in paths if is_validation_path(p)]
    assert 0.01 < len(held_out) / len(paths) < 0.03
    assert not any(is_validation_path(p, 0.0) for p in paths)
    assert all(is_validation_path(p, 1.0) for p in paths)


def test_corpus_columns_and_disjoint_splits(corpus):
    assert corpus["train"].column_names == ["text", "path"]
    assert set(corpus["train"]["path"]).isdisjoint(corpus["validation"]["path"])
    assert corpus["train"].num_rows + corpus["validation"].num_rows == 300
    assert all(p.endswith(".py") and "site-packages" not in p for p in corpus["train"]["path"])


def test_bad_arguments_raise():
    with pytest.raises(ValueError, match="validation_fraction"):
        is_validation_path("a.py", 1.5)
    with pytest.raises(ValueError, match="max_documents"):
        load_stdlib_corpus(max_documents=0)
    with pytest.raises(ValueError, match="vocab_size"):
        build_tokenizer(vocab_size=10)


def test_tokenizer_has_every_special_token_and_round_trips(tokenizer):
    for name in ("pad", "bos", "eos", "unk", "mask"):
        assert getattr(tokenizer, f"{name}_token_id") is not None, name
    ids = tokenizer.convert_tokens_to_ids(list(SENTINELS))
    assert len(set(ids)) == 100 and tokenizer.unk_token_id not in ids
    text = "def f(x):\n    return 'é中文' * 2\n"
    encoded = tokenizer(text)["input_ids"]
    assert tokenizer.all_special_ids and not set(encoded) & set(tokenizer.all_special_ids)
    assert tokenizer.decode(encoded) == text


def test_tokenizer_is_cached(tmp_path):
    first = build_tokenizer(vocab_size=400, max_documents=10, cache_dir=tmp_path)
    second = build_tokenizer(vocab_size=400, max_documents=10, cache_dir=tmp_path)
    assert first.get_vocab() == second.get_vocab()
    assert len(list((tmp_path / "tokenizers").iterdir())) == 1


def test_tokenize_corpus_counts_utf8_bytes_and_adds_eos(tokenizer):
    ds = datasets.Dataset.from_dict({"text": ["abc", "中文"]})
    rows = tokenize_corpus(ds, tokenizer, add_bos=True)
    assert rows["num_bytes"] == [3, 6]
    for row in rows["input_ids"]:
        assert row[0] == tokenizer.bos_token_id and row[-1] == tokenizer.eos_token_id
    with pytest.raises(ValueError, match="text_column"):
        tokenize_corpus(ds, tokenizer, text_column="content")
