"""Hostile inputs to what a run's results become: split_metrics, the model-index, .eval_results files
(merged, never overwritten), the card's files (written atomically), and the held-out text files."""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import pytest
import torch
import yaml
from huggingface_hub import ModelCard

from hf_lmobj.cards import eval_results_entries, split_metrics, write_eval_results, write_model_card
from hf_lmobj.cards.data import check_results, left_out_results
from hf_lmobj.cards.eval_results import EVAL_RESULTS_SOURCE_URL
from hf_lmobj.cards.writer import LEFT_OUT_LINE, LOSS_CURVE_NAME
from hf_lmobj.metrics.lighteval_data import check_text_dataset, write_text_dataset
from hf_lmobj.recipes.runtime.after_training import write_metrics

PPL = ("perplexity", "Perplexity", "validation", 9.5)
DATE = "2026-01-15"


def _card(out, metrics, **kwargs):
    arguments = {"objective": "causal", "hyperparameters": {}, "model_name": "tiny", "dataset_name": "python-stdlib"}
    return write_model_card(out, metrics=metrics, **{**arguments, **kwargs})


def _model_index(out) -> dict:
    return {
        (r.metric_type, r.dataset_split): r.metric_value
        for r in ModelCard.load(out / "README.md").data.eval_results or []
    }


def _entries(out, task_id="perplexity") -> list:
    return yaml.safe_load((out / ".eval_results" / f"{task_id}.yaml").read_text(encoding="utf-8"))


def _ours(value, dataset="hf-lmobj/python-stdlib", task_id="perplexity") -> dict:
    return {"dataset": {"id": dataset, "task_id": task_id}, "value": value, "date": DATE,
            "source": {"url": EVAL_RESULTS_SOURCE_URL, "name": "hf_lmobj"}, "notes": "old"}  # fmt: skip


# ------------------------------------------------------------------------------ the examples
def test_nan_results_are_left_out_of_the_model_index_and_eval_results_and_the_card_says_so(tmp_path):
    metrics = {"eval_loss": math.nan, "eval_perplexity": math.nan, "eval_bits_per_byte": 1.25, "eval_runtime": 2.0}
    with pytest.warns(RuntimeWarning) as record:
        _card(tmp_path, metrics)
    assert sorted(str(w.message).split(" is left out of the model-index")[0] for w in record) == [
        "eval_loss",
        "eval_perplexity",
    ]
    assert _model_index(tmp_path) == {("bits_per_byte", "validation"): 1.25}
    assert not (tmp_path / ".eval_results" / "perplexity.yaml").exists()
    text = (tmp_path / "README.md").read_text(encoding="utf-8")
    assert ".nan" not in text.split("---")[1]  # the YAML front matter
    line = next(line for line in text.splitlines() if LEFT_OUT_LINE in line)
    assert "eval_perplexity = nan (NaN: nothing was measured" in line and "eval_loss = nan" in line


def test_a_results_file_written_by_another_tool_is_merged_never_overwritten(tmp_path):
    folder = tmp_path / ".eval_results"
    folder.mkdir()
    theirs = [{"dataset": {"id": "Salesforce/wikitext", "task_id": "perplexity"}, "value": 21.0,
               "source": {"url": "https://github.com/EleutherAI/lm-evaluation-harness"}},
              {"dataset": {"id": "hf-lmobj/python-stdlib", "task_id": "perplexity"}, "value": 7.0}]  # fmt: skip
    (folder / "perplexity.yaml").write_text(yaml.safe_dump(theirs), encoding="utf-8")
    _card(tmp_path, {"eval_perplexity": 9.5})
    entries = _entries(tmp_path)
    assert entries[:2] == theirs  # kept as they were, even the entry of the same dataset and metric
    assert [e["value"] for e in entries] == [21.0, 7.0, 9.5]
    _card(tmp_path, {"eval_perplexity": 8.25})  # a rerun replaces its own entry only, in place
    assert [e["value"] for e in _entries(tmp_path)] == [21.0, 7.0, 8.25]


def test_one_perplexity_per_dataset_and_split_the_held_out_scoring_wins(tmp_path):
    metrics = {"eval_loss": 6.24, "eval_perplexity": 513.47, "validation_perplexity": 513.41,
               "eval_bits_per_byte": 2.1, "validation_bits_per_byte": 2.05, "validation_tokens": 900}  # fmt: skip
    _card(tmp_path, metrics)
    assert _model_index(tmp_path) == {("loss", "validation"): 6.24, ("perplexity", "validation"): 513.41,
                                      ("bits_per_byte", "validation"): 2.05}  # fmt: skip
    assert [e["value"] for e in _entries(tmp_path)] == [513.41]
    assert [e["value"] for e in _entries(tmp_path, "bits_per_byte")] == [2.05]
    note = next(line for line in (tmp_path / "README.md").read_text().splitlines() if LEFT_OUT_LINE in line)
    assert "eval_perplexity = 513.47 (the same perplexity as validation_perplexity" in note
    assert "post-training scoring of the whole held-out text" in note


def test_a_lone_surrogate_is_refused_by_index_before_test_jsonl_is_written(tmp_path):
    with pytest.raises(ValueError, match=r"texts\[1\] holds '\\ud83d' at position 4, a lone surrogate"):
        write_text_dataset(["fine", "bad \ud83d cut emoji", "never reached"], tmp_path)
    assert list(tmp_path.iterdir()) == []  # no half-written test.jsonl for check_text_dataset to accept
    with pytest.raises(FileNotFoundError, match=r"test\.jsonl' not found"):
        check_text_dataset(tmp_path)


def test_a_failing_png_write_leaves_the_old_loss_curve_whole(tmp_path, monkeypatch):
    from matplotlib.figure import Figure

    history = [{"step": 1, "loss": 3.0}, {"step": 2, "loss": 2.0}]
    _card(tmp_path, {"eval_loss": 2.0}, log_history=history)
    before = (tmp_path / LOSS_CURVE_NAME).read_bytes()

    def half_then_fail(self, fname, **kwargs):
        with open(fname, "wb") as f:
            f.write(b"\x89PNG half")
        raise OSError("disk full")

    monkeypatch.setattr(Figure, "savefig", half_then_fail)
    with pytest.raises(OSError, match="disk full"):
        _card(tmp_path, {"eval_loss": 1.0}, log_history=history)
    assert (tmp_path / LOSS_CURVE_NAME).read_bytes() == before
    assert not [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")]  # the temporary file is removed


# --------------------------------------------------------------------------------------- split_metrics
@pytest.mark.parametrize(
    "value, error, match",
    [
        ("2.0", TypeError, r"metrics\['eval_loss'\] must be a real number, got str"),
        (True, TypeError, "got bool"),
        (np.bool_(True), TypeError, "got bool"),
        (2 + 0j, TypeError, "got complex"),
        (torch.tensor(2.0), TypeError, "got Tensor"),
        ([2.0], TypeError, "got list"),
    ],
)
def test_split_metrics_refuses_values_that_are_not_numbers(value, error, match):
    with pytest.raises(error, match=match):
        split_metrics({"eval_loss": value})


@pytest.mark.parametrize(
    "key, value, match",
    [
        ("eval_num_tokens", -5, "a count cannot be negative"),
        ("tokens_seen", math.nan, "a count cannot be negative, NaN"),
        ("validation_bytes", math.inf, "a count cannot be negative, NaN or infinite"),
        ("eval_perplexity", 0.5, r"a perplexity is exp\(mean NLL\) >= 1"),
        ("validation_bits_per_byte", -0.1, "bits per byte cannot be negative"),
        ("eval_accuracy", 1.5, r"an accuracy is a fraction in \[0, 1\]"),
        ("eval_masked_accuracy", -0.25, "an accuracy"),
    ],
)
def test_split_metrics_refuses_impossible_values_by_key(key, value, match):
    with pytest.raises(ValueError, match=rf"metrics\['{key}'\] is .*{match}"):
        split_metrics({key: value})


def test_numpy_scalars_become_python_numbers():
    results, stats = split_metrics({"eval_loss": np.float32(2.5), "test_accuracy": np.float64(0.75),
                                    "eval_num_tokens": np.int64(7)})  # fmt: skip
    assert results == {"eval_loss": ("loss", "Loss (nats per target token)", "validation", 2.5),
                       "test_accuracy": ("accuracy", "Accuracy", "test", 0.75)}  # fmt: skip
    assert stats == {"eval_num_tokens": 7}
    assert [type(v[3]) for v in results.values()] + [type(stats["eval_num_tokens"])] == [float, float, int]


@pytest.mark.parametrize(
    "metrics, results, left_out",
    [
        ({"eval_perplexity": math.inf}, {"eval_perplexity": math.inf}, []),  # a hopeless model: a real figure
        ({"eval_loss": math.inf, "eval_bits_per_byte": math.inf}, {"eval_loss": math.inf, "eval_bits_per_byte": math.inf}, []),
        ({"eval_perplexity": -math.inf}, {}, ["eval_perplexity"]),
        ({"eval_accuracy": math.inf}, {}, ["eval_accuracy"]),
        ({"eval_span_accuracy": math.nan, "eval_loss": 1.0}, {"eval_loss": 1.0}, ["eval_span_accuracy"]),
        ({"perplexity": 9.0, "eval_perplexity": 8.0}, {"eval_perplexity": 8.0}, ["perplexity"]),
        ({"validation_perplexity": 7.0, "eval_perplexity": 8.0, "perplexity": 9.0}, {"validation_perplexity": 7.0},
         ["eval_perplexity", "perplexity"]),
        ({"validation_perplexity": math.nan, "eval_perplexity": 8.0}, {"eval_perplexity": 8.0}, ["validation_perplexity"]),
        ({"eval_perplexity": 8.0, "test_perplexity": 9.0}, {"eval_perplexity": 8.0, "test_perplexity": 9.0}, []),
        ({"eval_accuracy": 0.5, "eval_masked_accuracy": 0.25}, {"eval_accuracy": 0.5, "eval_masked_accuracy": 0.25}, []),
    ],
)  # fmt: skip
def test_what_the_model_index_keeps(metrics, results, left_out):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        got, stats = split_metrics(metrics)
    assert {key: value[3] for key, value in got.items()} == results
    assert sorted(left_out_results(metrics)) == sorted(left_out)
    assert set(got) | set(stats) == set(metrics) and not set(got) & set(stats)  # a partition: nothing dropped


def test_split_metrics_refuses_a_key_that_is_not_a_string_and_a_list():
    with pytest.raises(TypeError, match="metrics keys must be str, got 3"):
        split_metrics({3: 1.0})
    with pytest.raises(TypeError, match="metrics must be a dict, got list"):
        split_metrics([("eval_loss", 1.0)])


# ------------------------------------------------------------------------ eval_results_entries / check_results
@pytest.mark.parametrize(
    "results, error, match",
    [
        ({"eval_perplexity": ("perplexity", "Perplexity", "validation", math.nan)}, ValueError, "is nan: leave"),
        ({"eval_perplexity": ("perplexity", "Perplexity", "../../etc", 9.5)}, ValueError, "the split must be a name"),
        ({"x": ("perplexity/../../x", "P", "validation", 9.5)}, ValueError, "the metric type must be a name"),
        ({"eval_perplexity": ("perplexity", "Perplexity", 9.5)}, TypeError, r"must be a \(metric type, name, split"),
        ({"eval_perplexity": ("perplexity", "Perplexity", "validation", True)}, TypeError, "got bool"),
        ({"eval_perplexity": ("perplexity", "Perplexity", "validation", "9.5")}, TypeError, "got str"),
        ({"a": PPL, "b": ("perplexity", "PPL", "validation", 9.0)}, ValueError, r"results\['b'\] and results\['a'\]"),
        ([PPL], TypeError, "results must be a dict"),
    ],
)
def test_eval_results_entries_refuse_bad_results_by_key(results, error, match):
    with pytest.raises(error, match=match):
        eval_results_entries(results, "python-stdlib", date=DATE)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"date": "yesterday"}, ValueError, "date must be an ISO-8601 date"),
        ({"date": 20260115}, TypeError, "date must be an ISO-8601 string"),
        ({"dataset_name": "  "}, ValueError, "dataset_name must be a non-empty string"),
        ({"dataset_name": None}, ValueError, "dataset_name must be a non-empty string"),
    ],
)
def test_eval_results_entries_refuse_a_bad_date_or_dataset(kwargs, error, match):
    arguments = {"dataset_name": "python-stdlib", "date": DATE, **kwargs}
    with pytest.raises(error, match=match):
        eval_results_entries({"eval_perplexity": PPL}, arguments.pop("dataset_name"), **arguments)


def test_numpy_values_reach_the_yaml_as_plain_floats(tmp_path):
    results = check_results({"eval_perplexity": ("perplexity", "Perplexity", "validation", np.float32(9.5))})
    write_eval_results(tmp_path, results, "python-stdlib", date=DATE)
    assert _entries(tmp_path)[0]["value"] == 9.5
    assert "!!python" not in (tmp_path / ".eval_results" / "perplexity.yaml").read_text()


# ------------------------------------------------------------------------------ write_eval_results: merging
def test_a_rerun_that_leaves_a_result_out_removes_its_stale_file(tmp_path):
    _card(tmp_path, {"eval_loss": 1.0, "eval_bits_per_byte": 1.2})
    assert [e["value"] for e in _entries(tmp_path, "bits_per_byte")] == [1.2]
    with pytest.warns(RuntimeWarning, match="eval_bits_per_byte is left out"):
        _card(tmp_path, {"eval_loss": 1.0, "eval_bits_per_byte": math.nan})
    assert not (tmp_path / ".eval_results" / "bits_per_byte.yaml").exists()
    note = next(line for line in (tmp_path / "README.md").read_text().splitlines() if LEFT_OUT_LINE in line)
    assert "eval_bits_per_byte = nan (NaN: nothing was measured" in note


def test_a_rerun_drops_only_our_stale_entries_of_this_dataset_and_keeps_every_other(tmp_path):
    folder = tmp_path / ".eval_results"
    folder.mkdir()
    theirs = {"dataset": {"id": "hf-lmobj/python-stdlib", "task_id": "bits_per_byte"}, "value": 1.1,
              "source": {"url": "https://github.com/EleutherAI/lm-evaluation-harness"}}  # fmt: skip
    other_dataset = _ours(0.9, dataset="Salesforce/wikitext", task_id="bits_per_byte")
    mixed = [_ours(1.2, task_id="bits_per_byte"), theirs, other_dataset]
    (folder / "bits_per_byte.yaml").write_text(yaml.safe_dump(mixed, sort_keys=False), encoding="utf-8")
    (folder / "old_name.yaml").write_text(yaml.safe_dump([_ours(4.0, task_id="perplexity_test")]), encoding="utf-8")
    untouched = "# by hand\n- {dataset: {id: a/b, task_id: accuracy}, value: 0.5}\n"
    (folder / "accuracy.yaml").write_text(untouched, encoding="utf-8")
    (folder / "empty.yaml").write_text("", encoding="utf-8")
    written = write_eval_results(tmp_path, {"eval_perplexity": PPL}, "python-stdlib", date=DATE)
    assert sorted(p.name for p in written) == ["bits_per_byte.yaml", "perplexity.yaml"]
    assert _entries(tmp_path, "bits_per_byte") == [theirs, other_dataset]  # ours of this dataset dropped
    assert not (folder / "old_name.yaml").exists()  # only our stale entry: the file is removed
    assert (folder / "accuracy.yaml").read_text(encoding="utf-8") == untouched  # nothing of ours: byte for byte
    assert (folder / "empty.yaml").read_text(encoding="utf-8") == ""
    assert [e["value"] for e in _entries(tmp_path)] == [9.5]


def test_a_broken_file_of_another_name_is_refused_before_a_stale_file_is_removed(tmp_path):
    folder = tmp_path / ".eval_results"
    folder.mkdir()
    stale = yaml.safe_dump([_ours(1.2, task_id="bits_per_byte")])
    (folder / "bits_per_byte.yaml").write_text(stale, encoding="utf-8")
    (folder / "zz_notes.yaml").write_text("- [unclosed", encoding="utf-8")
    with pytest.raises(ValueError, match=r"zz_notes\.yaml is not valid YAML"):
        write_eval_results(tmp_path, {"eval_perplexity": PPL}, "python-stdlib", date=DATE)
    assert (folder / "bits_per_byte.yaml").read_text(encoding="utf-8") == stale
    assert sorted(p.name for p in folder.iterdir()) == ["bits_per_byte.yaml", "zz_notes.yaml"]


def test_our_entry_for_another_dataset_or_a_stale_duplicate(tmp_path):
    folder = tmp_path / ".eval_results"
    folder.mkdir()
    other = _ours(3.0, dataset="Salesforce/wikitext")
    (folder / "perplexity.yaml").write_text(yaml.safe_dump([_ours(1.0), other, _ours(2.0)]), encoding="utf-8")
    write_eval_results(tmp_path, {"eval_perplexity": PPL}, "python-stdlib", date=DATE)
    entries = _entries(tmp_path)
    assert [e["value"] for e in entries] == [9.5, 3.0]  # ours replaced in place, its stale copy dropped
    assert entries[1] == other


@pytest.mark.parametrize(
    "content, match",
    [
        (b"- dataset: {id: a/b\n  value: [", "is not valid YAML"),
        (b"dataset: {id: a/b, task_id: perplexity}\nvalue: 3\n", "holds a dict, not a list of results entries"),
        (b"- just a string\n", "entry 0 is a str, not a results entry"),
        (b"- !!python/object/apply:os.system ['true']\n", "is not valid YAML"),
        (b"- value: \xff\xfe\n", "is not UTF-8 text"),
        (b"42\n", "holds a int"),
    ],
)
def test_a_results_file_that_cannot_be_read_is_refused_by_name_and_kept(tmp_path, content, match):
    folder = tmp_path / ".eval_results"
    folder.mkdir()
    (folder / "perplexity.yaml").write_bytes(content)
    with pytest.raises(ValueError, match=rf"perplexity\.yaml.*{match}.*never overwritten"):
        _card(tmp_path, {"eval_perplexity": 9.5}, log_history=[{"step": 1, "loss": 2.0}])
    assert (folder / "perplexity.yaml").read_bytes() == content
    assert sorted(p.name for p in tmp_path.iterdir()) == [".eval_results"]  # no card, no PNG: nothing half done


def test_an_empty_results_file_is_filled(tmp_path):
    (tmp_path / ".eval_results").mkdir()
    (tmp_path / ".eval_results" / "perplexity.yaml").write_text("")
    write_eval_results(tmp_path, {"eval_perplexity": PPL}, "python-stdlib", date=DATE)
    assert [e["value"] for e in _entries(tmp_path)] == [9.5]


# ------------------------------------------------------------------------------------ write_model_card
def test_metrics_json_as_write_metrics_writes_it_feeds_the_card(tmp_path):
    path = write_metrics(tmp_path, {"eval_loss": math.nan, "eval_perplexity": 3.0, "eval_bits_per_byte": math.inf})
    metrics = json.loads(path.read_text())
    assert metrics["eval_loss"] is None and metrics["non_finite_metrics"] == {"eval_loss": "nan",
                                                                              "eval_bits_per_byte": "inf"}  # fmt: skip
    with pytest.warns(RuntimeWarning, match="eval_loss is left out"):
        _card(tmp_path, metrics)
    assert _model_index(tmp_path) == {("perplexity", "validation"): 3.0, ("bits_per_byte", "validation"): math.inf}
    text = (tmp_path / "README.md").read_text(encoding="utf-8")
    note = next(line for line in text.splitlines() if LEFT_OUT_LINE in line)
    assert "eval_loss = nan (NaN: nothing was measured" in note
    assert "non_finite_metrics" not in text


@pytest.mark.parametrize(
    "metrics, left_out",
    [
        ({"eval_loss": None, "eval_perplexity": 3.0}, {"eval_loss": "None: not measured (null in metrics.json)"}),
        ({"eval_loss": None, "non_finite_metrics": {"eval_loss": "np.float64(-inf)"}},
         {"eval_loss": "-inf is not a possible loss"}),
        ({"eval_accuracy": None, "non_finite_metrics": {"eval_accuracy": "inf"}},
         {"eval_accuracy": "inf is not a possible accuracy"}),
        ({"eval_loss": None, "non_finite_metrics": {}}, {"eval_loss": "None: not measured (null in metrics.json)"}),
    ],
)  # fmt: skip
def test_a_null_metric_is_left_out_with_its_reason(metrics, left_out):
    assert left_out_results(metrics) == left_out


def test_a_null_statistic_stays_a_statistic():
    assert split_metrics({"train_runtime": None, "eval_tokens": None}) == ({}, {"train_runtime": None,
                                                                              "eval_tokens": None})  # fmt: skip


@pytest.mark.parametrize(
    "metrics, error, match",
    [
        ({"eval_loss": None, "non_finite_metrics": ["eval_loss"]}, TypeError, "must be a dict"),
        ({"eval_loss": 2.0, "non_finite_metrics": {"eval_loss": "nan"}}, ValueError, "which is not null"),
        ({"non_finite_metrics": {"eval_loss": "nan"}}, ValueError, "names 'eval_loss', which is not null"),
        ({"eval_loss": None, "non_finite_metrics": {"eval_loss": "huge"}}, ValueError, "not 'nan', 'inf' or '-inf'"),
    ],
)
def test_a_non_finite_metrics_note_that_does_not_fit_is_refused(metrics, error, match):
    with pytest.raises(error, match=match):
        split_metrics(metrics)


def test_a_lone_surrogate_in_a_name_is_refused_before_any_file_is_written(tmp_path):
    with pytest.raises(ValueError, match=r"README\.md: the text cannot be written as UTF-8 \(a lone surrogate"):
        _card(tmp_path, {"eval_loss": 1.0}, model_name="tiny\udc80", log_history=[{"step": 1, "loss": 2.0}])
    assert list(tmp_path.iterdir()) == []


def test_a_lone_surrogate_in_the_dataset_name_is_refused_before_the_results_file(tmp_path):
    with pytest.raises(ValueError, match=r"dataset_name holds a lone surrogate at position 4"):
        write_eval_results(tmp_path, {"eval_perplexity": PPL}, "data\ud800", date=DATE)
    assert not (tmp_path / ".eval_results").exists()


def test_a_broken_readme_is_refused_by_name_not_overwritten(tmp_path):
    broken = "---\ntags: [a\n---\n\nmy notes\n"
    (tmp_path / "README.md").write_text(broken)
    with pytest.raises(ValueError, match=r"README\.md exists but is not a model card that can be read"):
        _card(tmp_path, {"eval_perplexity": 9.5})
    assert (tmp_path / "README.md").read_text() == broken
    assert not (tmp_path / ".eval_results").exists()


def test_a_foreign_card_with_a_string_tag_and_a_list_of_base_models(tmp_path):
    (tmp_path / "README.md").write_text("---\nlibrary_name: peft\ntags: lora\nbase_model: [org/a, org/b]\n---\n\nx\n")
    _card(tmp_path, {"eval_loss": 1.0})
    data = ModelCard.load(tmp_path / "README.md").data
    assert data.library_name == "peft" and "lora" in data.tags and "hf_lmobj" in data.tags
    assert data.base_model is None  # several bases: none named as the one


@pytest.mark.parametrize(
    "history, match",
    [
        ([{"step": 1, "loss": "3.0"}], r"log_history\[0\]\['loss'\] must be a real number, got str"),
        ([{"step": True, "loss": 3.0}], r"log_history\[0\]\['step'\] must be a real number, got bool"),
        ([{"step": 1, "loss": None}], r"log_history\[0\]\['loss'\] must be a real number, got NoneType"),
    ],
)
def test_log_history_values_that_are_not_numbers_are_named(tmp_path, history, match):
    with pytest.raises(TypeError, match=match):
        _card(tmp_path, {"eval_loss": 1.0}, log_history=history)
    assert list(tmp_path.iterdir()) == []


def test_the_left_out_line_joins_a_user_line_of_the_same_name(tmp_path):
    with pytest.warns(RuntimeWarning):
        _card(tmp_path, {"eval_perplexity": math.nan}, extra={LEFT_OUT_LINE: "baseline not run"})
    text = (tmp_path / "README.md").read_text()
    assert f"- **{LEFT_OUT_LINE}:** baseline not run; eval_perplexity = nan (NaN" in text


def test_metrics_json_values_round_trip_into_the_card_unchanged(tmp_path):
    metrics = json.loads(json.dumps({"eval_perplexity": 513.4700000000001, "validation_perplexity": 513.41}))
    _card(tmp_path, metrics)
    assert _model_index(tmp_path) == {("perplexity", "validation"): 513.41}
    assert "| `eval_perplexity` | 513.47 |" in (tmp_path / "README.md").read_text()  # still shown as a statistic


# ---------------------------------------------------------------------------- held-out text files
def test_check_text_dataset_refuses_a_file_that_is_not_utf8_by_line(tmp_path):
    (tmp_path / "test.jsonl").write_bytes(b'{"text": "a"}\n{"text": "\xff"}\n')
    with pytest.raises(ValueError, match=r"test\.jsonl:2 is not UTF-8 text \(byte 10 of the line\)"):
        check_text_dataset(tmp_path)


def test_check_text_dataset_refuses_an_escaped_lone_surrogate(tmp_path):
    (tmp_path / "test.jsonl").write_text('{"text": "a"}\n{"text": "b \\ud800"}\n')
    with pytest.raises(ValueError, match=r"test\.jsonl:2: 'text' holds '\\ud800' at position 2, a lone surrogate"):
        check_text_dataset(tmp_path)


def test_write_text_dataset_still_never_overwrites(tmp_path):
    write_text_dataset(["a"], tmp_path)
    with pytest.raises(FileExistsError, match="never overwrites"):
        write_text_dataset(["b"], tmp_path)
    assert check_text_dataset(tmp_path) == 1


# ------------------------------------------------------------------ the pre-training report's scoring
def _score_with(monkeypatch, scores):
    from types import SimpleNamespace

    import numpy as np

    from hf_lmobj.evaluation import validation
    from hf_lmobj.metrics.scoring import TokenScore
    from hf_lmobj.recipes.report import pretrain_report

    made = [TokenScore(nll, tokens, size, 0, np.full(tokens, nll / max(tokens, 1)), np.ones(tokens, dtype=np.int64))
            for nll, tokens, size in scores]  # fmt: skip
    monkeypatch.setattr(validation, "score_texts", lambda *args, **kwargs: made)
    data_args = SimpleNamespace(max_length=8)
    report_args = SimpleNamespace(score_max_length=None, score_stride=None, score_batch_size=2, bootstrap_samples=0)
    texts = ["t"] * len(scores)
    return pretrain_report.score_validation_texts(None, None, texts, data_args, report_args, progress=False)


def test_validation_scoring_skips_and_counts_texts_without_a_token(monkeypatch):
    metrics = _score_with(monkeypatch, [(2.0, 1, 3), (0.0, 0, 0), (1e308, 1, 2), (1e308, 1, 2)])
    assert metrics["validation_perplexity"] == math.inf  # an overflowing total is inf, not an OverflowError
    assert (metrics["validation_tokens"], metrics["validation_bytes"], metrics["validation_skipped_texts"]) == (3, 7, 1)
    results, stats = split_metrics(metrics)
    assert {"validation_bits_per_byte", "validation_perplexity"} <= set(results)
    assert "validation_skipped_texts" not in results  # the count is a statistic


def test_validation_scoring_without_anything_to_score_names_the_problem(monkeypatch):
    with pytest.raises(ValueError, match="none of the 2 validation texts has a token to score"):
        _score_with(monkeypatch, [(0.0, 0, 0), (0.0, 0, 1)])
    with pytest.raises(ValueError, match="there is no validation text to score"):
        _score_with(monkeypatch, [])
