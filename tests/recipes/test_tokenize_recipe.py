"""recipes/tokenize_corpus.py end to end: a local JSONL folder, the embedded corpus, and the script run as a script."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from hf_lmobj.corpus import build_tokenizer, load_stdlib_corpus
from hf_lmobj.store.token_store import TokenStore
from tests.testing_utils import load_recipe

ROOT = Path(__file__).resolve().parents[2]
TEXTS = ["def f(x):\n    return x\n", "print('a </s> b')\n", "", "import os\n", "x = 1\ny = 2\n"]


def load_tokenize_recipe():
    return load_recipe("tokenize_corpus")


def decoded(store: TokenStore, tokenizer) -> list[str]:
    """Each document without its BOS / EOS, decoded with ``tokenizer``."""
    documents = [store.document(i).tolist() for i in range(len(store))]
    assert all(d[0] == tokenizer.bos_token_id and d[-1] == tokenizer.eos_token_id for d in documents)
    return [tokenizer.decode(d[1:-1]) for d in documents]


def test_a_local_jsonl_folder_becomes_a_store_with_its_tokenizer(tmp_path, capsys):
    folder = tmp_path / "corpus"
    folder.mkdir()
    for index, part in enumerate((TEXTS[:3], TEXTS[3:])):  # two files, read in name order
        lines = [json.dumps({"content": text, "id": i}) for i, text in enumerate(part)]
        (folder / f"part-{index}.jsonl").write_text("\n".join(lines) + "\n")
    tokenizer_dir = tmp_path / "tok"
    build_tokenizer(vocab_size=512, max_documents=20).save_pretrained(tokenizer_dir)
    args = ["--dataset_name", str(folder), "--text_column", "content", "--tokenizer_name", str(tokenizer_dir)]
    recipe = load_tokenize_recipe()
    store = recipe.main([*args, "--num_proc", "2", "--output_dir", str(tmp_path / "store")])
    out = capsys.readouterr().out
    assert "4 documents" in out and "skipped 1 empty" in out and store.meta["text_column"] == "content"
    saved = AutoTokenizer.from_pretrained(tmp_path / "store" / "tokenizer")
    stored = [text for text in TEXTS if text]  # the empty text is skipped; none of these 4 is held out at 0.02
    assert decoded(TokenStore.open(tmp_path / "store"), saved) == stored
    assert store.tokenizer_origin == {"origin": "given", "name": str(tokenizer_dir)}
    streamed = recipe.main([*args, "--streaming", "true", "--max_documents", "4", "--output_dir", str(tmp_path / "s")])
    assert decoded(streamed, saved) == stored[:3]
    with pytest.raises(ValueError, match="already exists"):
        recipe.main([*args, "--output_dir", str(tmp_path / "store")])
    assert len(recipe.main([*args, "--overwrite", "true", "--output_dir", str(tmp_path / "store")])) == 4


def test_the_embedded_corpus_with_the_local_tokenizer(tmp_path):
    store = load_tokenize_recipe().main(
        ["--max_documents", "30", "--vocab_size", "512", "--output_dir", str(tmp_path / "store")]
    )
    expected = load_stdlib_corpus(max_documents=30)["train"]["text"]
    saved = AutoTokenizer.from_pretrained(tmp_path / "store" / "tokenizer")
    assert len(saved) == 512 and store.vocab_size == 512 and store.dtype.name == "uint16"
    assert decoded(store, saved) == expected


def test_a_failed_tokenizer_save_publishes_no_store(tmp_path, monkeypatch):
    recipe = load_tokenize_recipe()
    tokenizer = build_tokenizer(vocab_size=512, max_documents=20)

    def failing(self, folder, **kwargs):
        raise OSError("No space left on device")

    monkeypatch.setattr(recipe, "load_tokenizer", lambda args, texts, held_out: (tokenizer, {"origin": "given"}))
    monkeypatch.setattr(type(tokenizer), "save_pretrained", failing)
    with pytest.raises(OSError, match="No space left"):
        recipe.main(["--max_documents", "10", "--output_dir", str(tmp_path / "store")])
    assert list(tmp_path.iterdir()) == []  # never a store without its tokenizer/, nor a temporary folder


def test_runs_as_a_script(tmp_path):
    result = subprocess.run(
        [sys.executable, str(ROOT / "recipes" / "tokenize_corpus.py"), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert "python recipes/tokenize_corpus.py --output_dir" in result.stdout and "--num_proc" in result.stdout
