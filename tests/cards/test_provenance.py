"""Provenance in the card, the model-index and .eval_results (issue 35, point 4): the real training sources, the
validation text, the tokenizer's origin and the skipped documents, never a hard-coded python-stdlib."""

from __future__ import annotations

import copy
import math
import sys
from types import SimpleNamespace

import pytest
import yaml
from huggingface_hub import ModelCard

from hf_lmobj.cards import check_provenance, write_eval_results, write_model_card
from hf_lmobj.cards.dataset_ids import dataset_id
from hf_lmobj.cards.provenance import Provenance
from hf_lmobj.held_out import texts_fingerprint
from hf_lmobj.recipes.report.pretrain_report import _write_card, data_lines

VALIDATION_TEXTS = ["zorvu taleki mabrin\n", "quesh folnar tiriv obbek\n", "taleki zorvu\n"]
FINGERPRINT = texts_fingerprint(VALIDATION_TEXTS)
VALIDATION_BYTES = sum(len(text.encode("utf-8")) for text in VALIDATION_TEXTS)
METRICS = {"validation_perplexity": 7.25, "validation_bits_per_byte": 1.125, "validation_bytes": VALIDATION_BYTES,
           "validation_documents": 3, "validation_fingerprint": FINGERPRINT}  # fmt: skip
NONE_SKIPPED = {"empty": 0, "whitespace": 0, "one_token": 0}


def folder_record(folder: str = "/data/users/me/jsonl") -> dict:
    """What a run on a streamed JSONL folder records (the recipe's shape), one empty and one blank file skipped."""
    return {
        "training": [{"name": "jsonl", "location": folder, "kind": "local files", "weight": 1.0, "tokens": 123456,
                      "streamed": True}],
        "validation": {"source": "jsonl", "location": folder, "documents": 3, "bytes": VALIDATION_BYTES,
                       "fingerprint": FINGERPRINT, "selection": "held out by content hash (2% of documents)"},
        "tokenizer": {"origin": "trained", "name": None, "vocab_size": 512, "fingerprint": "fedcba9876543210",
                      "sample_documents": 290, "sample_bytes": 81234, "sample_fingerprint": "00112233445566aa",
                      "trained_on": ["jsonl"]},
        "skipped_documents": {"training": {"empty": 1, "whitespace": 1, "one_token": 0},
                              "validation": dict(NONE_SKIPPED)},
        "held_out_training_documents": 3,
    }  # fmt: skip


def mixture_record() -> dict:
    record = folder_record()
    record["training"] = [
        {"name": "stdlib_store", "location": "/data/stdlib_store", "kind": "token store", "weight": 3, "tokens": 9000},
        {"name": "the-stack-smol", "location": "bigcode/the-stack-smol", "kind": "hub", "weight": 1, "tokens": 3100},
    ]
    record["validation"].update(source="stdlib_store", location="/data/stdlib_store",
                                selection="the token store's held_out.jsonl")  # fmt: skip
    return record


def embedded_record() -> dict:
    record = folder_record()
    location = "the Python standard library (Lib/*.py)"
    record["training"] = [{"name": "python-stdlib", "location": location, "kind": "embedded corpus", "weight": 1.0}]
    record["validation"].update(source="python-stdlib", location=location)
    return record


def _card(out, record, metrics=METRICS, objective="causal"):
    return write_model_card(out, objective=objective, metrics=metrics, hyperparameters={"learning_rate": 1e-3},
                            model_name="tiny", provenance=record)  # fmt: skip


def _eval_results(out) -> dict[str, list]:
    return {path.stem: yaml.safe_load(path.read_text()) for path in sorted((out / ".eval_results").glob("*.yaml"))}


def _files(folder) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*")) if folder.exists() else []


# ------------------------------------------------------------------------------------ the examples
def test_a_jsonl_folder_run_names_the_folder_never_python_stdlib(tmp_path):
    _card(tmp_path, folder_record())
    card = ModelCard.load(tmp_path / "README.md")
    assert card.data.datasets == ["jsonl"]
    assert [(r.dataset_type, r.dataset_name, r.dataset_split) for r in card.data.eval_results] == [
        ("jsonl", "jsonl", "validation"), ("jsonl", "jsonl", "validation")]  # fmt: skip
    assert "objective of `hf_lmobj` on `jsonl`, from scratch." in card.text
    assert "| `jsonl` | `/data/users/me/jsonl` | local files | 1 | 123,456 |" in card.text
    readme = (tmp_path / "README.md").read_text() + "".join(p.read_text() for p in tmp_path.rglob("*.yaml"))
    assert "stdlib" not in readme


def test_eval_results_entries_name_the_validation_source_and_its_text(tmp_path):
    _card(tmp_path, folder_record())
    files = _eval_results(tmp_path)
    assert sorted(files) == ["bits_per_byte", "perplexity"]
    (entry,) = files["perplexity"]
    assert entry["dataset"] == {"id": "jsonl", "task_id": "perplexity"} and entry["value"] == 7.25
    assert entry["notes"] == (
        "Perplexity on the validation split (validation_perplexity in metrics.json); validation text: 3 documents "
        f"({VALIDATION_BYTES} bytes) of jsonl (/data/users/me/jsonl), held out by content hash (2% of documents); "
        f"text fingerprint {FINGERPRINT}"
    )


def test_a_mixture_card_lists_both_sources_with_their_weights_and_tokens(tmp_path):
    _card(tmp_path, mixture_record())
    card = ModelCard.load(tmp_path / "README.md")
    assert card.data.datasets == ["stdlib_store", "bigcode/the-stack-smol"]
    assert {r.dataset_type for r in card.data.eval_results} == {"stdlib_store"}  # the store's held-out text
    assert "on a mixture of `stdlib_store` (0.75) and `bigcode/the-stack-smol` (0.25)" in card.text
    assert "| `stdlib_store` | `/data/stdlib_store` | token store | 0.75 | 9,000 |" in card.text
    assert "| `bigcode/the-stack-smol` | `bigcode/the-stack-smol` | hub | 0.25 | 3,100 |" in card.text
    assert "of `stdlib_store` (`/data/stdlib_store`), the token store's held_out.jsonl" in card.text
    assert {entry["dataset"]["id"] for entries in _eval_results(tmp_path).values() for entry in entries} == {
        "stdlib_store"}  # fmt: skip


def test_an_embedded_corpus_run_keeps_its_hf_lmobj_id(tmp_path):
    _card(tmp_path, embedded_record())
    card = ModelCard.load(tmp_path / "README.md")
    assert card.data.datasets == ["hf-lmobj/python-stdlib"]
    assert {r.dataset_type for r in card.data.eval_results} == {"hf-lmobj/python-stdlib"}
    (entry,) = _eval_results(tmp_path)["bits_per_byte"]
    assert entry["dataset"]["id"] == "hf-lmobj/python-stdlib"
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert entry["notes"].endswith(f"; embedded corpus: the Python {version} standard library")


def test_a_hub_dataset_measured_on_its_validation_split_is_named_by_its_hub_id(tmp_path):
    record = folder_record()
    record["training"] = [{"name": "wikitext", "location": "Salesforce/wikitext", "kind": "hub", "weight": 1.0}]
    record["validation"].update(source="wikitext", location="Salesforce/wikitext",
                                selection="the dataset's validation split")  # fmt: skip
    _card(tmp_path, record)
    card = ModelCard.load(tmp_path / "README.md")
    assert card.data.datasets == ["Salesforce/wikitext"]
    assert {r.dataset_type for r in card.data.eval_results} == {"Salesforce/wikitext"}
    assert "| hub | 1 | not recorded |" in card.text  # realized tokens not filled in: said, not invented


def test_the_card_names_the_validation_text_tokenizer_skipped_and_held_out_documents(tmp_path):
    text = _card(tmp_path, folder_record()).text
    section = text.split("## Training data\n")[1].split("\n## Evaluation")[0]
    assert f"- **Validation text:** 3 documents ({VALIDATION_BYTES} bytes) of `jsonl` (`/data/users/me/jsonl`), held " \
           f"out by content hash (2% of documents); text fingerprint `{FINGERPRINT}`" in section  # fmt: skip
    assert ("- **Tokenizer:** trained by this run on a sample of its training side (290 documents, 81,234 bytes of "
            "`jsonl`); vocabulary 512; fingerprint `fedcba9876543210`") in section  # fmt: skip
    assert "counted, never trained or scored): training 1 empty, 1 whitespace-only; validation none" in section
    assert "- **Held out of training:** 3 documents" in section


@pytest.mark.parametrize(
    "tokenizer, words",
    [
        ({"origin": "given", "name": "gpt2"}, "- **Tokenizer:** given `gpt2`; vocabulary 512;"),
        ({"origin": "token store", "name": "/data/store"}, "- **Tokenizer:** the token store's `/data/store`; voc"),
        ({"origin": "trained"}, "- **Tokenizer:** trained by this run on a sample of its training side; vocabulary"),
    ],
)
def test_the_tokenizer_origin_is_said_as_recorded(tmp_path, tokenizer, words):
    record = folder_record()
    record["tokenizer"] = {"vocab_size": 512, "fingerprint": "fedcba9876543210", **tokenizer}
    assert words in _card(tmp_path, record).text


@pytest.mark.parametrize("objective", ["masked", "span", "sequence_classification"])
def test_every_template_has_the_training_data_section(tmp_path, objective):
    text = _card(tmp_path, folder_record(), metrics={"eval_loss": 2.0}, objective=objective).text
    assert "\n## Training data\n\n| source | location | kind | weight | tokens trained |\n" in text
    assert " on `jsonl`, from scratch." in text


# --------------------------------------------------------------------------------- the simple path (a name)
@pytest.mark.parametrize(
    "name, datasets",
    [
        ("python-stdlib-functions", ["hf-lmobj/python-stdlib-functions"]),
        ("Salesforce/wikitext", ["Salesforce/wikitext"]),
    ],
)
def test_a_caller_with_only_a_dataset_name_keeps_working(tmp_path, name, datasets):
    write_model_card(tmp_path, objective="causal", metrics={"eval_perplexity": 3.0}, hyperparameters={},
                     model_name="tiny", dataset_name=name)  # fmt: skip
    card = ModelCard.load(tmp_path / "README.md")
    assert card.data.datasets == datasets and card.data.eval_results[0].dataset_type == datasets[0]
    assert "Validation text" not in card.text  # nothing is claimed that the caller did not record


def test_a_local_folder_given_by_name_is_named_by_its_own_name(tmp_path):
    data = tmp_path / "corpora" / "my_texts"
    data.mkdir(parents=True)
    write_eval_results(tmp_path / "out", {"eval_perplexity": ("perplexity", "Perplexity", "validation", 3.0)},
                       str(data), date="2026-01-15")  # fmt: skip
    assert _eval_results(tmp_path / "out")["perplexity"][0]["dataset"]["id"] == "my_texts"


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"provenance": folder_record(), "dataset_name": "jsonl"}, "not both"),
        ({}, "dataset_name must be a non-empty string, got None; or pass provenance="),
    ],
)
def test_the_data_is_named_once(tmp_path, kwargs, match):
    with pytest.raises(ValueError, match=match):
        write_model_card(tmp_path, objective="causal", metrics={}, hyperparameters={}, model_name="m", **kwargs)
    assert _files(tmp_path) == []


@pytest.mark.parametrize(
    "name, location, kind, expected",
    [
        ("jsonl", "data/jsonl/", "local files", "jsonl"),
        ("store", "/data/stdlib_store", "token store", "stdlib_store"),
        ("wikitext", "Salesforce/wikitext", "hub", "Salesforce/wikitext"),
        ("python-stdlib", "the Python standard library (Lib/*.py)", "embedded corpus", "hf-lmobj/python-stdlib"),
        ("rows", None, "in-memory", "rows"),
        ("texts", "/abs/texts.jsonl", None, "texts.jsonl"),  # kind inferred: an absolute path is local
    ],
)
def test_dataset_ids(name, location, kind, expected):
    assert dataset_id(name, location, kind) == expected


# ----------------------------------------------------------------------------- the record is checked by key
def _set(path, value):
    """A folder record with ``value`` at ``path`` (a tuple of keys; ``...`` as value deletes the key)."""

    def change(record):
        target = record
        for key in path[:-1]:
            target = target[key]
        if value is ...:
            del target[path[-1]]
        else:
            target[path[-1]] = value
        return record

    return change


BAD_RECORDS = [
    (lambda r: [r], TypeError, r"provenance must be a dict"),
    (_set(("validation",), ...), ValueError, r"provenance has no 'validation'"),
    (_set(("source_of_truth",), "me"), ValueError, r"provenance has the unknown key\(s\) 'source_of_truth'"),
    (_set(("training",), {"name": "jsonl"}), TypeError, r"provenance\['training'\] must be a list"),
    (_set(("training",), []), ValueError, r"provenance\['training'\] is empty"),
    (_set(("training", 0, "location"), ...), ValueError, r"provenance\['training'\]\[0\] has no 'location'"),
    (_set(("training", 0, "weight"), "1.0"), TypeError, r"provenance\['training'\]\[0\]\['weight'\] must be a number"),
    (_set(("training", 0, "weight"), math.nan), ValueError, r"\['weight'\] must be a finite number"),
    (_set(("training", 0, "weight"), 0.0), ValueError, r"weights are all 0"),
    (_set(("training", 0, "kind"), "s3 bucket"), ValueError, r"\[0\]\['kind'\] must be one of"),
    (_set(("training", 0, "tokens"), -5), ValueError, r"\['tokens'\] is -5; counts cannot be negative"),
    (_set(("training", 0, "tokens"), 1.5), ValueError, r"\['tokens'\] is 1.5"),
    (_set(("training", 0, "streamed"), "yes"), TypeError, r"\['streamed'\] must be True or False"),
    (_set(("training", 0, "name"), "  "), ValueError, r"\[0\]\['name'\] must be a non-empty string"),
    (_set(("training", 0, "location"), None), TypeError, r"\[0\]\['location'\] must be a string"),
    (_set(("training", 0, "location"), "/data/\udcff"), ValueError, r"\['location'\] holds a lone surrogate"),
    (_set(("training", 0, "per_cent"), 5), ValueError, r"\[0\] has the unknown key\(s\) 'per_cent'"),
    (_set(("validation", "documents"), 0), ValueError, r"\['validation'\]\['documents'\] is 0"),
    (_set(("validation", "bytes"), 2), ValueError, r"\['bytes'\] is 2 for 3 documents"),
    (_set(("validation", "fingerprint"), "ABCDEF0123456789"), ValueError, r"\['fingerprint'\] must be 16 lowercase"),
    (_set(("validation", "selection"), ...), ValueError, r"\['validation'\] has no 'selection'"),
    (_set(("tokenizer", "origin"), "downloaded"), ValueError, r"\['tokenizer'\]\['origin'\] must be one of"),
    (_set(("tokenizer", "vocab_size"), True), TypeError, r"\['vocab_size'\] must be an int"),
    (_set(("tokenizer", "fingerprint"), ...), ValueError, r"\['tokenizer'\] has no 'fingerprint'"),
    (_set(("tokenizer", "trained_on"), []), TypeError, r"\['trained_on'\] must be a source's name"),
    (_set(("skipped_documents", "validation"), ...), ValueError, r"\['skipped_documents'\] has no 'validation'"),
    (_set(("skipped_documents", "training", "binary"), 2), ValueError, r"unknown key\(s\) 'binary'"),
    (_set(("skipped_documents", "training", "empty"), -1), ValueError, r"\['training'\]\['empty'\] is -1"),
    (_set(("held_out_training_documents",), 2.5), ValueError, r"held_out_training_documents'\] is 2.5"),
]


@pytest.mark.parametrize("change, error, match", BAD_RECORDS)
def test_a_bad_record_is_refused_by_key_before_anything_is_written(tmp_path, change, error, match):
    record = change(copy.deepcopy(folder_record()))
    with pytest.raises(error, match=match):
        _card(tmp_path, record)
    assert _files(tmp_path) == []


def test_two_sources_of_one_name_are_refused():
    record = mixture_record()
    record["training"][1]["name"] = "stdlib_store"
    with pytest.raises(ValueError, match=r"provenance\['training'\] names has 'stdlib_store' twice"):
        check_provenance(record)


def test_a_record_of_another_text_than_the_scored_one_is_refused(tmp_path):
    metrics = {**METRICS, "validation_fingerprint": texts_fingerprint(VALIDATION_TEXTS[:2])}
    with pytest.raises(ValueError, match=rf"metrics\['validation_fingerprint'\] is \w+ but .*is {FINGERPRINT}"):
        _card(tmp_path, folder_record(), metrics=metrics)
    with pytest.raises(TypeError, match=r"metrics\['validation_fingerprint'\] must be a string of 16 hex digits"):
        _card(tmp_path, folder_record(), metrics={**METRICS, "validation_fingerprint": 12})
    assert _files(tmp_path) == []


def test_the_fingerprint_is_a_statistic_of_the_card_not_a_result(tmp_path):
    card = _card(tmp_path, folder_record())
    assert f"| `validation_fingerprint` | {FINGERPRINT} |" in card.text
    assert [r.metric_type for r in card.data.eval_results] == ["perplexity", "bits_per_byte"]


# ------------------------------------------------------------------------------------ the pretrain report
def test_the_report_says_the_validation_text_and_the_skipped_documents():
    assert data_lines(folder_record()) == [
        f"validation text: 3 documents ({VALIDATION_BYTES} bytes) of jsonl (/data/users/me/jsonl), held out by "
        f"content hash (2% of documents); text fingerprint {FINGERPRINT}",
        "skipped documents (nothing to learn from): training 1 empty, 1 whitespace-only; validation none",
    ]
    record = folder_record()
    record["skipped_documents"]["training"] = dict(NONE_SKIPPED)
    assert len(data_lines(record)) == 1  # nothing skipped: no line


def test_the_recipes_card_passes_the_runs_provenance(tmp_path):
    trainer = SimpleNamespace(
        optimizer=object(), model=SimpleNamespace(num_parameters=lambda: 1234),
        args=SimpleNamespace(learning_rate=1e-3, per_device_train_batch_size=4),
        state=SimpleNamespace(max_steps=3, log_history=[]),
    )  # fmt: skip
    args = SimpleNamespace(data=SimpleNamespace(objective="causal", dataset_name=None),
                           model=SimpleNamespace(model_name_or_path=None), auxiliary=None)  # fmt: skip
    run = SimpleNamespace(trainer=trainer, args=args, data=SimpleNamespace(hyperparameters={}), tokenizer=[0] * 512,
                          provenance=folder_record())  # fmt: skip
    _write_card(run, dict(METRICS), tmp_path, {})
    card = ModelCard.load(tmp_path / "README.md")
    assert card.data.datasets == ["jsonl"] and "python-stdlib" not in card.text


def test_a_named_record_is_a_provenance_with_nothing_else_claimed():
    record = Provenance.named("python-stdlib")
    assert (record.validation, record.tokenizer, record.skipped_documents) == (None, None, None)
    assert record.validation_id == "hf-lmobj/python-stdlib" and record.markdown().count("\n") == 2
