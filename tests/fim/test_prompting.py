"""FIM prompts for generate(): the training layout up to <fim_middle>, cut to fit, stopped at EOS."""

from __future__ import annotations

import pytest
import torch
from transformers import LogitsProcessor, LogitsProcessorList

from hf_lmobj.fim.format import FimTokens, fim_token_ids
from hf_lmobj.fim.healing import heal_prompts
from hf_lmobj.fim.prompting import fim_prompt_ids, fim_prompts, infill, left_padded, middle_ids
from hf_lmobj.fim.transform import FimDraw, FimTransform
from hf_lmobj.models.stock import ModelArguments, build_model


def _encode(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_prompts_are_the_training_layout_up_to_the_middle(tokenizer):
    ids = fim_token_ids(tokenizer)
    bos = tokenizer.bos_token_id
    prefix, suffix = "def f(x):\n    ", "\n    return y\n"
    psm = fim_prompt_ids(tokenizer, prefix, suffix)
    spm = fim_prompt_ids(tokenizer, prefix, suffix, spm=True)
    assert psm == [bos, ids.prefix, *_encode(tokenizer, prefix), ids.suffix, *_encode(tokenizer, suffix), ids.middle]
    assert spm == [bos, ids.prefix, ids.suffix, *_encode(tokenizer, suffix), ids.middle, *_encode(tokenizer, prefix)]
    # a training document cut at the same characters starts with exactly the prompt
    text = prefix + "y = x" + suffix
    document = [bos, *_encode(tokenizer, text), tokenizer.eos_token_id]
    # SPM encodes prefix and middle as one text, so its prompt is healed: the prefix's last token is the model's
    (healed,), (lead,) = heal_prompts(tokenizer, [spm], protected={bos, *ids.sentinels})
    assert healed == spm[:-1] and lead == tokenizer.decode(spm[-1:]) and prefix.endswith(lead)
    for spm_flag, prompt, written in ((False, psm, "y = x"), (True, healed, lead + "y = x")):
        cut = FimDraw(True, spm_flag, len(prefix), len(prefix) + len("y = x"))
        trained = FimTransform(tokenizer).permute(document, text, cut)
        assert trained[: len(prompt)] == prompt
        assert tokenizer.decode(trained[len(prompt) : -1]) == written and trained[-1] == tokenizer.eos_token_id


def test_prompts_are_cut_to_fit_and_may_skip_bos(tokenizer):
    ids = fim_token_ids(tokenizer)
    prefix, suffix = "a = 1\nb = 2\nc = 3\n", "\nd = 4\ne = 5\n"
    pre, suf = _encode(tokenizer, prefix), _encode(tokenizer, suffix)
    cut = fim_prompt_ids(tokenizer, prefix, suffix, add_bos=False, max_prefix_tokens=3, max_suffix_tokens=2)
    assert cut == [ids.prefix, *pre[-3:], ids.suffix, *suf[:2], ids.middle]
    empty = fim_prompt_ids(tokenizer, prefix, suffix, add_bos=False, max_prefix_tokens=0, max_suffix_tokens=0)
    assert empty == [ids.prefix, ids.suffix, ids.middle]
    assert fim_prompts(tokenizer, ["", "x"], ["", ""], add_bos=False) == [
        [ids.prefix, ids.suffix, ids.middle],
        [ids.prefix, *_encode(tokenizer, "x"), ids.suffix, ids.middle],
    ]


def test_bad_prompt_arguments(tokenizer):
    with pytest.raises(TypeError, match="lists of strings"):
        fim_prompts(tokenizer, "a", "b")
    with pytest.raises(ValueError, match="one suffix per prefix"):
        fim_prompts(tokenizer, ["a", "b"], ["c"])
    with pytest.raises(ValueError, match="max_prefix_tokens must be an int >= 0"):
        fim_prompts(tokenizer, ["a"], ["b"], max_prefix_tokens=-1)
    with pytest.raises(ValueError, match="no FIM token '<PRE>'"):
        fim_prompt_ids(tokenizer, "a", "b", fim_tokens=FimTokens("<PRE>", "<MID>", "<SUF>"))


def test_middle_is_cut_at_the_first_eos_and_left_padding():
    sequences = torch.tensor([[0, 5, 6, 7, 2, 9], [5, 6, 8, 2, 2, 2], [5, 6, 1, 1, 1, 1]])
    assert middle_ids(sequences, prompt_length=2, eos_token_id=2) == [[6, 7], [8], [1, 1, 1, 1]]
    padded = left_padded([[5, 6, 7], [8], []], pad_token_id=0)
    assert padded["input_ids"].tolist() == [[5, 6, 7], [0, 0, 8], [0, 0, 0]]
    assert padded["attention_mask"].tolist() == [[1, 1, 1], [0, 0, 1], [0, 0, 0]]


class ForceTokens(LogitsProcessor):
    """Makes every row generate ``tokens`` in order (then EOS forever), whatever the model says."""

    def __init__(self, tokens: list[int], prompt_width: int) -> None:
        self.tokens, self.prompt_width = tokens, prompt_width

    def __call__(self, input_ids, scores):
        step = input_ids.shape[1] - self.prompt_width
        forced = torch.full_like(scores, -float("inf"))
        forced[:, self.tokens[min(step, len(self.tokens) - 1)]] = 0.0
        return forced


def test_infill_stops_at_the_end_of_middle_token(tokenizer, one_torch_thread):
    torch.manual_seed(0)
    model = build_model("causal", tokenizer, ModelArguments(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                                         max_position_embeddings=64))  # fmt: skip
    answer = _encode(tokenizer, "y = x + 1")
    prefixes, suffixes = ["def f(x):\n    ", "z = "], ["\n    return y\n", "\n"]
    width = max(len(p) for p in fim_prompts(tokenizer, prefixes, suffixes))
    force = LogitsProcessorList([ForceTokens([*answer, tokenizer.eos_token_id, *answer], width)])
    model.train()
    middles = infill(model, tokenizer, prefixes, suffixes, max_new_tokens=20, logits_processor=force)
    assert model.training  # generation ran in eval mode, the caller's mode is back
    assert middles == ["y = x + 1", "y = x + 1"]  # nothing after EOS, no prompt, no padding
    # SPM: the healed prompt lacks the prefix's last token (" ="'s space); the model writes it, infill drops it
    spm = fim_prompt_ids(tokenizer, prefixes[1], suffixes[1], spm=True)
    lead = tokenizer.decode(spm[-1:])
    written = _encode(tokenizer, lead + "y = x + 1")
    one = infill(
        model,
        tokenizer,
        prefixes[1],
        suffixes[1],
        max_new_tokens=20,
        spm=True,
        logits_processor=LogitsProcessorList([ForceTokens([*written, tokenizer.eos_token_id], len(spm) - 1)]),
    )
    assert one == "y = x + 1"
    with pytest.raises(TypeError, match="both be strings"):
        infill(model, tokenizer, "a", ["b"])


class PreferToken(LogitsProcessor):
    """Adds a large bonus to one token's score at every step."""

    def __init__(self, token: int) -> None:
        self.token = token

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        scores = scores.clone()
        scores[:, self.token] += 1e4
        return scores


def test_infill_never_writes_a_sentinel(tokenizer, one_torch_thread):
    torch.manual_seed(0)
    model = build_model("causal", tokenizer, ModelArguments(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                                         max_position_embeddings=64))  # fmt: skip
    ids = fim_token_ids(tokenizer)
    prefer = LogitsProcessorList([PreferToken(ids.suffix)])
    prompt = torch.tensor([fim_prompt_ids(tokenizer, "a = ", "\n")])
    unchecked = model.generate(prompt, max_new_tokens=4, do_sample=False, logits_processor=prefer,
                               eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.eos_token_id)  # fmt: skip
    assert unchecked[0, prompt.shape[1] :].tolist() == [ids.suffix] * 4  # what the bonus does unsuppressed
    middle = infill(model, tokenizer, "a = ", "\n", max_new_tokens=4, logits_processor=prefer)
    written = tokenizer(middle, add_special_tokens=False)["input_ids"]
    assert written and not set(written) & set(ids.sentinels)
    assert "<fim_" not in middle
