"""The ranks' scripts under a real ``torchrun`` launch (fresh interpreters, torchrun's own rendezvous), where the
library tests fork their ranks from the test process (tests/distributed.py): one launch of
``tests/scripts/pipeline_epoch.py`` on 2 processes with 2 DataLoader workers each, with the assertions of
tests/data/test_exactly_once.py."""

from __future__ import annotations

import pytest
import torch
from pipeline_epoch import documents

from hf_lmobj.corpus import build_tokenizer
from tests.testing_utils import SCRIPTS, torchrun


@pytest.mark.slow
def test_every_document_once_per_epoch_under_torchrun(tmp_path):
    torchrun(SCRIPTS / "pipeline_epoch.py", 2, str(tmp_path), "stream", "2", timeout=300)
    records = [torch.load(tmp_path / f"rank{r}.pt") for r in range(2)]
    trained = sorted(doc for record in records for doc in record["documents"])
    expected = sorted(tuple(doc) for doc in documents(build_tokenizer(vocab_size=512, max_documents=20)))
    assert trained == expected  # each document once: none missing, none repeated
    assert len({record["steps"] for record in records}) == 1  # the ranks stepped together
    assert len({record["micro_batches"] for record in records}) == 1
    assert records[0]["steps"] > 0
