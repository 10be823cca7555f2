"""``PretrainingStream``: sources -> (mix) -> rows -> batches, sharded over ranks and workers.

The dataset a :class:`~hf_lmobj.ObjectiveTrainer` (or :class:`~hf_lmobj.data.loader.PipelineLoader`)
trains on. It yields *collated batches* of exactly ``batch_size`` rows (the last step of an epoch
may hold fewer), each made by the objective's collator from the rows of
:mod:`hf_lmobj.data.block_rows` (packed rows for causal, pieces for masked / span), so the collator never
re-packs and memory per step is what ``per_device_train_batch_size`` says.

Two regimes, chosen by the sources:

* **planned** (one random-access source: a token store or a tokenized in-memory ``Dataset``): the
  epoch is planned from document lengths (:class:`~hf_lmobj.data.planned.EpochPlan`); global step
  ``s`` is the same rows on any world size and any number of workers; every rank runs
  ``steps_per_epoch()`` steps; each row is trained once per epoch. Worker ``w`` of ``n`` makes the
  steps ``s = w (mod n)``, which the ``DataLoader`` returns in order.
* **streamed** (a text stream, or a mixture of sources): each (rank, worker) unit reads its own
  disjoint slice (:class:`~hf_lmobj.data.streamed.UnitReader`); the epoch's length is unknown, so
  the ranks agree on its end step by step (:class:`~hf_lmobj.data.loader.PipelineLoader`).

A rank with no row left in a step that others still train gets a *ghost batch*: a real batch with
every target ignored (-100), so all ranks step together and no row is trained twice.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import torch

from hf_lmobj.checks import check_count, check_length
from hf_lmobj.constants import IGNORE_INDEX
from hf_lmobj.data.block_rows import RowFormat, row_feature
from hf_lmobj.data.planned import EpochPlan
from hf_lmobj.data.random_access import DatasetSource, RandomAccessSource, is_random_access
from hf_lmobj.data.sources import TextStream, check_unit
from hf_lmobj.data.streamed import UnitReader
from hf_lmobj.held_out import LEFT_OUT
from hf_lmobj.store.tokenizer_fingerprint import tokenizer_fingerprint

#: Batch keys holding training targets; a ghost batch sets them all to -100.
TARGET_KEYS = ("labels", "shift_labels")


def as_arrays(batch: dict[str, Any]) -> dict[str, Any]:
    """Tensors of ``batch`` as numpy arrays (no copy); other values as they are."""
    return {k: v.numpy() if isinstance(v, torch.Tensor) else v for k, v in batch.items()}


def as_tensors(batch: dict[str, Any]) -> dict[str, Any]:
    """Numpy arrays of ``batch`` as tensors (no copy); other values as they are."""
    return {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v for k, v in batch.items()}


def ghost_batch(batch: dict[str, Any]) -> dict[str, Any]:
    """``batch`` with every target ignored: the model runs, nothing is trained, no gradient added.

    A batch without a target tensor (``labels`` / ``shift_labels``) is refused: its ghost would train.
    """
    if not isinstance(batch, Mapping):
        raise TypeError(f"batch must be a dict of tensors (a collator's output), got {type(batch).__name__}")
    if not any(isinstance(batch.get(key), torch.Tensor) for key in TARGET_KEYS):
        raise ValueError(
            f"the batch has no target tensor ({' / '.join(TARGET_KEYS)}; keys: {sorted(batch)}), so a ghost batch of "
            "it would still train; use a collator that returns labels"
        )
    ghost = dict(batch)
    for key in TARGET_KEYS:
        if isinstance(ghost.get(key), torch.Tensor):
            ghost[key] = torch.full_like(ghost[key], IGNORE_INDEX)
    return ghost


class PretrainingStream(torch.utils.data.IterableDataset):
    """Collated batches of one rank from ``sources`` (see the module docstring).

    Args:
        sources: a list of random-access sources (``DatasetSource`` or a tokenized ``datasets.Dataset``,
            ``TokenStore``) and / or ``TextStream`` s; a random-access source needs at least one token.
        row_format: ``RowFormat("packed", max_length)`` (causal) or ``RowFormat("pieces", n)``.
        collator: the objective's collator, called on each batch's row features.
        batch_size: rows per batch (``per_device_train_batch_size``), >= 1.
        weights: share of the tokens of each source (several sources): finite, > 0; normalized.
        names: what logs call each source (default ``source0``, ``source1``, ...), each its own name.
        seed: orders documents and blocks, an int in ``[0, 2**32)``; the collator's own seed keys its
            masks / noise.
        shuffle: shuffle documents (once) and blocks (each epoch); False keeps the sources' order.
        block_documents: documents laid out together (larger packs tighter, holds more in memory), >= 1.

    Every argument is checked here (a string ``shuffle``, a float seed, duplicate names, an empty
    source are refused by name); an epoch of streams that yields no row at all is refused by the loader.

    Example:
        >>> import datasets
        >>> from hf_lmobj.corpus import build_tokenizer
        >>> from hf_lmobj import DataCollatorForCausalLM
        >>> tok = build_tokenizer(vocab_size=512, max_documents=20)
        >>> docs = datasets.Dataset.from_dict({"input_ids": [[5, 6, 7], [8, 9], [10, 11, 12, 13]]})
        >>> collator = DataCollatorForCausalLM(tok, max_length=4, packing=True)
        >>> stream = PretrainingStream([DatasetSource(docs)], RowFormat("packed", 4), collator, batch_size=2, shuffle=False)
        >>> len(stream), stream.steps_per_epoch()
        (3, 2)
        >>> [item["batch"]["input_ids"].shape[0] for item in stream]
        [2, 1]
    """

    def __init__(
        self,
        sources: Sequence[Any],
        row_format: RowFormat,
        collator: Callable[[list[dict[str, Any]]], dict[str, Any]],
        batch_size: int,
        *,
        weights: Sequence[float] | None = None,
        names: Sequence[str] | None = None,
        seed: int = 0,
        shuffle: bool = True,
        block_documents: int = 1000,
    ) -> None:
        sources = _check_sources(sources)
        if not isinstance(row_format, RowFormat):
            raise TypeError(f"row_format must be a RowFormat (e.g. RowFormat('packed', 512)), got {row_format!r}")
        reader = self.reader = UnitReader(sources, row_format, weights, block_documents, seed, shuffle, names)
        self.names, self.weights, self.block_documents = reader.names, reader.weights, reader.block_documents
        self.seed, self.shuffle, self.sources = reader.seed, reader.shuffle, reader.sources
        for name, source in zip(self.names, sources):
            _check_not_empty(source, name)
        if not callable(collator):
            raise TypeError(f"collator must be callable (features -> batch), got {type(collator).__name__}")
        self.row_format, self.collator, self.batch_size = row_format, collator, check_length(batch_size, "batch_size")
        self.rank, self.world_size, self.epoch, self.start_step = 0, 1, 0, 0
        self.resume_positions: dict[int, dict[str, Any]] = {}  # streamed: unit -> position to resume from
        self.plan = None
        if len(sources) == 1 and is_random_access(sources[0]):
            self.plan = EpochPlan(sources[0].lengths, row_format, self.block_documents, self.seed, self.shuffle)

    # ---- placement -------------------------------------------------------------------------
    @property
    def planned(self) -> bool:
        return self.plan is not None

    def shard(self, rank: int, world_size: int) -> PretrainingStream:
        """Read as rank ``rank`` of ``world_size`` (the trainer calls this before iterating)."""
        self.rank, self.world_size = check_unit(rank, world_size, "rank", "world_size")
        return self

    def set_epoch(self, epoch: int) -> None:
        self.epoch = check_count(epoch, "epoch")

    def __len__(self) -> int:
        if self.plan is None:
            raise TypeError("a streamed or mixed PretrainingStream has no length; set max_steps")
        return self.plan.num_rows

    def steps_per_epoch(self) -> int | None:
        """Steps every rank runs in one epoch (planned), or None (streamed: ends when the data does)."""
        return None if self.plan is None else self.plan.steps(self.batch_size, self.world_size)

    # ---- iteration -------------------------------------------------------------------------
    def __iter__(self) -> Iterator[dict[str, Any]]:
        info = torch.utils.data.get_worker_info()
        worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
        if hasattr(self.collator, "set_epoch"):
            self.collator.set_epoch(self.epoch)
        if self.plan is not None:
            items = self._planned_batches(worker, workers)
        else:
            items = self._streamed_batches(self.rank * workers + worker, self.world_size * workers)
        for item in items:  # a worker sends numpy arrays: pickled bytes cross processes faster than tensors
            yield item if info is None or "batch" not in item else {**item, "batch": as_arrays(item["batch"])}

    def _planned_batches(self, worker: int, workers: int) -> Iterator[dict[str, Any]]:
        plan, source = self.plan, self.sources[0]
        last = plan.num_rows - 1
        for step in range(self.start_step + worker, plan.steps(self.batch_size, self.world_size), workers):
            rows = plan.rows_of_step(step, self.rank, self.batch_size, self.world_size, self.epoch)
            features = [self._planned_row(source, row) for row in (rows or [last])]
            batch = self._collate(features)
            tokens = np.array([sum(len(f["input_ids"]) for f in features) if rows else 0], dtype=np.int64)
            yield {"step": step, "batch": batch if rows else ghost_batch(batch), "tokens": tokens}

    def _planned_row(self, source: Any, row: int) -> dict[str, Any]:
        """Row ``row``, reading only its chunks' tokens (not whole documents)."""
        block, layout, within = self.plan.locate(row)
        docs = self.plan.block_docs(block)
        read = lambda d, start, stop: source.document_slice(int(docs[d]), start, stop)
        return row_feature(layout, within, read, self.row_format)

    def _streamed_batches(self, unit: int, units: int) -> Iterator[dict[str, Any]]:
        """The unit's batches; each says whether it is the unit's ``last`` (the loader orders units by it)."""
        held = None
        for item in self._unit_batches(unit, units):
            if "batch" not in item:  # the documents left out after the unit's last row: its last batch counts them
                if held is not None:
                    held = {**held, "left_out": held["left_out"] + item["left_out"]}
                continue
            if held is not None:
                yield {**held, "last": False}
            held = item
        if held is not None:
            yield {**held, "last": True}
        else:  # no data at all (e.g. fewer shards than workers): say so, or the loader would wait for it
            yield {"unit": unit, "last": True, "empty": True}

    def _unit_batches(self, unit: int, units: int) -> Iterator[dict[str, Any]]:
        """Batches of the unit's rows with the tokens each source gave and the documents passed over (``left_out``,
        by :data:`~hf_lmobj.held_out.LEFT_OUT` reason) since the previous batch."""
        features: list[dict[str, Any]] = []
        tokens = np.zeros(len(self.sources), dtype=np.int64)
        left_out = np.zeros(len(LEFT_OUT), dtype=np.int64)
        start = self.resume_positions.get(unit)
        position = start
        for feature, by_source, position in self.reader.rows(unit, units, self.epoch, start, left_out):  # noqa: B007
            features.append(feature)
            tokens += by_source
            if len(features) == self.batch_size:
                yield {"batch": self._collate(features), "tokens": tokens, "left_out": left_out.copy(), "unit": unit,
                       "position": position}  # fmt: skip
                features, tokens, left_out[:] = [], np.zeros_like(tokens), 0
        if features:
            yield {"batch": self._collate(features), "tokens": tokens, "left_out": left_out.copy(), "unit": unit,
                   "position": position}  # fmt: skip
        elif left_out.any():
            yield {"left_out": left_out.copy()}

    def _collate(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        batch = self.collator(features)
        if not isinstance(batch, Mapping):
            raise TypeError(f"the collator must return a dict of tensors, {type(self.collator).__name__} returned "
                            f"{type(batch).__name__}")  # fmt: skip
        return batch

    def template_batch(self) -> dict[str, Any]:
        """A ghost batch of one real row, for a rank whose slice held no document at all."""
        first = next(iter(self.reader.rows(0, 1, self.epoch)), None)
        if first is None:
            raise ValueError(self.empty_message())
        return ghost_batch(self._collate([first[0]]))

    def empty_message(self) -> str:
        """Why an epoch gave no row at all: the sources' names and what to check."""
        names = ", ".join(repr(name) for name in self.names)
        return (
            f"the sources ({names}) gave no row in epoch {self.epoch}: every one is empty or holds only empty "
            "texts (an empty file or split?); give the pipeline at least one non-empty document"
        )

    def fingerprint(self) -> dict[str, Any]:
        """What the rows depend on: sources, weights, row format, block size, seed, shuffle."""
        return {
            "sources": [s.fingerprint() for s in self.sources],
            "names": self.names,
            "weights": None if self.weights is None else [round(float(w), 12) for w in self.weights],
            "rows": [self.row_format.kind, self.row_format.max_length],
            "block_documents": self.block_documents,
            "seed": self.seed,
            "shuffle": self.shuffle,
            "collator": _describe(self.collator),
        }


def _describe(collator: Any) -> str:
    """The collator's class and settings (its dataclass fields), without the tokenizer object."""
    import dataclasses

    if dataclasses.is_dataclass(collator):
        fields = {f.name: getattr(collator, f.name) for f in dataclasses.fields(collator) if f.init}
        tokenizer = getattr(collator, "tokenizer", None)
        fields["tokenizer"] = None if tokenizer is None else tokenizer_fingerprint(tokenizer)  # content, not path
        return f"{type(collator).__name__}({sorted((k, repr(v)) for k, v in fields.items())})"
    return type(collator).__name__


def _check_sources(sources: Any) -> list[Any]:
    """A list of sources, each a ``TextStream`` or random-access (a ``datasets.Dataset`` becomes a ``DatasetSource``)."""
    import datasets

    single = (str, bytes, Mapping, datasets.Dataset, datasets.IterableDataset, TextStream, DatasetSource)
    if isinstance(sources, single) or not isinstance(sources, Sequence):
        raise TypeError(
            f"sources must be a list of sources, got {type(sources).__name__}; wrap one in a list: [source]"
        )
    checked = [DatasetSource(s) if isinstance(s, datasets.Dataset) else s for s in sources]
    if not checked:
        raise ValueError("sources is empty; give at least one source")
    for i, source in enumerate(checked):
        if isinstance(source, datasets.IterableDataset):
            raise TypeError(f"sources[{i}] is a streamed IterableDataset; wrap it: TextStream(dataset, tokenizer)")
        if not isinstance(source, (TextStream, RandomAccessSource)):
            raise TypeError(
                f"sources[{i}] must be a TextStream, a DatasetSource / tokenized datasets.Dataset or a TokenStore, "
                f"got {type(source).__name__}"
            )
    return checked


def _check_not_empty(source: Any, name: str) -> None:
    """A random-access source with no document, or only empty ones, is refused by name (0 steps otherwise)."""
    if isinstance(source, TextStream):
        return  # a stream's size is known once read (the loader refuses an epoch that gave no row)
    lengths = np.asarray(source.lengths)
    if lengths.size == 0 or int(lengths.sum()) == 0:
        raise ValueError(
            f"source {name!r} holds no token ({lengths.size} documents, all empty); it would train 0 steps; "
            "give it at least one non-empty document"
        )
