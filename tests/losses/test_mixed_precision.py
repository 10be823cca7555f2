"""The GPU regime on CPU: bf16 / fp16 autocast and half-precision weights through every computing path.

Each case compares with the float32 run from the same weights (bf16 tolerance) and, where one
exists, with what the stock model computes under the same autocast (tight tolerance).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from distributed_step import sgd_args

from hf_lmobj.generation.sampling import SamplingLogitsProcessor, sampling_generate_kwargs
from hf_lmobj.losses.functional import causal_lm_loss
from hf_lmobj.losses.linear_cross_entropy import linear_cross_entropy, linear_token_losses
from hf_lmobj.metrics.scoring import score_texts
from hf_lmobj.trainer.objective_trainer import ObjectiveTrainer
from tests.testing_utils import build_model, build_rows, stack_rows

HALF = [torch.bfloat16, torch.float16]
OBJECTIVES = ["causal", "masked", "span"]


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def _head_inputs(with_bias: bool = False):
    g = torch.Generator().manual_seed(0)
    hidden = torch.randn(40, 16, generator=g, requires_grad=True)  # (N, H)
    weight = (0.5 * torch.randn(300, 16, generator=g)).requires_grad_()  # (V, H)
    bias = (0.1 * torch.randn(300, generator=g)).requires_grad_() if with_bias else None
    targets = torch.randint(0, 300, (40,), generator=g)
    targets[::5] = -100
    return hidden, weight, bias, targets


def _stock(hidden, weight, bias, targets, options):
    """What a stock model computes: logits from nn.functional.linear, float32 cross-entropy."""
    logits = F.linear(hidden, weight, bias).float()  # (N, V), the autocast dtype rounded
    if options.get("logit_softcap"):
        logits = options["logit_softcap"] * torch.tanh(logits / options["logit_softcap"])
    keep = targets != -100
    loss = F.cross_entropy(logits, targets, label_smoothing=options.get("label_smoothing", 0.0))
    return loss + options.get("z_loss", 0.0) * torch.logsumexp(logits[keep], -1).square().mean()


@pytest.mark.parametrize("dtype", HALF)
@pytest.mark.parametrize(
    "options", [{}, {"label_smoothing": 0.1, "z_loss": 1e-3, "logit_softcap": 5.0}], ids=["plain", "smoothed"]
)
@pytest.mark.parametrize("with_bias", [False, True], ids=["no_bias", "bias"])
def test_linear_cross_entropy_under_autocast(dtype, options, with_bias):
    hidden, weight, bias, targets = _head_inputs(with_bias)
    params = [p for p in (hidden, weight, bias) if p is not None]
    with torch.autocast("cpu", dtype=dtype):
        ours = linear_cross_entropy(hidden, weight, targets, bias=bias, chunk_size=7, **options)
        stock = _stock(hidden, weight, bias, targets, options)
    fp32 = _stock(hidden, weight, bias, targets, options)
    assert ours.dtype == torch.float32
    assert abs(ours.item() - stock.item()) < 1e-5 * abs(stock.item())
    assert abs(ours.item() - fp32.item()) < 1e-2 * abs(fp32.item())
    grads = torch.autograd.grad(ours, params)
    for ours_g, stock_g, fp32_g in zip(grads, torch.autograd.grad(stock, params), torch.autograd.grad(fp32, params)):
        assert ours_g.dtype == torch.float32  # the parameters' dtype
        assert _rel(ours_g, stock_g) < 1e-2  # the stock rounds its one big weight-gradient product
        assert _rel(ours_g, fp32_g) < 3e-2


@pytest.mark.parametrize("dtype", HALF)
def test_linear_token_losses_under_autocast(dtype):
    hidden, weight, _, targets = _head_inputs()
    with torch.autocast("cpu", dtype=dtype):
        ours = linear_token_losses(hidden, weight, targets, chunk_size=9)
        stock = F.cross_entropy((hidden @ weight.T).float(), targets, reduction="none")
    assert ours.dtype == torch.float32
    torch.testing.assert_close(ours, stock.detach(), rtol=1e-5, atol=1e-5)


def test_fp16_loss_scaling_keeps_gradients_finite():
    """GradScaler multiplies the loss by 2**16: the float32 gradient sums must not overflow."""
    hidden, weight, _, targets = _head_inputs()
    with torch.autocast("cpu", dtype=torch.float16):
        loss = linear_cross_entropy(hidden, weight, targets, chunk_size=4)
    (loss * 2.0**16).backward()
    assert torch.isfinite(hidden.grad).all() and torch.isfinite(weight.grad).all()
    torch.testing.assert_close(
        weight.grad / 2.0**16,
        torch.autograd.grad(_stock(hidden, weight, None, targets, {}), weight)[0],
        rtol=2e-2,
        atol=1e-4,
    )


@pytest.mark.parametrize("dtype", HALF)
def test_functional_loss_on_half_logits_accumulates_in_float32(dtype):
    logits = torch.randn(2, 5, 50, generator=torch.Generator().manual_seed(1)).to(dtype).requires_grad_()
    labels = torch.randint(0, 50, (2, 5))
    loss = causal_lm_loss(logits, labels)
    ref = F.cross_entropy(logits.float()[:, :-1].reshape(-1, 50), labels[:, 1:].reshape(-1))
    assert loss.dtype == torch.float32 and abs(loss.item() - ref.item()) < 1e-6
    (grad,) = torch.autograd.grad(loss, logits)
    assert grad.dtype == dtype and torch.isfinite(grad.float()).all()


def _train(objective: str, tmp_path, **precision) -> tuple[list[float], float, torch.nn.Module]:
    """Two AdamW steps (batch 4), then an evaluation: (train losses, eval_loss, model)."""
    model, rows = build_model(objective), build_rows(objective)
    args = sgd_args(str(tmp_path), 4, 1, **precision)
    args.max_steps, args.optim, args.learning_rate, args.logging_strategy = 2, "adamw_torch", 1e-2, "steps"
    args.logging_steps, args.per_device_eval_batch_size = 1, 4
    trainer = ObjectiveTrainer(model=model, args=args, data_collator=stack_rows, train_dataset=rows, eval_dataset=rows)
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    return losses, trainer.evaluate()["eval_loss"], model


@pytest.mark.slow
@pytest.mark.parametrize("objective", OBJECTIVES)
@pytest.mark.parametrize("precision", ["bf16", "fp16"])
def test_objective_trainer_trains_and_evaluates_in_mixed_precision(objective, precision, tmp_path):
    ref_losses, ref_eval, _ = _train(objective, tmp_path / "fp32")
    losses, eval_loss, model = _train(objective, tmp_path / precision, **{precision: True})
    assert len(losses) == len(ref_losses) == 2
    for ours, ref in zip(losses, ref_losses):
        assert abs(ours - ref) < 0.02 * ref, (losses, ref_losses)
    assert abs(eval_loss - ref_eval) < 0.02 * ref_eval
    assert all(torch.isfinite(p).all() and p.dtype == torch.float32 for p in model.parameters())


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_head_path_gradients_under_bf16_autocast(objective, tmp_path):
    """compute_loss (captured head, chunked loss) under autocast vs the stock model's own loss."""
    model, batch = build_model(objective), stack_rows(build_rows(objective))
    trainer = ObjectiveTrainer(
        model=model, args=sgd_args(str(tmp_path), 8, 1), data_collator=stack_rows, train_dataset=build_rows(objective)
    )

    def grads(loss_fn, autocast: bool) -> torch.Tensor:
        model.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            loss = loss_fn()
        loss.backward()
        return torch.cat([p.grad.reshape(-1) for p in model.parameters()])

    ours = grads(lambda: trainer.compute_loss(model, dict(batch)), autocast=True)
    stock = grads(lambda: model(**batch).loss, autocast=True)
    fp32 = grads(lambda: model(**batch).loss, autocast=False)
    assert ours.dtype == torch.float32 and torch.isfinite(ours).all()
    assert _rel(ours, stock) < 1e-2
    assert _rel(ours, fp32) < 6e-2


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_half_precision_weights_train_through_the_head_path(objective, tmp_path):
    """bf16 weights (no autocast): bf16 gradients for every parameter, loss within 2% of float32."""
    model, batch = build_model(objective), stack_rows(build_rows(objective))
    trainer = ObjectiveTrainer(
        model=model, args=sgd_args(str(tmp_path), 8, 1), data_collator=stack_rows, train_dataset=build_rows(objective)
    )
    ref = trainer.compute_loss(model, dict(batch)).item()
    model.to(torch.bfloat16)
    loss = trainer.compute_loss(model, dict(batch))
    loss.backward()
    assert loss.dtype == torch.float32 and abs(loss.item() - ref) < 0.02 * ref
    assert all(p.grad.dtype == torch.bfloat16 and torch.isfinite(p.grad).all() for p in model.parameters())


def test_scoring_a_bf16_model_matches_float32(tiny_gpt2, tokenizer, corpus):
    texts = corpus["validation"]["text"][:3]
    ref = sum(s.nll for s in score_texts(tiny_gpt2, tokenizer, texts, max_length=64, progress=False))
    half = tiny_gpt2.to(torch.bfloat16)
    try:
        ours = sum(s.nll for s in score_texts(half, tokenizer, texts, max_length=64, progress=False))
    finally:
        tiny_gpt2.to(torch.float32)
    assert abs(ours - ref) < 0.02 * ref


@pytest.mark.parametrize("dtype", HALF)
def test_sampler_filters_half_scores_as_float32(dtype):
    scores = (3 * torch.randn(4, 200, generator=torch.Generator().manual_seed(2))).to(dtype)
    proc = SamplingLogitsProcessor(temperature=0.7, top_k=50, top_p=0.9, min_p=0.01)
    ours = proc(None, scores)
    ref = proc(None, scores.float())
    assert ours.dtype == dtype
    assert torch.equal(torch.isinf(ours), torch.isinf(ref))


def test_generate_with_a_bf16_model_and_the_sampler(tiny_gpt2, tokenizer):
    prompt = torch.tensor([[tokenizer.bos_token_id]])
    half = tiny_gpt2.to(torch.bfloat16)
    try:
        torch.manual_seed(0)
        out = half.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=8,
            pad_token_id=tokenizer.pad_token_id,
            **sampling_generate_kwargs(top_p=0.9, top_k=20),
        )
    finally:
        tiny_gpt2.to(torch.float32)
    assert out.shape == (1, 9) and int(out.max()) < len(tokenizer)


def _bf16_update(objective: str, batch_size: int, accumulation: int, output_dir: str) -> torch.Tensor:
    model = build_model(objective)
    before = torch.cat([p.detach().reshape(-1).clone() for p in model.parameters()])
    ObjectiveTrainer(
        model=model,
        args=sgd_args(output_dir, batch_size, accumulation, bf16=True),
        data_collator=stack_rows,
        train_dataset=build_rows(objective),
    ).train()
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()]) - before


@pytest.mark.slow
@pytest.mark.parametrize("objective", OBJECTIVES)
def test_gradient_accumulation_stays_exact_under_bf16(objective, tmp_path):
    """Batch 8 vs 2 x accumulation 4 under bf16: the same update up to bf16 rounding, not a wrong denominator."""
    one, accumulated = (_bf16_update(objective, b, a, str(tmp_path)) for b, a in ((8, 1), (2, 4)))
    assert _rel(accumulated, one) < 1e-2  # the rows hold different target counts: a wrong denominator shows


@pytest.mark.slow
def test_the_prepared_gpu_check_runs_its_code_paths_on_cpu():
    """benchmarks/gpu_check.py waits for a GPU; its dry run keeps it from rotting until then."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "gpu_check.py"
    spec = importlib.util.spec_from_file_location("gpu_check", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["--device", "cpu", "--quick", "--only", "loss", "--only", "packing", "--only", "tp"]) == 0


def test_the_tp_check_skips_by_name_without_two_gpus(monkeypatch):
    from pathlib import Path

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[2] / "benchmarks"))
    from tp_step import check_tp

    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert check_tp("cuda", quick=True) == [("tp", "TP=1 vs TP=2 step", "needs 2 GPUs, this machine has 1", "SKIP")]
