"""SamplingLogitsProcessor against the textbook example, transformers' warpers and generate()."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import (
    GPT2LMHeadModel,
    LogitsProcessorList,
    MinPLogitsWarper,
    TemperatureLogitsWarper,
    TopKLogitsWarper,
    TopPLogitsWarper,
)

from hf_lmobj.generation.sampling import SamplingLogitsProcessor, sample_next_token, sampling_generate_kwargs
from tests.testing_utils import tiny_gpt2

TEXTBOOK = torch.tensor([[2.0, 1.0, 0.1]])


def probs_of(scores: torch.Tensor) -> list[float]:
    return [round(p, 3) for p in scores.float().softmax(-1)[0].tolist()]


def hf_chain(temperature, top_k, top_p, min_p, keep=1) -> LogitsProcessorList:
    """The warpers generate() builds, in its order: Temperature -> TopK -> TopP -> MinP."""
    chain = LogitsProcessorList()
    if temperature != 1.0:
        chain.append(TemperatureLogitsWarper(float(temperature)))
    if top_k:
        chain.append(TopKLogitsWarper(top_k, min_tokens_to_keep=keep))
    if top_p is not None and top_p < 1.0:
        chain.append(TopPLogitsWarper(top_p, min_tokens_to_keep=keep))
    if min_p is not None:
        chain.append(MinPLogitsWarper(min_p, min_tokens_to_keep=keep))
    return chain


def random_case(seed: int, dtype: torch.dtype):
    """Random logits (B, V) and one random setting of the four parameters."""
    g = torch.Generator().manual_seed(seed)

    def pick(options):
        return options[int(torch.randint(len(options), (1,), generator=g))]

    batch, vocab = pick([1, 4, 16]), pick([8, 100, 1000, 5000])
    scale = pick([0.5, 2.0, 5.0])
    logits = (scale * torch.randn(batch, vocab, generator=g, dtype=torch.float64)).to(dtype)
    params = dict(
        temperature=pick([0.5, 1.0, 1.7]),
        top_k=pick([None, 1, 5, 50]),
        top_p=pick([None, 0.3, 0.9, 0.95]),
        min_p=pick([None, 0.05, 0.2]),
        keep=pick([1, 1, 3]),
    )
    return logits, params


def processor(params) -> SamplingLogitsProcessor:
    p = dict(params)
    return SamplingLogitsProcessor(min_tokens_to_keep=p.pop("keep"), **p)


def gpt2(vocab_size: int = 128, **overrides) -> GPT2LMHeadModel:
    """A randomly initialised GPT-2 (hidden 32, 2 layers, 256 positions), the same weights on every call, in eval
    mode."""
    return tiny_gpt2(vocab_size=vocab_size, positions=256, **overrides).eval()


# --- the textbook worked example ----------------------------------------------------------------


@pytest.mark.parametrize(
    "temperature, expected",
    [
        (1.0, [0.659, 0.242, 0.099]),
        (0.5, [0.864, 0.117, 0.019]),
        (2.0, [0.502, 0.304, 0.194]),
        (2, [0.502, 0.304, 0.194]),
    ],
)
def test_textbook_temperature(temperature, expected):
    assert probs_of(SamplingLogitsProcessor(temperature=temperature)(None, TEXTBOOK)) == expected


def test_textbook_top_p_keeps_two_tokens():
    scores = SamplingLogitsProcessor(top_p=0.9)(None, TEXTBOOK)
    assert probs_of(scores) == [0.731, 0.269, 0.0]
    assert scores[0, 2].item() == -math.inf


def test_top_k_one_is_greedy():
    logits = torch.randn(32, 500, generator=torch.Generator().manual_seed(1))
    scores = SamplingLogitsProcessor(top_k=1)(None, logits)
    assert torch.equal(scores.isfinite(), torch.nn.functional.one_hot(logits.argmax(-1), 500).bool())
    g = torch.Generator().manual_seed(0)
    assert torch.equal(sample_next_token(logits, top_k=1, generator=g), logits.argmax(-1))


def test_top_p_sampling_frequencies_match_renormalised_probabilities():
    g = torch.Generator().manual_seed(0)
    draws = sample_next_token(TEXTBOOK.expand(20000, 3), top_p=0.9, generator=g)  # (20000,)
    share = (draws == 0).float().mean().item()
    assert abs(share - 0.731) < 5 * math.sqrt(0.731 * 0.269 / 20000)
    assert not bool((draws == 2).any())


# --- against transformers' warper chain ---------------------------------------------------------


@pytest.mark.parametrize("seed", range(60))
def test_equals_transformers_chain_float64(seed):
    """In float64 the rounding differences vanish: outputs are identical, value for value."""
    logits, params = random_case(seed, torch.float64)
    ours = processor(params)(None, logits)
    theirs = hf_chain(params["temperature"], params["top_k"], params["top_p"], params["min_p"], params["keep"])(
        None, logits
    )
    assert torch.equal(ours, theirs), params


@pytest.mark.parametrize("seed", range(60))
def test_kept_set_equals_transformers_chain_float32(seed):
    """In float32 a token may differ only where the mass above it ties ``top_p`` to rounding."""
    logits, params = random_case(seed, torch.float32)
    ours = processor(params)(None, logits).isfinite()
    chain = hf_chain(params["temperature"], params["top_k"], params["top_p"], params["min_p"], params["keep"])
    theirs = chain(None, logits).isfinite()
    for row, token in (ours != theirs).nonzero().tolist():
        z = hf_chain(params["temperature"], params["top_k"], None, None, params["keep"])(None, logits.double())[row]
        mass_above = z.softmax(-1)[z > z[token]].sum().item()
        assert abs(mass_above - params["top_p"]) < 1e-5, (params, row, token, mass_above)


# --- per-row parameters -------------------------------------------------------------------------


def test_per_row_parameters_equal_each_row_alone():
    logits = 2.0 * torch.randn(6, 300, generator=torch.Generator().manual_seed(3))
    temperature = [1.0, 0.0, 0.7, 1.3, 1.0, 0.5]
    top_k = [0, 5, 40, 0, 3, 300]
    top_p = [1.0, 0.9, 0.8, 0.5, 1.0, 0.95]
    min_p = [0.0, 0.0, 0.1, 0.05, 0.2, 0.0]
    batched = SamplingLogitsProcessor(
        torch.tensor(temperature), torch.tensor(top_k), torch.tensor(top_p), torch.tensor(min_p), 2
    )(None, logits)
    for b in range(6):
        alone = SamplingLogitsProcessor(temperature[b], top_k[b], top_p[b], min_p[b], 2)(None, logits[b : b + 1])
        assert torch.equal(batched[b : b + 1], alone), b


def test_per_prompt_values_follow_generate_expansion():
    logits = torch.randn(6, 50, generator=torch.Generator().manual_seed(4))
    per_prompt = SamplingLogitsProcessor(top_k=torch.tensor([1, 10]))(None, logits)
    per_row = SamplingLogitsProcessor(top_k=torch.tensor([1, 1, 1, 10, 10, 10]))(None, logits)
    assert torch.equal(per_prompt, per_row)
    with pytest.raises(ValueError, match="top_k has 4 values but the batch has 6 rows"):
        SamplingLogitsProcessor(top_k=torch.tensor([1, 2, 3, 4]))(None, logits)


# --- generate() integration ---------------------------------------------------------------------


def test_temperature_zero_equals_greedy_generate():
    model = gpt2()
    prompt = torch.randint(0, 128, (3, 4), generator=torch.Generator().manual_seed(5))
    greedy = model.generate(prompt, do_sample=False, max_new_tokens=8, pad_token_id=0)
    ours = model.generate(prompt, **sampling_generate_kwargs(temperature=0), max_new_tokens=8, pad_token_id=0)
    assert torch.equal(ours, greedy)


def test_per_prompt_parameters_through_generate_expansion():
    """One temperature per prompt; generate() repeats each prompt num_return_sequences times."""
    model = gpt2()
    prompt = torch.randint(0, 128, (2, 4), generator=torch.Generator().manual_seed(12))
    greedy = model.generate(prompt[:1], do_sample=False, max_new_tokens=6, pad_token_id=0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        out = model.generate(
            prompt,
            **sampling_generate_kwargs(temperature=torch.tensor([0.0, 5.0])),
            num_return_sequences=3,
            max_new_tokens=6,
            pad_token_id=0,
        )  # (6, 10)
    assert torch.equal(out[:3], greedy.expand(3, -1))  # prompt 0: greedy in all three rows
    assert len({tuple(row) for row in out[3:, 4:].tolist()}) > 1  # prompt 1: hot, the rows differ


def flat_gpt2(vocab_size: int) -> GPT2LMHeadModel:
    """A model whose next-token logits are ``-1e-3 * token_id`` whatever the input: nearly flat."""
    model = gpt2(vocab_size, tie_word_embeddings=False, eos_token_id=None, bos_token_id=None)
    with torch.no_grad():
        model.transformer.ln_f.weight.zero_()
        model.transformer.ln_f.bias.zero_()
        model.transformer.ln_f.bias[0] = 1.0  # every hidden state becomes e_0
        model.lm_head.weight.zero_()
        model.lm_head.weight[:, 0] = -1e-3 * torch.arange(vocab_size).float()
    return model


def test_no_hidden_top_k_when_sampling_a_flat_distribution():
    model = flat_gpt2(1000)
    prompt = torch.zeros(2, 1, dtype=torch.long)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        stock = model.generate(prompt, do_sample=True, max_new_tokens=60, pad_token_id=0)[:, 1:]
        torch.manual_seed(0)
        ours = model.generate(prompt, **sampling_generate_kwargs(top_k=None), max_new_tokens=60, pad_token_id=0)[:, 1:]
    assert bool((stock < 50).all())  # transformers' own default top_k=50: never beyond the top 50
    assert (ours >= 50).float().mean().item() > 0.8  # ours: the whole (flat) vocabulary


def test_generate_samples_exactly_like_a_custom_loop():
    """generate() with our kwargs applies our processor and nothing else: same draws, same seed."""
    model = gpt2(256)
    prompt = torch.randint(0, 256, (2, 5), generator=torch.Generator().manual_seed(6))
    settings = dict(temperature=0.8, top_k=40, top_p=0.9, min_p=0.02)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(123)
        generated = model.generate(prompt, **sampling_generate_kwargs(**settings), max_new_tokens=10, pad_token_id=0)
    g = torch.Generator().manual_seed(123)
    ids = prompt
    with torch.no_grad():
        for _ in range(10):
            logits = model(ids).logits[:, -1].float()  # (B, V)
            ids = torch.cat([ids, sample_next_token(logits, **settings, generator=g)[:, None]], dim=1)
    assert torch.equal(generated, ids)


def test_a_generator_alone_decides_the_draws_and_leaves_the_global_rng_alone():
    """With ``generator=`` the global RNG neither decides the draw nor advances; without it, it does."""
    logits = torch.zeros(64, 1000)

    def draw(seed: int | None, global_seed: int) -> tuple[torch.Tensor, bool]:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(global_seed)
            before = torch.get_rng_state()
            generator = None if seed is None else torch.Generator().manual_seed(seed)
            tokens = sample_next_token(logits, top_p=0.9, generator=generator)
            return tokens, torch.equal(torch.get_rng_state(), before)

    (a, untouched), (b, _) = draw(7, global_seed=0), draw(7, global_seed=1)
    assert untouched  # the global RNG did not advance
    assert torch.equal(a, b)  # another global seed, the same draws: only the generator counts
    assert not torch.equal(a, draw(8, global_seed=0)[0])  # another generator seed, other draws
    (c, untouched), (d, _) = draw(None, global_seed=0), draw(None, global_seed=1)
    assert not untouched and not torch.equal(c, d)  # no generator: the global RNG draws


# --- validation, NaN, -inf, dtypes --------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(temperature=-0.5), ValueError, "temperature must be in"),
        (dict(temperature=math.inf), ValueError, "temperature must be in"),
        (dict(temperature="hot"), TypeError, "temperature must be a number"),
        (dict(top_k=-1), ValueError, "top_k must be in"),
        (dict(top_k=2.5), TypeError, "top_k must be an int"),
        (dict(top_k=True), TypeError, "top_k must be an int"),
        (dict(top_k=torch.tensor([1.0, 2.0])), TypeError, "integer dtype"),
        (dict(top_p=0.0), ValueError, "top_p must be in \\(0, 1\\]"),
        (dict(top_p=1.5), ValueError, "top_p must be in"),
        (dict(top_p=torch.tensor([0.5, math.nan])), ValueError, "top_p must be in"),
        (dict(min_p=-0.1), ValueError, "min_p must be in"),
        (dict(min_p=torch.ones(2, 2)), ValueError, "1-D"),
        (dict(min_tokens_to_keep=0), ValueError, "min_tokens_to_keep"),
        (dict(min_tokens_to_keep=1.0), TypeError, "min_tokens_to_keep"),
    ],
)
def test_bad_parameters_raise_at_construction(kwargs, error, match):
    with pytest.raises(error, match=match):
        SamplingLogitsProcessor(**kwargs)


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_nan_or_inf_scores_raise(bad):
    logits = torch.zeros(3, 10)
    logits[1, 4] = bad
    with pytest.raises(ValueError, match="NaN or \\+inf in rows \\[1\\]"):
        SamplingLogitsProcessor(top_p=0.9)(None, logits)


def test_all_minus_inf_rows_pass_through_and_sampling_names_them():
    logits = torch.randn(3, 20, generator=torch.Generator().manual_seed(8))
    logits[1] = -math.inf
    proc = SamplingLogitsProcessor(temperature=0.7, top_k=5, top_p=0.8, min_p=0.1)
    scores = proc(None, logits)
    assert bool(scores[1].eq(-math.inf).all())
    assert torch.equal(scores[2:], proc(None, logits[2:]))
    with pytest.raises(ValueError, match="rows \\[1\\] have no finite score"):
        proc.sample(logits)


def test_input_is_not_modified():
    logits = torch.randn(4, 100, generator=torch.Generator().manual_seed(9))
    before = logits.clone()
    SamplingLogitsProcessor(temperature=0.5, top_k=10, top_p=0.9, min_p=0.1)(None, logits)
    assert torch.equal(logits, before)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_does_not_overflow(dtype):
    logits = (torch.randn(4, 1000, generator=torch.Generator().manual_seed(10)) * 1e4).to(dtype)
    logits[:, 0] = 6e4  # near float16's limit; / 0.25 would overflow if scaled in place
    proc = SamplingLogitsProcessor(temperature=0.25, top_p=0.9)
    scores = proc(None, logits)
    reference = proc(None, logits.float())
    assert scores.dtype == dtype
    assert not bool(scores.isnan().any()) and not bool((scores == math.inf).any())
    assert torch.equal(scores.isfinite(), reference.isfinite())
    torch.testing.assert_close(scores.float().softmax(-1), reference.softmax(-1), atol=1e-3, rtol=0)


def test_generate_kwargs_switch_every_builtin_warper_off():
    kwargs = SamplingLogitsProcessor(top_p=0.9).generate_kwargs()
    assert kwargs["do_sample"] is True and kwargs["top_k"] == 0
    assert kwargs["temperature"] == 1.0 and kwargs["top_p"] == 1.0 and kwargs["min_p"] is None
    model = gpt2()
    config, _ = model._prepare_generation_config(None, **{k: v for k, v in kwargs.items() if k != "logits_processor"})
    built = model._get_logits_processor(
        config,
        input_ids_seq_length=1,
        encoder_input_ids=torch.zeros(1, 1).long(),
        logits_processor=kwargs["logits_processor"],
        device="cpu",
    )
    assert [type(p) for p in built] == [SamplingLogitsProcessor]
