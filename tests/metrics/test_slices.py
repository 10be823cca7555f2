"""Figures per domain and tag level from per-document sums: hand-computed micro / macro, merges, hostile tables."""

from __future__ import annotations

import math

import numpy as np
import pytest

from hf_lmobj.metrics.domain_tags import domain_of_path
from hf_lmobj.metrics.scoring import TextScore
from hf_lmobj.metrics.slices import LN2, DocumentSums, domain_figures, figures, merge
from hf_lmobj.metrics.sums import (
    bits_per_byte_from_sums,
    byte_perplexity_from_sums,
    perplexity_from_sums,
    word_perplexity_from_sums,
)


def table(nll, tokens, nbytes, domain, words=None, doc_id=None) -> DocumentSums:
    n = len(nll)
    return DocumentSums(
        nll=nll,
        tokens=tokens,
        bytes=nbytes,
        words=[0] * n if words is None else words,
        doc_id=list(range(n)) if doc_id is None else doc_id,
        domain=domain,
    )


# Three domains, in bits (nll = bits * ln 2):
#   wiki: 4 + 2 bits over 2 + 2 bytes, 2 + 1 tokens, 3 + 3 words -> 1.5 bits/byte, 2 bits/token, 1 bit/word
#   code: 2 bits over 4 bytes, 2 tokens, 1 word                    -> 0.5 bits/byte, 1 bit/token, 2 bits/word
#   web:  9 bits over 6 bytes, 3 tokens, 3 words                   -> 1.5 bits/byte, 3 bits/token, 3 bits/word
#   all:  17 bits over 14 bytes, 8 tokens, 10 words
THREE = dict(
    nll=[4 * LN2, 2 * LN2, 2 * LN2, 9 * LN2],
    tokens=[2, 1, 2, 3],
    nbytes=[2, 2, 4, 6],
    words=[3, 3, 1, 3],
    domain=["wiki", "wiki", "code", "web"],
)
THREE_EXPECTED = {
    "perplexity/code": 2.0,
    "perplexity/web": 8.0,
    "perplexity/wiki": 4.0,
    "perplexity/micro": 2 ** (17 / 8),
    "perplexity/macro": 2 ** ((1 + 3 + 2) / 3),  # exp of the mean nats per token: the geometric mean, 4
    "bits_per_byte/code": 0.5,
    "bits_per_byte/web": 1.5,
    "bits_per_byte/wiki": 1.5,
    "bits_per_byte/micro": 17 / 14,
    "bits_per_byte/macro": (0.5 + 1.5 + 1.5) / 3,
    "byte_perplexity/code": 2**0.5,
    "byte_perplexity/web": 2**1.5,
    "byte_perplexity/wiki": 2**1.5,
    "byte_perplexity/micro": 2 ** (17 / 14),
    "byte_perplexity/macro": 2 ** (7 / 6),
    "word_perplexity/code": 4.0,
    "word_perplexity/web": 8.0,
    "word_perplexity/wiki": 2.0,
    "word_perplexity/micro": 2 ** (17 / 10),
    "word_perplexity/macro": 2 ** ((2 + 3 + 1) / 3),
}


def test_three_domains_micro_and_macro_match_the_hand_computed_figures():
    out = domain_figures(table(**THREE))
    assert list(out) == list(THREE_EXPECTED)
    assert out == pytest.approx(THREE_EXPECTED, rel=1e-12)


def test_macro_perplexity_is_the_geometric_mean_not_the_arithmetic_mean():
    out = domain_figures(table([1 * LN2, 3 * LN2], [1, 1], [1, 1], ["x", "y"]))
    assert out["perplexity/macro"] == pytest.approx(4.0)  # sqrt(2 * 8), not (2 + 8) / 2
    assert out["byte_perplexity/macro"] == pytest.approx(2 ** out["bits_per_byte/macro"])


def test_figures_of_the_whole_table_are_the_sums_modules_figures_exactly():
    t = table(**THREE)
    nll, tokens, nbytes, words = list(t.nll), list(t.tokens), list(t.bytes), list(t.words)
    assert figures(t) == {
        "perplexity": perplexity_from_sums(nll, tokens),
        "bits_per_byte": bits_per_byte_from_sums(nll, nbytes),
        "byte_perplexity": byte_perplexity_from_sums(nll, nbytes),
        "word_perplexity": word_perplexity_from_sums(nll, words),
    }
    assert all(domain_figures(t)[f"{name}/micro"] == value for name, value in figures(t).items())


# code/python: 4 bits / 2 bytes (2 bpb), 2 tokens; code/c: 1 bit / 2 bytes (0.5 bpb), 1 token; wiki: 3 bits / 3 bytes
LEVELS = dict(
    nll=[4 * LN2, 1 * LN2, 3 * LN2], tokens=[2, 1, 3], nbytes=[2, 2, 3], domain=["code/python", "code/c", "wiki"]
)


def test_tag_levels_give_micro_per_prefix_and_macro_per_parent():
    out = domain_figures(table(**LEVELS))
    bpb = {k[len("bits_per_byte/") :]: v for k, v in out.items() if k.startswith("bits_per_byte/")}
    assert bpb == pytest.approx(
        {
            "code": 5 / 4,  # micro over both code documents
            "code/macro": (2 + 0.5) / 2,  # mean of its children
            "code/c": 0.5,
            "code/python": 2.0,
            "wiki": 1.0,
            "micro": 8 / 7,
            "macro": (5 / 4 + 1.0) / 2,  # over the top level: code's micro and wiki
        }
    )
    assert list(bpb) == ["code", "code/macro", "code/c", "code/python", "wiki", "micro", "macro"]
    assert out["perplexity/code/macro"] == pytest.approx(2 ** ((2 + 1) / 2))


def test_three_levels_deep_get_every_prefix():
    t = table([LN2, LN2, LN2], [1, 1, 1], [1, 2, 4], ["code/python/email", "code/python/web", "code/c"])
    keys = [k for k in domain_figures(t) if k.startswith("bits_per_byte/")]
    assert keys == [
        "bits_per_byte/code",
        "bits_per_byte/code/macro",
        "bits_per_byte/code/c",
        "bits_per_byte/code/python",
        "bits_per_byte/code/python/macro",
        "bits_per_byte/code/python/email",
        "bits_per_byte/code/python/web",
        "bits_per_byte/micro",
        "bits_per_byte/macro",
    ]
    out = domain_figures(t)
    assert out["bits_per_byte/code/python/macro"] == pytest.approx((1 + 0.5) / 2)
    assert out["bits_per_byte/code/macro"] == pytest.approx((0.25 + 2 / 3) / 2)  # python's micro is 2 bits / 3 bytes
    assert out["bits_per_byte/macro"] == out["bits_per_byte/code"] == pytest.approx(3 / 7)


def test_without_levels_only_the_domains_as_given_but_macro_still_over_the_top_level():
    out = domain_figures(table(**LEVELS), levels=False)
    bpb = {k[len("bits_per_byte/") :]: v for k, v in out.items() if k.startswith("bits_per_byte/")}
    assert bpb == pytest.approx({"code/c": 0.5, "code/python": 2.0, "wiki": 1.0, "micro": 8 / 7, "macro": 9 / 8})


def test_word_perplexity_is_absent_when_no_words_were_counted():
    out = domain_figures(table(**LEVELS))
    assert not [k for k in out if k.startswith("word_perplexity")]
    assert "word_perplexity" not in figures(table(**LEVELS))
    assert len(out) == 3 * 7


def test_rows_in_any_order_give_the_same_figures():
    t = table(**THREE)
    order = [3, 1, 0, 2]
    shuffled = DocumentSums(
        *(tuple(getattr(t, f)[i] for i in order) for f in ("nll", "tokens", "bytes", "words", "doc_id", "domain"))
    )
    assert domain_figures(shuffled) == domain_figures(t)


def test_totals_beyond_the_largest_float_stay_exact():
    out = domain_figures(table([1e308, 1e308], [10**10, 10**10], [10**10, 10**10], ["x", "x"]))
    assert out["bits_per_byte/x"] == out["bits_per_byte/micro"] == pytest.approx(1e298 / LN2)


def test_merge_of_two_rank_tables_equals_the_single_table():
    single = table(**THREE, doc_id=["d0", "d1", "d2", "d3"])
    rank0 = table([single.nll[i] for i in (2, 0)], [2, 2], [4, 2], ["code", "wiki"], words=[1, 3], doc_id=["d2", "d0"])
    rank1 = table([single.nll[i] for i in (3, 1)], [3, 1], [6, 2], ["web", "wiki"], words=[3, 3], doc_id=["d3", "d1"])
    merged = merge([rank0, rank1])
    assert merged == single
    assert domain_figures(merged) == domain_figures(single)


@pytest.mark.parametrize(
    "tables, error, match",
    [
        ([], ValueError, "empty"),
        ("tables", TypeError, "list of DocumentSums"),
        ([{"nll": [1.0]}], TypeError, r"tables\[0\] must be a DocumentSums"),
    ],
)
def test_merge_refuses_what_is_not_a_list_of_tables(tables, error, match):
    with pytest.raises(error, match=match):
        merge(tables)


def test_merge_refuses_a_document_on_two_ranks_and_mixed_id_kinds():
    one = table([1.0], [1], [1], ["x"], doc_id=["a"])
    with pytest.raises(ValueError, match="'a', already given.*distributed sampler pads"):
        merge([one, one])
    with pytest.raises(TypeError, match="mix strings and ints"):
        merge([one, table([1.0], [1], [1], ["x"], doc_id=[7])])


def test_from_scores_takes_text_scores():
    t = DocumentSums.from_scores(
        [TextScore(2.0, 3, 5, 1), TextScore(1.0, 2, 4, 2)], doc_id=["a", "b"], domain=["x", "y"]
    )
    assert (t.nll, t.tokens, t.bytes, t.words) == ((2.0, 1.0), (3, 2), (5, 4), (1, 2))
    with pytest.raises(TypeError, match=r"scores\[0\] must be a TextScore"):
        DocumentSums.from_scores([(2.0, 3, 5, 1)], doc_id=["a"], domain=["x"])


def test_numpy_columns_are_accepted_and_stored_as_tuples():
    t = table(np.array([1.0, 2.0]), np.array([1, 2]), np.array([3, 4], dtype=np.int64), np.array(["x", "y"]))
    assert t.tokens == (1, 2) and type(t.tokens[0]) is int and t.domain == ("x", "y")


GOOD = dict(nll=[1.0, 2.0], tokens=[1, 2], bytes=[3, 4], words=[0, 0], doc_id=["a", "b"], domain=["x", "y"])


@pytest.mark.parametrize(
    "field, value, error, match",
    [
        ("nll", [float("nan"), 1.0], ValueError, r"nll\[0\] is nan"),
        ("nll", [math.inf, 1.0], ValueError, r"nll\[0\] is inf"),
        ("nll", [-0.5, 1.0], ValueError, r"nll\[0\] is -0.5"),
        ("nll", ["1.0", 1.0], TypeError, r"nll\[0\] must be a number"),
        ("nll", [1.0], ValueError, "one entry per document"),
        ("tokens", [1, -2], ValueError, r"tokens\[1\] is -2; counts cannot be negative"),
        ("tokens", [0, 1], ValueError, r"tokens\[0\] is 0.*scored no token"),
        ("tokens", [1.5, 1], ValueError, r"tokens\[0\] is 1.5"),
        ("tokens", [True, 1], TypeError, r"tokens\[0\] must be a whole number"),
        ("bytes", [0, 1], ValueError, r"bytes\[0\] is 0.*no bits per byte"),
        ("bytes", [2**63, 1], ValueError, r"bytes\[0\] is .*beyond"),
        ("words", [-1, 0], ValueError, r"words\[0\] is -1"),
        ("words", [3, 0], ValueError, "words: document 'a' has 3 and document 'b' has 0"),
        ("doc_id", ["a", "a"], ValueError, r"doc_id\[1\] is 'a', already given"),
        ("doc_id", ["a", 2], TypeError, "mixes strings and ints"),
        ("doc_id", [True, False], TypeError, r"doc_id\[0\] must be a string or an int"),
        ("doc_id", ["", "b"], ValueError, r"doc_id\[0\] is an empty string"),
        ("doc_id", {"a", "b"}, TypeError, "doc_id must be a list .* in order; got a set"),
        ("domain", ["", "y"], ValueError, r"domain\[0\] is an empty string"),
        ("domain", ["a//b", "y"], ValueError, r"domain\[0\] is 'a//b'; its '/'-separated tags must be non-empty"),
        ("domain", ["code/", "y"], ValueError, "tags must be non-empty"),
        ("domain", [" wiki", "y"], ValueError, "without surrounding spaces"),
        ("domain", ["macro", "y"], ValueError, "the tag 'macro' is reserved"),
        ("domain", ["code/micro", "y"], ValueError, "the tag 'micro' is reserved"),
        ("domain", ["wiki_ci_low", "y"], ValueError, "'wiki_ci_low' is reserved"),
        ("domain", [None, "y"], TypeError, r"domain\[0\] must be a string"),
        ("domain", "xy", TypeError, "domain must be a list"),
        ("domain", ["code", "code/python"], ValueError, "'code' holds documents and has the sub-domain 'code/python'"),
    ],
)
def test_hostile_tables_are_refused_by_field(field, value, error, match):
    with pytest.raises(error, match=match):
        DocumentSums(**{**GOOD, field: value})


def test_an_empty_table_is_refused():
    with pytest.raises(ValueError, match="the table is empty"):
        DocumentSums(nll=[], tokens=[], bytes=[], words=[], doc_id=[], domain=[])


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda: domain_figures({"nll": [1.0]}), TypeError, "sums must be a DocumentSums"),
        (
            lambda: domain_figures(table([1.0], [1], [1], ["x"]), levels="yes"),
            TypeError,
            "levels must be True or False",
        ),
        (lambda: figures([1.0]), TypeError, "sums must be a DocumentSums"),
    ],
)
def test_figures_refuse_what_is_not_a_table(call, error, match):
    with pytest.raises(error, match=match):
        call()


@pytest.mark.parametrize(
    "path, domain",
    [
        ("wiki.jsonl.gz", "wiki"),
        ("/data/paloma/c4_en.jsonl", "c4_en"),
        ("books.JSON", "books"),
        ("en.wiki.txt.zst", "en.wiki"),
        ("shards/part-0.parquet", "part-0"),
        ("README", "README"),
    ],
)
def test_domain_of_path_is_the_file_name_without_its_extensions(path, domain):
    assert domain_of_path(path) == domain


@pytest.mark.parametrize(
    "path, error, match",
    [
        (".jsonl.gz", ValueError, "no name before its extensions"),
        ("data/macro.jsonl", ValueError, "'macro' is reserved"),
        (3, TypeError, "path must be a file path"),
    ],
)
def test_domain_of_path_refuses_names_that_make_no_domain(path, error, match):
    with pytest.raises(error, match=match):
        domain_of_path(path)
