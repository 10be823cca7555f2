"""After a stop and a resume (once or twice) every later loss, grad norm and the final weights are bit-equal.

Each case is ``tests/scripts/pipeline_resume.py`` on ranks forked from the test process
(``tests.distributed.run_ranks``): a 12-step run whole, and the same run stopped at step 4 and 8 (or 6) and
resumed from its checkpoint in fresh Trainers; the data continues from the checkpoint's ``data_state.json``
without replaying a batch.
"""

from __future__ import annotations

import pytest
import torch
from pipeline_resume import main

from tests.distributed import preload, run_ranks

preload(*(f"transformers.models.{name}.modeling_{name}" for name in ("gpt2", "bert", "t5")))
CASES = [  # (objective, source, workers, processes, plan)
    ("causal", "dataset", 0, 1, "4,8,12"),
    ("causal", "stream", 2, 1, "6,12"),
    ("causal", "store", 2, 2, "6,12"),
    ("causal", "stream", 0, 2, "4,8,12"),
    ("causal", "mix", 2, 2, "6,12"),
    ("masked", "stream", 0, 2, "6,12"),
    ("masked", "store", 2, 1, "6,12"),
    ("span", "stream", 2, 2, "6,12"),
    ("span", "dataset", 0, 1, "6,12"),
]


def _record(tmp_path, name, *args):
    out = tmp_path / name
    out.mkdir()
    run_ranks(main, args[3], str(out), *args[:3], args[4], timeout=400)
    return torch.load(out / "record.pt")


@pytest.mark.slow
@pytest.mark.parametrize(("objective", "source", "workers", "processes", "plan"), CASES)
def test_resumed_runs_equal_the_uninterrupted_one_bit_for_bit(tmp_path, objective, source, workers, processes, plan):
    whole = _record(tmp_path, "whole", objective, source, workers, processes, "12")
    resumed = _record(tmp_path, "resumed", objective, source, workers, processes, plan)
    assert whole["steps"] == resumed["steps"] == 12
    assert resumed["losses"] == whole["losses"] and len(whole["losses"]) == 12
    assert resumed["grad_norms"] == whole["grad_norms"]
    for name, value in whole["parameters"].items():
        assert torch.equal(resumed["parameters"][name], value), name


@pytest.mark.slow
def test_workers_resume_in_turn_after_an_odd_number_of_batches(tmp_path, monkeypatch):
    """Accumulation 3: a stop at step 5 leaves 15 batches, so the next batch is worker 1's, not worker 0's."""
    monkeypatch.setenv("PIPELINE_GA", "3")
    whole = _record(tmp_path, "whole", "causal", "stream", 2, 1, "12")
    resumed = _record(tmp_path, "resumed", "causal", "stream", 2, 1, "5,12")
    assert resumed["losses"] == whole["losses"] and resumed["grad_norms"] == whole["grad_norms"]


@pytest.mark.slow
@pytest.mark.parametrize(("objective", "before", "after"), [("causal", 2, 1), ("causal", 1, 2), ("masked", 2, 1)])
def test_a_planned_source_resumes_on_another_world_size(tmp_path, monkeypatch, objective, before, after):
    """``before`` processes stop at step 6, ``after`` resume (batch 4 // processes): the same global batches.

    Without dropout (each process draws its own dropout masks, so only the data can be compared).
    """
    monkeypatch.setenv("PIPELINE_DROPOUT", "0")
    whole = _record(tmp_path, "whole", objective, "store", 0, before, "12")
    first = tmp_path / "elastic"
    first.mkdir()
    run_ranks(main, before, str(first), objective, "store", 0, "6", timeout=400)
    run_ranks(main, after, str(first), objective, "store", 0, "resume:6,12", timeout=400)
    resumed = torch.load(first / "record.pt")
    assert resumed["steps"] == 12
    for step in range(7, 13):
        assert resumed["losses"][step] == pytest.approx(whole["losses"][step], rel=1e-5, abs=1e-6), step
    for name, value in whole["parameters"].items():
        torch.testing.assert_close(resumed["parameters"][name], value, rtol=1e-4, atol=1e-6)
