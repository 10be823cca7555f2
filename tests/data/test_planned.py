"""The planned epoch: the same global rows on any world size, each row once, ranks in step."""

from __future__ import annotations

import numpy as np
import pytest

from hf_lmobj.data.block_rows import RowFormat
from hf_lmobj.data.planned import EpochPlan


def _plan(seed=0, shuffle=True):
    lengths = np.random.default_rng(1).integers(1, 50, size=203)
    return EpochPlan(lengths, RowFormat("packed", 32), block_documents=17, seed=seed, shuffle=shuffle)


@pytest.mark.parametrize("world_size", [1, 2, 3, 4])
def test_each_row_once_per_epoch_on_any_world_size(world_size):
    plan = _plan()
    steps = plan.steps(batch_size=3, world_size=world_size)
    taken = [
        row
        for step in range(steps)
        for rank in range(world_size)
        for row in plan.rows_of_step(step, rank, 3, world_size, epoch=0)
    ]
    assert sorted(taken) == list(range(plan.num_rows))
    assert steps == -(-plan.num_rows // (3 * world_size))


def test_global_batches_do_not_depend_on_the_world_size():
    plan = _plan()
    one = [plan.rows_of_step(s, 0, 4, 1, 0) for s in range(plan.steps(4, 1))]
    two = [plan.rows_of_step(s, 0, 2, 2, 0) + plan.rows_of_step(s, 1, 2, 2, 0) for s in range(plan.steps(2, 2))]
    assert one == two


def test_epochs_reorder_blocks_but_keep_the_rows():
    plan = _plan()
    rows = {}
    for epoch in (0, 1):
        plan.set_epoch(epoch)
        rows[epoch] = [
            (int(plan.block_docs(block)[layout.chunk_doc[layout.row_offsets[r]]]), int(layout.chunk_len.sum()))
            for block, layout, r in (plan.locate(g) for g in range(plan.num_rows))
        ]
    assert rows[0] != rows[1] and sorted(rows[0]) == sorted(rows[1])
    assert plan.num_tokens == int(plan.lengths.sum())


def test_the_plan_is_seeded_and_shuffle_false_keeps_order():
    assert np.array_equal(_plan(seed=3).block_docs(0), _plan(seed=3).block_docs(0))
    assert not np.array_equal(_plan(seed=3).block_docs(0), _plan(seed=4).block_docs(0))
    assert _plan(shuffle=False).block_docs(1).tolist() == list(range(17, 34))
