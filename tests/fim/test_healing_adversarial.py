"""Adversarial inputs to token healing: ``heal_prompts`` and ``LeadLogitsProcessor``.

Input classes: prompts that end with a control token, leads that spell a special token's string,
batch-size mismatches between ``scores`` / ``input_ids`` and the leads (beams, returned sequences),
scores narrower than the vocabulary, wrong shapes and dtypes, bad prompt lengths, leads no token
can write, prompts and protected sets of the wrong kind.
"""

from __future__ import annotations

import pytest
import torch
from transformers import LogitsProcessorList

from hf_lmobj.fim.healing import LeadLogitsProcessor, heal_prompts
from hf_lmobj.plain_text import encode_plain, special_ids
from tests.testing_utils import tiny_gpt2


@pytest.fixture(scope="module")
def processor_factory(tokenizer):
    cache = {}

    def make(leads, prompt_length=2):
        if "texts" not in cache:
            cache["texts"] = LeadLogitsProcessor(tokenizer, [""], 0).texts
        processor = LeadLogitsProcessor.__new__(LeadLogitsProcessor)  # reuse the decoded vocabulary
        processor.tokenizer, processor.leads, processor.prompt_length = tokenizer, list(leads), prompt_length
        processor.texts = cache["texts"]
        return processor

    return make


# ----------------------------------------------------------------------------- heal_prompts
@pytest.mark.parametrize("name", ["</s>", "<pad>", "<mask>", "<unk>", "<fim_middle>", "<extra_id_0>", "[X]"])
def test_a_prompt_ending_with_a_control_token_is_never_healed(tokenizer, name):
    prompt = [*encode_plain(tokenizer, ["x = "])[0], tokenizer.convert_tokens_to_ids(name)]
    assert heal_prompts(tokenizer, [prompt], protected=set()) == ([prompt], [""])


def test_a_literal_sentinel_string_at_the_end_is_healed_as_text(tokenizer):
    prompt = encode_plain(tokenizer, ["s = '<fim_middle>"])[0]
    (healed,), (lead,) = heal_prompts(tokenizer, [prompt], protected=None)
    assert healed == prompt[:-1] and lead == tokenizer.decode(prompt[-1:]) and lead.endswith(">")


@pytest.mark.parametrize(
    "prompts, protected, error, word",
    [([5, 6, 7], set(), TypeError, "not one prompt"), ("abc", set(), TypeError, "list of prompts"),
     ([[5, 6.5]], set(), TypeError, "list of ints"), ([[5]], "abc", TypeError, "protected"),
     ([[5]], {1.5}, TypeError, "protected"), (torch.tensor([[5, 6]]), set(), TypeError, "list of prompts")],
)  # fmt: skip
def test_heal_prompts_refuses_inputs_of_the_wrong_kind(tokenizer, prompts, protected, error, word):
    with pytest.raises(error, match=word):
        heal_prompts(tokenizer, prompts, protected)


def test_heal_prompts_leaves_empty_prompts_and_an_empty_batch_alone(tokenizer):
    assert heal_prompts(tokenizer, [], set()) == ([], [])
    assert heal_prompts(tokenizer, [[]], set()) == ([[]], [""])


# ----------------------------------------------------------------------------- special tokens never write a lead
@pytest.mark.parametrize("lead", ["<", "<fim_middle>", "</s>x", "<pad>", "[", "\n", "<extra_id_0> "])
def test_special_tokens_never_stand_for_lead_text(tokenizer, processor_factory, lead):
    processor = processor_factory([lead])
    scores = processor(torch.tensor([[5, 6]]), torch.zeros(1, len(tokenizer)))
    allowed = torch.nonzero(scores[0] == 0).flatten().tolist()
    assert allowed and not set(allowed) & special_ids(tokenizer)
    texts = [tokenizer.decode([i]) for i in allowed]
    assert all(t.startswith(lead) or lead.startswith(t) for t in texts)


def test_the_real_constructor_blanks_every_special_token(tokenizer):
    processor = LeadLogitsProcessor(tokenizer, ["<"], prompt_length=0)
    assert all(processor.texts[i] == "" for i in special_ids(tokenizer))
    assert processor.texts[encode_plain(tokenizer, ["<"])[0][0]] == "<"


# ----------------------------------------------------------------------------- rows, widths, shapes
@pytest.mark.parametrize(
    "leads, rows, ids_rows",
    [(["a", "b"], 3, 3), (["a"], 2, 2), (["a", "b"], 2, 3), (["a", "b", "c", "d"], 2, 2)],
    ids=["more-rows", "beams-not-expanded", "ids-and-scores-differ", "fewer-rows"],
)
def test_rows_that_do_not_match_the_leads_are_refused(tokenizer, processor_factory, leads, rows, ids_rows):
    processor = processor_factory(leads)
    with pytest.raises(ValueError, match=f"has {len(leads)} leads but generate\\(\\) runs {rows} rows"):
        processor(torch.zeros(ids_rows, 2, dtype=torch.long), torch.zeros(rows, len(tokenizer)))


def test_scores_narrower_than_the_vocabulary_are_refused(tokenizer, processor_factory):
    with pytest.raises(ValueError, match="do not belong together"):
        processor_factory(["a"])(torch.zeros(1, 2, dtype=torch.long), torch.zeros(1, 512))


@pytest.mark.parametrize(
    "input_ids, scores, error, word",
    [(torch.zeros(2, dtype=torch.long), torch.zeros(1, 1024), ValueError, "input_ids must be a 2-D"),
     (torch.zeros(1, 2, dtype=torch.long), torch.zeros(1024), ValueError, "scores must be a 2-D"),
     (torch.zeros(1, 2), torch.zeros(1, 1024), TypeError, "integer token ids"),
     (torch.zeros(1, 2, dtype=torch.long), torch.zeros(1, 1024, dtype=torch.long), TypeError, "floating point"),
     ([[5, 6]], torch.zeros(1, 1024), ValueError, "input_ids must be a 2-D"),
     (torch.zeros(1, 1, dtype=torch.long), torch.zeros(1, 1024), ValueError, "fewer than prompt_length=2")],
)  # fmt: skip
def test_wrong_shapes_and_dtypes_are_refused(tokenizer, processor_factory, input_ids, scores, error, word):
    with pytest.raises(error, match=word):
        processor_factory(["a"])(input_ids, scores)


@pytest.mark.parametrize(
    "leads, length, error, word",
    [("ab", 0, TypeError, "wrap one text in a list"), ([None], 0, TypeError, r"leads\[0\] must be a string"),
     (["a"], -1, ValueError, "prompt_length must be an int >= 0"), (["a"], True, TypeError, "prompt_length"),
     (["a"], 1.5, TypeError, "prompt_length")],
)  # fmt: skip
def test_bad_leads_and_prompt_lengths_are_refused(tokenizer, leads, length, error, word):
    with pytest.raises(error, match=word):
        LeadLogitsProcessor(tokenizer, leads, length)


def test_a_lead_no_token_can_write_is_an_error_not_garbage(tokenizer, processor_factory):
    lead = "\U0001d518"  # a 4-byte character the small byte-level vocabulary has no token for
    processor = processor_factory([lead])
    assert not any(t and (t.startswith(lead) or lead.startswith(t)) for t in processor.texts)
    with pytest.raises(ValueError, match="row 0: no token of the vocabulary writes"):
        processor(torch.tensor([[5, 6]]), torch.zeros(1, len(tokenizer)))


def test_padded_embeddings_are_masked_during_the_lead(tokenizer, processor_factory):
    scores = processor_factory(["\n"])(torch.tensor([[5, 6]]), torch.zeros(1, len(tokenizer) + 8))
    assert bool((scores[0, len(tokenizer) :] == -float("inf")).all())


def test_beam_search_writes_the_lead_in_every_row_when_leads_are_repeated(tokenizer, one_torch_thread):
    model = tiny_gpt2(tokenizer, positions=32, width=16, layers=1, pad_token_id=None).eval()
    prompts = [encode_plain(tokenizer, ["if x:\n"])[0], encode_plain(tokenizer, ["y = 1 "])[0]]
    healed, leads = heal_prompts(tokenizer, [p[-3:] for p in prompts], protected=set())
    assert all(leads) and len({len(p) for p in healed}) == 1
    beams = 3
    processor = LeadLogitsProcessor(tokenizer, [lead for lead in leads for _ in range(beams)], len(healed[0]))
    out = model.generate(torch.tensor(healed), max_new_tokens=2, num_beams=beams, num_return_sequences=beams,
                         logits_processor=LogitsProcessorList([processor]), pad_token_id=0)  # fmt: skip
    written = [tokenizer.decode(row[len(healed[0]) :]) for row in out.tolist()]
    assert all(text.startswith(leads[row // beams]) for row, text in enumerate(written))
    unexpanded = LeadLogitsProcessor(tokenizer, leads, len(healed[0]))
    with pytest.raises(ValueError, match="repeat each prompt's lead"):
        model.generate(torch.tensor(healed), max_new_tokens=2, num_beams=beams, pad_token_id=0,
                       logits_processor=LogitsProcessorList([unexpanded]))  # fmt: skip
