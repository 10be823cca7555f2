"""ELECTRA: discriminator labels, loss against the stock models' own losses, no gradient through sampling,
GA exactness, per-row draws, shared embeddings across save/load, and a collated run."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from auxiliary_step import build_aux_model, build_rows, parameter_update, train_and_save
from distributed_step import sgd_args
from transformers import AutoModelForSequenceClassification, ElectraForPreTraining

from hf_lmobj.collators.masked import DataCollatorForMaskedLM
from hf_lmobj.models.electra import ElectraPretrainingConfig, ElectraPretrainingModel, generator_config
from hf_lmobj.models.electra_loss import electra_loss, sample_replacements
from hf_lmobj.trainer.auxiliary import AuxiliaryObjectiveTrainer
from tests.testing_utils import assert_bf16_autocast_loss_is_close, flat_parameters, stack_rows


def _batch() -> dict[str, torch.Tensor]:
    return stack_rows(build_rows("electra"))


def _original(batch) -> torch.Tensor:
    return torch.where(batch["labels"] != -100, batch["labels"], batch["input_ids"])


def test_discriminator_labels_are_input_differs_from_original():
    model, batch = build_aux_model("electra"), _batch()
    out = model(**batch, sampling_seed=0)
    original, selected = _original(batch), batch["labels"] != -100
    assert torch.equal(out.replaced, out.replaced_input_ids != original)
    assert torch.equal(out.replaced_input_ids[~selected], original[~selected])  # only selected positions change
    assert not out.replaced[~selected].any()
    assert not out.replaced[batch["attention_mask"] == 0].any()


@pytest.mark.parametrize("favourite_is_original", [True, False])
def test_generator_hits_count_as_original(favourite_is_original):
    """A generator that always samples one token: where that is the original, the label is 'original'."""
    model, batch = build_aux_model("electra"), _batch()
    selected = batch["labels"] != -100
    token = 7 if favourite_is_original else 9
    batch["labels"] = batch["labels"].masked_fill(selected, 7)  # every selected original is token 7
    with torch.no_grad():
        model.generator.get_output_embeddings().bias[token] = 1e4
    out = model(**batch, sampling_seed=0)
    assert (out.replaced_input_ids[selected] == token).all()
    assert bool((batch["input_ids"][selected] != 7).any())  # the generator's input was corrupted there
    assert torch.equal(out.replaced, selected if not favourite_is_original else torch.zeros_like(selected))


def test_loss_equals_the_stock_models_own_losses(tmp_path, one_torch_thread):
    model, batch = build_aux_model("electra"), _batch()
    trainer = AuxiliaryObjectiveTrainer(model=model, args=sgd_args(str(tmp_path), 8, 1))
    assert trainer.auxiliary == "electra" and trainer.objective == "masked"
    ours = trainer.compute_loss(model, dict(batch))
    out = model(**batch, sampling_seed=trainer.args.seed, sampling_step=0)  # the same draws
    stock_mlm = model.generator(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"],
                                labels=batch["labels"]).loss  # fmt: skip
    labels = (out.replaced_input_ids != _original(batch)).long()
    stock_rtd = model.discriminator(input_ids=out.replaced_input_ids, attention_mask=batch["attention_mask"],
                                    labels=labels).loss  # fmt: skip
    assert abs(ours.item() - (stock_mlm + 50.0 * stock_rtd).item()) < 1e-5
    again, outputs = trainer.compute_loss(model, dict(batch), return_outputs=True)
    assert again.item() == ours.item() and torch.equal(outputs.replaced_input_ids, out.replaced_input_ids)
    total, mlm, rtd = electra_loss(out, 3, 7, rtd_weight=2.0)
    assert abs(total.item() - (mlm + 2.0 * rtd).item()) < 1e-6
    assert abs(mlm.item() * 3 - stock_mlm.item() * int((batch["labels"] != -100).sum())) < 1e-4


def test_loss_equals_a_naive_per_token_reference(tmp_path, one_torch_thread):
    """MLM + 50 RTD written out token by token: -log softmax at each selected position, and the binary
    cross-entropy -[y log sigmoid(z) + (1 - y) log sigmoid(-z)] at each real token, y = (input != original);
    half the selected positions are generator hits (y = 0 there although the generator's input was corrupted)."""
    model, batch = build_aux_model("electra"), _batch()
    selected = (batch["labels"] != -100).nonzero().tolist()
    for b, t in selected[::2]:
        batch["labels"][b, t] = 7  # the original token there is 7 ...
    with torch.no_grad():
        model.generator.get_output_embeddings().bias[7] = 12.0  # ... and the generator nearly always samples 7
    trainer = AuxiliaryObjectiveTrainer(model=model, args=sgd_args(str(tmp_path), 8, 1))
    ours = trainer.compute_loss(model, dict(batch))
    replaced_ids = model(**batch, sampling_seed=trainer.args.seed, sampling_step=0).replaced_input_ids  # the same draws
    generator_logits = model.generator(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    disc_logits = model.discriminator(input_ids=replaced_ids, attention_mask=batch["attention_mask"]).logits
    mlm_sum, mlm_count, rtd_sum, rtd_count, hits, replaced = 0.0, 0, 0.0, 0, 0, 0
    for b in range(batch["input_ids"].shape[0]):
        for t in range(batch["input_ids"].shape[1]):
            label = int(batch["labels"][b, t])
            original = label if label != -100 else int(batch["input_ids"][b, t])
            if label != -100:
                mlm_sum = mlm_sum - torch.log_softmax(generator_logits[b, t], dim=-1)[label]
                mlm_count += 1
                hits += int(replaced_ids[b, t]) == label and int(batch["input_ids"][b, t]) != label
            if int(batch["attention_mask"][b, t]) == 1:
                y = float(int(replaced_ids[b, t]) != original)
                z = disc_logits[b, t]
                rtd_sum = rtd_sum - (y * F.logsigmoid(z) + (1.0 - y) * F.logsigmoid(-z))
                rtd_count += 1
                replaced += int(y)
    naive = mlm_sum / mlm_count + 50.0 * rtd_sum / rtd_count
    assert hits >= 3 and replaced >= 3  # both kinds of selected position occur
    assert ours.item() == pytest.approx(naive.item(), rel=1e-5)
    assert trainer._term_sums["rtd_loss"].item() == pytest.approx((rtd_sum / rtd_count).item(), rel=1e-5)


def test_no_gradient_flows_through_the_samples():
    model, batch = build_aux_model("electra"), _batch()
    out = model(**batch, sampling_seed=0)
    assert not out.replaced_input_ids.requires_grad
    _, _, rtd = electra_loss(out)
    rtd.backward()
    shared = {id(p) for p in model.discriminator.electra.embeddings.parameters()}
    generator_own = [(n, p) for n, p in model.generator.named_parameters() if id(p) not in shared]
    assert generator_own and all(p.grad is None or not p.grad.any() for _, p in generator_own)
    assert any(p.grad is not None and p.grad.any() for p in model.discriminator.parameters())


def test_draws_depend_on_the_row_not_its_batch_company():
    model, batch = build_aux_model("electra"), _batch()
    whole = model(**batch, sampling_seed=3, sampling_step=5).replaced_input_ids
    for i in range(0, 8, 2):
        part = {k: v[i : i + 2] for k, v in batch.items()}
        assert torch.equal(model(**part, sampling_seed=3, sampling_step=5).replaced_input_ids, whole[i : i + 2])
    assert not torch.equal(model(**batch, sampling_seed=3, sampling_step=6).replaced_input_ids, whole)


def test_sampling_follows_the_softmax():
    logits = torch.log(torch.tensor([[0.7, 0.2, 0.1]])).expand(4000, 3)
    rows = torch.arange(4000) // 10
    keys = [str(i).encode() for i in range(400)]
    counts = torch.bincount(sample_replacements(logits, rows, keys, seed=0, step=0), minlength=3).float() / 4000
    assert torch.allclose(counts, torch.tensor([0.7, 0.2, 0.1]), atol=0.03)


def reference_update() -> torch.Tensor:
    """-grad of the stock models' full-batch losses, MLM + 50 RTD, on the draws the rows get."""
    model, batch = build_aux_model("electra"), _batch()
    with torch.no_grad():
        replaced = model(**batch, sampling_seed=0, sampling_step=0).replaced_input_ids
    mlm = model.generator(
        input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]
    ).loss
    rtd = model.discriminator(input_ids=replaced, attention_mask=batch["attention_mask"],
                              labels=(replaced != _original(batch)).long()).loss  # fmt: skip
    (mlm + 50.0 * rtd).backward()
    return torch.cat([-(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in model.parameters()])


def test_batch_8_and_batch_2_times_accumulation_4_take_the_full_batch_step(tmp_path, one_torch_thread):
    rows = build_rows("electra")
    counts = {
        tuple(build_aux_model("electra").count_targets(stack_rows(rows[i : i + 2])).tolist()) for i in range(0, 8, 2)
    }
    assert len(counts) > 1  # a per-micro-batch mean would show
    reference = reference_update()
    for batch_size, accumulation in ((8, 1), (2, 4)):
        update = parameter_update("electra", batch_size, accumulation, str(tmp_path))
        assert ((update - reference).norm() / reference.norm()).item() < 1e-5, (batch_size, accumulation)


def test_shared_embeddings_stay_tied_after_save_and_load(tmp_path, one_torch_thread):
    trainer = train_and_save("electra", tmp_path)
    model = trainer.model
    stock = ElectraForPreTraining.from_pretrained(tmp_path / "out")
    assert torch.equal(flat_parameters(stock), flat_parameters(model.discriminator))
    classifier = AutoModelForSequenceClassification.from_pretrained(tmp_path / "out", num_labels=2)
    assert torch.equal(
        classifier.electra.embeddings.word_embeddings.weight,
        model.discriminator.electra.embeddings.word_embeddings.weight,
    )
    reloaded = ElectraPretrainingModel.from_pretrained(tmp_path / "out")
    assert reloaded.shares_embeddings()
    assert torch.equal(flat_parameters(reloaded), flat_parameters(model))
    with torch.no_grad():
        reloaded.discriminator.get_input_embeddings().weight[5] += 1.0
    assert torch.equal(
        reloaded.generator.get_output_embeddings().weight[5], reloaded.discriminator.get_input_embeddings().weight[5]
    )
    batch = _batch()
    assert trainer.compute_loss(reloaded, dict(batch)).item() != trainer.compute_loss(model, dict(batch)).item()


def test_a_collated_whole_word_run_trains_and_evaluates(tokenizer, corpus, tmp_path, one_torch_thread):
    from transformers import ElectraConfig

    from hf_lmobj.corpus import tokenize_corpus

    config = ElectraConfig(vocab_size=len(tokenizer), embedding_size=32, hidden_size=32, num_hidden_layers=2,
                           num_attention_heads=2, intermediate_size=64, max_position_embeddings=64,
                           pad_token_id=tokenizer.pad_token_id)  # fmt: skip
    model = ElectraPretrainingModel.from_config(config, generator_fraction=1 / 3)
    rows = [
        {"input_ids": ids[:48]} for ids in tokenize_corpus(corpus["train"].select(range(16)), tokenizer)["input_ids"]
    ]
    collator = DataCollatorForMaskedLM(tokenizer, whole_word_mask=True, seed=0)
    args = sgd_args(str(tmp_path), 8, 1)
    args.learning_rate, args.max_steps, args.remove_unused_columns = 1e-3, 2, True
    trainer = AuxiliaryObjectiveTrainer(
        model=model, args=args, data_collator=collator, train_dataset=rows, eval_dataset=rows[:8]
    )
    trainer.train()
    metrics = trainer.evaluate()
    assert {"eval_mlm_loss", "eval_rtd_loss", "eval_rtd_accuracy", "eval_masked_accuracy"} <= set(metrics)
    weight = model.electra_config.rtd_weight
    assert metrics["eval_loss"] == pytest.approx(metrics["eval_mlm_loss"] + weight * metrics["eval_rtd_loss"])
    assert 0.0 <= metrics["eval_rtd_accuracy"] <= 1.0


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="rtd_weight"):
        ElectraPretrainingConfig(rtd_weight=-1.0)
    disc = build_aux_model("electra").discriminator.config
    with pytest.raises(ValueError, match="generator_fraction"):
        generator_config(disc, 0.0)
    other = build_aux_model("electra")
    other.generator.config.embedding_size = 16
    with pytest.raises(ValueError, match="embedding_size"):
        ElectraPretrainingModel(other.generator, other.discriminator)
    batch = _batch()
    with pytest.raises(ValueError, match="2D attention_mask"):
        build_aux_model("electra")(
            **{**batch, "attention_mask": batch["attention_mask"][:, None, None]}, sampling_seed=0
        )


def test_bf16_autocast_trains(tmp_path, one_torch_thread):
    model, batch = build_aux_model("electra"), _batch()
    trainer = AuxiliaryObjectiveTrainer(model=model, args=sgd_args(str(tmp_path), 8, 1))
    assert_bf16_autocast_loss_is_close(trainer, model, batch)
