"""recipes/score.py as a contract users script against: per-domain figures, intervals, comparisons, contamination.

References are independent of the recipe: the same texts scored with ``score_texts`` and turned into figures by
``domain_figures`` / ``bootstrap_intervals`` (exact equality), hand-computed micro and macro figures, and planted
copies of evaluation documents in training data.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
from pathlib import Path

import datasets
import pytest

from hf_lmobj.corpus import build_tokenizer, load_stdlib_corpus
from hf_lmobj.metrics.scoring import score_texts
from hf_lmobj.metrics.slices import LN2, DocumentSums, domain_figures
from hf_lmobj.metrics.uncertainty import bootstrap_intervals
from hf_lmobj.store.tokenize_text import tokenize_to_token_store
from tests.distributed import preload, run_ranks
from tests.testing_utils import load_recipe, tiny_gpt2, tiny_llama

preload("transformers.models.llama.modeling_llama", "hf_lmobj.metrics.scoring")
SCORE = load_recipe("score")
DOMAINS = ("code", "math", "wiki")
PER_DOMAIN = 5
FIGURES = ("perplexity", "bits_per_byte", "byte_perplexity", "word_perplexity")


# ------------------------------------------------------------------------------------------ fixtures
def _texts() -> list[str]:
    """Distinct stdlib snippets (400 characters: dozens of 13-grams each), one block per domain."""
    texts = [t[:400] for t in load_stdlib_corpus(max_documents=80)["train"]["text"] if len(t) > 400]
    return list(dict.fromkeys(texts))[: PER_DOMAIN * len(DOMAINS)]


def _write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return _texts()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tokenizer) -> Path:
    """A tiny Llama (hidden 32) and its tokenizer (vocab 1024), saved."""
    folder = tmp_path_factory.mktemp("llama")
    tiny_llama(tokenizer, positions=256, seed=3).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def other_vocab_dir(tmp_path_factory) -> Path:
    """A tiny GPT-2 with another tokenizer (vocab 512): another tokenization of the same text."""
    folder = tmp_path_factory.mktemp("gpt2-512")
    small = build_tokenizer(vocab_size=512, max_documents=300)
    tiny_gpt2(small, positions=256, seed=5).save_pretrained(folder)
    small.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def three_files(tmp_path_factory, texts) -> Path:
    """A Paloma-style folder: one file per domain, rows without a domain field."""
    folder = tmp_path_factory.mktemp("three")
    for k, domain in enumerate(DOMAINS):
        _write_jsonl(folder / f"{domain}.jsonl", [{"text": t} for t in texts[k * PER_DOMAIN : (k + 1) * PER_DOMAIN]])
    return folder


def _domain_of(k: int) -> str:
    return DOMAINS[k // PER_DOMAIN]


def _run(args: list[str], out: Path) -> tuple[dict, str]:
    """The recipe in this process: its returned metrics and what it printed."""
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        metrics = SCORE.main([*args, "--output_dir", str(out), "--use_cpu", "true"])
    return metrics, printed.getvalue()


def _base(model: Path, data: Path, *flags: str) -> list[str]:
    return ["--model_name_or_path", str(model), "--dataset_name", str(data), "--split", "train", *flags]


@pytest.fixture(scope="module")
def three_run(tmp_path_factory, model_dir, three_files):
    out = tmp_path_factory.mktemp("three-out")
    metrics, printed = _run(_base(model_dir, three_files, "--bootstrap_samples", "300", "--bootstrap_seed", "7"), out)
    return metrics, printed, out


@pytest.fixture(scope="module")
def reference(model_dir, texts) -> DocumentSums:
    """The same texts scored directly and tabled by hand, domain by file."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    scores = score_texts(model, AutoTokenizer.from_pretrained(model_dir), texts, progress=False)
    return DocumentSums.from_scores(scores, doc_id=list(range(len(texts))),
                                    domain=[_domain_of(k) for k in range(len(texts))])  # fmt: skip


# ------------------------------------------------------------------------------------------ keys and values
def test_every_documented_key_is_written_for_each_domain_micro_and_macro(three_run):
    metrics, _, out = three_run
    for figure in FIGURES:
        for node in (*DOMAINS, "micro", "macro"):
            assert {f"{figure}/{node}", f"{figure}/{node}_ci_low", f"{figure}/{node}_ci_high"} <= set(metrics)
    for node in (*DOMAINS, "micro"):
        assert metrics[f"documents/{node}"] == (PER_DOMAIN if node != "micro" else 3 * PER_DOMAIN)
    assert json.loads((out / "metrics.json").read_text()) == metrics
    assert (metrics["bootstrap/samples"], metrics["bootstrap/confidence"], metrics["bootstrap/seed"]) == (300, 0.95, 7)


def test_the_figures_equal_domain_figures_of_the_same_sums(three_run, reference):
    metrics, _, _ = three_run
    expected = domain_figures(reference)
    assert {key: metrics[key] for key in expected} == expected


def test_the_intervals_equal_the_bootstrap_of_the_same_sums(three_run, reference):
    metrics, _, _ = three_run
    for key, (low, high) in bootstrap_intervals(reference, 300, 0.95, 7).items():
        assert (metrics[f"{key}_ci_low"], metrics[f"{key}_ci_high"]) == (low, high)


def test_micro_and_macro_by_hand(three_run, reference):
    metrics, _, _ = three_run
    per_domain = {d: [i for i, name in enumerate(reference.domain) if name == d] for d in DOMAINS}
    bits = {d: math.fsum(reference.nll[i] for i in rows) / sum(reference.bytes[i] for i in rows) / LN2
            for d, rows in per_domain.items()}  # fmt: skip
    assert metrics["bits_per_byte/macro"] == pytest.approx(sum(bits.values()) / 3, rel=1e-12)
    assert metrics["bits_per_byte/micro"] == pytest.approx(math.fsum(reference.nll) / sum(reference.bytes) / LN2,
                                                           rel=1e-12)  # fmt: skip
    assert metrics["bits_per_byte/micro"] == pytest.approx(metrics["train_bits_per_byte"], rel=1e-12)
    assert metrics["perplexity/micro"] == pytest.approx(metrics["train_perplexity"], rel=1e-12)


def test_each_interval_brackets_its_figure(three_run):
    metrics, _, _ = three_run
    lows = [key for key in metrics if key.endswith("_ci_low")]
    assert len(lows) == 4 * 5
    for low in lows:
        key = low[: -len("_ci_low")]
        assert metrics[low] <= metrics[key] <= metrics[f"{key}_ci_high"], key


def test_the_printed_table_has_a_row_per_domain_then_micro_and_macro(three_run):
    metrics, printed, _ = three_run
    lines = printed.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("domain"))
    assert "bits/byte [95% CI]" in lines[header] and "perplexity [95% CI]" in lines[header]
    rows = [line.split()[0] for line in lines[header + 1 : header + 6]]
    assert rows == [*DOMAINS, "micro", "macro"]
    micro = lines[header + 4].split()
    assert micro[1:3] == [str(3 * PER_DOMAIN), str(metrics["bytes/micro"])]
    assert (
        micro[3] == f"{metrics['bits_per_byte/micro']:.4f}"
        and micro[4] == f"[{metrics['bits_per_byte/micro_ci_low']:.4f},"
    )


def test_no_intervals_with_zero_bootstrap_samples(tmp_path, model_dir, three_files, three_run):
    metrics, printed = _run(_base(model_dir, three_files, "--bootstrap_samples", "0"), tmp_path)
    assert not [key for key in metrics if "_ci_" in key]
    assert metrics["bootstrap/samples"] == 0 and "bootstrap/seed" not in metrics
    with_intervals = three_run[0]
    assert {k: v for k, v in with_intervals.items() if "_ci_" not in k and not k.startswith("bootstrap/")} == {
        k: v for k, v in metrics.items() if not k.startswith("bootstrap/")}  # fmt: skip
    assert "CI]" not in printed


def test_the_card_names_the_interval_method(three_run):
    _, _, out = three_run
    card = (out / "README.md").read_text()
    assert "95% stratified document bootstrap (percentile), 300 resamples, seed 7" in card
    assert "`bits_per_byte/micro_ci_low`" in card


# ------------------------------------------------------------------------------------------ where domains come from
def test_a_domain_field_with_tag_paths_gives_every_level(tmp_path, model_dir, texts):
    tags = ["code/python", "code/c", "prose"]
    data = _write_jsonl(tmp_path / "all.jsonl", [{"text": t, "domain": tags[k % 3]} for k, t in enumerate(texts[:9])])
    metrics, printed = _run(_base(model_dir, data, "--bootstrap_samples", "50"), tmp_path / "out")
    nodes = [k[len("bits_per_byte/") :] for k in metrics if k.startswith("bits_per_byte/") and "_ci_" not in k]
    assert nodes == ["code", "code/macro", "code/c", "code/python", "prose", "micro", "macro"]
    assert metrics["bits_per_byte/code/macro"] == pytest.approx(
        (metrics["bits_per_byte/code/c"] + metrics["bits_per_byte/code/python"]) / 2, rel=1e-12)  # fmt: skip
    assert metrics["documents/code"] == 6 and "code/macro" in printed


def test_another_domain_column_is_read_from_a_named_split(tmp_path, model_dir, texts):
    data = _write_jsonl(
        tmp_path / "rows.jsonl", [{"text": t, "topic": ("a", "b")[k % 2]} for k, t in enumerate(texts[:4])]
    )
    metrics, _ = _run(_base(model_dir, data, "--domain_column", "topic", "--bootstrap_samples", "0"), tmp_path / "o")
    assert (metrics["documents/a"], metrics["documents/b"]) == (2, 2)


def test_a_single_file_without_a_domain_is_one_domain_named_after_it(tmp_path, model_dir, texts):
    data = _write_jsonl(tmp_path / "essays.jsonl", [{"text": t} for t in texts[:3]])
    metrics, _ = _run(_base(model_dir, data, "--bootstrap_samples", "0"), tmp_path / "o")
    assert metrics["documents/essays"] == 3
    assert metrics["bits_per_byte/essays"] == metrics["bits_per_byte/micro"] == metrics["bits_per_byte/macro"]


def test_the_embedded_corpus_is_sliced_by_stdlib_package(tmp_path, model_dir):
    metrics, _ = _run(["--model_name_or_path", str(model_dir), "--split", "train", "--max_documents", "40",
                       "--max_texts", "6", "--max_length", "64", "--bootstrap_samples", "0"], tmp_path)  # fmt: skip
    paths = load_stdlib_corpus(0.02, 40)["train"]["path"]
    packages = [p.split("/")[0] if "/" in p else "(top level)" for p in paths]
    scored = [p for p, text in zip(packages, load_stdlib_corpus(0.02, 40)["train"]["text"]) if text.strip()][:6]
    assert {k[len("documents/") :]: v for k, v in metrics.items() if k.startswith("documents/")} == {
        **{p: scored.count(p) for p in sorted(set(scored))}, "micro": 6}  # fmt: skip


def test_the_validation_split_is_the_pretrain_held_out_text_with_its_file_domains(tmp_path, model_dir, three_files):
    from hf_lmobj.data.prepare import DataArguments
    from hf_lmobj.data.run_sources import open_sources

    flags = ["--validation_fraction", "0.5", "--bootstrap_samples", "0"]
    metrics, _ = _run(["--model_name_or_path", str(model_dir), "--dataset_name", str(three_files), *flags], tmp_path)
    held = open_sources(DataArguments(dataset_name=str(three_files), validation_fraction=0.5))
    counts = {d: held.validation_domains.count(d) for d in set(held.validation_domains)}
    assert {
        k[len("documents/") :]: v for k, v in metrics.items() if k.startswith("documents/") and k != "documents/micro"
    } == counts
    assert metrics["texts_scored"] == len(held.validation_texts) and metrics["validation_bits_per_byte"] > 0


def test_empty_and_whitespace_texts_are_counted_not_scored(tmp_path, model_dir, texts):
    data = _write_jsonl(tmp_path / "d.jsonl", [{"text": texts[0]}, {"text": ""}, {"text": "  \n"}, {"text": texts[1]}])
    metrics, _ = _run(_base(model_dir, data, "--bootstrap_samples", "0"), tmp_path / "o")
    assert (metrics["texts_scored"], metrics["documents_skipped/empty"], metrics["documents_skipped/whitespace"]) == (
        2, 1, 1)  # fmt: skip


# ------------------------------------------------------------------------------------------ processes
def _score_in_rank(argv: list[str]) -> dict:
    return load_recipe("score").main(argv)


def test_two_processes_give_the_figures_of_one(tmp_path, model_dir, three_files):
    flags = _base(model_dir, three_files, "--bootstrap_samples", "100", "--batch_size", "1", "--use_cpu", "true")
    one = SCORE.main([*flags, "--output_dir", str(tmp_path / "one")])
    ranks = run_ranks(_score_in_rank, 2, [*flags, "--output_dir", str(tmp_path / "two")], timeout=240)
    assert ranks[0] == one
    assert json.loads((tmp_path / "two" / "metrics.json").read_text()) == one
    assert "| `num_processes` | 2 |" in (tmp_path / "two" / "README.md").read_text()
    assert ranks[1]["texts_scored"] == 3 * PER_DOMAIN  # the other rank gathered every document too


# ------------------------------------------------------------------------------------------ comparisons
def test_a_model_compared_with_itself_differs_by_zero(tmp_path, model_dir, three_files):
    metrics, printed = _run(_base(model_dir, three_files, "--compare_model", str(model_dir), "--bootstrap_samples",
                                  "200"), tmp_path)  # fmt: skip
    for node in (*DOMAINS, "micro", "macro"):
        key = f"compare/bits_per_byte/{node}"
        assert metrics[key] == 0.0 and metrics[f"{key}_ci_low"] <= 0.0 <= metrics[f"{key}_ci_high"]
    assert metrics["compare/win_rate/micro"] == 0.0 and metrics["compare/ties/micro"] == 3 * PER_DOMAIN
    assert metrics["compare/sign_test_p/micro"] == 1.0 and metrics["compare/documents_left_out"] == 0
    assert not [k for k in metrics if k.startswith("compare/tokenizer_free")]  # one tokenizer: nothing to align
    assert "compare - model, bits/byte [95% CI]" in printed and "+0.0000 [+0.0000, +0.0000]" in printed


def test_a_compare_model_with_another_vocabulary_is_compared_per_byte(
    tmp_path, model_dir, other_vocab_dir, three_files
):
    metrics, printed = _run(_base(model_dir, three_files, "--compare_model", str(other_vocab_dir),
                                  "--bootstrap_samples", "0"), tmp_path)  # fmt: skip
    paired, free = metrics["compare/bits_per_byte/micro"], metrics["compare/tokenizer_free/bits_per_byte/micro"]
    assert free == pytest.approx(paired, rel=1e-5)  # every token scored both ways: the same bytes, the same NLL
    for domain in DOMAINS:
        assert metrics[f"compare/tokenizer_free/bits_per_byte/{domain}"] == pytest.approx(
            metrics[f"compare/bits_per_byte/{domain}"], rel=1e-5)  # fmt: skip
    assert "compare/bits_per_byte/micro_ci_low" not in metrics
    assert "documents of largest gap: #" in printed and "tokenizer-free gap" in printed


# ------------------------------------------------------------------------------------------ contamination
@pytest.fixture(scope="module")
def training_folder(tmp_path_factory, texts) -> Path:
    """Training text: unrelated stdlib snippets and one planted copy of the first wiki document."""
    folder = tmp_path_factory.mktemp("train")
    clean = [t[:400] for t in load_stdlib_corpus(max_documents=140)["train"]["text"][100:110]]
    _write_jsonl(folder / "train.jsonl", [{"text": t} for t in [*clean, texts[2 * PER_DOMAIN]]])
    return folder


def test_a_planted_copy_contaminates_its_domain_only(tmp_path, model_dir, three_files, training_folder):
    metrics, printed = _run(_base(model_dir, three_files, "--bootstrap_samples", "0", "--contamination_source",
                                  str(training_folder)), tmp_path)  # fmt: skip
    assert metrics["contamination/wiki/rate"] == 1 / PER_DOMAIN
    assert metrics["contamination/code/rate"] == metrics["contamination/math/rate"] == 0.0
    assert (
        metrics["contamination/rate"] == 1 / (3 * PER_DOMAIN) and metrics["contamination/contaminated_documents"] == 1
    )
    assert "contaminated" in printed and "20.0%" in printed


def test_a_token_store_is_scanned_with_its_own_tokenizer(tmp_path, model_dir, three_files, texts):
    small = build_tokenizer(vocab_size=512, max_documents=300)  # not the model's tokenizer
    rows = datasets.Dataset.from_dict({"text": ["unrelated words " * 30, texts[0]]})
    store = tokenize_to_token_store(rows, small, tmp_path / "store", save_tokenizer=True)
    metrics, _ = _run(_base(model_dir, three_files, "--bootstrap_samples", "0", "--contamination_source",
                            str(store.path)), tmp_path / "o")  # fmt: skip
    assert metrics["contamination/code/rate"] == 1 / PER_DOMAIN and metrics["contamination/wiki/rate"] == 0.0
    assert metrics["contamination/training_documents"] == 2
    assert metrics["contamination/tokenizer"] == f"the tokenizer of token store {store.path}"


def test_several_sources_repeated_or_comma_separated(tmp_path, model_dir, three_files, training_folder, texts):
    other = _write_jsonl(tmp_path / "more.jsonl", [{"text": texts[0]}])
    sources = [str(training_folder), str(other)]
    for flags in (["--contamination_source", ",".join(sources)],
                  ["--contamination_source", sources[0], "--contamination_source", sources[1]]):  # fmt: skip
        metrics, _ = _run(_base(model_dir, three_files, "--bootstrap_samples", "0", *flags), tmp_path / "o")
        assert metrics["contamination/training_documents"] == 12
        assert metrics["contamination/code/rate"] == metrics["contamination/wiki/rate"] == 1 / PER_DOMAIN


# ------------------------------------------------------------------------------------------ hostile input
@pytest.mark.parametrize(
    ("flags", "error", "words"),
    [
        (["--bootstrap_samples", "-1"], ValueError, "bootstrap_samples must be an int >= 0"),
        (["--confidence", "1.5"], ValueError, "confidence must be a finite number in \\(0, 1\\)"),
        (["--confidence", "0"], ValueError, "confidence"),
        (["--confidence", "nan"], ValueError, "confidence"),
        (["--bootstrap_seed", "-1"], ValueError, "bootstrap_seed must be an int in \\[0, 2\\*\\*32\\)"),
        (["--bootstrap_seed", str(2**32)], ValueError, "bootstrap_seed"),
        (["--contamination_source", "a,,b"], ValueError, "empty entry"),
        (["--contamination_source", "data/x", "data/x"], ValueError, "'data/x' twice"),
        (["--compare_model", " "], ValueError, "compare_model must be a non-empty string"),
        (["--domain_column", "topic"], ValueError, "domain_column 'topic' is read from a named split"),
        (["--domain_column", "topic", "--split", "train"], ValueError, "domain_column 'topic'"),  # embedded corpus
        (["--domain_column", ""], ValueError, "domain_column must be a non-empty string"),
    ],
)
def test_bad_flags_are_refused_before_anything_is_loaded(monkeypatch, tmp_path, flags, error, words):
    monkeypatch.setattr(SCORE, "score_documents", lambda *a: pytest.fail("should not be reached"))
    with pytest.raises(error, match=words):
        SCORE.main(["--model_name_or_path", "some/model", "--output_dir", str(tmp_path / "eval"), *flags])
    assert not (tmp_path / "eval").exists()


def _refused_before_scoring(monkeypatch, tmp_path, argv: list[str], words: str) -> None:
    monkeypatch.setattr(SCORE, "score_shard", lambda *a, **k: pytest.fail("scored before the refusal"))
    with pytest.raises(ValueError, match=words):
        SCORE.main([*argv, "--output_dir", str(tmp_path / "eval"), "--use_cpu", "true"])
    assert not (tmp_path / "eval").exists()


@pytest.mark.parametrize(
    ("source", "words"),
    [
        ("{tmp}/no_such_folder", r"contamination_source '.*/no_such_folder': no such file or folder"),
        ("./missing/train.jsonl", r"contamination_source './missing/train.jsonl': no such file or folder"),
        ("nobody-here/no-such-dataset", r"contamination_source 'nobody-here/no-such-dataset': cannot read it as a Hub"),
    ],
)
def test_a_missing_contamination_source_is_refused_by_name_before_scoring(monkeypatch, tmp_path, model_dir,
                                                                           three_files, source, words):  # fmt: skip
    argv = _base(model_dir, three_files, "--contamination_source", source.format(tmp=tmp_path))
    _refused_before_scoring(monkeypatch, tmp_path, argv, words)


def test_a_token_store_of_another_tokenizer_without_its_folder_is_refused(
    monkeypatch, tmp_path, model_dir, three_files
):
    small = build_tokenizer(vocab_size=512, max_documents=300)
    store = tokenize_to_token_store(datasets.Dataset.from_dict({"text": ["some words " * 20]}), small, tmp_path / "s")
    argv = _base(model_dir, three_files, "--contamination_source", str(store.path))
    _refused_before_scoring(
        monkeypatch, tmp_path, argv, "token store .* holds ids of a 512-id vocabulary.*no tokenizer/"
    )


@pytest.mark.parametrize(
    ("domains", "words"),
    [
        (["micro", "x"], r"domain\[0\] is 'micro'.*reserved"),
        (["code", "code/python"], r"domain 'code' holds documents and has the sub-domain 'code/python'"),
        (["a_ci_low", "b"], r"reserved"),
        ([None, "b"], r"row 0 has domain None in column 'domain'"),
    ],
)
def test_a_domain_that_cannot_name_figures_is_refused_before_scoring(monkeypatch, tmp_path, model_dir, texts,
                                                                      domains, words):  # fmt: skip
    data = _write_jsonl(tmp_path / "d.jsonl", [{"text": t, "domain": d} for t, d in zip(texts, domains)])
    _refused_before_scoring(monkeypatch, tmp_path, _base(model_dir, data), words)


def test_a_missing_compare_model_is_refused_before_scoring(monkeypatch, tmp_path, model_dir, three_files):
    argv = _base(model_dir, three_files, "--compare_model", str(tmp_path / "absent"))
    _refused_before_scoring(monkeypatch, tmp_path, argv, r"compare_model '.*absent': cannot load its tokenizer")


def test_a_window_past_the_compare_models_context_is_refused_before_scoring(monkeypatch, tmp_path, model_dir,
                                                                             three_files):  # fmt: skip
    short = tmp_path / "short"
    tiny_gpt2(build_tokenizer(vocab_size=512, max_documents=300), positions=32).save_pretrained(short)
    build_tokenizer(vocab_size=512, max_documents=300).save_pretrained(short)
    argv = _base(model_dir, three_files, "--compare_model", str(short), "--max_length", "64")
    _refused_before_scoring(monkeypatch, tmp_path, argv, r"compare_model '.*short': max_length=64 exceeds .* 32")


def test_too_many_resamples_for_the_figures_are_refused_before_scoring(monkeypatch, tmp_path, model_dir, three_files):
    argv = _base(model_dir, three_files, "--bootstrap_samples", str(10**7))
    _refused_before_scoring(monkeypatch, tmp_path, argv, r"bootstrap_samples 10000000 x 20 figures")


def test_merge_of_a_repeated_source_flag_keeps_every_value():
    argv = ["--x", "1", "--contamination_source", "a", "--y", "--contamination-source=b", "c"]
    assert SCORE.merge_repeated_flag(argv, "--contamination_source") == [
        "--x", "1", "--contamination_source", "a", "b", "c", "--y"]  # fmt: skip
