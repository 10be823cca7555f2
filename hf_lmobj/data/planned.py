"""One epoch of a random-access source planned from document lengths: global rows, global steps.

The documents are put in a fixed seeded order once and grouped into blocks of ``block_documents``;
each block is laid out into rows (:func:`~hf_lmobj.data.block_rows.block_layout`) from its lengths alone.
Epoch ``e`` visits the blocks in a seeded order of its own, so the rows are numbered ``g = 0 .. R-1``
the same way however many processes and workers read them. Global step ``s`` is rows
``[s * G, (s + 1) * G)`` with ``G = batch_size * world_size``; rank ``r`` takes the ``batch_size``
rows from ``s * G + r * batch_size``. Every rank runs ``ceil(R / G)`` steps; in the last one a rank
may get fewer rows, or none (then it gets a batch with no target, see :func:`ghost_batch`): every
row is trained exactly once per epoch, none twice.

Example:
    >>> plan = EpochPlan(np.array([3, 2, 4, 1]), RowFormat("packed", 4), block_documents=2, seed=0, shuffle=False)
    >>> plan.num_rows, plan.steps(batch_size=1, world_size=2)
    (4, 2)
    >>> plan.rows_of_step(step=1, rank=1, batch_size=1, world_size=2, epoch=0)
    [3]
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hf_lmobj.checks import check_count, check_flag, check_length, check_seed
from hf_lmobj.data.block_rows import BlockLayout, RowFormat, block_layout, check_lengths, shuffle_rows


def epoch_rng(seed: int, *keys: int) -> np.random.Generator:
    """A numpy generator keyed by ``seed`` and ``keys`` (e.g. the epoch), independent of any global RNG.

    ``seed`` is an int in ``[0, 2**32)`` and each key an int >= 0 (a float is refused, never cut to an int).

    Example:
        >>> int(epoch_rng(3, 1).integers(100)) == int(epoch_rng(3, 1).integers(100))
        True
        >>> epoch_rng(-1)
        Traceback (most recent call last):
        ...
        ValueError: seed must be an int in [0, 2**32), got -1
    """
    return np.random.default_rng([check_seed(seed), *(check_count(k, f"keys[{i}]") for i, k in enumerate(keys))])


@dataclass
class EpochPlan:
    """The rows of a random-access source's epochs (see the module docstring).

    ``lengths`` are the documents' token counts (ints >= 0, at least one token in all), ``block_documents``
    an int >= 1, ``seed`` an int in ``[0, 2**32)``, ``shuffle`` a bool.
    """

    lengths: np.ndarray  # (D,) int64
    fmt: RowFormat
    block_documents: int = 1000
    seed: int = 0
    shuffle: bool = True
    _doc_order: np.ndarray = field(init=False, repr=False)  # (D,) fixed across epochs
    _block_rows: np.ndarray = field(init=False, repr=False)  # (NB,) rows of each block
    _epoch: int = field(default=-1, init=False, repr=False)
    _first_row: np.ndarray = field(init=False, repr=False)  # (NB + 1,) first global row of each visited block
    _block_order: np.ndarray = field(init=False, repr=False)  # (NB,)
    _cache: tuple[int, BlockLayout] | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.lengths = check_lengths(self.lengths, "lengths")
        if self.lengths.size == 0 or int(self.lengths.sum()) == 0:
            raise ValueError(
                f"lengths hold no token ({self.lengths.size} documents); an epoch needs at least one token"
            )
        if not isinstance(self.fmt, RowFormat):
            raise TypeError(f"fmt must be a RowFormat, got {type(self.fmt).__name__}")
        self.block_documents = check_length(self.block_documents, "block_documents")
        self.seed, self.shuffle = check_seed(self.seed), check_flag(self.shuffle, "shuffle")
        count = self.lengths.size
        dtype = np.uint32 if count < 2**32 else np.int64
        order = epoch_rng(self.seed).permutation(count) if self.shuffle else np.arange(count)
        self._doc_order = order.astype(dtype)
        self._block_rows = np.array(
            [block_layout(self.lengths[self.block_docs(b)], self.fmt).num_rows for b in range(self.num_blocks)],
            dtype=np.int64,
        )
        self.set_epoch(0)

    # ---- the plan --------------------------------------------------------------------------
    @property
    def num_blocks(self) -> int:
        return -(-self.lengths.size // self.block_documents)

    @property
    def num_rows(self) -> int:
        return int(self._block_rows.sum())

    @property
    def num_tokens(self) -> int:
        return int(self.lengths.sum())

    def block_docs(self, block: int) -> np.ndarray:
        """Documents of block ``block`` (indices into the source), in layout order."""
        block = check_count(block, "block")
        if block >= self.num_blocks:
            raise ValueError(f"block must be in [0, {self.num_blocks}), got {block}")
        return self._doc_order[block * self.block_documents : (block + 1) * self.block_documents].astype(np.int64)

    def steps(self, batch_size: int, world_size: int) -> int:
        """Steps every rank runs in an epoch: ``ceil(rows / (batch_size x world_size))``."""
        batch_size, world_size = check_length(batch_size, "batch_size"), check_length(world_size, "world_size")
        return -(-self.num_rows // (batch_size * world_size))

    def set_epoch(self, epoch: int) -> None:
        epoch = check_count(epoch, "epoch")
        if epoch == self._epoch:
            return
        blocks = self.num_blocks
        self._block_order = epoch_rng(self.seed, 1, epoch).permutation(blocks) if self.shuffle else np.arange(blocks)
        self._first_row = np.concatenate([[0], np.cumsum(self._block_rows[self._block_order])])
        self._epoch, self._cache = epoch, None

    def rows_of_step(self, step: int, rank: int, batch_size: int, world_size: int, epoch: int) -> list[int]:
        """Global row numbers rank ``rank`` trains at global step ``step`` of ``epoch`` (maybe none)."""
        batch_size, world_size = check_length(batch_size, "batch_size"), check_length(world_size, "world_size")
        step, rank = check_count(step, "step"), check_count(rank, "rank")
        if rank >= world_size:
            raise ValueError(f"rank must be in [0, world_size={world_size}), got {rank}")
        self.set_epoch(epoch)
        first = step * batch_size * world_size + rank * batch_size
        return list(range(min(first, self.num_rows), min(first + batch_size, self.num_rows)))

    def locate(self, row: int) -> tuple[int, BlockLayout, int]:
        """``(block, its layout, row within it)`` of global row ``row`` in the current epoch."""
        row = check_count(row, "row")
        if row >= self.num_rows:
            raise ValueError(f"row must be in [0, {self.num_rows}) (the epoch's rows), got {row}")
        visit = int(np.searchsorted(self._first_row, row, side="right")) - 1
        block = int(self._block_order[visit])
        if self._cache is None or self._cache[0] != block:
            layout = block_layout(self.lengths[self.block_docs(block)], self.fmt)
            if self.shuffle:  # rows of a block in a seeded order of the epoch
                layout = shuffle_rows(layout, epoch_rng(self.seed, 3, self._epoch, block))
            self._cache = (block, layout)
        return block, self._cache[1], row - int(self._first_row[visit])
