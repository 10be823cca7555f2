"""Shared fixtures: a small locally trained tokenizer and the embedded corpus (no downloads); the integration tests' marker."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

INTEGRATION = Path(__file__).resolve().parent / "integration"


def pytest_collection_modifyitems(config, items):
    """Every test of tests/integration/ (real launchers, venvs, runs of a script) is ``slow``: ``make test`` runs it,
    ``make test-fast`` (``-m "not slow"``) leaves it out."""
    for item in items:
        if INTEGRATION in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.slow)


@pytest.fixture(scope="session")
def tokenizer():
    """A byte-level BPE (vocab 1024) trained on the first 300 stdlib files, cached on disk."""
    from hf_lmobj.corpus import build_tokenizer

    return build_tokenizer(vocab_size=1024, max_documents=300)


@pytest.fixture(scope="session")
def corpus():
    """The first 300 stdlib files, split train/validation."""
    from hf_lmobj.corpus import load_stdlib_corpus

    return load_stdlib_corpus(max_documents=300)


@pytest.fixture
def one_torch_thread():
    """Run a test on one torch thread: tiny models on a shared 2-core machine stall with two."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def tiny_gpt2(tokenizer):
    """A tiny GPT-2 (2 layers, width 32, 256 positions) from config, seeded, in eval mode."""
    from tests.testing_utils import tiny_gpt2

    return tiny_gpt2(tokenizer, positions=256, seed=1234).eval()


@pytest.fixture(autouse=True)
def _deterministic_torch():
    torch.manual_seed(0)
    yield
