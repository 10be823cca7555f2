"""One SGD step with ObjectiveTrainer on the tiny models and hand-built batches of tests/testing_utils.py.

Run on N ranks (``tests.distributed.run_ranks(save_updates, N, OUT.pt, OBJECTIVES, parameter_update)``, as the
tests do, or ``torchrun --nproc_per_node N tests/scripts/distributed_step.py OUT.pt``) it trains one step per
objective with ``per_device_train_batch_size=8 // (N * 2)`` and gradient accumulation 2, and
process 0 saves each model's parameter update to ``OUT.pt``.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: the clone's root, for tests.testing_utils
from tests.testing_utils import NUM_ROWS, OBJECTIVES, build_model, build_rows, flat_parameters, stack_rows  # noqa: E402


def exit_when_every_rank_is_done() -> None:
    """End a torchrun test process: barrier, flush, ``os._exit(0)``, skipping the interpreter's teardown.

    Every result is on disk by then. A gloo group freed late, by a ``DeviceMesh``, a DTensor or a DDP reducer
    that outlives ``destroy_process_group``, can hang or abort ("terminate called without an active
    exception") in that teardown (pytorch/pytorch#56297), which would fail a test for nothing it checks.
    """
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def sgd_args(output_dir: str, batch_size: int, accumulation: int, **extra):
    """TrainingArguments for one plain SGD step: lr 1, no clipping, no decay, no schedule."""
    from transformers import TrainingArguments

    return TrainingArguments(
        output_dir=output_dir,
        per_device_train_batch_size=batch_size,
        gradient_accumulation_steps=accumulation,
        max_steps=1,
        learning_rate=1.0,
        optim="sgd",
        lr_scheduler_type="constant",
        weight_decay=0.0,
        max_grad_norm=0.0,
        warmup_steps=0,
        report_to=[],
        save_strategy="no",
        logging_strategy="no",
        use_cpu=True,
        dataloader_num_workers=0,
        disable_tqdm=True,
        seed=0,
        **extra,
    )


def parameter_update(
    objective: str, batch_size: int, accumulation: int, output_dir: str, trainer_class=None, **trainer_kwargs
) -> torch.Tensor:
    """Flat parameter change of one SGD step over build_rows(objective) by ``trainer_class`` (ObjectiveTrainer by
    default) built with ``trainer_kwargs`` besides the model, the arguments, the rows and their collator."""
    from hf_lmobj.trainer.objective_trainer import ObjectiveTrainer

    model = build_model(objective)
    before = flat_parameters(model)
    trainer = (trainer_class or ObjectiveTrainer)(
        model=model,
        args=sgd_args(output_dir, batch_size, accumulation),
        data_collator=stack_rows,
        train_dataset=build_rows(objective),
        **trainer_kwargs,
    )
    trainer.train()
    return flat_parameters(model) - before


def save_updates(out_path: str, kinds, update) -> None:
    """``update(kind, batch_size, accumulation, output_dir)`` of each kind, with ``per_device_train_batch_size``
    8 // (N * 2) and gradient accumulation 2 on N processes; process 0 saves them to ``out_path``."""
    from hf_lmobj.trainer.teardown import close_distributed

    world = int(os.environ.get("WORLD_SIZE", "1"))
    updates = {}
    with tempfile.TemporaryDirectory() as tmp:
        for kind in kinds:
            updates[kind] = update(kind, NUM_ROWS // (world * 2), 2, tmp)
    if int(os.environ.get("RANK", "0")) == 0:
        torch.save(updates, out_path)
    close_distributed()  # the trainers are gone: leave the group before the interpreter's teardown


if __name__ == "__main__":
    save_updates(sys.argv[1], OBJECTIVES, parameter_update)
