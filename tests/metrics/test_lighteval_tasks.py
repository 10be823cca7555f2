"""The LightEval task file: its data checks, docs, unit counts and corpus figures, without lighteval.

Only the last test needs lighteval (skipped without it): LightEval's own pipeline on the task, scored by
the file's backend, must report the package's figures exactly.
"""

from __future__ import annotations

import importlib
import json
import math
from types import SimpleNamespace

import pytest

import hf_lmobj.metrics.lighteval_tasks as lighteval_tasks
from hf_lmobj.metrics.lighteval_data import (
    FIGURES,
    TextSums,
    check_text_dataset,
    corpus_figure,
    text_sums,
    write_text_dataset,
)
from hf_lmobj.metrics.lighteval_tasks import (
    DATA_ENV,
    TASK_NAME,
    ModelSpec,
    build_tasks_table,
    doc_fields,
    parse_model_spec,
    scored_text,
    tasks_table_from_env,
)
from hf_lmobj.metrics.scoring import score_texts
from hf_lmobj.metrics.sums import bits_per_byte_from_sums, byte_perplexity_from_sums, word_perplexity_from_sums

TEXTS = ["def f(x):\n    return x\n", "café = 'é'\n"]


def write_lines(folder, lines, name="test.jsonl"):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return folder


def package_figures(nll, num_bytes, num_words):
    return {
        "bits_per_byte": bits_per_byte_from_sums(nll, num_bytes),
        "byte_perplexity": byte_perplexity_from_sums(nll, num_bytes),
        "word_perplexity": word_perplexity_from_sums(nll, num_words),
    }


# ------------------------------------------------------------------------------------ import
def test_module_imports_and_registers_nothing_without_data(monkeypatch):
    monkeypatch.delenv(DATA_ENV, raising=False)
    module = importlib.reload(lighteval_tasks)
    assert module.TASKS_TABLE == [] and tasks_table_from_env() == []
    assert hasattr(module, "HfLmobjRollingModel") == module.lighteval_available()


# -------------------------------------------------------------------------------------- data
def test_write_text_dataset_round_trips_and_counts(tmp_path):
    path = write_text_dataset(TEXTS, tmp_path)
    assert path == tmp_path / "test.jsonl"
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert [row["text"] for row in rows] == TEXTS
    assert check_text_dataset(tmp_path) == 2


@pytest.mark.parametrize(
    "texts, error, match",
    [
        ([], ValueError, "texts is empty"),
        (["ok", ""], ValueError, r"texts\[1\] must be a non-empty string"),
        ("one text", TypeError, "wrap a single text in a list"),
    ],
)
def test_write_text_dataset_refuses_bad_texts(tmp_path, texts, error, match):
    with pytest.raises(error, match=match):
        write_text_dataset(texts, tmp_path)


def test_write_text_dataset_never_overwrites(tmp_path):
    write_text_dataset(["a"], tmp_path)
    with pytest.raises(FileExistsError):
        write_text_dataset(["b"], tmp_path)


@pytest.mark.parametrize(
    "make, error, match",
    [
        (lambda tmp: tmp / "nowhere", FileNotFoundError, "does not exist"),
        (
            lambda tmp: write_lines(tmp / "d", ['{"text": "a"}'], name="validation.jsonl"),
            FileNotFoundError,
            "test.jsonl",
        ),
        (lambda tmp: write_lines(tmp / "d", []), ValueError, "is empty: it holds no document"),
        (
            lambda tmp: write_lines(tmp / "d", ['{"text": "a"}', "not json"]),
            ValueError,
            r"test\.jsonl:2 is not valid JSON \(cut short or corrupt.*one JSON object per line",
        ),
        (lambda tmp: write_lines(tmp / "d", ['{"body": "a"}']), ValueError, r"no 'text' field \(fields: \['body'\]\)"),
        (lambda tmp: write_lines(tmp / "d", ['{"text": ""}']), ValueError, "'text' must be a non-empty string"),
        (lambda tmp: write_lines(tmp / "d", ['{"text": 3}']), ValueError, r"'text' must .*, got 3"),
        (lambda tmp: write_lines(tmp / "d", ['["a"]']), ValueError, "must be a JSON object with a 'text' field"),
        (lambda tmp: write_lines(tmp / "d", ['{"text": "a"}']) / "test.jsonl", ValueError, "pass its folder"),
    ],
)
def test_build_tasks_table_refuses_bad_data_before_importing_lighteval(tmp_path, make, error, match):
    data = make(tmp_path)
    with pytest.raises(error, match=match):
        build_tasks_table(data)
    with pytest.raises(error, match=match):
        check_text_dataset(data)


def test_a_second_file_of_the_split_is_refused(tmp_path):
    write_lines(tmp_path, ['{"text": "a"}'])
    write_lines(tmp_path, ['{"text": "b"}'], name="test-2.jsonl")  # datasets would read it into "test" too
    write_lines(tmp_path, ['{"text": "c"}'], name="train.jsonl")  # another split: fine
    with pytest.raises(ValueError, match=r"test-2.jsonl'\] into the 'test' split"):
        check_text_dataset(tmp_path)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"split": "held_out"}, ValueError, "split must be one of"),
        ({"text_column": ""}, ValueError, "text_column must be a non-empty string"),
        ({"name": " "}, ValueError, "name must be a non-empty string"),
    ],
)
def test_build_tasks_table_refuses_bad_settings(tmp_path, kwargs, error, match):
    write_text_dataset(TEXTS, tmp_path)
    with pytest.raises(error, match=match):
        build_tasks_table(tmp_path, **kwargs)


def test_build_tasks_table_without_lighteval_says_how_to_install(tmp_path):
    if lighteval_tasks.lighteval_available():
        pytest.skip("lighteval is installed here")
    write_text_dataset(TEXTS, tmp_path)
    with pytest.raises(ImportError, match="pip install lighteval"):
        build_tasks_table(tmp_path)


# -------------------------------------------------------------------------------------- docs
def test_doc_fields_make_the_document_the_query():
    assert doc_fields({"text": "x = 1\n", "path": "a.py"}, "hf_lmobj_text|0") == {
        "task_name": "hf_lmobj_text|0",
        "query": "x = 1\n",
        "choices": None,
        "gold_index": None,
    }
    assert doc_fields({"code": "y"}, text_column="code")["query"] == "y"
    with pytest.raises(ValueError, match="no 'text' field"):
        doc_fields({"code": "y"})


def test_scored_text_is_the_query_alone():
    doc = SimpleNamespace(id="3", query="a b", fewshot_samples=[], instruction=None)
    assert scored_text(doc) == "a b"
    with pytest.raises(ValueError, match=r"doc '3' has few-shot examples; run the task as 'hf_lmobj_text\|0'"):
        scored_text(SimpleNamespace(id="3", query="a b", fewshot_samples=[doc], instruction=None))
    with pytest.raises(ValueError, match="has an instruction"):
        scored_text(SimpleNamespace(id="3", query="a b", fewshot_samples=[], instruction="Read:"))


# ---------------------------------------------------------------------------- sums, figures
def test_text_sums_and_corpus_figures_by_hand():
    sums = [text_sums("a b", [-math.log(2), -math.log(4)]), text_sums("é", [-math.log(8)])]
    assert sums[0] == TextSums(math.fsum([math.log(2), math.log(4)]), 3, 2)
    assert sums[1] == TextSums(math.log(8), 2, 1)  # "é": 2 UTF-8 bytes, 1 word
    # 6 ln 2 nats = 6 bits over 5 bytes and 3 words
    assert corpus_figure("bits_per_byte", sums) == pytest.approx(6 / 5, rel=1e-15)
    assert corpus_figure("byte_perplexity", sums) == pytest.approx(2 ** (6 / 5), rel=1e-15)
    assert corpus_figure("word_perplexity", sums) == pytest.approx(4.0, rel=1e-15)


def test_corpus_figures_are_the_packages_on_scored_texts(tiny_gpt2, tokenizer, one_torch_thread):
    """Backend output -> per-document sums -> corpus figure: the package's bits per byte, bit for bit."""
    scores = score_texts(tiny_gpt2, tokenizer, TEXTS, max_length=8, windows="lm_eval", progress=False)
    sums = [text_sums(text, [-score.nll]) for text, score in zip(TEXTS, scores)]
    assert (
        [(s.num_bytes, s.num_words) for s in sums] == [(s.num_bytes, s.num_words) for s in scores] == [(23, 5), (13, 4)]
    )
    expected = package_figures([s.nll for s in scores], [s.num_bytes for s in scores], [s.num_words for s in scores])
    assert {name: corpus_figure(name, sums) for name in FIGURES} == expected


@pytest.mark.parametrize(
    "name, items, match",
    [
        ("bits_per_byte", [], "nll and num_bytes are empty"),
        ("bits_per_byte", [TextSums(math.nan, 3, 1)], r"nll\[0\] is nan"),
        ("word_perplexity", [TextSums(1.0, 3, 0)], r"num_words\[0\] is 0"),
        ("perplexity", [TextSums(1.0, 3, 1)], "figure must be one of"),
    ],
)
def test_corpus_figure_refuses_what_has_no_figure(name, items, match):
    with pytest.raises(ValueError, match=match):
        corpus_figure(name, items)


# ------------------------------------------------------------------------------------- model
def test_parse_model_spec():
    assert parse_model_spec("org/model") == ModelSpec("org/model", None, 8, None)
    assert parse_model_spec("/m, batch_size=2, max_length=128") == ModelSpec("/m", 128, 2, None)


@pytest.mark.parametrize(
    "spec, error, match",
    [
        ("m,stride=2", ValueError, "model option 'stride' is unknown"),
        ("m,max_length=8,max_length=9", ValueError, "must appear once"),
        ("m,batch_size", ValueError, "must appear once, as batch_size=<value>"),
        ("m,max_length=1.5", ValueError, "max_length must be an int >= 1, got '1.5'"),
        ("m,batch_size=0", ValueError, "batch_size must be an int >= 1"),
        (",max_length=8", ValueError, "model must be a non-empty string"),
        (None, TypeError, "model must be a string"),
    ],
)
def test_parse_model_spec_refuses(spec, error, match):
    with pytest.raises(error, match=match):
        parse_model_spec(spec)


# ------------------------------------------------------------------------ lighteval itself
@pytest.mark.slow
def test_lighteval_pipeline_reports_the_packages_figures(tmp_path, monkeypatch, tiny_gpt2, tokenizer, one_torch_thread):
    pytest.importorskip("lighteval")
    xxhash = pytest.importorskip("xxhash")
    if int(xxhash.VERSION.split(".")[0]) >= 4:
        pytest.skip("lighteval 0.13.0's DetailsLogger hashes str, which xxhash >= 4 refuses (lighteval#1330)")
    from lighteval.logging.evaluation_tracker import EvaluationTracker
    from lighteval.pipeline import ParallelismManager, Pipeline, PipelineParameters
    from lighteval.tasks.registry import Registry

    write_text_dataset(TEXTS, tmp_path / "data")
    monkeypatch.setenv(DATA_ENV, str(tmp_path / "data"))
    module = importlib.reload(lighteval_tasks)  # TASKS_TABLE from the environment, as --custom-tasks reads it
    (config,) = module.TASKS_TABLE
    assert (config.name, [m.metric_name for m in config.metrics]) == (TASK_NAME, list(FIGURES))
    # lighteval's registry imports its built-in task files, one of which downloads at import: load ours only
    load_ours = lambda custom_tasks=None, load_multilingual=False: Registry._extract_configs(custom_tasks)
    monkeypatch.setattr(Registry, "load_all_task_configs", staticmethod(load_ours))
    model = module.HfLmobjRollingModel.from_model(tiny_gpt2, tokenizer, max_length=8, batch_size=2)
    pipeline = Pipeline(
        tasks=f"{TASK_NAME}|0",
        pipeline_parameters=PipelineParameters(
            launcher_type=ParallelismManager.CUSTOM, custom_tasks_directory=module, bootstrap_iters=0
        ),
        evaluation_tracker=EvaluationTracker(output_dir=str(tmp_path / "out"), save_details=False),
        model=model,
    )
    pipeline.evaluate()
    reported = pipeline.get_results()["results"][f"{TASK_NAME}:0"]
    scores = score_texts(tiny_gpt2, tokenizer, TEXTS, max_length=8, windows="lm_eval", progress=False)
    expected = package_figures([s.nll for s in scores], [s.num_bytes for s in scores], [s.num_words for s in scores])
    assert {name: reported[name] for name in FIGURES} == expected
