"""Token healing for prompts that end mid-text: drop the prompt's last token, make the model write it.

Why: a byte-level BPE encodes ``"):\\n        if"`` as ``"):"``, ``"\\n       "``, ``" if"``, so a prompt
that ends at the line start ends with a lone ``"\\n"`` token that running text never has, and a model
reads it as a blank line. Token healing (as in Guidance, and as Code Llama recommends for SPM
prompts) drops that last token and lets the model write its text again, through any token that
*starts* with it (``"\\n       "`` included) or through shorter tokens that spell it:
:func:`heal_prompts` cuts the prompts and returns each one's *lead* text, :class:`LeadLogitsProcessor`
constrains the first generated token, and the caller strips the lead from the generated text.

A lead is text, so a control token never stands for it: :func:`heal_prompts` never cuts a special
token off (BOS, EOS, a FIM sentinel: nothing of the text to heal), and :class:`LeadLogitsProcessor`
never lets a special token write any part of a lead (``'<fim_middle>'`` in a lead must be written
as characters). Its rows are ``generate()``'s: one lead per row of ``scores``, so with beams or
several returned sequences per prompt each prompt's lead is repeated once per row (a mismatch is
an error, never a silent shift of leads onto other prompts' rows).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import torch
from transformers import LogitsProcessor, PreTrainedTokenizerBase

from hf_lmobj.checks import check_length, id_sequence
from hf_lmobj.plain_text import check_texts, special_ids


def _protected_ids(protected: Iterable[int] | None) -> set[int]:
    if protected is None:
        return set()
    if isinstance(protected, (str, bytes, int)) or not isinstance(protected, Iterable):
        raise TypeError(f"protected must be a set of token ids, got {protected!r}")
    ids = list(protected)
    bad = [i for i in ids if i is not None and (isinstance(i, bool) or not isinstance(i, int))]
    if bad:
        raise TypeError(f"protected must hold token ids (ints), got {bad[0]!r}")
    return {i for i in ids if i is not None}


def heal_prompts(
    tokenizer: PreTrainedTokenizerBase, prompts: Sequence[Sequence[int]], protected: Iterable[int] | None
) -> tuple[list[list[int]], list[str]]:
    """Each prompt without its last token, and that token's text (the lead the generation must start with).

    A prompt is left whole (lead ``""``) when it is empty, when its last token is ``protected`` (a
    sentinel or BOS: nothing of the text to heal) or any special token of the tokenizer (a control
    token is no text), or when that token is not whole characters on its own (part of a multi-byte
    character).

    Example:
        >>> from hf_lmobj.corpus import build_tokenizer
        >>> tok = build_tokenizer(vocab_size=512, max_documents=20)
        >>> prompt = tok("def f(x):\\n", add_special_tokens=False)["input_ids"]
        >>> (healed,), (lead,) = heal_prompts(tok, [prompt], protected=set())
        >>> tok.convert_ids_to_tokens(prompt[-2:]), healed == prompt[:-1], lead  # a lone newline token is cut
        (['):', 'Ċ'], True, '\\n')
        >>> heal_prompts(tok, [[tok.bos_token_id], []], protected={tok.bos_token_id})  # nothing to heal: left whole
        ([[1], []], ['', ''])
    """
    if isinstance(prompts, (torch.Tensor, str, bytes)) or not isinstance(prompts, Sequence):
        raise TypeError(f"prompts must be a list of prompts (lists of token ids), got {type(prompts).__name__}")
    if len(prompts) and not isinstance(prompts[0], (Sequence, np.ndarray, torch.Tensor)):
        raise TypeError(
            f"prompts must be a list of prompts (lists of token ids), not one prompt: wrap it, [{prompts!r}]"
        )
    rows = [id_sequence(prompt, "prompt", f"prompts[{i}]") for i, prompt in enumerate(prompts)]
    keep = _protected_ids(protected) | special_ids(tokenizer)
    healed, leads = [], []
    for row in rows:
        prompt = row.tolist()
        lead = tokenizer.decode(prompt[-1:]) if prompt and prompt[-1] not in keep else ""
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
    token goes on with what is left). Once the lead is written the row is free. Special tokens
    (BOS, EOS, pad, the FIM sentinels, ...) never write lead text.

    Args:
        tokenizer: the model's tokenizer (every token is decoded once, to find its text).
        leads: one text per row of ``scores`` (with beams or ``num_return_sequences`` > 1, repeat each
            prompt's lead once per row: ``generate()`` runs its rows prompt by prompt); ``""`` leaves
            that row free.
        prompt_length: the (left-padded) prompt width: generated tokens are those after it.

    Raises ``ValueError`` when ``scores`` / ``input_ids`` have another number of rows than ``leads``,
    fewer columns than the tokenizer has tokens (a model of another vocabulary), or when no token
    can write the rest of a lead.

    Example:
        >>> from hf_lmobj.corpus import build_tokenizer
        >>> tok = build_tokenizer(vocab_size=512, max_documents=20)
        >>> prompt = tok("def f(x):\\n", add_special_tokens=False)["input_ids"]
        >>> (healed,), (lead,) = heal_prompts(tok, [prompt], protected=set())
        >>> processor = LeadLogitsProcessor(tok, [lead, ""], prompt_length=len(healed))  # row 1 is free
        >>> scores = processor(torch.tensor([healed, healed]), torch.zeros(2, len(tok)))
        >>> allowed = torch.nonzero(scores[0] == 0).flatten().tolist()  # the others are -inf
        >>> len(allowed), all(tok.decode([i]).startswith("\\n") for i in allowed), int((scores[1] == 0).sum())
        (10, True, 512)
        >>> written = torch.tensor([healed + prompt[-1:]] * 2)  # once its lead is written, a row is free
        >>> (processor(written, torch.zeros(2, len(tok))) == 0).sum(dim=1).tolist()
        [512, 512]
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, leads: Sequence[str], prompt_length: int) -> None:
        self.tokenizer, self.leads = tokenizer, check_texts(leads, "leads")
        self.prompt_length = check_length(prompt_length, "prompt_length", 0, why="the prompt width")
        controls = special_ids(tokenizer)
        texts = tokenizer.batch_decode([[i] for i in range(len(tokenizer))])  # each token's text
        self.texts = ["" if i in controls else text for i, text in enumerate(texts)]  # "": never allowed

    def allowed(self, rest: str) -> torch.Tensor:
        """(V,) bool: the tokens that may come next when ``rest`` of the lead is still to be written."""
        return torch.tensor([bool(t) and (t.startswith(rest) or rest.startswith(t)) for t in self.texts])

    def _check(self, input_ids: Any, scores: Any) -> None:
        for name, value in (("input_ids", input_ids), ("scores", scores)):
            if not isinstance(value, torch.Tensor) or value.dim() != 2:
                shape = tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
                raise ValueError(f"{name} must be a 2-D tensor (rows, ...), got {shape}")
        if input_ids.is_floating_point() or input_ids.dtype == torch.bool:
            raise TypeError(f"input_ids must hold integer token ids, got dtype {input_ids.dtype}")
        if not scores.is_floating_point():
            raise TypeError(f"scores must be floating point logits, got dtype {scores.dtype}")
        if scores.shape[0] != len(self.leads) or input_ids.shape[0] != len(self.leads):
            raise ValueError(
                f"LeadLogitsProcessor has {len(self.leads)} leads but generate() runs {scores.shape[0]} rows "
                f"(input_ids has {input_ids.shape[0]}); give one lead per row: with num_beams / "
                "num_return_sequences = k, repeat each prompt's lead k times ([lead for lead in leads for _ in "
                "range(k)])"
            )
        if scores.shape[1] < len(self.texts):
            raise ValueError(
                f"scores have {scores.shape[1]} columns but the tokenizer has {len(self.texts)} tokens: the model "
                "and the tokenizer do not belong together (resize the model's embeddings to len(tokenizer))"
            )
        if input_ids.shape[1] < self.prompt_length:
            raise ValueError(
                f"input_ids have {input_ids.shape[1]} columns, fewer than prompt_length={self.prompt_length}; "
                "pass the width of the (left-padded) prompts"
            )

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        self._check(input_ids, scores)
        scores = scores.clone()  # (B, V'): V' >= V when the embeddings are padded
        for row, lead in enumerate(self.leads):
            written = self.tokenizer.decode(input_ids[row, self.prompt_length :]) if lead else ""
            if len(written) >= len(lead):
                continue  # free (the first tokens always continue the lead, so covering it ends the constraint)
            keep = torch.zeros(scores.shape[1], dtype=torch.bool, device=scores.device)  # (V',)
            allowed = self.allowed(lead[len(written) :])  # (V,)
            if not bool(allowed.any()):
                raise ValueError(
                    f"row {row}: no token of the vocabulary writes the rest {lead[len(written) :]!r} of its lead "
                    f"{lead!r}; a lead must be text the tokenizer can spell (heal_prompts gives such leads)"
                )
            keep[: allowed.numel()] = allowed.to(scores.device)
            scores[row, ~keep] = -float("inf")
        return scores
