"""The rows one (rank, worker) *unit* makes from its own slice of every source, resumable.

Used for streams and for mixtures (of streams or random-access sources). Unit ``u`` of ``U`` reads
a disjoint slice of each source (together the units read every document once per pass), mixes
the documents by tokens (:class:`~hf_lmobj.data.mixture.TokenMixer`), lays every
``block_documents`` of them out into rows and yields the rows in order. One source: the epoch ends
with the source (the last block may be short). Several: a source that runs out starts its next
pass, so the mixture never ends (train it for ``max_steps``).

Every row comes with the unit's *position after it*: where each source's next document starts at
the beginning of the current block (a random-access slice's index; a stream's ``datasets``
``state_dict()`` before the tokenized batch and the documents of it already taken), the mixer's
counts, and the rows of the block already emitted. Resuming from a position re-reads one block at
most, whatever the step: no replay of the data before it.

Example:
    >>> from hf_lmobj.data.block_rows import RowFormat
    >>> from hf_lmobj.data.random_access import DatasetSource
    >>> import datasets
    >>> source = DatasetSource(datasets.Dataset.from_dict({"input_ids": [[1, 2, 3], [4, 5], [6, 7, 8, 9]]}))
    >>> reader = UnitReader([source], RowFormat("packed", 5), shuffle=False)
    >>> [row["input_ids"].tolist() for row, _, _ in reader.rows(unit=0, num_units=2, epoch=0)]
    [[6, 7, 8, 9], [1, 2, 3]]
"""

from __future__ import annotations

import copy
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hf_lmobj.checks import check_count, check_flag, check_length, check_seed, check_unique_names
from hf_lmobj.data.block_rows import RowFormat, block_layout, row_feature, shuffle_rows
from hf_lmobj.data.mixture import TokenMixer, normalized_weights
from hf_lmobj.data.planned import epoch_rng
from hf_lmobj.data.sources import TextStream, check_unit
from hf_lmobj.held_out import LEFT_OUT


class SourceCursor:
    """One unit's documents of one source, pass by pass; ``position()`` is where the next one starts."""

    def __init__(self, reader: UnitReader, index: int, unit: int, num_units: int, position: dict | None) -> None:
        self.reader, self.index, self.unit, self.num_units = reader, index, unit, num_units
        self.source = reader.sources[index]
        position = _check_cursor_position(position, reader.names[index])
        self.left_out = np.zeros(len(LEFT_OUT), dtype=np.int64)  # documents passed over, by reason (LEFT_OUT)
        self._open(position["pass"], position["state"], position["taken"])

    def _open(self, pass_: int, state: Any, taken: int) -> None:
        self.pass_, self.state, self.taken = pass_, state, taken
        self._batch: list[np.ndarray | str] = []  # a stream's tokenized batch; a word where a text was left out
        if isinstance(self.source, TextStream):
            self._examples = self.source.unit_slice(self.unit, self.num_units, epoch=pass_)
            if state is not None:
                self._examples.load_state_dict(state)
            self._iterator = iter(self._examples)
            self._read = 0  # rows read in this pass since the position opened (numbers rows in errors)
            self._refill(skip=taken)
        else:
            count = self.source.lengths.size
            order = epoch_rng(self.reader.seed, 2, self.index, pass_).permutation(count)
            self._order = (order if self.reader.shuffle else np.arange(count))[self.unit :: self.num_units]

    def _refill(self, skip: int = 0) -> None:
        """Tokenize the stream's next batch of texts (``state`` = the stream's position before it)."""
        self.state = self._examples.state_dict()
        texts = self.source.read_texts(self._iterator, self.source.batch_size, self._examples, self._read)
        self._read += len(texts)
        self.taken = skip
        self._batch = self.source.documents_or_reasons(texts)[skip:] if texts else []

    def next(self) -> np.ndarray | None:
        """The next document of this pass, or None when the pass is over."""
        if isinstance(self.source, TextStream):
            while True:
                if not self._batch:
                    self._refill()
                    if not self._batch:
                        return None
                self.taken += 1
                doc = self._batch.pop(0)
                if not isinstance(doc, str):
                    return doc
                self.left_out[LEFT_OUT.index(doc)] += 1
        if self.taken >= self._order.size:
            return None
        self.taken += 1
        return self.source.document(int(self._order[self.taken - 1]))

    def next_pass(self) -> None:
        self._open(self.pass_ + 1, None, 0)

    def position(self) -> dict[str, Any]:
        """Where the next document starts (JSON-serializable).

        A stream whose tokenized batch is used up points after that batch (a resume tokenizes
        nothing it would throw away).
        """
        if isinstance(self.source, TextStream) and not self._batch:
            return {"pass": self.pass_, "state": copy.deepcopy(self._examples.state_dict()), "taken": 0}
        return {"pass": self.pass_, "state": copy.deepcopy(self.state), "taken": self.taken}


@dataclass
class UnitReader:
    """Rows of one unit's slice of ``sources`` (see the module docstring).

    ``weights`` (several sources) are each source's share of the tokens, finite and > 0; ``names``
    (default ``source0``, ``source1``, ...) name the sources in errors.
    """

    sources: Sequence[Any]
    fmt: RowFormat
    weights: Sequence[float] | None = None  # one per source (normalized here); None for one source
    block_documents: int = 1000
    seed: int = 0
    shuffle: bool = True
    names: Sequence[str] | None = None

    def __post_init__(self) -> None:
        if isinstance(self.sources, (str, bytes, TextStream)) or not isinstance(self.sources, Sequence):
            raise TypeError(f"sources must be a list of sources, got {type(self.sources).__name__}")
        if not self.sources:
            raise ValueError("sources is empty; give at least one source")
        if not isinstance(self.fmt, RowFormat):
            raise TypeError(f"fmt must be a RowFormat, got {type(self.fmt).__name__}")
        count = len(self.sources)
        names = [f"source{i}" for i in range(count)] if self.names is None else self.names
        self.names = check_unique_names(names, "names")
        if len(self.names) != count:
            raise ValueError(f"got {len(self.names)} names for {count} sources; give one name per source")
        if self.weights is not None:
            self.weights = normalized_weights(self.weights, self.names)
        elif count > 1:
            raise ValueError("several sources need weights (their share of the tokens), e.g. weights=[0.7, 0.3]")
        self.block_documents = check_length(self.block_documents, "block_documents")
        self.seed, self.shuffle = check_seed(self.seed), check_flag(self.shuffle, "shuffle")

    def _next_document(self, cursors: list[SourceCursor], mixer: TokenMixer | None, unit: int) -> tuple[int, Any]:
        """``(source, document)``; document None when the unit's single source is done."""
        if mixer is None:
            return 0, cursors[0].next()
        i = mixer.choose()
        doc = cursors[i].next()
        if doc is None:  # this source's pass is over: start the next one
            cursors[i].next_pass()
            doc = cursors[i].next()
            if doc is None:
                raise ValueError(
                    f"source {self.names[i]!r} has no document for unit {unit} of {cursors[i].num_units} "
                    "(processes x workers); give it at least as many documents (or shards) as units"
                )
        mixer.add(i, int(doc.size))
        return i, doc

    def rows(
        self, unit: int, num_units: int, epoch: int, position: dict | None = None, left_out: np.ndarray | None = None
    ) -> Iterator[tuple[dict[str, Any], np.ndarray, dict[str, Any]]]:
        """``(feature, tokens per source, position after it)`` of each row the unit makes, in order.

        ``position`` (from an earlier row) resumes right after that row. ``left_out`` (``(len(LEFT_OUT),)``
        int64), when given, gains the documents each block passed over (skipped or held out), counted once:
        before the block's first row, and not again for a block resumed after its first row.
        """
        unit, num_units = check_unit(unit, num_units)
        epoch = check_count(epoch, "epoch")
        start = _check_position(position, len(self.sources))
        start = start or {"cursors": [None] * len(self.sources), "taken": None, "block": 0, "row": 0}
        if len(self.sources) == 1 and start["cursors"][0] is None:
            start["cursors"][0] = {"pass": epoch, "state": None, "taken": 0}
        cursors = [SourceCursor(self, i, unit, num_units, p) for i, p in enumerate(start["cursors"])]
        mixer = None if len(self.sources) == 1 else TokenMixer(self.weights, start["taken"])
        block, skip = start["block"], start["row"]
        while True:
            at_start = {
                "cursors": [c.position() for c in cursors],
                "taken": None if mixer is None else mixer.taken.tolist(),
                "block": block,
            }
            docs, owners = [], []
            while len(docs) < self.block_documents:
                owner, doc = self._next_document(cursors, mixer, unit)
                if doc is None:
                    break
                docs.append(doc)
                owners.append(owner)
            if left_out is not None and skip == 0:
                left_out += sum(c.left_out for c in cursors)
            for c in cursors:
                c.left_out[:] = 0
            if not docs:
                return
            for row, (feature, by_source) in enumerate(self._block_rows(docs, owners, (unit, num_units, epoch, block))):
                if row >= skip:
                    yield feature, by_source, {**at_start, "row": row + 1}
            block, skip = block + 1, 0

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


_POSITION_FIX = "resume from a checkpoint written by this pipeline (or start afresh)"


def _check_position(position: Any, count: int) -> dict[str, Any] | None:
    """A unit's saved position: ``{"cursors": [one per source], "taken", "block", "row"}`` (a copy)."""
    if position is None:
        return None
    if not isinstance(position, dict) or any(key not in position for key in ("cursors", "taken", "block", "row")):
        raise ValueError(
            f"position must be a dict with 'cursors', 'taken', 'block' and 'row', got {position!r:.120}; {_POSITION_FIX}"
        )
    cursors, taken = position["cursors"], position["taken"]
    if not isinstance(cursors, list) or len(cursors) != count:
        raise ValueError(f"position['cursors'] must list one cursor per source ({count}), got {cursors!r:.120}")
    if taken is not None and (not isinstance(taken, list) or len(taken) != count):
        raise ValueError(f"position['taken'] must list the tokens taken from each of {count} sources, got {taken!r}")
    check_count(position["block"], "position['block']"), check_count(position["row"], "position['row']")
    return {**position, "cursors": list(cursors)}


def _check_cursor_position(position: Any, name: str) -> dict[str, Any]:
    """A source cursor's saved position ``{"pass", "state", "taken"}``; None starts the source afresh."""
    if position is None:
        return {"pass": 0, "state": None, "taken": 0}
    if not isinstance(position, dict) or any(key not in position for key in ("pass", "state", "taken")):
        raise ValueError(
            f"the position of source {name!r} must be a dict with 'pass', 'state' and 'taken', got {position!r:.120}; "
            f"{_POSITION_FIX}"
        )
    if position["state"] is not None and not isinstance(position["state"], dict):
        raise ValueError(f"the position of source {name!r} has a state that is not a dict; {_POSITION_FIX}")
    return {
        "pass": check_count(position["pass"], f"the position of source {name!r}: pass"),
        "state": position["state"],
        "taken": check_count(position["taken"], f"the position of source {name!r}: taken"),
    }
