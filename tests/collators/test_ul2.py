"""UL2 mixture of denoisers: lengths, mode tokens, weights, S split, and the prefix-LM variant."""

from __future__ import annotations

import pytest
import torch

from hf_lmobj.collators._noise import corrupted_lengths
from hf_lmobj.collators.span import sentinel_token_ids
from hf_lmobj.collators.ul2 import UL2_DENOISERS, DataCollatorForUL2, Denoiser, ul2_lengths
from tests.testing_utils import assert_right_padded, real, reconstruct, tiny_llama, tiny_t5

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_default_mixture_is_the_ul2_paper_one():
    settings = sorted((d.mode_token, d.mean_noise_span_length, d.noise_density) for d in UL2_DENOISERS)
    assert settings == sorted(
        [
            ("[R]", 3.0, 0.15),
            ("[R]", 8.0, 0.15),
            ("[S]", None, 0.25),
            ("[X]", 3.0, 0.5),
            ("[X]", 8.0, 0.5),
            ("[X]", 64.0, 0.15),
            ("[X]", 64.0, 0.5),
        ]
    )


@pytest.mark.parametrize("input_length", [32, 128, 512])
@pytest.mark.parametrize("decoder_only", [False, True])
def test_ul2_lengths_fit_every_denoiser_and_are_maximal(input_length, decoder_only):
    raw, targets = ul2_lengths(input_length, decoder_only=decoder_only)

    def need(n: int, d: Denoiser) -> tuple[int, int]:  # recomputed from the T5 counts by hand
        if d.mean_noise_span_length is None:
            target = min(max(round(n * d.noise_density), 1), n - 1)
            return 1 + n - target + 1, target + 1
        inputs, out = corrupted_lengths(n, d.noise_density, d.mean_noise_span_length)
        return 1 + inputs, out

    def total(n: int, d: Denoiser) -> int:
        return sum(need(n, d)) if decoder_only else need(n, d)[0]

    assert all(total(raw, d) <= input_length for d in UL2_DENOISERS)
    assert any(total(raw + 1, d) > input_length for d in UL2_DENOISERS)
    assert targets == max(need(raw, d)[1] for d in UL2_DENOISERS)


def test_fixed_length_batches_and_reconstruction(tokenizer):
    collator = DataCollatorForUL2(tokenizer, input_length=128, seed=0)
    raw = collator.raw_tokens_length
    features = [{"input_ids": list(range(200 + i, 200 + i + raw)), "idx": i} for i in range(64)]
    batch = collator(features)
    assert batch["input_ids"].shape == (64, 128)
    assert batch["labels"].shape == (64, collator.targets_length)
    modes = {tokenizer.convert_tokens_to_ids(t): t for t in ("[R]", "[S]", "[X]")}
    sentinels, eos = set(sentinel_token_ids(tokenizer)), tokenizer.eos_token_id
    seen = set()
    for row, feature in enumerate(features):
        inputs = real(batch["input_ids"][row], batch["attention_mask"][row])
        labels = real(batch["labels"][row])
        mode = modes[inputs[0]]
        seen.add(mode)
        if mode == "[S]":  # prefix LM: the last 25% is the target
            cut = raw - round(raw * 0.25)
            assert inputs[1:] == feature["input_ids"][:cut] + [eos]
            assert labels == feature["input_ids"][cut:] + [eos]
        else:
            assert reconstruct(inputs[1:-1], labels, sentinels, eos) == feature["input_ids"]
    assert seen == {"[R]", "[S]", "[X]"}


def test_weights_choose_the_denoiser(tokenizer):
    mixture = (
        Denoiser("[R]", 3.0, 0.15, weight=3.0),
        Denoiser("[S]", None, 0.25, weight=1.0),
        Denoiser("[X]", 64.0, 0.5, weight=0.0),
    )
    collator = DataCollatorForUL2(tokenizer, denoisers=mixture, seed=1)
    chosen = [collator.corrupt({"input_ids": [300, 301, 302, 303], "idx": i})[0] for i in range(2000)]
    share = torch.bincount(torch.tensor(chosen), minlength=3).float() / len(chosen)
    assert share[2] == 0 and abs(float(share[0]) - 0.75) < 0.04


def test_encoder_decoder_model_takes_ul2_batches(tokenizer):
    model = tiny_t5(tokenizer)
    collator = DataCollatorForUL2(tokenizer, model=model, seed=0)
    batch = collator([{"input_ids": list(range(300, 300 + n))} for n in (30, 80, 55)])
    assert torch.equal(batch["decoder_input_ids"], model._shift_right(batch["labels"]))
    modes = {tokenizer.convert_tokens_to_ids(t) for t in ("[R]", "[S]", "[X]")}
    sentinels, eos = set(sentinel_token_ids(tokenizer)), tokenizer.eos_token_id
    for row, n in enumerate((30, 80, 55)):
        inputs, labels = assert_right_padded(batch, row, tokenizer.pad_token_id)
        assert labels[-1] == eos and inputs[0] in modes and inputs[-1] == eos
        original = list(range(300, 300 + n))
        if sentinels.isdisjoint(inputs):  # [S], prefix LM: the input is a prefix, the label the rest
            assert inputs[1:-1] + labels[:-1] == original
        else:
            assert reconstruct(inputs[1:-1], labels, sentinels, eos) == original


def test_prefix_lm_variant_is_bidirectional_on_the_prefix_only(tokenizer):
    collator = DataCollatorForUL2(tokenizer, denoisers=(Denoiser("[S]", None, 0.25),), decoder_only=True, seed=0)
    feature = {"input_ids": list(range(300, 340))}
    batch = collator([feature, {"input_ids": list(range(400, 420))}])
    mask = batch["attention_mask"]
    assert mask.shape == (2, 1, 43, 43) and mask.dtype == torch.float32
    prefix = 1 + 30 + 1  # [S], 30 prefix tokens, EOS
    assert batch["labels"][0, :prefix].eq(-100).all()
    assert batch["labels"][0, prefix:].tolist() == list(range(330, 340)) + [tokenizer.eos_token_id]
    assert batch["labels"][1, 1 + 15 + 1 + 5 + 1 :].eq(-100).all()  # padding

    model = tiny_llama(vocab_size=len(tokenizer), positions=2048, attn_implementation="eager").eval()
    with torch.no_grad():
        base = model(**batch).logits
        changed_prefix = batch["input_ids"].clone()
        changed_prefix[0, 20] = 900  # a later prefix token ...
        later = model(input_ids=changed_prefix, attention_mask=mask).logits
        changed_target = batch["input_ids"].clone()
        changed_target[0, 37] = 900  # a target token ...
        future = model(input_ids=changed_target, attention_mask=mask).logits
    assert not torch.allclose(base[0, 5], later[0, 5])  # ... is seen by earlier prefix tokens
    torch.testing.assert_close(base[0, :37], future[0, :37])  # ... is not seen by earlier ones

    with torch.no_grad():  # loss only on the target part (HF shifts the labels itself)
        loss = model(**batch).loss
    shift_logits, shift_labels = base[:, :-1], batch["labels"][:, 1:]
    expected = torch.nn.functional.cross_entropy(
        shift_logits.reshape(-1, shift_logits.shape[-1]), shift_labels.reshape(-1), ignore_index=-100
    )
    torch.testing.assert_close(loss, expected)


def test_bad_input(tokenizer):
    with pytest.raises(ValueError, match="noise_density"):
        Denoiser("[R]", 3.0, 1.0)
    with pytest.raises(ValueError, match="positive weight"):
        DataCollatorForUL2(tokenizer, denoisers=(Denoiser("[R]", 3.0, 0.15, weight=0.0),))
    with pytest.raises(ValueError, match="mode token"):
        DataCollatorForUL2(tokenizer, denoisers=(Denoiser("[Q]", 3.0, 0.15),))
    collator = DataCollatorForUL2(tokenizer, input_length=64, seed=0)
    with pytest.raises(ValueError, match="at least 2"):
        collator([{"input_ids": [300]}])
    with pytest.raises(ValueError, match="raw_tokens_length"):
        collator([{"input_ids": list(range(300, 300 + collator.raw_tokens_length + 1))}])
