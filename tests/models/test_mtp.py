"""Multi-token prediction: targets, losses against a naive per-document reference, GA exactness, save/load."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from auxiliary_step import SEQ, aux_trainer, build_aux_model, build_rows, parameter_update, train_and_save
from distributed_step import sgd_args
from safetensors import safe_open
from transformers import AutoModelForCausalLM

from hf_lmobj.collators.causal import DataCollatorForCausalLM
from hf_lmobj.models.mtp import MTPConfig, MultiTokenPredictionModel
from hf_lmobj.models.mtp_targets import multi_token_targets
from hf_lmobj.trainer.auxiliary import AuxiliaryObjectiveTrainer
from tests.testing_utils import assert_bf16_autocast_loss_is_close, build_model, flat_parameters, stack_rows
from tests.testing_utils import build_rows as build_causal_rows

MTP_KINDS = ["mtp", "mtp_parallel"]


# ---- the naive reference: loops over rows, documents and positions ------------------------------
def naive_documents(batch: dict) -> list[list[int]]:
    """Document number of each position, read by walking position_ids (a 0 starts a document) or the mask."""
    out = []
    for b in range(batch["input_ids"].shape[0]):
        docs, current = [], 0
        for t in range(batch["input_ids"].shape[1]):
            if "position_ids" in batch:
                current += int(t > 0 and int(batch["position_ids"][b, t]) == 0)
            elif "attention_mask" in batch:
                current += int(t > 0 and int(batch["attention_mask"][b, t]) != int(batch["attention_mask"][b, t - 1]))
            docs.append(current)
        out.append(docs)
    return out


def naive_targets(batch: dict, depth: int) -> list[list[int]]:
    """Token t + depth + 1 if it is trained (label != -100) and t..t+depth+1 lie in one document, else -100."""
    labels, docs = batch["labels"], naive_documents(batch)
    length = labels.shape[1]
    out = []
    for b in range(labels.shape[0]):
        row = []
        for t in range(length):
            j = t + depth + 1
            ok = j < length and all(docs[b][i] == docs[b][t] for i in range(t, j + 1)) and int(labels[b, j]) != -100
            row.append(int(labels[b, j]) if ok else -100)
        out.append(row)
    return out


def naive_depth_losses(model: MultiTokenPredictionModel, batch: dict) -> tuple[list[torch.Tensor], list[int]]:
    """Mean CE of each depth, every document run through the MTP modules on its own (no mask needed)."""
    base = model.base
    layout = {k: batch[k] for k in ("position_ids", "attention_mask") if k in batch}  # packed or padded rows
    hidden = base.transformer(input_ids=batch["input_ids"], **layout, use_cache=False).last_hidden_state
    weight, embed = base.lm_head.weight, base.get_input_embeddings()
    docs = naive_documents(batch)
    depths = model.mtp_config.num_depths
    sums, counts = [hidden.new_zeros(()) for _ in range(depths + 1)], [0] * (depths + 1)
    targets = [naive_targets(batch, k) for k in range(depths + 1)]
    for b in range(hidden.shape[0]):
        for doc in sorted(set(docs[b])):
            span = [t for t in range(hidden.shape[1]) if docs[b][t] == doc]
            s, e = span[0], span[-1] + 1
            length = e - s
            states = [hidden[b, s:e][None]]  # depth 0: the head's input
            previous, positions, zeros = (
                hidden[b, s:e][None],
                torch.arange(length)[None],
                torch.zeros(1, length, dtype=torch.long),
            )
            for k, module in enumerate(model.mtp, start=1):
                following = None
                if module.sequential:
                    following = torch.zeros(1, length, embed.embedding_dim)
                    if length > k:
                        following[0, : length - k] = embed(batch["input_ids"][b, s + k : e])
                h, normed = module(previous if module.sequential else hidden[b, s:e][None], following, positions, zeros)
                states.append(normed)
                previous = h
            for k, state in enumerate(states):
                logits = state[0] @ weight.T  # (L, V)
                for i, t in enumerate(range(s, e)):
                    if targets[k][b][t] != -100:
                        sums[k] = sums[k] + F.cross_entropy(logits[i], torch.tensor(targets[k][b][t]), reduction="sum")
                        counts[k] += 1
    return [total / max(count, 1) for total, count in zip(sums, counts)], counts


def naive_total(model: MultiTokenPredictionModel, batch: dict) -> torch.Tensor:
    losses, _ = naive_depth_losses(model, batch)
    c = model.mtp_config
    return losses[0] + c.loss_weight / c.num_depths * sum(losses[1:])


# ---- targets ------------------------------------------------------------------------------------
def test_targets_of_hand_built_packed_rows_match_the_naive_walk():
    batch = stack_rows(build_rows("mtp"))
    for depth in range(4):
        assert multi_token_targets(batch, 3)[depth].tolist() == naive_targets(batch, depth)


def test_targets_of_collated_packed_and_padded_batches(tokenizer):
    eos = tokenizer.eos_token_id
    features = [
        {"input_ids": [10, 11, 12, 13, eos], "labels": [-100, -100, 12, 13, eos]},  # a prompt of two tokens
        {"input_ids": [20, 21, eos]},
        {"input_ids": [30, 31, 32, 33, 34, 35, eos]},
        {"input_ids": [40, eos]},
    ]
    for collator in (
        DataCollatorForCausalLM(tokenizer, max_length=8, packing=True),
        DataCollatorForCausalLM(tokenizer),
    ):
        batch = collator(features)
        batch.pop("use_cache", None)
        targets = multi_token_targets(batch, 3)
        for depth in range(4):
            assert targets[depth].tolist() == naive_targets(batch, depth), (collator.packing, depth)
        assert (targets[0] == batch["shift_labels"]).all()


def test_no_target_crosses_a_document_or_the_row_end():
    batch = stack_rows(build_rows("mtp"))
    targets = multi_token_targets(batch, 2)  # (3, B, T)
    docs = torch.tensor(naive_documents(batch))
    for depth in range(3):
        b, t = (targets[depth] != -100).nonzero(as_tuple=True)
        assert (t + depth + 1 < SEQ).all()
        assert (docs[b, t] == docs[b, t + depth + 1]).all()


# ---- losses -------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", MTP_KINDS)
def test_trainer_loss_equals_the_naive_per_document_reference(kind, tmp_path, one_torch_thread):
    model, batch = build_aux_model(kind), stack_rows(build_rows(kind))
    trainer = AuxiliaryObjectiveTrainer(model=model, args=sgd_args(str(tmp_path), 8, 1))
    assert trainer.auxiliary == "mtp" and trainer.objective == "causal"
    ours = trainer.compute_loss(model, dict(batch))
    naive, counts = naive_depth_losses(model, batch)
    assert abs(ours.item() - naive_total(model, batch).item()) < 1e-5
    assert counts == model.count_targets(batch).tolist() and all(c > 0 for c in counts)
    assert counts[0] > counts[1] > counts[2]  # deeper targets run into more boundaries
    assert (
        abs(naive[0].item() - model.base(**{k: batch[k] for k in ("input_ids", "position_ids", "labels")}).loss.item())
        < 1e-5
    )


def padded_rows() -> list[dict[str, torch.Tensor]]:
    """Right-padded rows (one document each, 2..9 next-token targets) with a -100 "prompt" token in some rows."""
    rows = build_causal_rows("causal")
    for i, row in enumerate(rows):
        if i % 2:
            row["labels"] = row["labels"].clone()
            row["labels"][1] = -100
    return rows


LAYOUTS = {"packed": lambda kind: build_rows(kind), "padded": lambda kind: padded_rows()}


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("kind", MTP_KINDS)
def test_each_depth_loss_equals_the_naive_reference(kind, layout, tmp_path, one_torch_thread):
    """Depth by depth (not only the weighted sum, where swapped or mixed-up depths would cancel)."""
    model, batch = build_aux_model(kind), stack_rows(LAYOUTS[layout](kind))
    trainer = AuxiliaryObjectiveTrainer(model=model, args=sgd_args(str(tmp_path), 8, 1))
    total = trainer.compute_loss(model, dict(batch))
    naive, counts = naive_depth_losses(model, batch)
    depths = model.mtp_config.num_depths
    recorded = [trainer._term_sums[f"mtp_depth_{k}_loss"].item() for k in range(1, depths + 1)]
    assert recorded == pytest.approx([loss.item() for loss in naive[1:]], abs=1e-5)
    assert abs(recorded[0] - recorded[1]) > 1e-4  # far above the tolerance: swapped depths would show
    assert total.item() == pytest.approx(naive_total(model, batch).item(), abs=1e-5)
    assert counts == model.count_targets(batch).tolist() and counts[0] > counts[1] > counts[2] > 0


def test_depth_losses_are_logged(tmp_path, one_torch_thread):
    args = sgd_args(str(tmp_path), 4, 1)
    args.logging_strategy, args.logging_steps, args.max_steps = "steps", 1, 2
    trainer = aux_trainer("mtp", args)
    trainer.train()
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert logged and {"mtp_depth_1_loss", "mtp_depth_2_loss"} <= set(logged[0])


# ---- gradient accumulation ------------------------------------------------------------------------
def reference_update(kind: str) -> torch.Tensor:
    """-lr * grad of the naive full-batch loss (lr 1, plain SGD)."""
    model = build_aux_model(kind)
    naive_total(model, stack_rows(build_rows(kind))).backward()
    return torch.cat([-(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in model.parameters()])


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


@pytest.mark.parametrize("kind", MTP_KINDS)
def test_batch_8_and_batch_2_times_accumulation_4_take_the_naive_full_batch_step(kind, tmp_path, one_torch_thread):
    rows = build_rows(kind)
    per_micro_batch = [
        model_counts
        for model_counts in (
            build_aux_model(kind).count_targets(stack_rows(rows[i : i + 2])).tolist() for i in range(0, 8, 2)
        )
    ]
    assert len({tuple(c) for c in per_micro_batch}) > 1  # a per-micro-batch mean would show
    reference = reference_update(kind)
    assert _rel(parameter_update(kind, 8, 1, str(tmp_path)), reference) < 1e-5
    assert _rel(parameter_update(kind, 2, 4, str(tmp_path)), reference) < 1e-5


# ---- saving -------------------------------------------------------------------------------------
def test_save_keeps_the_stock_model_loadable_alone_and_reloads_the_modules(tmp_path, one_torch_thread):
    trainer = train_and_save("mtp", tmp_path)
    model = trainer.model
    with safe_open(str(tmp_path / "out" / "model.safetensors"), "pt") as f:
        assert not any("mtp" in key for key in f.keys())
    stock = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    assert type(stock) is type(model.base)
    for (name, mine), theirs in zip(model.base.state_dict().items(), stock.state_dict().values()):
        assert torch.equal(mine, theirs), name
    reloaded = MultiTokenPredictionModel.from_pretrained(tmp_path / "out")
    assert torch.equal(flat_parameters(reloaded), flat_parameters(model))
    assert json.loads((tmp_path / "out" / "mtp" / "mtp_config.json").read_text())["num_depths"] == 2
    batch = stack_rows(build_rows("mtp"))
    assert trainer.compute_loss(reloaded, dict(batch)).item() == pytest.approx(
        trainer.compute_loss(model, dict(batch)).item(), abs=1e-6
    )


def test_resume_from_checkpoint_restores_the_modules(tmp_path, one_torch_thread):
    args = sgd_args(str(tmp_path), 4, 1)
    args.max_steps, args.save_strategy, args.save_steps = 2, "steps", 1
    first = aux_trainer("mtp", args)
    first.train()
    second = aux_trainer("mtp", args)  # a fresh model, resumed from the first run's checkpoint
    second.train(resume_from_checkpoint=str(tmp_path / "checkpoint-1"))
    assert torch.allclose(flat_parameters(first.model), flat_parameters(second.model), atol=1e-6)


# ---- bad input ----------------------------------------------------------------------------------
def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="architecture"):
        MTPConfig(architecture="tree")
    with pytest.raises(ValueError, match="loss_weight"):
        MTPConfig(loss_weight=-1.0)
    with pytest.raises(ValueError, match="num_attention_heads"):
        MTPConfig(hidden_size=32, num_attention_heads=3)
    with pytest.raises(TypeError, match="stock causal LM"):
        MultiTokenPredictionModel(torch.nn.Linear(2, 2))
    batch = stack_rows(build_rows("mtp"))
    with pytest.raises(ValueError, match="logits_to_keep"):
        multi_token_targets({**batch, "logits_to_keep": 1}, 1)
    with pytest.raises(ValueError, match="objective"):
        AuxiliaryObjectiveTrainer(model=build_aux_model("mtp"), args=sgd_args("unused", 1, 1), objective="masked")


def test_bf16_base_gets_bf16_modules():
    model = MultiTokenPredictionModel(build_model("causal").to(torch.bfloat16), MTPConfig(num_depths=1))
    assert {p.dtype for p in model.mtp.parameters()} == {torch.bfloat16}


def test_bf16_autocast_and_half_weights_train(tmp_path, one_torch_thread):
    """Under CPU bf16 autocast the loss stays close to fp32; bf16 weights run forward and backward."""
    model, batch = build_aux_model("mtp"), stack_rows(build_rows("mtp"))
    trainer = AuxiliaryObjectiveTrainer(model=model, args=sgd_args(str(tmp_path), 8, 1))
    assert_bf16_autocast_loss_is_close(trainer, model, batch)
    half = model.to(torch.bfloat16)
    loss = trainer.compute_loss(half, dict(batch))
    loss.backward()
    assert torch.isfinite(loss) and all(p.grad is not None for p in half.mtp.parameters())
