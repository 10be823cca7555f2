"""Tiny MTP / ELECTRA models, hand-built batches and one SGD step with AuxiliaryObjectiveTrainer.

Run under ``torchrun --nproc_per_node N tests/scripts/auxiliary_step.py OUT.pt`` it trains one step per
auxiliary objective with ``per_device_train_batch_size=8 // (N * 2)`` and gradient accumulation 2,
and process 0 saves each model's parameter update to ``OUT.pt``.

Example:
    >>> rows = build_rows("mtp")
    >>> len(rows), sorted(rows[0])
    (8, ['input_ids', 'labels', 'position_ids', 'shift_labels'])
"""

from __future__ import annotations

import os
import sys
import tempfile

import torch
from distributed_step import TINY_ENCODER, build_model, sgd_args, stack_rows

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


def flat_parameters(model: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])


def parameter_update(kind: str, batch_size: int, accumulation: int, output_dir: str) -> torch.Tensor:
    """Flat parameter change of one AuxiliaryObjectiveTrainer SGD step over build_rows(kind)."""
    from hf_lmobj.trainer.auxiliary import AuxiliaryObjectiveTrainer

    model = build_aux_model(kind)
    before = flat_parameters(model)
    trainer = AuxiliaryObjectiveTrainer(
        model=model,
        args=sgd_args(output_dir, batch_size, accumulation),
        data_collator=stack_rows,
        train_dataset=build_rows(kind),
    )
    trainer.train()
    return flat_parameters(model) - before


def main(out_path: str) -> None:
    from hf_lmobj.trainer.teardown import close_distributed

    world = int(os.environ.get("WORLD_SIZE", "1"))
    updates = {}
    with tempfile.TemporaryDirectory() as tmp:
        for kind in KINDS:
            updates[kind] = parameter_update(kind, NUM_ROWS // (world * 2), 2, tmp)
    if int(os.environ.get("RANK", "0")) == 0:
        torch.save(updates, out_path)
    close_distributed()  # the trainers are gone: leave the group before the interpreter's teardown


if __name__ == "__main__":
    main(sys.argv[1])
