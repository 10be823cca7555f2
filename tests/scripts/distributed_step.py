"""Tiny models, hand-built batches and one SGD step with ObjectiveTrainer (shared by the trainer tests).

Run under ``torchrun --nproc_per_node N tests/scripts/distributed_step.py OUT.pt`` it trains one step per
objective with ``per_device_train_batch_size=8 // (N * 2)`` and gradient accumulation 2, and
process 0 saves each model's parameter update to ``OUT.pt``.

Example:
    >>> rows = build_rows("masked", seed=0)
    >>> len(rows), sorted(rows[0])
    (8, ['attention_mask', 'input_ids', 'labels'])
"""

from __future__ import annotations

import os
import sys
import tempfile

import torch

VOCAB, SEQ, TARGET_SEQ, NUM_ROWS = 64, 10, 6, 8
PAD, MASK, START = 0, 1, 0
#: A 2-layer, width-32 BERT-style encoder without dropout (BERT here, ELECTRA in auxiliary_step.py).
TINY_ENCODER = {
    "vocab_size": VOCAB,
    "hidden_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 64,
    "max_position_embeddings": 32,
    "hidden_dropout_prob": 0.0,
    "attention_probs_dropout_prob": 0.0,
    "pad_token_id": PAD,
}


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


def build_model(objective: str, seed: int = 0) -> torch.nn.Module:
    """A tiny stock model (hidden 32, 2 layers, dropout 0) for the objective, seeded."""
    from transformers import (
        BertConfig,
        BertForMaskedLM,
        GPT2Config,
        GPT2LMHeadModel,
        T5Config,
        T5ForConditionalGeneration,
    )

    torch.manual_seed(seed)
    if objective == "causal":
        cfg = GPT2Config(
            vocab_size=VOCAB,
            n_positions=32,
            n_embd=32,
            n_layer=2,
            n_head=2,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            bos_token_id=2,
            eos_token_id=2,
            pad_token_id=PAD,
        )
        return GPT2LMHeadModel(cfg)
    if objective == "masked":
        return BertForMaskedLM(BertConfig(**TINY_ENCODER))
    cfg = T5Config(
        vocab_size=VOCAB,
        d_model=32,
        d_kv=16,
        d_ff=64,
        num_layers=2,
        num_heads=2,
        dropout_rate=0.0,
        decoder_start_token_id=START,
        pad_token_id=PAD,
        eos_token_id=2,
    )
    return T5ForConditionalGeneration(cfg)


def build_rows(objective: str, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    """NUM_ROWS pre-collated rows whose numbers of targets all differ (so a wrong denominator shows)."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for i in range(NUM_ROWS):
        ids = torch.randint(3, VOCAB, (SEQ,), generator=g)
        if objective == "causal":  # lengths 3..10: 2..9 next-token targets
            length = 3 + (i * 5) % 8
            mask = (torch.arange(SEQ) < length).long()
            ids = ids.masked_fill(mask == 0, PAD)
            rows.append({"input_ids": ids, "attention_mask": mask, "labels": ids.masked_fill(mask == 0, -100)})
        elif objective == "masked":  # 1..8 hand-picked selected positions
            picked = torch.randperm(SEQ, generator=g)[: 1 + (i * 3) % 8]
            labels = torch.full((SEQ,), -100)
            labels[picked] = ids[picked]
            corrupted = ids.clone()
            corrupted[picked] = MASK
            rows.append({"input_ids": corrupted, "attention_mask": torch.ones(SEQ, dtype=torch.long), "labels": labels})
        else:  # 1..6 target tokens, right-padded with -100
            length = 1 + (i * 5) % TARGET_SEQ
            labels = torch.randint(3, VOCAB, (TARGET_SEQ,), generator=g)
            labels[length:] = -100
            decoder_input_ids = torch.cat([torch.tensor([START]), labels[:-1]]).masked_fill(
                torch.cat([torch.tensor([False]), labels[:-1] == -100]), PAD
            )
            rows.append(
                {
                    "input_ids": ids,
                    "attention_mask": torch.ones(SEQ, dtype=torch.long),
                    "labels": labels,
                    "decoder_input_ids": decoder_input_ids,
                }
            )
    return rows


def stack_rows(rows: list[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Stack pre-collated rows into a batch (the data collator of these tests)."""
    return {key: torch.stack([r[key] for r in rows]) for key in rows[0]}


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


def parameter_update(objective: str, batch_size: int, accumulation: int, output_dir: str) -> torch.Tensor:
    """Flat parameter change of one ObjectiveTrainer SGD step over build_rows(objective)."""
    from hf_lmobj.trainer.objective_trainer import ObjectiveTrainer

    model = build_model(objective)
    before = torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])
    trainer = ObjectiveTrainer(
        model=model,
        args=sgd_args(output_dir, batch_size, accumulation),
        data_collator=stack_rows,
        train_dataset=build_rows(objective),
    )
    trainer.train()
    after = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    return after - before


def main(out_path: str) -> None:
    from hf_lmobj.trainer.teardown import close_distributed

    world = int(os.environ.get("WORLD_SIZE", "1"))
    updates = {}
    with tempfile.TemporaryDirectory() as tmp:
        for objective in ("causal", "masked", "span"):
            updates[objective] = parameter_update(objective, NUM_ROWS // (world * 2), 2, tmp)
    if int(os.environ.get("RANK", "0")) == 0:
        torch.save(updates, out_path)
    close_distributed()  # the trainers are gone: leave the group before the interpreter's teardown


if __name__ == "__main__":
    main(sys.argv[1])
