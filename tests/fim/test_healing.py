"""Token healing: the prompt's last token is cut off and the generation must write its text first."""

from __future__ import annotations

import torch

from hf_lmobj.fim.healing import LeadLogitsProcessor, heal_prompts


def _encode(tokenizer, text):
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def test_heal_prompts_cuts_the_last_token_unless_there_is_nothing_to_heal(tokenizer):
    prompt = _encode(tokenizer, "def f(x):\n")
    char = _encode(tokenizer, "中")  # several byte tokens in a small byte-level BPE, or one
    bos = tokenizer.bos_token_id
    healed, leads = heal_prompts(tokenizer, [prompt, [bos], [], [bos, *char]], protected={bos})
    assert healed[0] == prompt[:-1] and leads[0] == tokenizer.decode(prompt[-1:]) == "\n"
    assert healed[1:3] == [[bos], []] and leads[1:3] == ["", ""]  # a protected token; an empty prompt
    whole = len(char) == 1  # a lone token that is only part of a character is kept
    assert (healed[3], leads[3]) == (([bos], "中") if whole else ([bos, *char], ""))


def test_lead_is_written_first_through_one_token_or_several(tokenizer):
    lead = "\n        "
    processor = LeadLogitsProcessor(tokenizer, [lead, ""], prompt_length=2)
    vocab = len(tokenizer)
    scores = torch.zeros(2, vocab + 3)  # (B, V'): padded embeddings have extra ids
    first = processor(torch.tensor([[5, 6], [5, 6]]), scores)
    texts = [tokenizer.decode([i]) for i in range(vocab)]
    allowed = [i for i in range(vocab) if first[0, i] == 0]
    assert allowed and all(texts[i].startswith(lead) or lead.startswith(texts[i]) for i in allowed)
    assert all(first[0, vocab:] == -float("inf")) and bool((first[1] == 0).all())  # row 1 has no lead
    newline = _encode(tokenizer, "\n")[0]  # a start of the lead: the rest must follow
    second = processor(torch.tensor([[5, 6, newline], [5, 6, 7]]), scores)
    rest = lead[1:]
    assert all(texts[i].startswith(rest) or rest.startswith(texts[i]) for i in range(vocab) if second[0, i] == 0)
    assert texts[newline] == "\n" and second[0, newline] == -float("inf")  # "\n" is no start of the spaces left
    covered = _encode(tokenizer, lead)  # the lead written in full: free again
    assert bool((processor(torch.tensor([[5, 6, *covered], [5, 6, *covered]]), scores) == 0).all())


def test_generation_writes_the_lead_even_against_the_model(tokenizer, one_torch_thread):
    from transformers import LogitsProcessorList

    from hf_lmobj.models.stock import ModelArguments, build_model

    torch.manual_seed(0)
    model = build_model("causal", tokenizer, ModelArguments(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                                         max_position_embeddings=64)).eval()  # fmt: skip
    (prompt,), (lead,) = heal_prompts(tokenizer, [_encode(tokenizer, "if x:\n")], protected=set())
    free = model.generate(torch.tensor([prompt]), max_new_tokens=3, do_sample=False, pad_token_id=0)
    healing = LogitsProcessorList([LeadLogitsProcessor(tokenizer, [lead], len(prompt))])
    healed = model.generate(torch.tensor([prompt]), max_new_tokens=3, do_sample=False, pad_token_id=0,
                            logits_processor=healing)  # fmt: skip
    assert tokenizer.decode(healed[0, len(prompt) :]).startswith(lead)
    assert not tokenizer.decode(free[0, len(prompt) :]).startswith(lead)  # an untrained model would not
