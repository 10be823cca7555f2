"""Token healing for prompts that end mid-text: drop the prompt's last token, make the model write it.

A byte-level BPE encodes ``"):\\n        if"`` as ``"):"``, ``"\\n       "``, ``" if"``: the newline
merges with the next line's indentation. A prompt that ends at the line start therefore ends with a
lone ``"\\n"`` token that running text never has, and a model reads it as a blank line. Token
healing (Guidance; Code Llama recommends it for its suffix-prefix-middle prompts, whose prefix runs
straight into the middle) drops that last token and lets the model write its text again, through
any token that *starts* with it (``"\\n       "`` included) or through shorter tokens that spell it: :func:`heal_prompts` cuts the prompts
and returns each one's *lead* text, :class:`LeadLogitsProcessor` constrains the first generated
token, and the caller strips the lead from the generated text.

Example:
    >>> from hf_lmobj.corpus import build_tokenizer
    >>> tok = build_tokenizer(vocab_size=512, max_documents=20)
    >>> prompt = tok("def f(x):\\n", add_special_tokens=False)["input_ids"]
    >>> (healed,), (lead,) = heal_prompts(tok, [prompt], protected=set())
    >>> healed == prompt[:-1], lead
    (True, '\\n')
    >>> processor = LeadLogitsProcessor(tok, [lead], prompt_length=len(healed))
    >>> scores = processor(torch.tensor([healed]), torch.zeros(1, len(tok)))
    >>> all(tok.decode([i]).startswith("\\n") for i in torch.nonzero(scores[0] == 0).flatten().tolist())
    True
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from transformers import LogitsProcessor, PreTrainedTokenizerBase

__all__ = ["heal_prompts", "LeadLogitsProcessor"]


def heal_prompts(
    tokenizer: PreTrainedTokenizerBase, prompts: Sequence[Sequence[int]], protected: set[int]
) -> tuple[list[list[int]], list[str]]:
    """Each prompt without its last token, and that token's text (the lead the generation must start with).

    A prompt is left whole (lead ``""``) when it is empty, when its last token is ``protected`` (a
    sentinel or BOS: nothing of the text to heal) or when that token is not whole characters on its
    own (part of a multi-byte character).
    """
    healed, leads = [], []
    for prompt in prompts:
        prompt = list(prompt)
        lead = tokenizer.decode(prompt[-1:]) if prompt and prompt[-1] not in protected else ""
        if not lead or "\ufffd" in lead:
            healed.append(prompt)
            leads.append("")
            continue
        healed.append(prompt[:-1])
        leads.append(lead)
    return healed, leads


class LeadLogitsProcessor(LogitsProcessor):
    """Row ``i`` must write ``leads[i]`` first: until its generated text covers the lead, it may only
    pick a token that starts with the rest of the lead, or that is a start of it (then the next
    token goes on with what is left). Once the lead is written the row is free.

    Args:
        tokenizer: the model's tokenizer (every token is decoded once, to find its text).
        leads: one text per row; ``""`` leaves that row free.
        prompt_length: the (left-padded) prompt width: generated tokens are those after it.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, leads: Sequence[str], prompt_length: int) -> None:
        self.tokenizer, self.leads, self.prompt_length = tokenizer, list(leads), prompt_length
        self.texts = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])  # each token's text

    def allowed(self, rest: str) -> torch.Tensor:
        """(V,) bool: the tokens that may come next when ``rest`` of the lead is still to be written."""
        return torch.tensor([bool(t) and (t.startswith(rest) or rest.startswith(t)) for t in self.texts])

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        scores = scores.clone()  # (B, V'): V' >= V when the embeddings are padded
        for row, lead in enumerate(self.leads):
            written = self.tokenizer.decode(input_ids[row, self.prompt_length :]) if lead else ""
            if len(written) >= len(lead):
                continue  # free (the first tokens always continue the lead, so covering it ends the constraint)
            keep = torch.zeros(scores.shape[1], dtype=torch.bool, device=scores.device)  # (V',)
            allowed = self.allowed(lead[len(written) :])  # (V,)
            keep[: allowed.numel()] = allowed.to(scores.device)
            scores[row, ~keep] = -float("inf")
        return scores
