"""Over one epoch every document is trained exactly once, on 1 and 2 processes, with 0 and 2 workers.

Each run is ``tests/scripts/pipeline_epoch.py`` (ObjectiveTrainer, gloo) on ranks forked from the test process
(``tests.distributed.run_ranks``; its DataLoader workers are forked from each rank, as under torchrun); every
rank records the documents of the rows it trained. Together they must be the corpus exactly (no
document missing, none twice), and every rank must take the same number of optimizer steps.
"""

from __future__ import annotations

import pytest
import torch
from pipeline_epoch import documents, main

from hf_lmobj.corpus import build_tokenizer
from tests.distributed import preload, run_ranks

preload("transformers.models.gpt2.modeling_gpt2")


@pytest.mark.slow
@pytest.mark.parametrize("processes", [1, 2])
@pytest.mark.parametrize("workers", [0, 2])
@pytest.mark.parametrize("source", ["dataset", "stream", "store"])
def test_every_document_once_per_epoch_and_ranks_in_step(tmp_path, source, workers, processes):
    run_ranks(main, processes, str(tmp_path), source, workers)
    records = [torch.load(tmp_path / f"rank{r}.pt") for r in range(processes)]
    trained = sorted(doc for record in records for doc in record["documents"])
    expected = sorted(tuple(doc) for doc in documents(build_tokenizer(vocab_size=512, max_documents=20)))
    assert trained == expected  # each document once: none missing, none repeated
    assert len({record["steps"] for record in records}) == 1  # the ranks stepped together
    assert len({record["micro_batches"] for record in records}) == 1
    assert records[0]["steps"] > 0


@pytest.mark.slow
def test_pack_dataset_stream_with_the_collator_defaults_trains_under_accelerate_dispatch(tmp_path):
    """The user's first try: pack_dataset(IterableDataset) + DataCollatorForCausalLM(packing=True) on 2 processes.

    accelerate dispatches an IterableDataset's batches by default: they must be tensors only (no
    use_cache bool) and of one width (max_length), or the first step fails.
    """
    run_ranks(main, 2, str(tmp_path), "dispatch", 0)
    assert all(torch.load(tmp_path / f"rank{r}.pt")["steps"] == 3 for r in range(2))
