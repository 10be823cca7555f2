"""Fill-in-the-middle prompts for ``generate()``: the training layout up to ``<fim_middle>``, stopped at EOS.

A model trained with :class:`~hf_lmobj.collators.fim.DataCollatorForFillInTheMiddle` saw
``[BOS] <fim_prefix> prefix <fim_suffix> suffix <fim_middle> middle EOS`` (PSM) and
``[BOS] <fim_prefix> <fim_suffix> suffix <fim_middle> prefix middle EOS`` (SPM). To infill, it is
given everything before the middle and generates the middle; the EOS it then emits (the
end-of-middle token) is the ``eos_token_id`` that ``generate()`` stops at. Prefix and suffix are
encoded on their own, as the text-level transform encodes its PSM pieces in training. In SPM the
transform encodes prefix and middle as one text, so :func:`infill` heals an SPM prompt (its last
prefix token is the model's to write: :mod:`hf_lmobj.generation.token_healing`).

Example:
    >>> from hf_lmobj.corpus import build_tokenizer
    >>> tok = build_tokenizer(vocab_size=512, max_documents=20)
    >>> tok.decode(fim_prompt_ids(tok, "def f(x):\\n    ", "\\n    return y\\n"))
    '<s><fim_prefix>def f(x):\\n    <fim_suffix>\\n    return y\\n<fim_middle>'
    >>> tok.decode(fim_prompt_ids(tok, "a = ", "\\n", spm=True))
    '<s><fim_prefix><fim_suffix>\\n<fim_middle>a = '
    >>> middle_ids(torch.tensor([[7, 8, 21, 22, tok.eos_token_id, 0]]), prompt_length=2, eos_token_id=tok.eos_token_id)
    [[21, 22]]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers import LogitsProcessorList, PreTrainedTokenizerBase

from hf_lmobj.collators._fim_format import FimTokens, fim_layout, fim_token_ids
from hf_lmobj.generation.token_healing import LeadLogitsProcessor, heal_prompts

__all__ = ["fim_prompts", "fim_prompt_ids", "left_padded", "fim_generate_kwargs", "middle_ids", "infill"]


def _encode(tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], name: str) -> list[list[int]]:
    if not all(isinstance(t, str) for t in texts):
        raise TypeError(f"{name} must be strings (or one string)")
    return tokenizer(list(texts), add_special_tokens=False)["input_ids"] if texts else []


def _head(tokenizer: PreTrainedTokenizerBase, add_bos: bool | None) -> list[int]:
    if add_bos is None:
        add_bos = tokenizer.bos_token_id is not None
    if add_bos and tokenizer.bos_token_id is None:
        raise ValueError("add_bos=True but the tokenizer has no bos_token; pass add_bos=False")
    return [tokenizer.bos_token_id] if add_bos else []


def fim_prompts(
    tokenizer: PreTrainedTokenizerBase,
    prefixes: Sequence[str],
    suffixes: Sequence[str],
    spm: bool = False,
    add_bos: bool | None = None,
    fim_tokens: FimTokens | None = None,
    max_prefix_tokens: int | None = None,
    max_suffix_tokens: int | None = None,
) -> list[list[int]]:
    """One infilling prompt (token ids, ending where the middle starts) per ``(prefix, suffix)``.

    Args:
        tokenizer: holds the FIM tokens (looked up by name; a ValueError names a missing one).
        prefixes / suffixes: the text before and after the gap, one pair per prompt.
        spm: suffix-prefix-middle order (PSM by default); use the order(s) the model was trained on.
            An SPM prompt ends with the prefix encoded alone; for generation heal it as :func:`infill`
            does (``heal_prompts`` then ``LeadLogitsProcessor``).
        add_bos: put BOS first; None = when the tokenizer has one (as the FIM recipe's documents).
        fim_tokens: the sentinels' names (StarCoder's by default).
        max_prefix_tokens / max_suffix_tokens: keep only the last / first tokens of each side so
            the prompt fits the model's context (None = keep all).
    """
    if isinstance(prefixes, str) or isinstance(suffixes, str):
        raise TypeError("prefixes and suffixes must be lists of strings (use fim_prompt_ids for one pair)")
    if len(prefixes) != len(suffixes):
        raise ValueError(f"got {len(prefixes)} prefixes but {len(suffixes)} suffixes; pass one suffix per prefix")
    for name, value in (("max_prefix_tokens", max_prefix_tokens), ("max_suffix_tokens", max_suffix_tokens)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ValueError(f"{name} must be an int >= 0 or None, got {value!r}")
    ids = fim_token_ids(tokenizer, fim_tokens)
    head = _head(tokenizer, add_bos)
    prompts = []
    for prefix, suffix in zip(_encode(tokenizer, prefixes, "prefixes"), _encode(tokenizer, suffixes, "suffixes")):
        if max_prefix_tokens is not None:
            prefix = prefix[len(prefix) - max_prefix_tokens :] if max_prefix_tokens else []
        if max_suffix_tokens is not None:
            suffix = suffix[:max_suffix_tokens]
        prompts.append(head + fim_layout(prefix, [], suffix, ids, spm))
    return prompts


def fim_prompt_ids(tokenizer: PreTrainedTokenizerBase, prefix: str, suffix: str, **kwargs: Any) -> list[int]:
    """The prompt of one ``(prefix, suffix)`` pair; keyword arguments as :func:`fim_prompts`."""
    return fim_prompts(tokenizer, [prefix], [suffix], **kwargs)[0]


def left_padded(rows: Sequence[Sequence[int]], pad_token_id: int) -> dict[str, torch.Tensor]:
    """``input_ids`` and ``attention_mask`` of prompts padded on the left (decoder-only ``generate``).

    >>> left_padded([[5, 6], [7]], pad_token_id=0)["input_ids"].tolist()
    [[5, 6], [0, 7]]
    """
    if not rows:
        raise ValueError("no prompt to pad")
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)  # (B, T)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)  # (B, T)
    for i, row in enumerate(rows):
        if row:
            input_ids[i, width - len(row) :] = torch.tensor(row, dtype=torch.long)
            attention_mask[i, width - len(row) :] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def fim_generate_kwargs(tokenizer: PreTrainedTokenizerBase, fim_tokens: FimTokens | None = None) -> dict[str, Any]:
    """``generate()`` arguments that stop each row at the end-of-middle token (EOS), pad after it and
    never write a FIM sentinel (``suppress_tokens``): a middle holds none, and a small model that
    emits ``<fim_suffix>`` mid-line would otherwise spoil the line. Sentinels the tokenizer lacks
    are skipped, so the arguments also serve plain left-to-right generation.

    >>> from hf_lmobj.corpus import build_tokenizer
    >>> tok = build_tokenizer(vocab_size=512, max_documents=20)
    >>> kwargs = fim_generate_kwargs(tok)
    >>> kwargs["eos_token_id"] == tok.eos_token_id, tok.convert_ids_to_tokens(kwargs["suppress_tokens"])
    (True, ['<fim_prefix>', '<fim_middle>', '<fim_suffix>', '<fim_pad>'])
    """
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError("the tokenizer has no eos_token, so an infilled middle has no end token")
    names = FimTokens() if fim_tokens is None else fim_tokens
    vocab = tokenizer.get_vocab()  # includes added tokens
    sentinels = [vocab[n] for n in (names.prefix, names.middle, names.suffix, names.pad) if n in vocab]
    pad = eos if tokenizer.pad_token_id is None else tokenizer.pad_token_id
    return {"eos_token_id": eos, "pad_token_id": pad, **({"suppress_tokens": sentinels} if sentinels else {})}


def middle_ids(sequences: torch.Tensor, prompt_length: int, eos_token_id: int) -> list[list[int]]:
    """The generated middle of each row: the tokens after the prompt, up to (not including) the first EOS."""
    middles = []
    for row in sequences[:, prompt_length:].tolist():  # (B, new)
        middles.append(row[: row.index(eos_token_id)] if eos_token_id in row else row)
    return middles


@torch.inference_mode()
def infill(
    model: Any,
    tokenizer: PreTrainedTokenizerBase,
    prefix: str | Sequence[str],
    suffix: str | Sequence[str],
    spm: bool = False,
    max_new_tokens: int = 64,
    add_bos: bool | None = None,
    fim_tokens: FimTokens | None = None,
    max_prefix_tokens: int | None = None,
    max_suffix_tokens: int | None = None,
    **generate_kwargs: Any,
) -> str | list[str]:
    """The middle a FIM-trained causal LM writes between ``prefix`` and ``suffix`` (greedy by default).

    Strings in, a string out; lists in, a list out (one batched ``generate`` call, left-padded).
    ``generate_kwargs`` go to ``model.generate`` (e.g. ``do_sample=True, top_p=0.95``). An SPM
    prompt is token-healed (:mod:`hf_lmobj.generation.token_healing`): the FIM transform encodes an
    SPM prefix and middle as one text, so the prefix's last token is left for the model to write
    (its text is not part of the returned middle).
    """
    single = isinstance(prefix, str)
    if single != isinstance(suffix, str):
        raise TypeError("prefix and suffix must both be strings or both be lists of strings")
    prefixes, suffixes = ([prefix], [suffix]) if single else (list(prefix), list(suffix))
    prompts = fim_prompts(tokenizer, prefixes, suffixes, spm, add_bos, fim_tokens, max_prefix_tokens, max_suffix_tokens)
    leads = [""] * len(prompts)
    if spm:
        protected = {*fim_token_ids(tokenizer, fim_tokens).sentinels, tokenizer.bos_token_id}
        prompts, leads = heal_prompts(tokenizer, prompts, protected)
    stop = fim_generate_kwargs(tokenizer, fim_tokens)
    inputs = left_padded(prompts, stop["pad_token_id"])  # (B, T) each
    device = next(model.parameters()).device
    processors = LogitsProcessorList(generate_kwargs.pop("logits_processor", None) or [])
    if any(leads):
        processors.append(LeadLogitsProcessor(tokenizer, leads, inputs["input_ids"].shape[1]))
    kwargs = {"do_sample": False, **stop, **generate_kwargs, "logits_processor": processors}
    was_training = model.training
    model.eval()
    try:
        sequences = model.generate(
            **{k: v.to(device) for k, v in inputs.items()}, max_new_tokens=max_new_tokens, **kwargs
        )  # (B, T + new)
    finally:
        model.train(was_training)
    middles = middle_ids(sequences.cpu(), inputs["input_ids"].shape[1], stop["eos_token_id"])
    texts = [tokenizer.decode(ids) for ids in middles]
    texts = [text.removeprefix(lead) for text, lead in zip(texts, leads)]  # the first token starts with its lead
    return texts[0] if single else texts
