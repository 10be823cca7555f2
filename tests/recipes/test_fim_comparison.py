"""A figure is compared only with a figure on the same text (issue 35, point 6): the FIM report's plain baseline must
have been measured on this run's validation text (its fingerprint), checked before training and again in the report."""

from __future__ import annotations

import json

import pytest

from hf_lmobj.held_out import texts_fingerprint
from hf_lmobj.recipes.report.infilling import check_comparable_baseline, print_fim_comparison

OURS = texts_fingerprint(["def f(a):\n    return a\n", "x = 1\n"])
THEIRS = texts_fingerprint(["import os\n"])
FIM = {"validation_bits_per_byte": 2.06, "validation_infill_samples": 4, "validation_infill_psm_exact_match": 0.5,
       "validation_infill_prefix_only_exact_match": 0.25, "validation_fingerprint": OURS,
       "validation_documents": 37, "validation_bytes": 25694}  # fmt: skip


def _baseline(tmp_path, **metrics) -> str:
    path = tmp_path / "plain" / "metrics.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({"validation_bits_per_byte": 2.0, "validation_infill_prefix_only_exact_match": 0.1,
                                **metrics}))  # fmt: skip
    return str(path)


def test_a_baseline_on_the_same_text_passes(tmp_path):
    assert check_comparable_baseline(_baseline(tmp_path, validation_fingerprint=OURS), OURS) is None


def test_the_issues_example_a_baseline_on_another_text_is_refused_naming_both(tmp_path):
    # the FIM run scored 25,694 bytes, the plain run 604,522 (the stdlib's split): "ratio 1.442" compared nothing
    path = _baseline(tmp_path, validation_fingerprint=THEIRS, validation_documents=1200, validation_bytes=604522)
    with pytest.raises(ValueError) as error:
        check_comparable_baseline(path, OURS, validation_documents=37, validation_bytes=25694)
    message = str(error.value)
    assert f"it was measured on another validation text, {THEIRS} (1,200 documents, 604,522 bytes)" in message
    assert f"this run's validation text is {OURS} (37 documents, 25,694 bytes)" in message
    assert "with the same data arguments as this run" in message and path in message


def test_an_older_baseline_without_a_fingerprint_is_refused(tmp_path):
    path = _baseline(tmp_path, validation_bytes=604522)
    with pytest.raises(ValueError, match=rf"it has no validation_fingerprint .*604,522 bytes.*{OURS} \(size not "):
        check_comparable_baseline(path, OURS)


@pytest.mark.parametrize("path", [None, "missing/metrics.json"])
def test_no_baseline_yet_is_allowed_and_the_report_says_how_to_make_it(tmp_path, capsys, path):
    path = path and str(tmp_path / path)
    assert check_comparable_baseline(path, OURS) is None
    print_fim_comparison(FIM, path)
    out = capsys.readouterr().out
    assert "left-to-right bits per byte 2.060" in out and "ratio" not in out
    if path is not None:
        assert f"(no plain-CLM metrics at {path}: run causal/demo.yaml with --infill_cases 200 and the same data " \
               "arguments as this run first" in out  # fmt: skip


@pytest.mark.parametrize(
    "content, match",
    [
        (None, r"metrics\.json \(fim_baseline_metrics: a plain run's metrics\.json\) is a folder"),
        ('{"validation_bits_per_byte": 2.0', r"is not valid JSON \(cut short"),
        ("[2.0]", r"holds a list, expected a JSON object"),
        (json.dumps({"validation_fingerprint": 7}), r"it was measured on another validation text, 7 \(size not"),
    ],
)
def test_a_baseline_file_that_is_no_metrics_json_is_refused_by_name(tmp_path, content, match):
    path = tmp_path / "metrics.json"
    path.mkdir() if content is None else path.write_text(content)
    with pytest.raises(ValueError, match=match):
        check_comparable_baseline(str(path), OURS)


@pytest.mark.parametrize(
    "fingerprint, error", [("0123", ValueError), (None, TypeError), ("0123456789ABCDEF", ValueError)]
)
def test_this_runs_fingerprint_must_be_one(tmp_path, fingerprint, error):
    with pytest.raises(error, match="validation_fingerprint must be"):
        check_comparable_baseline(None, fingerprint)


def test_the_report_prints_a_ratio_only_on_the_same_text(tmp_path, capsys):
    print_fim_comparison(FIM, _baseline(tmp_path, validation_fingerprint=OURS))
    rows = capsys.readouterr().out.splitlines()
    assert rows[-4].endswith(f"(the same validation text, {OURS}):")
    assert rows[-2].split() == ["left-to-right", "bits", "per", "byte", "2.060", "2.000", "1.030"]
    assert rows[-1].split()[-4:] == ["0.500", "(psm)", "0.100", "(prefix_only)"]


@pytest.mark.parametrize(
    "ours, theirs, why",
    [
        (FIM, {"validation_fingerprint": THEIRS}, f"it was measured on another validation text, {THEIRS}"),
        (FIM, {}, "it has no validation_fingerprint"),
        ({**FIM, "validation_fingerprint": None}, {"validation_fingerprint": OURS}, "this run's metrics have no valid"),
    ],
)
def test_the_report_never_compares_figures_on_other_texts(tmp_path, capsys, ours, theirs, why):
    if ours["validation_fingerprint"] is None:
        ours = {k: v for k, v in ours.items() if k != "validation_fingerprint"}
    print_fim_comparison(ours, _baseline(tmp_path, **theirs))
    out = capsys.readouterr().out
    assert "(not compared with the plain run" in out and why in out
    assert "ratio" not in out and "2.000" not in out  # no figure of the other text is printed


def test_a_baseline_broken_after_setup_is_said_in_the_report_not_raised(tmp_path, capsys):
    path = tmp_path / "metrics.json"
    path.write_text("{")
    print_fim_comparison(FIM, str(path))
    assert "(not compared: " in capsys.readouterr().out
