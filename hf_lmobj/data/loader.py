"""``PipelineLoader``: the ``DataLoader`` over a :class:`~hf_lmobj.data.pipeline.PretrainingStream`.

It runs the stream in ``num_workers`` worker processes (each makes whole batches), unwraps the
batches in step order and keeps the ranks in step: a planned stream has the same number of steps
on every rank by construction (``len(loader)``); for a streamed one the ranks agree at each step
whether any of them still has data (one all-reduce of a flag), and a rank that has run out trains
ghost batches (every target -100) until all have, so no rank stops early and nothing is repeated.
It also counts the tokens each source gave (``tokens_by_source``), for the logs and the card.

Not passed through ``accelerator.prepare``: accelerate would dispatch or re-shard batches that are
already this rank's own; the Trainer moves them to the device.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Iterator
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader

from hf_lmobj.checks import check_count, check_flag, check_length
from hf_lmobj.data.pipeline import PretrainingStream, as_tensors, ghost_batch
from hf_lmobj.held_out import LEFT_OUT


def _identity(item: Any) -> Any:
    return item


class PipelineLoader:
    """Batches of ``stream`` for this rank, in step order, ranks kept in step (see the module docstring).

    ``num_workers`` is an int >= 0, ``pin_memory`` / ``persistent_workers`` bools, ``prefetch_factor``
    None or an int >= 1, ``multiprocessing_context`` None, a start method's name or a context. An epoch
    in which no rank gets a single row (every source empty) is refused by the sources' names.

    Example:
        >>> import datasets
        >>> from hf_lmobj.corpus import build_tokenizer
        >>> from hf_lmobj import DataCollatorForCausalLM
        >>> from hf_lmobj.data import DatasetSource, PretrainingStream, RowFormat
        >>> tok = build_tokenizer(vocab_size=512, max_documents=20)
        >>> docs = datasets.Dataset.from_dict({"input_ids": [[5, 6, 7], [8, 9], [10, 11, 12, 13]]})
        >>> stream = PretrainingStream([docs], RowFormat("packed", 4), DataCollatorForCausalLM(tok, max_length=4),
        ...                            batch_size=2, shuffle=False)
        >>> loader = PipelineLoader(stream)
        >>> len(loader), [batch["input_ids"].shape[0] for batch in loader], loader.tokens_by_source.tolist()
        (2, [2, 1], [9])
    """

    def __init__(
        self,
        stream: PretrainingStream,
        num_workers: int = 0,
        pin_memory: bool = False,
        prefetch_factor: int | None = None,
        persistent_workers: bool = False,
        multiprocessing_context: Any = None,
    ) -> None:
        if not isinstance(stream, PretrainingStream):
            raise TypeError(f"PipelineLoader takes a PretrainingStream, got {type(stream).__name__}")
        self.dataset = stream
        self.num_workers = check_count(num_workers, "num_workers", fix="0 reads in the main process")
        pin_memory = check_flag(pin_memory, "pin_memory")
        persistent_workers = check_flag(persistent_workers, "persistent_workers")
        prefetch_factor = check_length(prefetch_factor, "prefetch_factor", optional=True)
        if isinstance(multiprocessing_context, str) and multiprocessing_context not in _START_METHODS:
            raise ValueError(
                f"multiprocessing_context must be one of {_START_METHODS} (or a context, or None), "
                f"got {multiprocessing_context!r}"
            )
        self._loader_kwargs = {
            "batch_size": None,
            "num_workers": self.num_workers,
            "collate_fn": _identity,
            "pin_memory": pin_memory,
            "prefetch_factor": prefetch_factor if self.num_workers else None,
            "persistent_workers": persistent_workers and self.num_workers > 0,
            "multiprocessing_context": multiprocessing_context if self.num_workers else None,
        }
        self.tokens_by_source = np.zeros(len(stream.sources), dtype=np.int64)
        self.left_out = np.zeros(len(LEFT_OUT), dtype=np.int64)  # streamed documents passed over, by LEFT_OUT reason
        self.batches_seen = 0
        self.batches_in_epoch = 0  # this rank's batches of the current epoch, ghosts included
        self._positions: dict[int, dict[str, Any]] = {}  # streamed: unit -> position after its last batch
        self._next_unit: int | None = None  # streamed: the unit whose batch comes next
        self._exhausted: set[int] = set()  # streamed: units that gave their last batch this epoch
        self._resumed_batches: int | None = None
        self._pending_epoch: int | None = None

    @property
    def batch_size(self) -> int:
        return self.dataset.batch_size

    def __len__(self) -> int:
        steps = self.dataset.steps_per_epoch()
        if steps is None:
            raise TypeError("a streamed PipelineLoader has no length (the data decides when the epoch ends)")
        return steps

    def set_epoch(self, epoch: int) -> None:
        epoch = check_count(epoch, "epoch")
        if self._pending_epoch is not None:  # a resumed stream continues its own epoch count
            self._epoch_offset = self._pending_epoch - epoch
            self._pending_epoch = None
        self.dataset.set_epoch(epoch + getattr(self, "_epoch_offset", 0))

    # ---- state -------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """This rank's data position (JSON-serializable): restoring it resumes without replaying data."""
        stream = self.dataset
        state = {
            "regime": "planned" if stream.planned else "streamed",
            "epoch": stream.epoch,
            "batches_in_epoch": self.batches_in_epoch,
            "batch_size": stream.batch_size,
            "world_size": stream.world_size,
            "rank": stream.rank,
            "workers": self.num_workers,
            "tokens_by_source": self.tokens_by_source.tolist(),
            "left_out": self.left_out.tolist(),
        }
        if not stream.planned:
            state["units"] = {str(unit): position for unit, position in sorted(self._positions.items())}
            state["next_unit"], state["exhausted"] = self._next_unit, sorted(self._exhausted)
        return state

    def resume(self, states: list[dict[str, Any]], batches_in_epoch: int) -> PipelineLoader:
        """Continue from every rank's saved ``states`` at this rank's batch ``batches_in_epoch`` of the epoch.

        Planned: any world size, as long as the rows already trained are a whole number of this
        run's global batches (``batch_size x world_size``). Streamed: the same world size and workers.
        Raises ``ValueError`` naming what changed, or what the saved states lack.
        """
        stream = self.dataset
        batches_in_epoch = check_count(batches_in_epoch, "batches_in_epoch")
        _check_states(states, stream)
        first = states[0]
        if first["regime"] != ("planned" if stream.planned else "streamed"):
            raise ValueError(f"the checkpoint's data was {first['regime']}, this run's is not; resume the same data")
        if stream.planned:
            rows_done = first["batches_in_epoch"] * first["batch_size"] * first["world_size"]
            if rows_done != batches_in_epoch * stream.batch_size * stream.world_size:
                raise ValueError(
                    f"the checkpoint trained {rows_done} rows of this epoch ({first['batches_in_epoch']} steps of "
                    f"{first['batch_size']} rows x {first['world_size']} processes), which is not "
                    f"{batches_in_epoch} steps of {stream.batch_size} x {stream.world_size}; keep "
                    "per_device_train_batch_size x gradient_accumulation_steps x world_size unchanged"
                )
            stream.start_step = batches_in_epoch
        else:
            if (first["world_size"], first["workers"]) != (stream.world_size, self.num_workers):
                raise ValueError(
                    f"a streamed source resumes on the same processes and workers: the checkpoint had "
                    f"{first['world_size']} x {first['workers']}, this run {stream.world_size} x {self.num_workers}; "
                    "for elastic runs tokenize the corpus into a token store (recipes/tokenize_corpus.py)"
                )
            mine = states[stream.rank]
            stream.resume_positions = {int(unit): position for unit, position in mine["units"].items()}
            self._positions = dict(stream.resume_positions)
            self._next_unit, self._exhausted = mine["next_unit"], set(mine["exhausted"])
            batches_in_epoch = mine["batches_in_epoch"]
            self._pending_epoch = mine["epoch"]
        totals = np.sum([s["tokens_by_source"] for s in states], axis=0).astype(np.int64)
        self.tokens_by_source = totals if stream.rank == 0 else np.zeros_like(totals)
        left_out = np.sum([s["left_out"] for s in states], axis=0).astype(np.int64)
        self.left_out = left_out if stream.rank == 0 else np.zeros_like(left_out)
        self._resumed_batches = batches_in_epoch
        return self

    # ---- iteration ---------------------------------------------------------------------------
    def __iter__(self) -> Iterator[dict[str, Any]]:
        resumed, self._resumed_batches = self._resumed_batches, None
        self.batches_in_epoch = resumed or 0
        if resumed is None:
            self.dataset.start_step, self.dataset.resume_positions, self._positions = 0, {}, {}
            self._next_unit, self._exhausted = None, set()
        items = self._items() if self.dataset.planned or self.num_workers < 2 else self._in_unit_order(self._items())
        if self.dataset.planned or self.dataset.world_size == 1:
            yield from (self._take(item) for item in items)
            if resumed is None and self.batches_in_epoch == 0:  # a fresh epoch with no row: nothing would train
                raise ValueError(self.dataset.empty_message())
        else:
            yield from self._in_step(items, fresh=resumed is None)

    def _items(self) -> Iterator[dict[str, Any]]:
        expected = self.dataset.start_step
        for item in DataLoader(self.dataset, **self._loader_kwargs):
            if item.get("empty") and self.num_workers < 2:
                continue  # a unit without data (ordered runs read this flag in _in_unit_order)
            if self.dataset.planned:  # workers must come back in step order
                if item["step"] != expected:
                    raise RuntimeError(f"expected step {expected} from the workers, got {item['step']}")
                expected += 1
            yield item

    def _in_unit_order(self, items: Iterator[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        """Streamed with several workers: the units' batches in turn, from ``_next_unit``, whatever order
        the workers deliver them in (a resumed run restarts its workers at worker 0); a unit that gave
        its ``last`` batch leaves the turn. At most one batch per unit waits here."""
        rank, workers = self.dataset.rank, self.num_workers
        units = [rank * workers + worker for worker in range(workers)]
        turn = units.index(self._next_unit) if self._next_unit in units else 0
        waiting: dict[int, list[dict[str, Any]]] = {unit: [] for unit in units}
        while len(self._exhausted) < len(units):
            unit = units[turn % workers]
            turn += 1
            if unit in self._exhausted:
                continue
            while not waiting[unit]:
                item = next(items, None)
                if item is None:
                    break
                waiting[item["unit"]].append(item)
            if not waiting[unit]:  # its worker ended without a last batch (it had no data)
                self._exhausted.add(unit)
                continue
            item = waiting[unit].pop(0)
            if item["last"]:
                self._exhausted.add(unit)
            if item.get("empty"):
                continue
            self._next_unit = units[turn % workers]
            yield item

    def _take(self, item: dict[str, Any]) -> dict[str, Any]:
        self.tokens_by_source += item["tokens"]
        if "left_out" in item:
            self.left_out += item["left_out"]
        self.batches_seen += 1
        self.batches_in_epoch += 1
        if "unit" in item:
            self._positions[item["unit"]] = item["position"]
        return as_tensors(item["batch"])

    def _in_step(self, items: Iterator[dict[str, Any]], fresh: bool) -> Iterator[dict[str, Any]]:
        """Streamed on several ranks: stop when every rank is out of data, ghosts until then.

        A ``fresh`` (not resumed) epoch in which no rank has a first batch raises on every rank at once.
        """
        last = None
        while True:
            item = next(items, None)
            if not _any_rank(item is not None):
                if fresh and self.batches_in_epoch == 0:
                    raise ValueError(self.dataset.empty_message())
                return
            if item is not None:
                last = self._take(item)
                yield last
            else:
                self.batches_in_epoch += 1
                yield ghost_batch(last if last is not None else self.dataset.template_batch())


_START_METHODS = tuple(multiprocessing.get_all_start_methods())

#: What every rank's saved data state holds (``state_dict``); a streamed one also its units' positions.
_STATE_KEYS = ("regime", "epoch", "batches_in_epoch", "batch_size", "world_size", "rank", "workers",
               "tokens_by_source", "left_out")  # fmt: skip
_STREAMED_KEYS = ("units", "next_unit", "exhausted")
_STATE_FIX = "resume from another checkpoint (or start afresh)"


def _check_states(states: Any, stream: PretrainingStream) -> None:
    """Every rank's saved state: a dict with the keys of ``state_dict``, one per rank of the checkpoint."""
    if not isinstance(states, (list, tuple)) or not states:
        raise ValueError(f"the data states must be a non-empty list (one per rank), got {states!r:.80}; {_STATE_FIX}")
    for rank, state in enumerate(states):
        if not isinstance(state, dict):
            raise ValueError(f"the data state of rank {rank} is a {type(state).__name__}, not a dict; {_STATE_FIX}")
        needed = _STATE_KEYS + (_STREAMED_KEYS if state.get("regime") == "streamed" else ())
        missing = [key for key in needed if key not in state]
        if missing:
            raise ValueError(f"the data state of rank {rank} has no {', '.join(map(repr, missing))}; {_STATE_FIX}")
        if state["regime"] not in ("planned", "streamed"):
            raise ValueError(f"the data state of rank {rank} has regime {state['regime']!r}; {_STATE_FIX}")
        counts = state["tokens_by_source"]
        if not isinstance(counts, list) or len(counts) != len(stream.sources):
            raise ValueError(
                f"the data state of rank {rank} counts tokens of {len(counts) if isinstance(counts, list) else '?'} "
                f"sources, this run has {len(stream.sources)}; resume with the same sources"
            )
        left_out = state["left_out"]
        if not isinstance(left_out, list) or len(left_out) != len(LEFT_OUT):
            raise ValueError(f"the data state of rank {rank} counts {left_out!r:.60} documents left out, not one count "
                             f"per reason {LEFT_OUT}; {_STATE_FIX}")  # fmt: skip
        for key in ("epoch", "batches_in_epoch", "rank", "workers"):
            check_count(state[key], f"the data state of rank {rank}: {key}")
        for key in ("batch_size", "world_size"):
            check_count(state[key], f"the data state of rank {rank}: {key}", 1)
    if len(states) != states[0]["world_size"]:
        raise ValueError(
            f"the checkpoint holds {len(states)} data states for a world size of {states[0]['world_size']}; "
            f"{_STATE_FIX}"
        )


def _any_rank(flag: bool) -> bool:
    """True when ``flag`` is True on any rank of the default process group."""
    if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
        return flag
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else "cpu"
    value = torch.tensor([int(flag)], device=device)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return bool(value.item())
