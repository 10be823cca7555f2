"""The contamination scan: planted copies found in every kind of source, clean text clean, exact counts by hand."""

from __future__ import annotations

import math

import datasets
import numpy as np
import pytest

from hf_lmobj.contamination import ngrams as index_module
from hf_lmobj.contamination.index import ContaminationIndex, normalized_words
from hf_lmobj.contamination.report import ContaminationReport, SourceScan
from hf_lmobj.corpus import build_tokenizer
from hf_lmobj.data import DatasetSource, TextStream
from hf_lmobj.held_out import HeldOut, content_hash
from hf_lmobj.plain_text import encode_plain
from hf_lmobj.store import write_token_store
from hf_lmobj.store.tokenize_text import tokenize_to_token_store

N = 13


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer(vocab_size=512, max_documents=20)


VOCABULARY = [a + b + c for a in "bcdfgklmnprst" for b in "aeiou" for c in ("", "n", "r", "st")]


def prose(seed: int, words: int = 60) -> str:
    """Generated text: ``words`` pseudo-words drawn from 260, seeded (two seeds share no 13-gram in practice)."""
    rng = np.random.default_rng(seed)
    return " ".join(VOCABULARY[i] for i in rng.integers(0, len(VOCABULARY), words))


EVAL = [prose(seed) for seed in range(4)]  # four evaluation documents
DOMAINS = ["web", "web", "code", "books"]
CLEAN = [prose(1000 + seed, 200) for seed in range(6)]  # training text sharing nothing with EVAL


@pytest.fixture(scope="module")
def index(tok):
    return ContaminationIndex.build(EVAL, DOMAINS, tok)


def planted() -> list[str]:
    """Clean training text with EVAL[0] copied whole and EVAL[2] embedded in the middle of a longer document."""
    return [CLEAN[0], EVAL[0], CLEAN[1], f"{CLEAN[2]} {EVAL[2]} {CLEAN[3]}", CLEAN[4]]


# ------------------------------------------------------------------------------------------- recall
def _assert_planted_found(report: ContaminationReport) -> None:
    assert report.contaminated == [0, 2]
    assert report.fractions[0] == 1.0 and report.fractions[2] >= 0.9  # embedded: an edge n-gram may differ
    assert report.fractions[1] == 0.0 and report.fractions[3] == 0.0
    assert report.rate == 0.5
    assert report.domain_rates == {"books": 0.0, "code": 1.0, "web": 0.5}


def test_planted_copies_in_a_list_of_texts(index):
    report = index.scan(planted())
    _assert_planted_found(report)
    assert report.sources == (
        SourceScan("source 0", "text", 5, sum(map(len, encode_plain(index.tokenizer, planted()))), 2),
    )


def test_planted_copies_in_an_in_memory_dataset(index):
    _assert_planted_found(index.scan(datasets.Dataset.from_dict({"text": planted(), "id": list(range(5))})))


def test_planted_copies_in_a_streamed_dataset(index):
    stream = datasets.Dataset.from_dict({"body": planted()}).to_iterable_dataset(num_shards=2)
    _assert_planted_found(index.scan(stream, text_column="body"))


def test_planted_copies_in_the_pipelines_text_stream_with_bos_and_eos(index, tok):
    report = index.scan(TextStream(datasets.Dataset.from_dict({"text": planted()}), tok, batch_size=2))
    _assert_planted_found(report)
    assert report.sources[0].kind == "stream" and report.sources[0].documents_hit == 2


def test_planted_copies_in_a_token_store(index, tok, tmp_path):
    store = tokenize_to_token_store(datasets.Dataset.from_dict({"text": planted()}), tok, tmp_path / "store")
    report = index.scan(store)
    _assert_planted_found(report)
    assert report.sources == (SourceScan("source 0", "token_store", 5, store.num_tokens, 2),)


@pytest.mark.parametrize("chunk_tokens", [1, 5, 13, 64, 1000])
def test_store_chunking_changes_nothing(index, tok, tmp_path, chunk_tokens):
    store = tokenize_to_token_store(datasets.Dataset.from_dict({"text": planted()}), tok, tmp_path / "store")
    whole, chunked = index.scan(store), index.scan(store, chunk_tokens=chunk_tokens)
    np.testing.assert_array_equal(chunked.fractions, whole.fractions)
    assert chunked.sources == whole.sources


def test_planted_copies_in_a_tokenized_dataset_source(index, tok):
    ids = [np.array(doc) for doc in encode_plain(tok, planted())]
    _assert_planted_found(index.scan(DatasetSource(datasets.Dataset.from_dict({"input_ids": ids}))))


def test_a_mixture_reports_each_source_and_the_union(index, tok, tmp_path):
    store = write_token_store(tmp_path / "s", encode_plain(tok, [CLEAN[0], EVAL[1]]), len(tok), tokenizer=tok)
    stream = TextStream(datasets.Dataset.from_dict({"text": [EVAL[3], CLEAN[1]]}), tok)
    report = index.scan(store, stream, [CLEAN[2]], names=["store", "web", "list"])
    assert report.contaminated == [1, 3]
    assert [(s.name, s.kind, s.documents, s.documents_hit) for s in report.sources] == [
        ("store", "token_store", 2, 1), ("web", "stream", 2, 1), ("list", "text", 1, 0)]  # fmt: skip
    assert report.as_metrics()["contamination/training_documents_hit"] == 2


def test_a_copy_is_a_copy_within_one_document(index, tok, tmp_path):
    """EVAL[1] cut in two training documents: exactly the n - 1 n-grams across the cut are not seen."""
    ids = encode_plain(tok, [EVAL[1]])[0]
    cut = len(ids) // 2
    store = write_token_store(tmp_path / "s", [ids[:cut], ids[cut:]], len(tok), tokenizer=tok)
    positions = len(ids) - N + 1
    assert index.scan(store).fractions[1] == (positions - (N - 1)) / positions
    assert index.scan(write_token_store(tmp_path / "t", [ids], len(tok))).fractions[1] == 1.0


def test_a_partial_copy_gives_its_exact_share(tok):
    words = EVAL[0].split()  # 60 words: 48 word 13-grams
    index = ContaminationIndex.build([EVAL[0]], ["web"], n=N, unit="words")
    report = index.scan([" ".join(words[:30])])  # words 0..29: the 18 13-grams starting at 0..17
    assert report.fractions.tolist() == [18 / 48] and report.contaminated == []


def test_the_token_unit_does_not_normalise_case(index):
    assert index.scan([EVAL[0].upper(), EVAL[2].title()]).contaminated == []


@pytest.mark.parametrize(
    "change",
    [str.upper, lambda t: t.replace(" ", "\n\t  "), lambda t: t.replace(" ", ", ") + "!", lambda t: t.title()],
    ids=["upper", "whitespace", "punctuation", "title"],
)
def test_the_word_unit_finds_copies_with_case_space_and_punctuation_changes(change):
    index = ContaminationIndex.build(EVAL, DOMAINS, n=N, unit="words")
    report = index.scan([CLEAN[0], f"{CLEAN[1]} {change(EVAL[2])} {CLEAN[2]}"])
    assert report.contaminated == [2] and report.fractions[2] == 1.0


def test_the_word_unit_scans_a_token_store_by_decoding_it(tok, tmp_path):
    index = ContaminationIndex.build(EVAL, DOMAINS, tok, unit="words")
    store = tokenize_to_token_store(datasets.Dataset.from_dict({"text": planted()}), tok, tmp_path / "store")
    assert index.scan(store).contaminated == [0, 2]


def test_the_word_unit_respects_a_streams_held_out_texts(tok):
    index = ContaminationIndex.build(EVAL, DOMAINS, tok, unit="words")
    rule = HeldOut(0.0, frozenset({content_hash(EVAL[0])}))
    stream = TextStream(datasets.Dataset.from_dict({"text": [EVAL[0], EVAL[3]]}), tok, held_out=rule)
    assert index.scan(stream).contaminated == [3]


def test_a_streams_held_out_texts_are_not_training_text(index, tok):
    rule = HeldOut(0.0, frozenset(content_hash(text) for text in EVAL))
    stream = TextStream(datasets.Dataset.from_dict({"text": EVAL + CLEAN[:1]}), tok, held_out=rule)
    report = index.scan(stream)
    assert report.rate == 0.0 and report.sources[0].documents == 1


def test_normalized_words():
    assert normalized_words("Hello,   WORLD!\nfoo_bar 3.14") == ["hello", "world", "foo_bar", "3", "14"]


# ------------------------------------------------------------------------------------ clean, exactness
def test_clean_text_gives_no_contaminated_document(index, tok, tmp_path):
    store = tokenize_to_token_store(datasets.Dataset.from_dict({"text": CLEAN}), tok, tmp_path / "store")
    for report in (index.scan(CLEAN), index.scan(store)):
        assert report.fractions.tolist() == [0.0] * 4 and report.rate == 0.0
        assert report.sources[0].documents_hit == 0


def test_a_hash_that_always_collides_changes_no_result(monkeypatch):
    """Hits are compared id by id: even a hash of 0 for every window gives the same, exact, result."""
    index = ContaminationIndex.build(EVAL, DOMAINS, n=N, unit="words")
    expected = index.scan(planted() + CLEAN).fractions
    monkeypatch.setattr(index_module, "window_hashes", lambda ids, n: np.zeros(max(ids.size - n + 1, 0), np.uint64))
    colliding = ContaminationIndex.build(EVAL, DOMAINS, n=N, unit="words")
    assert colliding.table.num_ngrams == index.table.num_ngrams == 4 * 48
    np.testing.assert_array_equal(colliding.scan(planted() + CLEAN).fractions, expected)
    assert not colliding.contaminated(CLEAN[5]) and colliding.contaminated(EVAL[3])


def test_repeated_ngrams_count_by_position():
    index = ContaminationIndex.build(["a b c a b c a b"], None, n=3, unit="words")  # 6 positions, 3 distinct 3-grams
    assert index.table.num_ngrams == 3
    assert index.scan(["x a b c y"]).fractions.tolist() == [2 / 6]  # "a b c" at positions 0 and 3


# ---------------------------------------------------------------------------- short documents, domains
def test_short_documents_are_left_out_of_the_rates_and_counted():
    texts = ["a b c d", "a b", "", "x y z w", "p q"]
    index = ContaminationIndex.build(texts, ["d1", "d1", "d2", "d2", "d3"], n=3, unit="words")
    report = index.scan(["a b c d"])
    assert np.isnan(report.fractions[[1, 2, 4]]).all() and report.short_documents == 3
    assert report.contaminated == [0] and report.rate == 0.5 and report.domain_rates == {"d1": 1.0, "d2": 0.0}
    metrics = report.as_metrics()
    assert "contamination/d3/rate" not in metrics and metrics["contamination/d3/short_documents"] == 1
    assert metrics["contamination/d2/short_documents"] == 1 and metrics["contamination/documents"] == 2
    assert index.describe()["short_documents"] == 3


def test_per_domain_rates_by_hand():
    """Nine documents in three domains; contaminated: 2 of 4 in a, 1 of 3 in b, 0 of 2 in c."""
    texts = [f"d{i} w{i} x{i} y{i}" for i in range(9)]
    domains = ["a", "a", "a", "a", "b", "b", "b", "c", "c"]
    index = ContaminationIndex.build(texts, domains, n=2, unit="words")
    report = index.scan([texts[0], texts[3], texts[5]])
    assert report.contaminated == [0, 3, 5] and report.rate == 3 / 9
    assert report.as_metrics() == {
        "contamination/rate": 3 / 9, "contamination/n": 2, "contamination/unit": "words",
        "contamination/threshold": 0.5, "contamination/documents": 9, "contamination/contaminated_documents": 3,
        "contamination/short_documents": 0, "contamination/training_documents": 3,
        "contamination/training_documents_hit": 3, "contamination/a/rate": 0.5, "contamination/b/rate": 1 / 3,
        "contamination/c/rate": 0.0, "contamination/a/short_documents": 0, "contamination/b/short_documents": 0,
        "contamination/c/short_documents": 0,
    }  # fmt: skip


@pytest.mark.parametrize("threshold, contaminated", [(0.25, [0, 1]), (0.5, [0, 1]), (0.51, [0]), (1.0, [0])])
def test_the_threshold_judges_the_share_of_ngrams(threshold, contaminated):
    """Document 1 has 4 bigram positions, 2 seen: a share of exactly 0.5."""
    index = ContaminationIndex.build(["a b c", "p q r s t"], None, n=2, unit="words", threshold=threshold)
    report = index.scan(["a b c", "p q r"])
    assert report.fractions.tolist() == [1.0, 0.5] and report.contaminated == contaminated


def test_without_domains_there_are_no_domain_figures():
    report = ContaminationIndex.build(["a b c"], None, n=2, unit="words").scan(["a b"])
    assert report.domain_rates == {} and sorted(k for k in report.as_metrics() if k.count("/") > 1) == []


# -------------------------------------------------------------------------------- filter, identity
def test_the_filter_predicate_on_text_and_ids(index, tok):
    copy = f"{CLEAN[0]} {EVAL[1]}"
    assert index.contaminated(copy) and not index.contaminated(CLEAN[0])
    ids = encode_plain(tok, [copy])[0]
    assert index.contaminated(ids) and index.contaminated(np.array(ids, dtype=np.uint16))
    assert not index.contaminated(encode_plain(tok, [CLEAN[1]])[0]) and not index.contaminated([])


@pytest.mark.parametrize(
    "document, error, match",
    [([1, True, 3], TypeError, "bool"), ([1.5, 2.0], TypeError, "ints"), ([3, -1], ValueError, ">= 0"), (None, TypeError, "ints")],
)  # fmt: skip
def test_the_filter_predicate_refuses_bad_ids(index, document, error, match):
    with pytest.raises(error, match=match):
        index.contaminated(document)


def test_describe_is_deterministic_and_names_what_changes(tok):
    first = ContaminationIndex.build(EVAL, DOMAINS, tok).describe()
    assert first == ContaminationIndex.build(list(EVAL), list(DOMAINS), tok).describe()
    assert sorted(first) == [
        "documents",
        "fingerprint",
        "n",
        "ngrams",
        "short_documents",
        "threshold",
        "tokenizer",
        "unit",
    ]
    others = [
        ContaminationIndex.build(EVAL, DOMAINS, tok, n=8), ContaminationIndex.build(EVAL, DOMAINS, tok, threshold=0.8),
        ContaminationIndex.build(EVAL, DOMAINS, tok, unit="words"), ContaminationIndex.build(EVAL[:3], DOMAINS[:3], tok),
    ]  # fmt: skip
    assert len({first["fingerprint"], *(other.describe()["fingerprint"] for other in others)}) == 5


# ---------------------------------------------------------------------------------------- hostile
@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"n": 0}, ValueError, "n must be an int >= 1"),
        ({"n": -3}, ValueError, "n must be an int >= 1"),
        ({"n": 13.0}, TypeError, "n must be an int"),
        ({"n": True}, TypeError, "n must be an int"),
        ({"n": 10_000}, ValueError, "none of the 4 evaluation documents has n=10000"),
        ({"threshold": 0}, ValueError, "threshold"),
        ({"threshold": 1.5}, ValueError, "threshold"),
        ({"threshold": -0.1}, ValueError, "threshold"),
        ({"threshold": math.nan}, ValueError, "threshold"),
        ({"threshold": "0.5"}, TypeError, "threshold"),
        ({"unit": "chars"}, ValueError, "unit must be one of"),
        ({"tokenizer": None}, TypeError, "tokenizer must be the run's tokenizer"),
        ({"tokenizer": "gpt2"}, TypeError, "tokenizer must be"),
        ({"domains": ["web"]}, ValueError, "domains has 1 entries for 4"),
        ({"domains": ["web", "", "a", "b"]}, ValueError, r"domains\[1\] must be a non-empty string"),
        ({"domains": "web"}, TypeError, "domains must be a list"),
        ({"texts": []}, ValueError, "the evaluation set is empty"),
        ({"texts": "one text"}, TypeError, "texts must be a list of strings"),
        ({"texts": ["a", None]}, TypeError, r"texts\[1\] must be a string"),
    ],
)  # fmt: skip
def test_build_refuses(tok, kwargs, error, match):
    arguments = {"texts": EVAL, "domains": DOMAINS, "tokenizer": tok} | kwargs
    if arguments["texts"] == []:
        arguments["domains"] = []
    with pytest.raises(error, match=match):
        ContaminationIndex.build(**arguments)


@pytest.mark.parametrize(
    "documents, error, match",
    [([[1, 2, 600]], ValueError, r"must lie in \[0, 512\)"), ([[1, 2.5]], TypeError, "evaluation document 0"),
     ("abc", TypeError, "list of token-id sequences")],
)  # fmt: skip
def test_from_token_ids_refuses(tok, documents, error, match):
    with pytest.raises(error, match=match):
        ContaminationIndex.from_token_ids(documents, None, tok, n=2)


@pytest.mark.parametrize(
    "sources, kwargs, error, match",
    [
        ((), {}, ValueError, "at least one training source"),
        ((42,), {}, TypeError, "source 'source 0' is a int"),
        (({"text": ["a"]},), {}, TypeError, "is a dict"),
        (([[1, 2, 3]],), {}, TypeError, "a list source holds texts"),
        ((["a"], ["b"]), {"names": ["x"]}, ValueError, "names has 1 entries for 2 sources"),
        ((["a"], ["b"]), {"names": ["x", "x"]}, ValueError, "'x' twice"),
        ((["a"],), {"batch_size": 0}, ValueError, "batch_size"),
        ((["a"],), {"chunk_tokens": 0}, ValueError, "chunk_tokens"),
        ((datasets.Dataset.from_dict({"body": ["a"]}),), {}, ValueError, "no column 'text'"),
        ((datasets.Dataset.from_dict({"text": ["a", None]}),), {}, TypeError, "row 1 of column 'text' holds NoneType"),
    ],
)  # fmt: skip
def test_scan_refuses(index, sources, kwargs, error, match):
    with pytest.raises(error, match=match):
        index.scan(*sources, **kwargs)


def test_scan_refuses_a_store_or_stream_of_another_tokenizer(index, tmp_path):
    other = build_tokenizer(vocab_size=600, max_documents=20)
    store = write_token_store(tmp_path / "s", [[1, 2, 3]], len(other), tokenizer=other)
    with pytest.raises(ValueError, match="source 'source 0': the token store"):
        index.scan(store)
    with pytest.raises(ValueError, match="another tokenizer"):
        index.scan(TextStream(datasets.Dataset.from_dict({"text": ["a b"]}), other))


def test_a_word_index_without_tokenizer_cannot_read_token_ids(tmp_path):
    index = ContaminationIndex.build(EVAL, DOMAINS, unit="words")
    with pytest.raises(ValueError, match="source 'source 0': a word index decodes a token store: this index has no"):
        index.scan(write_token_store(tmp_path / "s", [[1, 2, 3]], 512))
    with pytest.raises(ValueError, match="a word index decodes token ids: this index has no tokenizer"):
        index.contaminated([1, 2, 3])


def test_a_token_index_without_tokenizer_reads_ids_but_cannot_encode_text(tok, tmp_path):
    index = ContaminationIndex.from_token_ids([list(range(20))], ["a"], n=4)
    assert index.scan(write_token_store(tmp_path / "s", [list(range(5, 30))], 512)).fractions.tolist() == [
        12 / 17
    ]  # starts 5..16
    assert index.contaminated(np.arange(3, 9)) and not index.contaminated(np.arange(3))
    with pytest.raises(ValueError, match="text: this index has no tokenizer"):
        index.scan(["some text"])
    with pytest.raises(ValueError, match="source 'source 0': this index has no tokenizer"):
        index.scan(TextStream(datasets.Dataset.from_dict({"text": ["a b"]}), tok))


@pytest.mark.parametrize(
    "fields, match",
    [({"fractions": np.array([1.5])}, r"\[0, 1\]"), ({"threshold": 0.0}, "threshold"),
     ({"domains": ("a", "b")}, "domains has 2 entries for 1")],
)  # fmt: skip
def test_the_report_checks_its_fields(fields, match):
    values = {"n": 2, "unit": "words", "threshold": 0.5, "fractions": np.array([0.5]), "domains": None, "sources": ()}
    with pytest.raises(ValueError, match=match):
        ContaminationReport(**(values | fields))
    with pytest.raises(ValueError, match="documents_hit 3 > 2"):
        SourceScan("s", "text", 2, 10, 3)
