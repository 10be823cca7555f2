"""The rows one (rank, worker) *unit* makes from its own slice of every source.

Used for streams and for mixtures (of streams or random-access sources). Unit ``u`` of ``U`` reads
a disjoint slice of each source (together the units read every document once per pass), mixes
the documents by tokens (:class:`~hf_lmobj.data.mixture.TokenMixer`), lays every
``block_documents`` of them out into rows and yields the rows in order. One source: the epoch ends
with the source (the last block may be short). Several: a source that runs out starts its next
pass, so the mixture never ends (train it for ``max_steps``).

Example:
    >>> from hf_lmobj.data.rows import RowFormat
    >>> from hf_lmobj.data.sources import DatasetSource
    >>> import datasets
    >>> source = DatasetSource(datasets.Dataset.from_dict({"input_ids": [[1, 2, 3], [4, 5], [6, 7, 8, 9]]}))
    >>> reader = UnitReader([source], RowFormat("packed", 5), shuffle=False)
    >>> [row["input_ids"] for row, _ in reader.rows(unit=0, num_units=2, epoch=0)]
    [[6, 7, 8, 9], [1, 2, 3]]
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hf_lmobj.data.mixture import TokenMixer
from hf_lmobj.data.planned import epoch_rng
from hf_lmobj.data.rows import RowFormat, block_layout, row_feature, shuffle_rows
from hf_lmobj.data.sources import TextStream

__all__ = ["UnitReader"]


@dataclass
class UnitReader:
    """Rows of one unit's slice of ``sources`` (see the module docstring)."""

    sources: Sequence[Any]
    fmt: RowFormat
    weights: Sequence[float] | None = None  # normalized, one per source; None for one source
    block_documents: int = 1000
    seed: int = 0
    shuffle: bool = True

    def documents(self, source_index: int, unit: int, num_units: int, pass_: int) -> Iterator[np.ndarray]:
        """Token ids of the unit's documents of one source in pass ``pass_``."""
        source = self.sources[source_index]
        if isinstance(source, TextStream):
            yield from source.iter_documents(source.unit_slice(unit, num_units, epoch=pass_))
            return
        count = source.lengths.size
        rng = epoch_rng(self.seed, 2, source_index, pass_)
        order = rng.permutation(count) if self.shuffle else np.arange(count)
        for index in order[unit::num_units].tolist():
            yield source.document(index)

    def _mixed(self, unit: int, num_units: int, epoch: int) -> Iterator[tuple[int, np.ndarray]]:
        """``(source, document)`` pairs of the unit, mixed by tokens."""
        if len(self.sources) == 1:
            for doc in self.documents(0, unit, num_units, epoch):
                yield 0, doc
            return
        mixer = TokenMixer(self.weights)
        passes = [0] * len(self.sources)
        streams = [self.documents(i, unit, num_units, 0) for i in range(len(self.sources))]
        while True:
            i = mixer.choose()
            doc = next(streams[i], None)
            if doc is None:  # this source's pass is over: start the next one
                passes[i] += 1
                streams[i] = self.documents(i, unit, num_units, passes[i])
                doc = next(streams[i], None)
                if doc is None:
                    raise ValueError(
                        f"source {i} has no document for unit {unit} of {num_units} (processes x workers); "
                        "give it at least as many documents (or shards) as units"
                    )
            mixer.add(i, int(doc.size))
            yield i, doc

    def rows(self, unit: int, num_units: int, epoch: int) -> Iterator[tuple[dict[str, Any], np.ndarray]]:
        """``(feature, tokens per source)`` of each row the unit makes, in order."""
        docs: list[np.ndarray] = []
        owners: list[int] = []
        block = 0
        for owner, doc in self._mixed(unit, num_units, epoch):
            docs.append(doc)
            owners.append(owner)
            if len(docs) == self.block_documents:
                yield from self._block_rows(docs, owners, (unit, num_units, epoch, block))
                docs, owners, block = [], [], block + 1
        if docs:
            yield from self._block_rows(docs, owners, (unit, num_units, epoch, block))

    def _block_rows(
        self, docs: list[np.ndarray], owners: list[int], key: tuple[int, ...]
    ) -> Iterator[tuple[dict[str, Any], np.ndarray]]:
        layout = block_layout(np.array([d.size for d in docs], dtype=np.int64), self.fmt)
        if self.shuffle:  # rows of a block in a seeded order (best-fit emits them document by document)
            layout = shuffle_rows(layout, epoch_rng(self.seed, 4, *key))
        chunk_owner = np.asarray(owners, dtype=np.int64)[layout.chunk_doc]  # (C,)
        for row in range(layout.num_rows):
            first, last = int(layout.row_offsets[row]), int(layout.row_offsets[row + 1])
            by_source = np.bincount(
                chunk_owner[first:last], weights=layout.chunk_len[first:last], minlength=len(self.sources)
            )
            yield row_feature(layout, row, docs, self.fmt), by_source.astype(np.int64)
