"""What a Trainer needs to train on a ``PretrainingStream`` and resume it exactly (used by ObjectiveTrainer).

* :func:`pipeline_loader`: this rank's :class:`~hf_lmobj.data.PipelineLoader` (not accelerate's dispatcher);
* :func:`checked_resume`: the checkpoint a resume continues from, refused by name when it cannot be exact
  (missing optimizer / scheduler / trainer / data state, any state file cut short or corrupt, another data
  fingerprint), and its data state: all before ``Trainer.train`` opens a file;
* :func:`replay_free`: within one epoch, the Trainer's single ``skip_first_batches`` call repositions the
  loader from the data state in O(1) instead of replaying batches (the Trainer has no hook for it);
* :func:`finish_checkpoint`: after the stock save, every rank's data position, then the completion marker;
  old checkpoints rotate only after it, so a save cut short never costs the previous checkpoint;
* :func:`source_token_counts`: the tokens each source gave, summed over ranks;
* :func:`tensors_only`: a collator without non-tensor entries, for accelerate's batch dispatcher.

Example:
    >>> batch = tensors_only(lambda features: {"input_ids": torch.ones(1, 2), "use_cache": False})([{}])
    >>> sorted(batch)
    ['input_ids']
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

import torch
import transformers.trainer as hf_trainer
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, rotate_checkpoints

from hf_lmobj.data.loader import PipelineLoader
from hf_lmobj.data.pipeline import PretrainingStream
from hf_lmobj.held_out import LEFT_OUT
from hf_lmobj.trainer.checkpoints import (
    check_checkpoint,
    check_fingerprint,
    latest_complete_checkpoint,
    write_complete_marker,
    write_data_state,
)
from hf_lmobj.trainer.state_files import DATA_STATE_NAME, read_data_state


class _TensorsOnly:
    """A collator without its non-tensor entries (``use_cache``), which accelerate's dispatcher cannot send."""

    def __init__(self, collator: Callable[..., dict[str, Any]]) -> None:
        self.collator = collator

    def __call__(self, features: list[dict[str, Any]]) -> dict[str, Any]:
        return {k: v for k, v in self.collator(features).items() if isinstance(v, torch.Tensor)}


def tensors_only(collator: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    return collator if isinstance(collator, _TensorsOnly) else _TensorsOnly(collator)


def pipeline_loader(stream: PretrainingStream, args: Any, batch_size: int) -> PipelineLoader:
    """This rank's loader of ``stream`` with the ``TrainingArguments``' dataloader settings."""
    stream = stream.shard(args.process_index, args.world_size)
    if stream.batch_size != batch_size:
        raise ValueError(
            f"the PretrainingStream makes batches of {stream.batch_size} rows but per_device_train_batch_size "
            f"is {batch_size}; build the stream with batch_size={batch_size}"
        )
    return PipelineLoader(
        stream,
        num_workers=args.dataloader_num_workers,
        pin_memory=args.dataloader_pin_memory,
        prefetch_factor=args.dataloader_prefetch_factor,
        persistent_workers=args.dataloader_persistent_workers,
        multiprocessing_context=args.dataloader_multiprocessing_context,
    )


def data_fingerprint(stream: PretrainingStream, objective: str) -> dict[str, Any]:
    return {**stream.fingerprint(), "objective": objective}


def checked_resume(
    resume_from_checkpoint: str | bool | None, output_dir: str, fingerprint: dict[str, Any] | None, ignore: bool
) -> tuple[str | None, dict | None]:
    """``(checkpoint folder or None, its data state or None)``; ``True`` means the latest complete one.

    ``fingerprint`` is the run's data fingerprint when it trains on a ``PretrainingStream`` (None otherwise):
    the checkpoint must then hold a data state with the same one, unless ``ignore``. Every state file the
    Trainer will read is opened first (``check_checkpoint``): a damaged one is a ``ValueError`` naming it.
    """
    if resume_from_checkpoint is True:
        resume_from_checkpoint = latest_complete_checkpoint(output_dir)
        if resume_from_checkpoint is None:
            raise ValueError(f"resume_from_checkpoint=True: no complete checkpoint in {output_dir}")
    if not resume_from_checkpoint:
        return None, None
    folder = check_checkpoint(resume_from_checkpoint, needs_data_state=fingerprint is not None)
    if fingerprint is None:
        return str(folder), None
    state = read_data_state(folder)
    check_fingerprint(state["fingerprint"], fingerprint, ignore)
    return str(folder), state


@contextlib.contextmanager
def replay_free(take_state: Callable[[], dict | None]) -> Iterator[None]:
    """Within the block, ``skip_first_batches(loader, n)`` resumes a ``PipelineLoader`` from ``take_state()``."""
    stock = hf_trainer.skip_first_batches

    def reposition(loader, num_batches: int = 0):
        if not isinstance(loader, PipelineLoader):
            return stock(loader, num_batches)
        state = take_state()
        if state is None:
            raise ValueError(f"resuming {num_batches} batches into the epoch needs the checkpoint's {DATA_STATE_NAME}")
        return loader.resume(state["ranks"], num_batches)

    hf_trainer.skip_first_batches = reposition
    try:
        yield
    finally:
        hf_trainer.skip_first_batches = stock


def _gathered_states(loader: PipelineLoader | None, world_size: int) -> list[dict] | None:
    """Every rank's data position (collective), or None when the run reads no pipeline."""
    if loader is None:
        return None
    state = loader.state_dict()
    if world_size == 1:
        return [state]
    gathered: list[Any] = [None] * world_size
    torch.distributed.all_gather_object(gathered, state)
    return gathered


def finish_checkpoint(trainer: Any, trial: Any, save_total_limit: int | None, fingerprint: dict | None) -> None:
    """After the stock save (run with rotation off): data state, completion marker, then rotation."""
    run_dir = trainer._get_output_dir(trial=trial)
    folder = os.path.join(run_dir, f"{PREFIX_CHECKPOINT_DIR}-{trainer.state.global_step}")
    states = _gathered_states(trainer._pipeline_loader, trainer.args.world_size)
    if trainer.args.should_save:
        if states is not None:
            write_data_state(folder, states, fingerprint)
        write_complete_marker(folder, trainer.state.global_step, sorted(os.listdir(folder)))
        rotate_checkpoints(
            output_dir=run_dir,
            save_total_limit=save_total_limit,
            best_model_checkpoint=trainer.state.best_model_checkpoint,
            use_mtime=True,
        )
    trainer.accelerator.wait_for_everyone()


def source_token_counts(loader: PipelineLoader | None, accelerator: Any, args: Any) -> dict[str, int]:
    """``train_tokens_<source>``: tokens each source gave, and ``train_<reason>_documents``: the streamed documents
    passed over (skipped as empty, whitespace or one token; held out), when any; summed over ranks (a collective:
    every rank)."""
    if loader is None:
        return {}
    counts = torch.as_tensor([*loader.tokens_by_source.tolist(), *loader.left_out.tolist()], dtype=torch.float64)
    if args.world_size > 1:
        counts = accelerator.reduce(counts.to(args.device), reduction="sum").cpu()
    values = [int(count) for count in counts.tolist()]
    names = loader.dataset.names
    found = {f"train_tokens_{name}": count for name, count in zip(names, values)}
    left_out = {f"train_{reason}_documents": count for reason, count in zip(LEFT_OUT, values[len(names) :]) if count}
    return {**found, **left_out}
