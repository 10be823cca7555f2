"""`.eval_results` per domain: one entry per domain (task_id = the metrics.json key) with its interval, merged."""

from __future__ import annotations

import math

import pytest
import yaml

from hf_lmobj.cards import eval_results_entries, write_eval_results, write_model_card
from hf_lmobj.cards.eval_results import EVAL_RESULTS_SOURCE_URL, check_per_domain
from hf_lmobj.metrics.slices import DocumentSums, domain_figures
from hf_lmobj.metrics.uncertainty import bootstrap_intervals, interval_keys
from tests.cards.test_writer import check_eval_results_file

DATE = "2026-01-15"
BPB = ("bits_per_byte", "Bits per byte", "validation", 1.3)
DOMAINS = {
    "bits_per_byte/code/c": 1.0,
    "bits_per_byte/code/c_ci_low": 0.8,
    "bits_per_byte/code/c_ci_high": 1.25,
    "bits_per_byte/code/py": 3.0,
    "bits_per_byte/code/macro": 2.0,
    "bits_per_byte/micro": 1.3,
    "bits_per_byte/macro": 1.5,
    "perplexity/wiki": 4.0,
    "byte_perplexity/wiki": 2.0,  # not a Hub result here: passed over
    "compare/bits_per_byte/wiki": -0.5,
    "contamination/rate": 0.0,
}


def _stems(folder) -> list[str]:
    return sorted(p.stem for p in (folder / ".eval_results").glob("*.yaml"))


def _entries(folder, name) -> list[dict]:
    return check_eval_results_file(folder / ".eval_results" / f"{name}.yaml")


def test_one_entry_per_domain_keyed_by_its_metrics_json_key_beside_the_whole_set_entry():
    files = eval_results_entries({"eval_bits_per_byte": BPB}, "python-stdlib", date=DATE, per_domain=DOMAINS)
    assert sorted(files) == ["bits_per_byte", "perplexity"]
    bpb = files["bits_per_byte"]
    assert [(e["dataset"]["task_id"], e["value"]) for e in bpb] == [
        ("bits_per_byte", 1.3),  # today's whole-set entry, first and unchanged
        ("bits_per_byte/code/c", 1.0),
        ("bits_per_byte/code/py", 3.0),
        ("bits_per_byte/code/macro", 2.0),
        ("bits_per_byte/micro", 1.3),
        ("bits_per_byte/macro", 1.5),
    ]
    assert {e["dataset"]["id"] for e in bpb} == {"hf-lmobj/python-stdlib"}
    assert all(e["source"] == {"url": EVAL_RESULTS_SOURCE_URL, "name": "hf_lmobj"} and e["date"] == DATE for e in bpb)
    assert [(e["dataset"]["task_id"], e["value"]) for e in files["perplexity"]] == [("perplexity/wiki", 4.0)]


@pytest.mark.parametrize(
    "key, notes",
    [
        ("bits_per_byte/code/c", "Bits per byte of the domain code/c on the validation split "
         "(bits_per_byte/code/c in metrics.json); bootstrap interval [0.8, 1.25] (bits_per_byte/code/c_ci_low, "
         "_ci_high); embedded corpus"),
        ("bits_per_byte/code/py", "Bits per byte of the domain code/py on the validation split "
         "(bits_per_byte/code/py in metrics.json); embedded corpus"),
        ("bits_per_byte/code/macro", "Bits per byte of the mean over the sub-domains of code (macro)"),
        ("bits_per_byte/micro", "Bits per byte of every domain together (micro: sum over sum)"),
        ("bits_per_byte/macro", "Bits per byte of the mean over the top-level domains (macro)"),
        ("perplexity/wiki", "Perplexity of the domain wiki on the validation split"),
    ],
)  # fmt: skip
def test_the_notes_say_what_each_entry_averages_and_carry_its_interval(key, notes):
    files = eval_results_entries({}, "python-stdlib", date=DATE, per_domain=DOMAINS)
    (entry,) = [e for e in files[key.split("/")[0]] if e["dataset"]["task_id"] == key]
    assert entry["notes"].startswith(notes)
    assert ("bootstrap interval" in entry["notes"]) == (key == "bits_per_byte/code/c")


def test_figures_and_intervals_of_the_metrics_modules_go_in_as_they_come(tmp_path):
    table = DocumentSums(nll=[1.0, 2.0, 3.0, 5.0], tokens=[1, 2, 2, 3], bytes=[4, 4, 6, 9], words=[0] * 4,
                         doc_id=[0, 1, 2, 3], domain=["a", "a", "b", "b"])  # fmt: skip
    flat = {**domain_figures(table), **interval_keys(bootstrap_intervals(table, 100, seed=1))}
    write_eval_results(tmp_path, {}, "python-stdlib", date=DATE, per_domain=flat)
    entries = _entries(tmp_path, "bits_per_byte")
    assert {e["dataset"]["task_id"]: e["value"] for e in entries} == {
        key: value for key, value in flat.items() if key.startswith("bits_per_byte/") and "_ci_" not in key
    }
    low, high = flat["bits_per_byte/a_ci_low"], flat["bits_per_byte/a_ci_high"]
    assert f"bootstrap interval [{low:.6g}, {high:.6g}]" in entries[0]["notes"]
    assert _stems(tmp_path) == ["bits_per_byte", "perplexity"]  # byte / word perplexity: no Hub file


def test_the_card_writes_the_per_domain_keys_of_metrics_json(tmp_path):
    metrics = {"eval_loss": 2.0, "validation_bits_per_byte": 1.3, **DOMAINS}
    write_model_card(tmp_path, objective="causal", metrics=metrics, hyperparameters={}, model_name="tiny",
                     dataset_name="Salesforce/wikitext")  # fmt: skip
    bpb = _entries(tmp_path, "bits_per_byte")
    assert [e["dataset"]["task_id"] for e in bpb][:2] == ["bits_per_byte", "bits_per_byte/code/c"]
    assert {e["dataset"]["id"] for e in bpb} == {"Salesforce/wikitext"}
    assert _stems(tmp_path) == ["bits_per_byte", "perplexity"]  # loss: no Hub results file


def test_metrics_json_nulls_leave_a_figure_or_its_interval_out_with_a_warning(tmp_path):
    metrics = {
        "bits_per_byte/a": None,  # NaN in the run: left out, with its bounds
        "bits_per_byte/a_ci_low": 1.0,
        "bits_per_byte/a_ci_high": 2.0,
        "bits_per_byte/b": 1.5,
        "bits_per_byte/b_ci_low": None,  # the figure stays, without an interval
        "bits_per_byte/b_ci_high": 1.7,
        "perplexity/c": None,  # inf: a real result
        "non_finite_metrics": {"bits_per_byte/a": "nan", "bits_per_byte/b_ci_low": "nan", "perplexity/c": "inf"},
    }
    with pytest.warns(RuntimeWarning) as caught:
        write_model_card(tmp_path, objective="causal", metrics=metrics, hyperparameters={}, model_name="tiny",
                         dataset_name="python-stdlib")  # fmt: skip
    said = " ".join(str(w.message) for w in caught)
    assert "bits_per_byte/a is left out of .eval_results" in said and "bits_per_byte/b_ci_low is left out" in said
    (b,) = _entries(tmp_path, "bits_per_byte")
    assert (b["dataset"]["task_id"], b["value"], "interval" in b["notes"]) == ("bits_per_byte/b", 1.5, False)
    assert [(e["dataset"]["task_id"], e["value"]) for e in _entries(tmp_path, "perplexity")] == [
        ("perplexity/c", math.inf)
    ]


def test_a_rerun_replaces_our_domain_entries_drops_stale_ones_and_keeps_everyone_elses(tmp_path):
    theirs = {"dataset": {"id": "hf-lmobj/python-stdlib", "task_id": "bits_per_byte/code/c"}, "value": 0.7}
    write_eval_results(tmp_path, {"eval_bits_per_byte": BPB}, "python-stdlib", date=DATE, per_domain=DOMAINS)
    path = tmp_path / ".eval_results" / "bits_per_byte.yaml"
    path.write_text(yaml.safe_dump([*yaml.safe_load(path.read_text()), theirs], sort_keys=False))
    again = {"bits_per_byte/code/c": 1.1, "bits_per_byte/micro": 1.2}  # code/py, macros: gone this run
    write_eval_results(tmp_path, {"eval_bits_per_byte": BPB}, "python-stdlib", date=DATE, per_domain=again)
    assert [(e["dataset"]["task_id"], e["value"]) for e in _entries(tmp_path, "bits_per_byte")] == [
        ("bits_per_byte", 1.3),
        ("bits_per_byte/code/c", 1.1),  # replaced in place
        ("bits_per_byte/micro", 1.2),
        ("bits_per_byte/code/c", 0.7),  # another tool's entry of the same task_id: kept as it is
    ]
    write_eval_results(tmp_path, {"eval_bits_per_byte": BPB}, "python-stdlib", date=DATE)  # no domains now
    assert [e["value"] for e in _entries(tmp_path, "bits_per_byte")] == [1.3, 0.7]
    assert _stems(tmp_path) == ["bits_per_byte"]  # perplexity.yaml held only our stale domain entry


def test_our_domain_entries_for_another_dataset_stay(tmp_path):
    write_eval_results(tmp_path, {}, "Salesforce/wikitext", date=DATE, per_domain={"perplexity/wiki": 5.0})
    write_eval_results(tmp_path, {}, "python-stdlib", date=DATE, per_domain={"perplexity/wiki": 4.0})
    assert [(e["dataset"]["id"], e["value"]) for e in _entries(tmp_path, "perplexity")] == [
        ("Salesforce/wikitext", 5.0),
        ("hf-lmobj/python-stdlib", 4.0),
    ]


BAD = [  # (per_domain, error, word)
    (["bits_per_byte/a", 1.0], TypeError, "per_domain must be a dict"),
    ({3: 1.0}, TypeError, "keys must be strings"),
    ({"bits_per_byte/a": math.nan}, ValueError, r"per_domain\['bits_per_byte/a'\] is nan"),
    ({"bits_per_byte/a": -0.1}, ValueError, "bits per byte cannot be negative"),
    ({"perplexity/a": 0.5}, ValueError, r"a perplexity is exp\(mean NLL\) >= 1"),
    ({"perplexity/a": -math.inf}, ValueError, "perplexity"),
    ({"bits_per_byte/a": "1.0"}, TypeError, "must be a real number"),
    ({"bits_per_byte/a": True}, TypeError, "must be a real number"),
    ({"bits_per_byte/": 1.0}, ValueError, "names no domain"),
    ({"bits_per_byte/a": 1.0, "bits_per_byte/a_ci_low": 0.9}, ValueError, "pass both bounds"),
    ({"bits_per_byte/a_ci_low": 0.9, "bits_per_byte/a_ci_high": 1.1}, ValueError, "which per_domain lacks"),
    ({"bits_per_byte/a": 1.0, "bits_per_byte/a_ci_low": 1.2, "bits_per_byte/a_ci_high": 1.1}, ValueError, "in order"),
    ({"bits_per_byte/a": 1.0, "bits_per_byte/a_ci_low": math.nan, "bits_per_byte/a_ci_high": 1.1}, ValueError, "nan"),
]


@pytest.mark.parametrize("per_domain, error, word", BAD)
def test_bad_per_domain_figures_are_refused_by_key_before_anything_is_written(tmp_path, per_domain, error, word):
    with pytest.raises(error, match=word):
        write_eval_results(tmp_path, {"eval_bits_per_byte": BPB}, "python-stdlib", date=DATE, per_domain=per_domain)
    assert not (tmp_path / ".eval_results").exists()


def test_keys_of_other_figures_are_passed_over():
    assert check_per_domain({"byte_perplexity/a": 0.1, "loss": -3, "bits_per_byte": 1.0, "x/y": "z"}) == {}
    assert check_per_domain(None) == {}
