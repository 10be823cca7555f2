"""Tiny MTP / ELECTRA models, hand-built batches and one SGD step with AuxiliaryObjectiveTrainer.

Run on N ranks (``tests.distributed.run_ranks(save_updates, N, OUT.pt, KINDS, parameter_update)``, as the tests
do, or ``torchrun --nproc_per_node N tests/scripts/auxiliary_step.py OUT.pt``) it trains one step per
auxiliary objective with ``per_device_train_batch_size=8 // (N * 2)`` and gradient accumulation 2,
and process 0 saves each model's parameter update to ``OUT.pt``.

Example:
    >>> rows = build_rows("mtp")
    >>> len(rows), sorted(rows[0])
    (8, ['input_ids', 'labels', 'position_ids', 'shift_labels'])
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from distributed_step import save_updates, sgd_args

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a file: the clone's root, for tests.testing_utils
from tests.testing_utils import TINY_ENCODER, build_model, flat_parameters, stack_rows  # noqa: E402

VOCAB, SEQ, NUM_ROWS, PAD, MASK = 64, 12, 8, 0, 1
KINDS = ("mtp", "mtp_parallel", "electra")


def build_aux_model(kind: str, seed: int = 0) -> torch.nn.Module:
    """A tiny MTP wrapper (GPT-2, hidden 32, 2 layers, D=2) or ELECTRA pair (width 32 / 8), dropout 0."""
    from transformers import ElectraConfig

    from hf_lmobj.models.electra import ElectraPretrainingModel
    from hf_lmobj.models.mtp import MTPConfig, MultiTokenPredictionModel

    if kind.startswith("mtp"):
        architecture = "parallel" if kind == "mtp_parallel" else "sequential"
        config = MTPConfig(num_depths=2, architecture=architecture, loss_weight=0.5)
        return MultiTokenPredictionModel(build_model("causal", seed), config, seed=seed)
    config = ElectraConfig(**TINY_ENCODER, embedding_size=32)
    return ElectraPretrainingModel.from_config(config, generator_fraction=0.25, seed=seed)


def build_rows(kind: str, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """NUM_ROWS pre-collated rows whose target counts differ per depth / term (a wrong denominator shows).

    MTP rows are packed: 1-3 documents per row (``position_ids`` restart), ``labels`` -100 at each
    document start and at a "prompt" token, ``shift_labels`` the collator's. ELECTRA rows are
    right-padded with 1..7 selected positions ([MASK] or a random token in the input).
    """
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(NUM_ROWS):
        ids = torch.randint(3, VOCAB, (SEQ,), generator=g)
        if kind.startswith("mtp"):
            cuts = sorted(torch.randperm(SEQ - 2, generator=g)[: i % 3].add(1).tolist())
            starts = torch.zeros(SEQ, dtype=torch.bool)
            starts[[0, *cuts]] = True
            position_ids = torch.arange(SEQ) - torch.where(starts, torch.arange(SEQ), 0).cummax(0).values
            labels = ids.masked_fill(starts, -100)
            labels[(3 * i + 1) % SEQ] = -100  # a "prompt" token: not trained, not a boundary
            shift_labels = torch.cat([labels[1:], torch.tensor([-100])])
            rows.append(
                {"input_ids": ids, "position_ids": position_ids, "labels": labels, "shift_labels": shift_labels}
            )
        else:
            length = 4 + (i * 5) % (SEQ - 3)
            mask = (torch.arange(SEQ) < length).long()
            ids = ids.masked_fill(mask == 0, PAD)
            picked = torch.randperm(length, generator=g)[: 1 + (i * 3) % 7]
            labels = torch.full((SEQ,), -100)
            labels[picked] = ids[picked]
            corrupted = ids.clone()
            corrupted[picked] = MASK
            corrupted[picked[:1]] = torch.randint(3, VOCAB, (1,), generator=g)  # one random replacement
            rows.append({"input_ids": corrupted, "attention_mask": mask, "labels": labels})
    return rows


def aux_trainer(kind: str, args, model: torch.nn.Module | None = None):
    """An AuxiliaryObjectiveTrainer of ``model`` (default: a fresh ``build_aux_model(kind)``) over
    ``build_rows(kind)``, collated by ``stack_rows``, with the TrainingArguments ``args``."""
    from hf_lmobj.trainer.auxiliary import AuxiliaryObjectiveTrainer

    model = build_aux_model(kind) if model is None else model
    return AuxiliaryObjectiveTrainer(model=model, args=args, data_collator=stack_rows, train_dataset=build_rows(kind))


def parameter_update(kind: str, batch_size: int, accumulation: int, output_dir: str) -> torch.Tensor:
    """Flat parameter change of one AuxiliaryObjectiveTrainer SGD step over build_rows(kind)."""
    trainer = aux_trainer(kind, sgd_args(output_dir, batch_size, accumulation))
    before = flat_parameters(trainer.model)
    trainer.train()
    return flat_parameters(trainer.model) - before


def train_and_save(kind: str, folder: Path):
    """The trainer of one SGD step (4 rows a step) on ``kind`` in ``folder / "run"``, its model saved in
    ``folder / "out"``."""
    trainer = aux_trainer(kind, sgd_args(str(folder / "run"), 4, 1))
    trainer.train()
    trainer.save_model(str(folder / "out"))
    return trainer


if __name__ == "__main__":
    save_updates(sys.argv[1], KINDS, parameter_update)
