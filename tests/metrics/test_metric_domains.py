"""The evaluate metrics with domains= and bootstrap intervals: hand-worked figures, the slices' own, hostile input."""

from __future__ import annotations

import math

import pytest

from hf_lmobj.metrics import load
from hf_lmobj.metrics.scoring import score_texts
from hf_lmobj.metrics.slices import LN2, DocumentSums, domain_figures
from hf_lmobj.metrics.uncertainty import bootstrap_intervals, interval_keys

COUNT = {"perplexity": "num_tokens", "bits_per_byte": "num_bytes"}
FIGURES = {"perplexity": ("perplexity", "word_perplexity"), "bits_per_byte": ("bits_per_byte", "byte_perplexity")}
# Four documents in three domains (wiki, code/py, code/c); NLL in bits (times ln 2 below).
DOMAINS = ["wiki", "code/py", "code/c", "wiki"]
BITS = [2.0, 6.0, 3.0, 4.0]
TOKENS = [2, 3, 2, 2]
NBYTES = [4, 2, 3, 4]
NLL = [bits * LN2 for bits in BITS]
TEXTS = ["def f(x):\n    return x\n", "import os\nprint(os.sep)\n", "x = [i * i for i in range(9)]\n", "# a\n# b\n"]


@pytest.fixture(scope="module")
def metrics():
    return {name: load(name) for name in COUNT}


def _sums(name: str) -> dict:
    return {"nll": NLL, COUNT[name]: TOKENS if name == "perplexity" else NBYTES}


def _table(nll, tokens, nbytes, words, domains) -> DocumentSums:
    return DocumentSums(nll=nll, tokens=tokens, bytes=nbytes, words=words, doc_id=list(range(len(nll))), domain=domains)


def _own(name: str, figures: dict) -> dict:
    """The metric's own figures of a ``domain_figures`` (or interval) dict."""
    return {key: value for key, value in figures.items() if key.split("/", 1)[0] in FIGURES[name]}


# hand-worked: bits per token / per byte per node (then 2 ** for perplexities), in the keys' order
HAND = {
    "perplexity": {  # bits per token: wiki 6/4, code/py 6/3, code/c 3/2, code 9/5; micro 15/9
        "code": 1.8, "code/macro": (2.0 + 1.5) / 2, "code/c": 1.5, "code/py": 2.0, "wiki": 1.5,
        "micro": 15 / 9, "macro": (1.5 + 1.8) / 2,
    },
    "bits_per_byte": {  # bits per byte: wiki 6/8, code/py 6/2, code/c 3/3, code 9/5; micro 15/13
        "code": 1.8, "code/macro": (3.0 + 1.0) / 2, "code/c": 1.0, "code/py": 3.0, "wiki": 0.75,
        "micro": 15 / 13, "macro": (0.75 + 1.8) / 2,
    },
}  # fmt: skip


@pytest.mark.parametrize("name", ["perplexity", "bits_per_byte"])
def test_three_domains_give_the_hand_worked_micro_and_macro_figures(metrics, name):
    result = metrics[name].compute(**_sums(name), domains=DOMAINS)
    sliced = {key[len(name) + 1 :]: value for key, value in result.items() if key.startswith(f"{name}/")}
    expected = {node: bits if name == "bits_per_byte" else 2**bits for node, bits in HAND[name].items()}
    assert sliced == pytest.approx(expected, rel=1e-12) and list(sliced) == list(expected)
    second = "byte_perplexity" if name == "bits_per_byte" else None  # 2 ** bits per byte; no words counted
    assert {k for k in result if "/" in k} == {f"{f}/{n}" for f in (name, second) if f for n in HAND[name]}
    assert result[f"{name}/micro"] == pytest.approx(result[name], rel=1e-15)  # the whole set, as before


@pytest.mark.parametrize("name", ["perplexity", "bits_per_byte"])
def test_the_figures_are_domain_figures_on_the_same_sums(metrics, name):
    nll, tokens, nbytes = [0.3, 7.25, 1.5, 2.0, 9.0], [1, 9, 2, 4, 11], [3, 40, 5, 9, 60]
    domains = ["a/x/1", "a/x/2", "a/y", "b", "b"]
    counts = {"num_tokens": tokens} if name == "perplexity" else {"num_bytes": nbytes}
    result = metrics[name].compute(nll=nll, **counts, domains=domains)
    reference = _own(name, domain_figures(_table(nll, tokens, nbytes, [0] * 5, domains)))
    assert {key: value for key, value in result.items() if "/" in key} == reference  # exact


def test_words_counted_give_word_perplexity_per_domain(metrics):
    words = [3, 4, 1, 2]
    result = metrics["perplexity"].compute(nll=NLL, num_tokens=TOKENS, num_words=words, domains=DOMAINS)
    reference = domain_figures(_table(NLL, TOKENS, TOKENS, words, DOMAINS))
    assert {k: v for k, v in result.items() if k.startswith("word_perplexity/")} == {
        k: v for k, v in reference.items() if k.startswith("word_perplexity/")
    }
    assert result["word_perplexity/wiki"] == pytest.approx(2 ** (6 / 5), rel=1e-12)


@pytest.mark.parametrize("name", ["perplexity", "bits_per_byte"])
def test_texts_scored_by_a_model_give_the_figures_of_their_sums(metrics, name, tiny_gpt2, tokenizer):
    domains = ["py/def", "py/import", "py/def", "comment"]
    result = metrics[name].compute(predictions=TEXTS, model=tiny_gpt2, tokenizer=tokenizer, progress=False,
                                   domains=domains, bootstrap_samples=50, seed=3)  # fmt: skip
    scores = score_texts(tiny_gpt2, tokenizer, TEXTS, progress=False)
    table = DocumentSums.from_scores(scores, doc_id=[0, 1, 2, 3], domain=domains)
    expected = _own(name, domain_figures(table))
    expected.update(interval_keys(_own(name, bootstrap_intervals(table, 50, seed=3))))
    assert {key: value for key, value in result.items() if "/" in key} == expected
    low, high = bootstrap_intervals(table, 50, seed=3)[f"{name}/micro"]
    assert (result[f"{name}_ci_low"], result[f"{name}_ci_high"]) == (low, high)


@pytest.mark.parametrize(
    "name, keys",
    [
        ("perplexity", {"perplexity", "nll", "num_tokens", "perplexities"}),
        ("bits_per_byte", {"bits_per_byte", "byte_perplexity", "nll", "num_bytes", "bits_per_byte_per_text"}),
    ],
)
def test_without_domains_or_intervals_the_result_is_unchanged(metrics, name, keys):
    result = metrics[name].compute(**_sums(name))
    assert set(result) == keys
    assert metrics[name].compute(**_sums(name), domains=None, bootstrap_samples=0) == result
    if name == "perplexity":
        assert result["perplexity"] == math.exp(math.fsum(NLL) / sum(TOKENS))
    else:
        assert result["bits_per_byte"] == math.fsum(NLL) / sum(NBYTES) / LN2


@pytest.mark.parametrize("name", ["perplexity", "bits_per_byte"])
def test_intervals_come_only_when_asked_and_are_the_bootstrap_of_the_table(metrics, name):
    plain = metrics[name].compute(**_sums(name), domains=DOMAINS)
    assert not any("_ci_" in key for key in plain)
    asked = metrics[name].compute(**_sums(name), domains=DOMAINS, bootstrap_samples=200, confidence=0.9, seed=11)
    table = _table(NLL, TOKENS if name == "perplexity" else NBYTES, NBYTES if name != "perplexity" else TOKENS,
                   [0] * 4, DOMAINS)  # fmt: skip
    intervals = _own(name, bootstrap_intervals(table, 200, confidence=0.9, seed=11))
    assert {key: value for key, value in asked.items() if "_ci_" in key and "/" in key} == interval_keys(intervals)
    assert {key: asked[key] for key in plain} == plain  # the figures themselves do not move
    assert asked[f"{name}_ci_low"] <= asked[name] <= asked[f"{name}_ci_high"]


def test_intervals_without_domains_resample_every_entry_and_add_only_whole_set_bounds(metrics):
    result = metrics["bits_per_byte"].compute(nll=NLL, num_bytes=NBYTES, bootstrap_samples=300, seed=5)
    assert sorted(key for key in result if "_ci_" in key or "/" in key) == [
        "bits_per_byte_ci_high", "bits_per_byte_ci_low", "byte_perplexity_ci_high", "byte_perplexity_ci_low",
    ]  # fmt: skip
    table = _table(NLL, NBYTES, NBYTES, [0] * 4, ["any"] * 4)  # one stratum: every entry resampled together
    assert (result["bits_per_byte_ci_low"], result["bits_per_byte_ci_high"]) == bootstrap_intervals(table, 300, seed=5)[
        "bits_per_byte/micro"
    ]


def test_add_batch_and_add_give_what_one_compute_gives(metrics):
    metric = metrics["perplexity"]
    whole = metric.compute(nll=NLL, num_tokens=TOKENS, domains=DOMAINS, bootstrap_samples=100, seed=2)
    metric.add_batch(nll=NLL[:2], num_tokens=TOKENS[:2], domains=DOMAINS[:2])
    metric.add(nll=NLL[2], num_tokens=TOKENS[2], domains=DOMAINS[2])
    metric.add_batch(nll=NLL[3:], num_tokens=TOKENS[3:], domains=DOMAINS[3:])
    assert metric.compute(bootstrap_samples=100, seed=2) == whole


def test_entries_with_and_without_domains_are_refused_at_compute(metrics):
    metric = metrics["bits_per_byte"]
    metric.add_batch(nll=NLL[:2], num_bytes=NBYTES[:2], domains=DOMAINS[:2])
    metric.add_batch(nll=NLL[2:], num_bytes=NBYTES[2:])
    with pytest.raises(ValueError, match="entry 0 has a domain and entry 2 has none"):
        metric.compute()


BAD_DOMAINS = [  # (domains, error, word)
    (["wiki", "code/py", "code/c"], ValueError, r"nll \(4\) and domains \(3\)"),
    (DOMAINS + ["wiki"], ValueError, r"nll \(4\) and domains \(5\)"),
    (["wiki", None, "code/c", "wiki"], TypeError, r"domains\[1\] must be a string"),
    (["wiki", "", "code/c", "wiki"], ValueError, r"domains\[1\] is an empty string"),
    (["wiki", 3, "code/c", "wiki"], TypeError, r"domains\[1\]"),
    (["wiki", "code/micro", "code/c", "wiki"], ValueError, "reserved"),
    (["wiki", "code//py", "code/c", "wiki"], ValueError, "non-empty"),
    (["wiki", " code", "code/c", "wiki"], ValueError, "surrounding spaces"),
    (["wiki", "code", "code/c", "wiki"], ValueError, "sub-domain 'code/c'"),
    ("wiki", TypeError, "one entry per text"),
    ({"wiki", "code"}, TypeError, "in order"),
]


@pytest.mark.parametrize("domains, error, word", BAD_DOMAINS)
def test_bad_domains_are_refused_by_name(metrics, domains, error, word):
    with pytest.raises(error, match=word):
        metrics["perplexity"].compute(nll=NLL, num_tokens=TOKENS, domains=domains)


BAD_OPTIONS = [  # (options, error, word)
    ({"bootstrap_samples": -1}, ValueError, r"bootstrap_samples must be an int >= 0"),
    ({"bootstrap_samples": True}, TypeError, "bootstrap_samples"),
    ({"bootstrap_samples": 10.0}, TypeError, "bootstrap_samples"),
    ({"bootstrap_samples": 10, "confidence": 1.0}, ValueError, "confidence"),
    ({"bootstrap_samples": 10, "confidence": "0.9"}, TypeError, "confidence"),
    ({"bootstrap_samples": 10, "seed": -1}, ValueError, "seed"),
    ({"bootstrap_samples": 10, "seed": 2**32}, ValueError, "seed"),
]


@pytest.mark.parametrize("options, error, word", BAD_OPTIONS)
def test_bad_bootstrap_options_are_refused_by_name(metrics, options, error, word):
    with pytest.raises(error, match=word):
        metrics["bits_per_byte"].compute(nll=NLL, num_bytes=NBYTES, domains=DOMAINS, **options)


def test_bad_texts_domains_and_options_are_refused_before_any_model_loads(metrics):
    missing = "/nonexistent/model"  # loading it would fail with an OSError: the refusal comes first
    with pytest.raises(ValueError, match=r"predictions \(2\) and domains \(1\)"):
        metrics["perplexity"].compute(predictions=TEXTS[:2], model_id=missing, domains=["py"])
    with pytest.raises(TypeError, match=r"domains\[0\] must be a string"):
        metrics["perplexity"].add_batch(predictions=TEXTS[:1], model_id=missing, domains=[None])
    with pytest.raises(ValueError, match="bootstrap_samples"):
        metrics["bits_per_byte"].compute(predictions=TEXTS[:1], model_id=missing, bootstrap_samples=-5)


def test_bootstrap_options_belong_to_compute_not_to_adding_entries(metrics):
    with pytest.raises(TypeError, match=r"add_batch takes entries only; pass bootstrap_samples= to compute"):
        metrics["perplexity"].add_batch(nll=NLL, num_tokens=TOKENS, bootstrap_samples=10)
    with pytest.raises(TypeError, match=r"add takes entries only; pass seed= to compute"):
        metrics["perplexity"].add(nll=NLL[0], num_tokens=TOKENS[0], seed=1)


def test_a_text_the_model_cannot_produce_has_no_domain_figure(metrics):
    with pytest.raises(ValueError, match=r"nll\[1\] is inf"):
        metrics["perplexity"].compute(nll=[1.0, math.inf], num_tokens=[1, 1], domains=["a", "b"])
    assert metrics["perplexity"].compute(nll=[1.0, math.inf], num_tokens=[1, 1])["perplexity"] == math.inf
