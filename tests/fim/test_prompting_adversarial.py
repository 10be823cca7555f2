"""Adversarial inputs to FIM prompting: ``fim_prompts`` / ``fim_prompt_ids``, ``left_padded``, ``middle_ids``
and ``infill``.

Input classes: special-token strings in prefixes and suffixes, flags given as strings, texts that are
not strings, hostile counts (``num_return_sequences``, ``num_beams``, ``max_new_tokens``), every decoding
mode (greedy, sampling, beam search, beam sampling; the others refused), prompts longer than the
model's positions, a tokenizer larger than the model, wrong shapes and dtypes of ids.
"""

from __future__ import annotations

import pytest
import torch
from transformers import LogitsProcessor, LogitsProcessorList

from hf_lmobj.fim.format import fim_token_ids
from hf_lmobj.fim.prompting import fim_prompt_ids, fim_prompts, infill, left_padded, middle_ids
from hf_lmobj.plain_text import encode_plain, special_ids
from tests.testing_utils import tiny_gpt2

LITERALS = ["s = '<fim_middle>'\n", "'<fim_prefix>'", "<fim_suffix>", "x = '</s>' + '<pad>'", "'[MASK]' '<mask>'",
            "<|endoftext|>"]  # fmt: skip


@pytest.fixture(scope="module")
def model(tokenizer):
    return tiny_gpt2(tokenizer, width=16, layers=1).eval()


class WriteSuffixStart(LogitsProcessor):
    """Each row writes the first token of its own prompt's suffix, then EOS (a large bonus, not a hard mask,
    so that beam search still has other finite candidates)."""

    def __init__(self, tokenizer) -> None:
        self.suffix, self.eos = fim_token_ids(tokenizer).suffix, tokenizer.eos_token_id
        self.width: int | None = None

    def __call__(self, input_ids, scores):
        self.width = self.width or input_ids.shape[1]
        scores = scores.clone()
        for row in range(input_ids.shape[0]):
            ids = input_ids[row].tolist()
            target = ids[ids.index(self.suffix) + 1]
            done = target in ids[self.width :]
            scores[row, self.eos if done else target] += 100.0
        return scores


def _first_token_text(tokenizer, text: str) -> str:
    return tokenizer.decode(encode_plain(tokenizer, [text])[0][:1])


PREFIXES, SUFFIXES = ["x = ", "y = "], ["alpha\n", "beta\n"]  # prompts of the same length (no padding)


# ----------------------------------------------------------------------------- literal text stays text
@pytest.mark.parametrize("spm", [False, True])
@pytest.mark.parametrize("literal", LITERALS)
def test_special_token_strings_in_prefix_and_suffix_stay_characters(tokenizer, literal, spm):
    ids = fim_token_ids(tokenizer)
    prompt = fim_prompt_ids(tokenizer, literal, literal, spm=spm)
    assert [prompt.count(s) for s in ids.sentinels] == [1, 1, 1]
    controls = [i for i in prompt if i in special_ids(tokenizer)]
    assert controls == [tokenizer.bos_token_id, ids.prefix, ids.suffix, ids.middle]  # PSM and SPM alike
    assert tokenizer.decode([i for i in prompt if i not in controls]) == literal * 2  # both sides, as characters


def test_the_issue_example_builds_one_fim_middle(tokenizer):
    ids = fim_token_ids(tokenizer)
    (prompt,) = fim_prompts(tokenizer, ["s = '<fim_middle>'\n"], ["\n"])
    encoded = encode_plain(tokenizer, ["s = '<fim_middle>'\n", "\n"])
    assert prompt == [tokenizer.bos_token_id, ids.prefix, *encoded[0], ids.suffix, *encoded[1], ids.middle]
    assert prompt.count(ids.middle) == 1


# ----------------------------------------------------------------------------- bad prompt arguments
@pytest.mark.parametrize(
    "kwargs, error, word",
    [
        ({"spm": "False"}, TypeError, "spm must be True or False"),
        ({"spm": 1}, TypeError, "spm must be True or False"),
        ({"add_bos": "yes"}, TypeError, "add_bos must be True or False"),
        ({"prefixes": [None]}, TypeError, r"prefixes\[0\] must be a string"),
        ({"suffixes": [b"x"]}, TypeError, r"suffixes\[0\] must be a string"),
        ({"max_prefix_tokens": 1.5}, ValueError, "max_prefix_tokens must be an int >= 0"),
        ({"max_suffix_tokens": True}, ValueError, "max_suffix_tokens must be an int >= 0"),
        ({"fim_tokens": "<fim_prefix>"}, TypeError, "fim_tokens must be a FimTokens"),
        ({"suffixes": ["a", "b"]}, ValueError, "one suffix per prefix"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_bad_prompt_arguments_are_refused(tokenizer, kwargs, error, word):
    arguments = {"prefixes": ["a"], "suffixes": ["b"], **kwargs}
    with pytest.raises(error, match=word):
        fim_prompts(tokenizer, **arguments)


def test_fim_prompt_ids_takes_one_pair_of_strings(tokenizer):
    with pytest.raises(TypeError, match="prefix and suffix must be strings"):
        fim_prompt_ids(tokenizer, ["a"], "b")


@pytest.mark.parametrize(
    "rows, pad, error, word",
    [([], 0, ValueError, "non-empty list"), ([[1.5]], 0, TypeError, "list of ints"),
     ([[5]], -1, ValueError, "pad_token_id"), ([[5]], True, TypeError, "pad_token_id"),
     (torch.tensor([[5, 6]]), 0, ValueError, "non-empty list")],
)  # fmt: skip
def test_left_padded_refuses_bad_rows_and_pads(rows, pad, error, word):
    with pytest.raises(error, match=word):
        left_padded(rows, pad)


@pytest.mark.parametrize(
    "sequences, length, error, word",
    [(torch.tensor([5, 6, 2]), 1, ValueError, "2-D"), (torch.tensor([[5.0, 2.0]]), 1, TypeError, "integer"),
     (torch.tensor([[5, 2]]), 3, ValueError, "longer than the sequences"),
     (torch.tensor([[5, 2]]), -1, ValueError, "prompt_length")],
)  # fmt: skip
def test_middle_ids_refuses_bad_shapes_dtypes_and_lengths(sequences, length, error, word):
    with pytest.raises(error, match=word):
        middle_ids(sequences, length, eos_token_id=2)


# ----------------------------------------------------------------------------- what infill returns
def test_one_string_in_one_middle_out_and_lists_stay_one_per_prompt(tokenizer, model, one_torch_thread):
    force = LogitsProcessorList([WriteSuffixStart(tokenizer)])
    one = infill(model, tokenizer, PREFIXES[0], SUFFIXES[0], max_new_tokens=4, logits_processor=force)
    assert one == _first_token_text(tokenizer, SUFFIXES[0])
    force = LogitsProcessorList([WriteSuffixStart(tokenizer)])
    assert infill(model, tokenizer, PREFIXES, SUFFIXES, max_new_tokens=4, logits_processor=force) == [
        _first_token_text(tokenizer, s) for s in SUFFIXES
    ]


@pytest.mark.parametrize(
    "decoding",
    [{"do_sample": True}, {"num_beams": 3}, {"num_beams": 2, "do_sample": True}],
    ids=["sampling", "beam-search", "beam-sampling"],
)
def test_num_return_sequences_middles_per_prompt_grouped_by_prompt(tokenizer, model, decoding, one_torch_thread):
    count = 2
    force = LogitsProcessorList([WriteSuffixStart(tokenizer)])
    torch.manual_seed(0)
    middles = infill(model, tokenizer, PREFIXES, SUFFIXES, max_new_tokens=4, num_return_sequences=count,
                     logits_processor=force, **decoding)  # fmt: skip
    assert len(middles) == len(PREFIXES) * count and all(isinstance(m, str) for m in middles)
    first = [_first_token_text(tokenizer, s) for s in SUFFIXES]
    assert middles[0] == first[0] and middles[count] == first[1]  # prompt 0's group, then prompt 1's
    if decoding.get("num_beams", 1) == 1:  # sampling under the bonus: every sample is the forced middle
        assert middles == [first[0]] * count + [first[1]] * count


def test_beam_search_returns_every_requested_beam_for_one_prompt(tokenizer, model, one_torch_thread):
    force = LogitsProcessorList([WriteSuffixStart(tokenizer)])
    middles = infill(model, tokenizer, PREFIXES[0], SUFFIXES[0], max_new_tokens=4, num_beams=3,
                     num_return_sequences=3, logits_processor=force)  # fmt: skip
    assert isinstance(middles, list) and len(middles) == 3
    assert middles[0] == _first_token_text(tokenizer, SUFFIXES[0])


def test_healed_spm_prompts_with_beams_match_each_prompt_alone(tokenizer, model, one_torch_thread):
    beams = {"spm": True, "max_new_tokens": 3, "num_beams": 2, "num_return_sequences": 2}
    together = infill(model, tokenizer, PREFIXES, SUFFIXES, **beams)
    alone = [m for p, s in zip(PREFIXES, SUFFIXES) for m in infill(model, tokenizer, p, s, **beams)]
    assert len(together) == 4 and together == alone


def test_return_dict_in_generate_still_gives_text(tokenizer, model, one_torch_thread):
    force = LogitsProcessorList([WriteSuffixStart(tokenizer)])
    middle = infill(model, tokenizer, PREFIXES[0], SUFFIXES[0], max_new_tokens=4, logits_processor=force,
                    return_dict_in_generate=True, output_scores=True)  # fmt: skip
    assert middle == _first_token_text(tokenizer, SUFFIXES[0])


class Prefer(LogitsProcessor):
    def __init__(self, token: int) -> None:
        self.token = token

    def __call__(self, input_ids, scores):
        scores = scores.clone()
        scores[:, self.token] += 1e4
        return scores


@pytest.mark.parametrize("name", ["<mask>", "<pad>", "<s>", "<extra_id_0>", "<fim_pad>"])
def test_the_middle_never_holds_a_control_token(tokenizer, model, name, one_torch_thread):
    prefer = LogitsProcessorList([Prefer(tokenizer.convert_tokens_to_ids(name))])
    middle = infill(model, tokenizer, "s = '<fim_middle>'", "\n", max_new_tokens=3, logits_processor=prefer)
    assert name not in middle and len(encode_plain(tokenizer, [middle])[0]) == 3


# ----------------------------------------------------------------------------- what infill refuses
@pytest.mark.parametrize(
    "kwargs, error, word",
    [
        ({"num_return_sequences": 0}, ValueError, "num_return_sequences must be an int >= 1"),
        ({"num_return_sequences": -2, "do_sample": True}, ValueError, "num_return_sequences must be an int >= 1"),
        ({"num_return_sequences": True}, TypeError, "num_return_sequences"),
        ({"num_return_sequences": 1.5, "do_sample": True}, TypeError, "num_return_sequences"),
        ({"num_return_sequences": 2}, ValueError, "greedy search writes one middle per prompt"),
        ({"num_return_sequences": 3, "num_beams": 2}, ValueError, "more than num_beams=2"),
        ({"num_beams": 0}, ValueError, "num_beams must be an int >= 1"),
        ({"do_sample": "yes"}, TypeError, "do_sample must be True or False"),
        ({"num_beams": 2, "num_beam_groups": 2, "diversity_penalty": 0.5}, ValueError, "group_beam_search"),
        ({"penalty_alpha": 0.6, "top_k": 4}, ValueError, "contrastive_search"),
        ({"max_new_tokens": 0}, ValueError, "max_new_tokens must be an int >= 1"),
        ({"max_new_tokens": -5}, ValueError, "max_new_tokens must be an int >= 1"),
        ({"max_new_tokens": True}, TypeError, "max_new_tokens"),
        ({"max_new_tokens": 2.5}, TypeError, "max_new_tokens"),
        ({"max_new_tokens": 60}, ValueError, "max_prefix_tokens"),  # 6 prompt tokens + 60 > 64 positions
        ({"input_ids": torch.tensor([[1]])}, TypeError, "builds 'input_ids' itself"),
        ({"max_length": 20}, TypeError, "builds 'max_length' itself"),
        ({"spm": "no"}, TypeError, "spm must be True or False"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_hostile_generation_arguments_are_refused_by_name(tokenizer, model, kwargs, error, word):
    with pytest.raises(error, match=word):
        infill(model, tokenizer, "x = ", "\n", **{"max_new_tokens": 4, **kwargs})


def test_a_prompt_longer_than_the_model_is_refused_and_cutting_it_fits(tokenizer, model, one_torch_thread):
    prefix = "value = value + 1\n" * 30
    with pytest.raises(ValueError, match="prompt 0 has .* tokens.*model has 64"):
        infill(model, tokenizer, prefix, "\n", max_new_tokens=4)
    assert isinstance(infill(model, tokenizer, prefix, "\n", max_new_tokens=4, max_prefix_tokens=16), str)


def test_a_tokenizer_larger_than_the_model_is_refused(tokenizer):
    small = tiny_gpt2(tokenizer, vocab_size=512, width=16, layers=1).eval()
    with pytest.raises(ValueError, match="the tokenizer has 1024 tokens but the model's embeddings have 512"):
        infill(small, tokenizer, "x = ", "\n", max_new_tokens=2)


@pytest.mark.parametrize(
    "prefix, suffix, error, word",
    [([], [], ValueError, "no prompt"), ("x", ["y"], TypeError, "both be strings"),
     (["x", None], ["y", "z"], TypeError, r"prefix\[1\] must be a string")],
)  # fmt: skip
def test_bad_prefix_and_suffix_lists_are_refused(tokenizer, model, prefix, suffix, error, word):
    with pytest.raises(error, match=word):
        infill(model, tokenizer, prefix, suffix, max_new_tokens=2)
