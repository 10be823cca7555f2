"""pretrain.py past memory: streamed JSONL files, a token store and a two-source mixture, for each objective."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.testing_utils import QUICK, ROOT, load_recipe, write_stdlib_jsonl

CONFIGS = {"causal": "causal/demo.yaml", "masked": "masked/bert_tiny.yaml", "span": "span/t5_tiny.yaml"}
BOUNDED = [
    "--max_validation_documents",
    "6",
    "--validation_fraction",
    "0.1",  # 120 documents: about 12 held out by content hash
    "--ngram_orders",
    "3",
    "--torch_threads",
    "1",
    "--max_train_minutes",
    "null",
]


@pytest.fixture(scope="module")
def jsonl_folder(tmp_path_factory) -> Path:
    return write_stdlib_jsonl(tmp_path_factory.mktemp("jsonl"), documents=120)


def _run(tmp_path, objective: str, *extra: str) -> dict:
    args = ["--config", str(ROOT / "recipes/configs" / CONFIGS[objective]), *QUICK, *BOUNDED, "--max_steps", "3"]
    return load_recipe().main([*args, *extra, "--output_dir", str(tmp_path / objective)])


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["causal", "masked", "span"])
def test_each_objective_trains_from_a_streamed_jsonl_folder(tmp_path, jsonl_folder, objective):
    metrics = _run(tmp_path, objective, "--dataset_name", str(jsonl_folder), "--streaming", "true")
    name = f"train_tokens_{jsonl_folder.name}"
    assert metrics[name] > 0 and (tmp_path / objective / "README.md").exists()
    assert metrics["eval_loss"] == metrics["eval_loss"]  # finite: the held-out documents were scored


@pytest.mark.slow
def test_clm_trains_from_a_token_store_and_from_a_mixture(tmp_path, jsonl_folder):
    tokenize = __import__("importlib").import_module("hf_lmobj.recipes.tokenize_corpus")
    tokenize.main(["--max_documents", "60", "--vocab_size", "1024", "--output_dir", str(tmp_path / "store")])
    tokenizer = str(tmp_path / "store" / "tokenizer")
    metrics = _run(tmp_path, "causal", "--token_store", str(tmp_path / "store"), "--tokenizer_name", tokenizer)
    # real tokens; tokens seen also count the padding of a short last row
    assert 0.95 * metrics["train_tokens_seen"] <= metrics["train_tokens_store"] <= metrics["train_tokens_seen"]
    sources = json.dumps([
        {"token_store": str(tmp_path / "store"), "weight": 0.7, "name": "store"},
        {"dataset_name": str(jsonl_folder), "weight": 0.3, "name": "jsonl"},
    ])  # fmt: skip
    mixed = _run(
        tmp_path / "mix", "causal", "--sources", sources, "--tokenizer_name", tokenizer, "--block_documents", "4"
    )
    assert mixed["train_tokens_store"] > 0 and mixed["train_tokens_jsonl"] > 0
    assert 0.95 * mixed["train_tokens_seen"] <= mixed["train_tokens_store"] + mixed["train_tokens_jsonl"]
    assert mixed["train_tokens_store"] + mixed["train_tokens_jsonl"] <= mixed["train_tokens_seen"]


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--streaming", "true"], "dataset_name"),
        (["--sources", '[{"weight": 1}]'], "exactly one of dataset_name"),
        (["--sources", '[{"token_store": "x", "weight": 0}]'], "weight must be a number > 0"),
        (["--sources", "not json"], "JSON list"),
        (["--token_store", "x", "--sources", '[{"token_store": "x", "weight": 1}]'], "not both"),
    ],
)
def test_bad_pipeline_flags_are_refused_by_name(tmp_path, flags, words):
    with pytest.raises(ValueError, match=words):
        _run(tmp_path, "causal", *flags)


@pytest.mark.slow
def test_fim_trains_from_a_streamed_folder_and_reports_infilling(tmp_path, jsonl_folder):
    args = ["--config", str(ROOT / "recipes/configs/causal/fim_demo.yaml"), *QUICK, *BOUNDED, "--max_steps", "3"]
    metrics = load_recipe().main([*args, "--dataset_name", str(jsonl_folder), "--streaming", "true",
                                  "--infill_cases", "4", "--output_dir", str(tmp_path / "fim")])  # fmt: skip
    assert metrics[f"train_tokens_{jsonl_folder.name}"] > 0
    assert "validation_infill_spm_exact_match" in metrics


def test_fim_from_a_token_store_is_refused_by_name(tmp_path):
    with pytest.raises(ValueError, match="token store does not hold"):
        args = ["--config", str(ROOT / "recipes/configs/causal/fim_demo.yaml"), *QUICK, *BOUNDED]
        load_recipe().main([*args, "--token_store", str(tmp_path), "--output_dir", str(tmp_path / "o")])


@pytest.fixture(scope="module")
def tokenizer():
    from hf_lmobj.corpus import build_tokenizer

    return build_tokenizer(vocab_size=512, max_documents=20)


@pytest.mark.parametrize(
    "objective, first_key", [("causal", "position_ids"), ("masked", "labels"), ("span", "decoder_input_ids")]
)
def test_a_streamed_text_source_makes_batches_for_each_objective(jsonl_folder, tokenizer, objective, first_key):
    """Fast: the streamed text source opens and yields collated batches (the slow runs above train on it)."""
    from hf_lmobj.data.prepare import DataArguments
    from hf_lmobj.data.prepare_run import prepare_run_data
    from hf_lmobj.data.run_sources import open_sources

    args = DataArguments(objective=objective, dataset_name=str(jsonl_folder), streaming=True, max_length=64,
                         max_validation_documents=4, block_documents=8, validation_fraction=0.2)  # fmt: skip
    data = prepare_run_data(open_sources(args), objective, tokenizer, args, batch_size=2)
    batch = next(iter(data.train_dataset.shard(0, 1)))["batch"]  # a batch with its stream position
    assert first_key in batch and batch["input_ids"].shape[0] == 2
    assert len(data.validation_texts) == 4
