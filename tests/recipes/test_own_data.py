"""A user's own data, right by construction (issue 35): one path, held-out text by content, their tokenizer.

The corpus is a generated language that never occurs in Python source (random syllable words), in a JSONL
folder holding one empty and one whitespace-only document.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hf_lmobj.corpus import build_tokenizer
from hf_lmobj.data.prepare import DataArguments
from hf_lmobj.data.prepare_run import prepare_run_data
from hf_lmobj.data.run_sources import open_sources
from hf_lmobj.data.sources import TextStream
from hf_lmobj.held_out import HeldOut, content_hash, text_problem
from tests.testing_utils import QUICK, ROOT, launch_env

SYLLABLES = ["zor", "vu", "ta", "le", "ki", "mao", "dre", "qua", "shi", "ny", "pol", "ek", "ru", "fa", "gwi"]
FRACTION = 0.1


def generated_texts(count: int, seed: int = 0) -> list[str]:
    """``count`` documents of a language no Python file speaks: sentences of random syllable words."""
    rng = np.random.default_rng(seed)
    texts = []
    for _ in range(count):
        words = ["".join(rng.choice(SYLLABLES, size=rng.integers(1, 4))) for _ in range(rng.integers(20, 90))]
        lines = [" ".join(words[i : i + 9]).capitalize() + "." for i in range(0, len(words), 9)]
        texts.append("\n".join(lines))
    return texts


def write_folder(folder: Path, texts: list[str], files: int = 3) -> Path:
    """The texts as ``files`` JSON Lines files, the first file opening with an empty and a whitespace-only one."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = ["", "   \n\t ", *texts]
    for index in range(files):
        lines = [json.dumps({"text": text}) for text in rows[index::files]]
        (folder / f"part-{index}.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def reading_order(folder: Path) -> list[str]:
    return [
        json.loads(line)["text"] for path in sorted(folder.glob("*.jsonl")) for line in path.read_text().splitlines()
    ]


@pytest.fixture(scope="module")
def own_folder(tmp_path_factory) -> Path:
    return write_folder(tmp_path_factory.mktemp("own") / "zorvu", generated_texts(240))


def _held_out(folder: Path, limit: int) -> list[str]:
    rule = HeldOut(FRACTION)
    picked = [t for t in reading_order(folder) if text_problem(t) is None and rule.by_rule(content_hash(t))]
    return picked[:limit]


def test_held_out_documents_are_the_same_in_memory_streamed_and_in_a_token_store(tmp_path, own_folder):
    """The same corpus as a token store, a stream and in memory: the same held-out and the same trained documents."""
    tokenize = __import__("importlib").import_module("hf_lmobj.recipes.tokenize_corpus")
    store = tmp_path / "store"
    tokenize.main(["--dataset_name", str(own_folder), "--vocab_size", "512", "--validation_fraction", str(FRACTION),
                   "--output_dir", str(store)])  # fmt: skip
    base = {
        "validation_fraction": FRACTION,
        "max_validation_documents": 1000,
        "tokenizer_name": str(store / "tokenizer"),
    }
    ways = {
        "memory": DataArguments(dataset_name=str(own_folder), **base),
        "stream": DataArguments(dataset_name=str(own_folder), streaming=True, **base),
        "store": DataArguments(token_store=str(store), **base),
    }
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(store / "tokenizer")
    held, trained = {}, {}
    for way, args in ways.items():
        sources = open_sources(args)
        held[way] = sources.validation_texts
        data = prepare_run_data(sources, "causal", tokenizer, args, batch_size=2)
        trained[way] = _trained_documents(data.train_dataset.sources[0])
    assert held["memory"] == held["stream"] == held["store"] == _held_out(own_folder, 1000)
    assert len(held["memory"]) >= 10
    assert trained["memory"] == trained["stream"] == trained["store"]
    held_docs = {tuple([tokenizer.bos_token_id, *tokenizer(t, add_special_tokens=False)["input_ids"],
                        tokenizer.eos_token_id]) for t in held["memory"]}  # fmt: skip
    assert not held_docs & trained["memory"]
    assert len(trained["memory"]) == 240 - len(_held_out(own_folder, 10**6))  # the empty ones skipped


def _trained_documents(source) -> set[tuple[int, ...]]:
    if isinstance(source, TextStream):
        return {tuple(doc.tolist()) for doc in source.iter_documents(source.unit_slice(0, 1))}
    return {tuple(source.document(i).tolist()) for i in range(len(source.lengths))}


def test_the_readme_mixture_trains_no_held_out_document(tmp_path, own_folder):
    """A token store of a folder plus a stream of the same folder (the README's mixture): every trained document of
    either source is checked against the held-out text, by its tokens."""
    tokenize = __import__("importlib").import_module("hf_lmobj.recipes.tokenize_corpus")
    store = tmp_path / "store"
    tokenize.main(["--dataset_name", str(own_folder), "--vocab_size", "512", "--output_dir", str(store)])
    sources = json.dumps([{"token_store": str(store), "weight": 0.7}, {"dataset_name": str(own_folder), "weight": 0.3}])
    args = DataArguments(sources=sources, max_validation_documents=1000)
    opened = open_sources(args)
    from hf_lmobj.data.run_tokenizer import run_tokenizer

    tokenizer, record = run_tokenizer(opened, args)
    assert record["origin"] == "token store"
    data = prepare_run_data(opened, "causal", tokenizer, args, batch_size=2)
    trained = set().union(*(_trained_documents(s) for s in data.train_dataset.sources))
    held = [t for t in reading_order(own_folder) if text_problem(t) is None and HeldOut(0.02).by_rule(content_hash(t))]
    assert held and opened.validation_texts == held[: len(opened.validation_texts)]
    for text in held:
        ids = (tokenizer.bos_token_id, *tokenizer(text, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id)
        assert ids not in trained
    assert data.provenance["validation"]["source"] == "zorvu"


@pytest.mark.slow
def test_two_processes_stream_a_folder_of_another_language_with_no_tokenizer_given(tmp_path, own_folder):
    out = tmp_path / "run"
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
              str(ROOT / "recipes/accelerate_configs/multi_process.yaml"), str(ROOT / "recipes/pretrain.py")]  # fmt: skip
    quick = [flag for flag in QUICK if flag not in ("--max_documents", "200", "--vocab_size", "1024")]
    args = ["--config", str(ROOT / "recipes/configs/causal/demo.yaml"), *quick, "--vocab_size", "512",
            "--dataset_name", str(own_folder), "--streaming", "true", "--validation_fraction", str(FRACTION),
            "--max_steps", "4", "--ngram_orders", "none", "--compressor_baselines", "false",
            "--max_train_minutes", "null", "--torch_threads", "1", "--output_dir", str(out)]  # fmt: skip
    result = subprocess.run([*launch, *args], env=launch_env(), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    held = _held_out(own_folder, 100)
    assert metrics["validation_bytes"] == sum(len(t.encode("utf-8")) for t in held)
    assert metrics["validation_documents"] == len(held)
    assert metrics["train_skipped_empty_documents"] == 1 and metrics["train_skipped_whitespace_documents"] == 1
    card = (out / "README.md").read_text()
    assert "zorvu" in card and "python-stdlib" not in card
    from transformers import AutoTokenizer

    own = AutoTokenizer.from_pretrained(out)
    stdlib = build_tokenizer(512)
    text = "\n".join(held)
    per_byte = {name: len(tok(text, add_special_tokens=False)["input_ids"]) / len(text.encode()) for name, tok in
                (("own", own), ("stdlib", stdlib))}  # fmt: skip
    assert per_byte["own"] <= 0.8 * per_byte["stdlib"], per_byte
