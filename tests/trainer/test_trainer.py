"""ObjectiveTrainer: exact loss, gradient-accumulation invariance and corpus perplexity."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from distributed_step import parameter_update, sgd_args
from transformers import Trainer

from hf_lmobj.losses.targets import count_targets
from hf_lmobj.trainer.compute_loss import infer_objective, make_compute_loss_func
from hf_lmobj.trainer.objective_trainer import ObjectiveTrainer
from tests.testing_utils import (
    OBJECTIVES,
    TINY_IDS,
    build_model,
    build_rows,
    reference_update,
    stack_rows,
    tiny_llama,
)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_compute_loss_equals_the_stock_model_loss(objective, tmp_path):
    model, batch = build_model(objective), stack_rows(build_rows(objective))
    trainer = ObjectiveTrainer(
        model=model, args=sgd_args(str(tmp_path), 8, 1), data_collator=stack_rows, train_dataset=build_rows(objective)
    )
    assert trainer.objective == objective == infer_objective(model)
    ours = trainer.compute_loss(model, dict(batch))
    assert abs(ours.item() - model(**batch).loss.item()) < 1e-6


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_one_sgd_step_is_the_same_for_batch_8_and_batch_2_times_accumulation_4(objective, tmp_path):
    reference = reference_update(objective)
    assert _rel(parameter_update(objective, 8, 1, str(tmp_path)), reference) < 1e-5
    assert _rel(parameter_update(objective, 2, 4, str(tmp_path)), reference) < 1e-5


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_the_rows_would_expose_a_per_micro_batch_mean(objective):
    """Micro-batches of 2 hold different target counts, so averaging their means is not the token mean."""
    rows = build_rows(objective)
    counts = [int(count_targets(objective, stack_rows(rows[i : i + 2]))) for i in range(0, 8, 2)]
    assert len(set(counts)) > 1


def test_logits_fallback_gives_the_same_update(tmp_path):
    update = parameter_update("masked", 2, 4, str(tmp_path), use_linear_head=False)
    assert _rel(update, reference_update("masked")) < 1e-5


def test_stock_trainer_with_our_compute_loss_func_is_exact_for_masked_lm(tmp_path):
    compute_loss_func = make_compute_loss_func("masked")
    update = parameter_update("masked", 2, 4, str(tmp_path), Trainer, compute_loss_func=compute_loss_func)
    assert _rel(update, reference_update("masked")) < 1e-5


def _hand_nll(objective: str, model, rows) -> tuple[float, int]:
    """Total NLL and target count over rows, one row at a time, from the model's own logits."""
    total, count = 0.0, 0
    model.eval()
    with torch.no_grad():
        for row in rows:
            batch = stack_rows([row])
            labels = batch.pop("labels")
            logits = model(**batch).logits[0]
            targets = labels[0]
            if objective == "causal":
                logits, targets = logits[:-1], targets[1:]
            total += F.cross_entropy(logits, targets, reduction="sum").item()
            count += int((targets != -100).sum())
    return total, count


@pytest.mark.parametrize("objective", OBJECTIVES)
@pytest.mark.parametrize("with_metrics", [False, True])
def test_eval_perplexity_is_the_corpus_perplexity(objective, with_metrics, tmp_path):
    model, rows = build_model(objective), build_rows(objective)
    metrics_fn = (lambda pred: {"seen": float(len(pred.label_ids))}) if with_metrics else None
    args = sgd_args(str(tmp_path), 8, 1, per_device_eval_batch_size=3)  # batches of 3, 3, 2
    trainer = ObjectiveTrainer(model=model, args=args, data_collator=stack_rows, compute_metrics=metrics_fn)
    metrics = trainer.evaluate(eval_dataset=rows)
    total, count = _hand_nll(objective, model, rows)
    assert metrics["eval_num_target_tokens"] == count
    assert abs(metrics["eval_loss"] - total / count) < 1e-5
    assert abs(metrics["eval_perplexity"] - math.exp(total / count)) / math.exp(total / count) < 1e-5
    if with_metrics:
        assert metrics["eval_seen"] == 8.0


def test_untied_llama_head_and_logits_to_keep(tmp_path):
    model = tiny_llama(vocab_size=64, positions=2048, kv_heads=1, tie_word_embeddings=False, **TINY_IDS)
    rows = build_rows("causal")
    batch = stack_rows(rows)
    trainer = ObjectiveTrainer(model=model, args=sgd_args(str(tmp_path), 8, 1), data_collator=stack_rows)
    assert abs(trainer.compute_loss(model, dict(batch)).item() - model(**batch).loss.item()) < 1e-6
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    # the last 3 positions are scored: 7 -> 8, 8 -> 9, and 9 (no next token)
    ref = F.cross_entropy(logits[:, -3:-1].reshape(-1, 64), batch["labels"][:, -2:].reshape(-1))
    assert abs(trainer.compute_loss(model, {**batch, "logits_to_keep": 3}).item() - ref.item()) < 1e-6


def test_peft_wrapped_model(tmp_path):
    from peft import LoraConfig, get_peft_model

    model = get_peft_model(build_model("causal"), LoraConfig(r=4, target_modules=["c_attn"], fan_in_fan_out=True))
    batch = stack_rows(build_rows("causal"))
    trainer = ObjectiveTrainer(model=model, args=sgd_args(str(tmp_path), 8, 1), data_collator=stack_rows)
    assert trainer.objective == "causal"
    assert abs(trainer.compute_loss(model, dict(batch)).item() - model(**batch).loss.item()) < 1e-6


def test_bad_arguments_are_named(tmp_path):
    model = build_model("masked")
    with pytest.raises(ValueError, match="objective must be one of"):
        ObjectiveTrainer(model=model, args=sgd_args(str(tmp_path), 8, 1), objective="bert")
    assert ObjectiveTrainer(model=model, args=sgd_args(str(tmp_path), 8, 1), objective="masked").objective == "masked"
    with pytest.raises(ValueError, match="compute_loss_func"):
        ObjectiveTrainer(
            model=model, args=sgd_args(str(tmp_path), 8, 1), compute_loss_func=make_compute_loss_func("masked")
        )
    with pytest.raises(ValueError, match="objective must be one of"):
        make_compute_loss_func("t5")
