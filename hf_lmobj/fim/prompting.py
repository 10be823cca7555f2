"""Fill-in-the-middle prompts for ``generate()``: the training layout up to ``<fim_middle>``, stopped at EOS.

A model trained with :class:`~hf_lmobj.fim.collator.DataCollatorForFillInTheMiddle` saw
``[BOS] <fim_prefix> prefix <fim_suffix> suffix <fim_middle> middle EOS`` (PSM) and
``[BOS] <fim_prefix> <fim_suffix> suffix <fim_middle> prefix middle EOS`` (SPM). To infill, it is
given everything before the middle and generates the middle, stopped by ``generate()`` at the EOS
(the end-of-middle token). Prefix and suffix are encoded on their own, as plain text
(:mod:`hf_lmobj.plain_text`), as the text-level transform encodes its PSM parts: code that mentions
``'<fim_middle>'`` gives ordinary tokens and a prompt holds exactly one of each sentinel (inserted by
id). In SPM the transform encodes prefix and middle as one text, so :func:`infill` heals an SPM
prompt (its last prefix token is the model's to write: :mod:`hf_lmobj.fim.healing`).
The model writes no control token either: :func:`fim_generate_kwargs` suppresses every special
token but the end-of-middle EOS.

:func:`infill` returns ``num_return_sequences`` middles per prompt, grouped by prompt as
``generate()`` groups its rows (prompt 0's, then prompt 1's, ...), for greedy decoding, sampling,
beam search and beam sampling; other decoding modes are refused by name.

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

import copy
from collections.abc import Sequence
from typing import Any

import torch
from transformers import GenerationConfig, LogitsProcessorList, PreTrainedTokenizerBase

from hf_lmobj.checks import check_flag, check_length, check_token_id, id_sequence
from hf_lmobj.fim.format import FimTokens, fim_layout, fim_token_ids
from hf_lmobj.fim.healing import LeadLogitsProcessor, heal_prompts
from hf_lmobj.plain_text import check_texts, encode_plain, special_ids

SERVED_MODES = ("greedy_search", "sample", "beam_search", "beam_sample")  # generate() modes infill reads back


def _encode(tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], name: str) -> list[list[int]]:
    return encode_plain(tokenizer, check_texts(texts, name))  # a "<fim_middle>" in the text stays characters


def _head(tokenizer: PreTrainedTokenizerBase, add_bos: bool | None) -> list[int]:
    add_bos = check_flag(add_bos, "add_bos", optional=True)
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
        prefixes / suffixes: the text before and after the gap, one pair per prompt. Encoded as plain
            characters: a special-token string in them (``'<fim_middle>'``, ``'</s>'``) stays text.
        spm: suffix-prefix-middle order (PSM by default); use the order(s) the model was trained on.
            An SPM prompt ends with the prefix encoded alone; for generation heal it as :func:`infill`
            does (``heal_prompts`` then ``LeadLogitsProcessor``).
        add_bos: put BOS first; None = when the tokenizer has one (as the FIM recipe's documents).
        fim_tokens: the sentinels' names (StarCoder's by default).
        max_prefix_tokens / max_suffix_tokens: keep only the last / first tokens of each side so
            the prompt fits the model's context (None = keep all).

    Example:
        >>> from hf_lmobj.corpus import build_tokenizer
        >>> tok = build_tokenizer(vocab_size=512, max_documents=20)
        >>> (prompt,) = fim_prompts(tok, ["s = '<fim_middle>'\\n"], ["\\n"])
        >>> prompt.count(tok.convert_tokens_to_ids("<fim_middle>"))  # the sentinel only, not the string
        1
    """
    if isinstance(prefixes, str) or isinstance(suffixes, str):
        raise TypeError("prefixes and suffixes must be lists of strings (use fim_prompt_ids for one pair)")
    prefixes, suffixes = check_texts(prefixes, "prefixes"), check_texts(suffixes, "suffixes")
    if len(prefixes) != len(suffixes):
        raise ValueError(f"got {len(prefixes)} prefixes but {len(suffixes)} suffixes; pass one suffix per prefix")
    for name, value in (("max_prefix_tokens", max_prefix_tokens), ("max_suffix_tokens", max_suffix_tokens)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
            raise ValueError(f"{name} must be an int >= 0 or None, got {value!r}")
    spm = check_flag(spm, "spm")
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
    if not isinstance(prefix, str) or not isinstance(suffix, str):
        raise TypeError(
            f"prefix and suffix must be strings, got {type(prefix).__name__} and {type(suffix).__name__} "
            "(use fim_prompts for lists)"
        )
    return fim_prompts(tokenizer, [prefix], [suffix], **kwargs)[0]


def left_padded(rows: Sequence[Sequence[int]], pad_token_id: int) -> dict[str, torch.Tensor]:
    """``input_ids`` and ``attention_mask`` of prompts padded on the left (decoder-only ``generate``).

    >>> left_padded([[5, 6], [7]], pad_token_id=0)["input_ids"].tolist()
    [[5, 6], [0, 7]]
    """
    if isinstance(rows, torch.Tensor) or not isinstance(rows, Sequence) or not rows:
        raise ValueError(f"rows must be a non-empty list of prompts (lists of token ids), got {rows!r}")
    pad_token_id = check_token_id(pad_token_id, "pad_token_id")
    rows = [id_sequence(row, "prompt", f"row {i}") for i, row in enumerate(rows)]
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), pad_token_id, dtype=torch.long)  # (B, T)
    attention_mask = torch.zeros((len(rows), width), dtype=torch.long)  # (B, T)
    for i, row in enumerate(rows):
        if row.size:
            input_ids[i, width - len(row) :] = torch.from_numpy(row)
            attention_mask[i, width - len(row) :] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def fim_generate_kwargs(tokenizer: PreTrainedTokenizerBase, fim_tokens: FimTokens | None = None) -> dict[str, Any]:
    """``generate()`` arguments that stop each row at the end-of-middle token (EOS), pad after it and
    never write a control token (``suppress_tokens``): every special token but EOS, the FIM sentinels
    first. A middle is text, and a small model that emits ``<fim_suffix>`` mid-line would otherwise
    spoil the line (or put ``'<pad>'`` into the decoded middle). Sentinels the tokenizer lacks are
    skipped, so the arguments also serve plain left-to-right generation.

    >>> from hf_lmobj.corpus import build_tokenizer
    >>> tok = build_tokenizer(vocab_size=512, max_documents=20)
    >>> kwargs = fim_generate_kwargs(tok)
    >>> kwargs["eos_token_id"] == tok.eos_token_id, tok.convert_ids_to_tokens(kwargs["suppress_tokens"][:4])
    (True, ['<fim_prefix>', '<fim_middle>', '<fim_suffix>', '<fim_pad>'])
    >>> tok.eos_token_id in kwargs["suppress_tokens"], tok.convert_tokens_to_ids("<mask>") in kwargs["suppress_tokens"]
    (False, True)
    """
    eos = tokenizer.eos_token_id
    if eos is None:
        raise ValueError("the tokenizer has no eos_token, so an infilled middle has no end token")
    names = FimTokens() if fim_tokens is None else fim_tokens
    if not isinstance(names, FimTokens):
        raise TypeError(f"fim_tokens must be a FimTokens, got {type(names).__name__}")
    vocab = tokenizer.get_vocab()  # includes added tokens
    sentinels = [vocab[n] for n in (names.prefix, names.middle, names.suffix, names.pad) if n in vocab]
    controls = sorted(special_ids(tokenizer) - {eos, *sentinels})
    suppressed = [i for i in (*sentinels, *controls) if i != eos]
    pad = eos if tokenizer.pad_token_id is None else tokenizer.pad_token_id
    return {"eos_token_id": eos, "pad_token_id": pad, **({"suppress_tokens": suppressed} if suppressed else {})}


def middle_ids(sequences: torch.Tensor, prompt_length: int, eos_token_id: int) -> list[list[int]]:
    """The generated middle of each row: the tokens after the prompt, up to (not including) the first EOS."""
    if not isinstance(sequences, torch.Tensor) or sequences.dim() != 2:
        shape = tuple(sequences.shape) if isinstance(sequences, torch.Tensor) else type(sequences).__name__
        raise ValueError(f"sequences must be a 2-D tensor (rows, prompt + new tokens), got {shape}")
    if sequences.is_floating_point() or sequences.is_complex() or sequences.dtype == torch.bool:
        raise TypeError(f"sequences must hold integer token ids, got dtype {sequences.dtype}")
    prompt_length = check_length(prompt_length, "prompt_length", 0)
    if prompt_length > sequences.shape[1]:
        raise ValueError(f"prompt_length={prompt_length} is longer than the sequences ({sequences.shape[1]} tokens)")
    eos_token_id = check_token_id(eos_token_id, "eos_token_id")
    middles = []
    for row in sequences[:, prompt_length:].tolist():  # (B, new)
        middles.append(row[: row.index(eos_token_id)] if eos_token_id in row else row)
    return middles


def _model_vocab_size(model: Any) -> int | None:
    embeddings = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
    if embeddings is not None and hasattr(embeddings, "num_embeddings"):
        return int(embeddings.num_embeddings)
    return getattr(getattr(model, "config", None), "vocab_size", None)


def model_positions(model: Any) -> int | None:
    """The model's context (``max_position_embeddings`` or GPT-2's ``n_positions``), None when it names none."""
    config = getattr(model, "config", None)
    for name in ("max_position_embeddings", "n_positions"):
        value = getattr(config, name, None)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def check_model_vocabulary(model: Any, tokenizer: PreTrainedTokenizerBase) -> None:
    """Refuse a tokenizer with more tokens than the model's embeddings (padded embeddings, more rows than
    tokens, are fine): its ids would index past the embedding matrix."""
    vocab = _model_vocab_size(model)
    if vocab is not None and len(tokenizer) > vocab:
        raise ValueError(
            f"the tokenizer has {len(tokenizer)} tokens but the model's embeddings have {vocab}: they do not "
            "belong together; pass the model's own tokenizer, or model.resize_token_embeddings(len(tokenizer))"
        )


def check_model_fits(
    model: Any, tokenizer: PreTrainedTokenizerBase, prompts: Sequence[Sequence[int]], max_new_tokens: int, fix: str
) -> None:
    """Refuse, before ``generate``, a tokenizer larger than the model's embeddings and a prompt that with
    ``max_new_tokens`` outgrows the model's positions (an ``IndexError`` deep in the model otherwise)."""
    check_model_vocabulary(model, tokenizer)
    positions = model_positions(model)
    longest = max(range(len(prompts)), key=lambda i: len(prompts[i]))
    if positions is not None and len(prompts[longest]) + max_new_tokens > positions:
        raise ValueError(
            f"prompt {longest} has {len(prompts[longest])} tokens, plus max_new_tokens={max_new_tokens} that is "
            f"{len(prompts[longest]) + max_new_tokens} positions, but the model has {positions}; {fix}"
        )


def _rows_per_prompt(model: Any, generate_kwargs: dict[str, Any]) -> tuple[int, int]:
    """(middles returned per prompt, rows ``generate`` runs per prompt), or a clear error for a mode
    whose rows infill cannot read back."""
    base = generate_kwargs.get("generation_config") or getattr(model, "generation_config", None)
    config = copy.deepcopy(base) if isinstance(base, GenerationConfig) else GenerationConfig()
    count, beams = (generate_kwargs.get(k, getattr(config, k, None)) for k in ("num_return_sequences", "num_beams"))
    count = check_length(1 if count is None else count, "num_return_sequences", 1, why="middles per prompt")
    beams = check_length(1 if beams is None else beams, "num_beams", 1)
    sample = check_flag(generate_kwargs["do_sample"], "do_sample")
    if beams == 1 and not sample and count > 1:
        raise ValueError(
            f"num_return_sequences={count} with greedy decoding: greedy search writes one middle per prompt; pass "
            f"do_sample=True (sampling) or num_beams >= {count} (beam search), or num_return_sequences=1"
        )
    if beams > 1 and count > beams:
        raise ValueError(
            f"num_return_sequences={count} is more than num_beams={beams}: beam search returns at most its beams; "
            f"pass num_beams >= {count}"
        )
    for key, value in generate_kwargs.items():
        if key not in ("generation_config", "logits_processor") and hasattr(config, key):
            setattr(config, key, value)
    mode = str(getattr(config.get_generation_mode(generate_kwargs.get("assistant_model")), "value", "?"))
    if mode not in SERVED_MODES:
        raise ValueError(
            f"infill serves greedy search, sampling, beam search and beam sampling (it reads each prompt's "
            f"middles back by row), not {mode!r}; drop the arguments that select it (num_beam_groups, "
            "constraints / force_words_ids, penalty_alpha, assistant_model, prompt_lookup_num_tokens, ...)"
        )
    return count, max(beams, count)


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
    """The middle(s) a FIM-trained causal LM writes between ``prefix`` and ``suffix`` (greedy by default).

    ``generate_kwargs`` go to ``model.generate`` (e.g. ``do_sample=True, top_p=0.95``, or
    ``num_beams=4``); with ``num_return_sequences=n`` each prompt gets ``n`` middles. What comes back:

    * strings in and ``n == 1``: one string (the middle);
    * strings in and ``n > 1``: a list of the ``n`` middles;
    * lists in: a flat list of ``len(prefix) * n`` middles grouped by prompt, as ``generate()`` groups
      its rows: ``middles[i * n + j]`` is the ``j``-th middle of prompt ``i`` (``n == 1``: one per prompt).

    Served decoding modes: greedy search (``n`` must be 1), sampling, beam search and beam sampling
    (``n <= num_beams``); others (group beam, constrained beam, contrastive, assisted generation)
    are refused by name, as are ``max_new_tokens < 1``, a tokenizer larger than the model's
    embeddings and a prompt that with ``max_new_tokens`` outgrows the model's positions (cut it with
    ``max_prefix_tokens`` / ``max_suffix_tokens``). The text is encoded as plain characters (see
    :func:`fim_prompts`) and the model may write no control token but the end-of-middle EOS.

    An SPM prompt is token-healed (:mod:`hf_lmobj.fim.healing`): the FIM transform encodes
    an SPM prefix and middle as one text, so the prefix's last token is left for the model to write
    (its text is not part of the returned middle).

    Example:
        >>> from transformers import GPT2Config, GPT2LMHeadModel
        >>> from hf_lmobj.corpus import build_tokenizer
        >>> tok = build_tokenizer(vocab_size=512, max_documents=20)
        >>> _ = torch.manual_seed(0)  # an untrained tiny model; a bias below steers its greedy choice
        >>> model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=1, n_head=2, n_positions=64,
        ...                                    bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id))
        >>> one, eos = tok.convert_tokens_to_ids("1"), tok.eos_token_id
        >>> bias = {(one,): 100.0, (one, eos): 200.0}  # write "1", then the end-of-middle EOS
        >>> infill(model, tok, "x = ", "\\nprint(x)\\n", max_new_tokens=4, sequence_bias=bias)  # the middle alone
        '1'
        >>> infill(model, tok, ["x = ", "y = "], ["\\n", "\\n"], max_new_tokens=4, sequence_bias=bias)  # one per prompt
        ['1', '1']
        >>> infill(model, tok, "x = ", "\\n", max_new_tokens=0)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: max_new_tokens must be an int >= 1...
    """
    single = isinstance(prefix, str)
    if single != isinstance(suffix, str):
        raise TypeError("prefix and suffix must both be strings or both be lists of strings")
    prefixes, suffixes = (
        ([prefix], [suffix]) if single else (check_texts(prefix, "prefix"), check_texts(suffix, "suffix"))
    )
    if not prefixes:
        raise ValueError("no prompt: prefix and suffix are empty lists; pass at least one (prefix, suffix) pair")
    max_new_tokens = check_length(max_new_tokens, "max_new_tokens", 1, why="the middle's generation budget")
    spm = check_flag(spm, "spm")
    for reserved in ("input_ids", "attention_mask", "inputs", "max_length"):
        if reserved in generate_kwargs:
            raise TypeError(f"infill builds {reserved!r} itself (the prompts; max_new_tokens= sets the budget)")
    generate_kwargs = {"do_sample": False, **generate_kwargs}
    count, rows = _rows_per_prompt(model, generate_kwargs)
    prompts = fim_prompts(tokenizer, prefixes, suffixes, spm, add_bos, fim_tokens, max_prefix_tokens, max_suffix_tokens)
    fix = "cut the prompts with max_prefix_tokens= / max_suffix_tokens=, or lower max_new_tokens"
    check_model_fits(model, tokenizer, prompts, max_new_tokens, fix)
    leads = [""] * len(prompts)
    if spm:
        protected = {*fim_token_ids(tokenizer, fim_tokens).sentinels, tokenizer.bos_token_id}
        prompts, leads = heal_prompts(tokenizer, prompts, protected)
    stop = fim_generate_kwargs(tokenizer, fim_tokens)
    inputs = left_padded(prompts, stop["pad_token_id"])  # (B, T) each
    device = next(model.parameters()).device
    processors = LogitsProcessorList(generate_kwargs.pop("logits_processor", None) or [])
    if any(leads):  # generate() runs `rows` rows per prompt, prompt by prompt (beams or returned sequences)
        row_leads = [lead for lead in leads for _ in range(rows)]
        processors.append(LeadLogitsProcessor(tokenizer, row_leads, inputs["input_ids"].shape[1]))
    kwargs = {**stop, **generate_kwargs, "logits_processor": processors}
    was_training = model.training
    model.eval()
    try:
        output = model.generate(
            **{k: v.to(device) for k, v in inputs.items()}, max_new_tokens=max_new_tokens, **kwargs
        )  # (B * n, T + new), grouped by prompt
    finally:
        model.train(was_training)
    sequences = getattr(output, "sequences", output)
    if sequences.shape[0] != len(prompts) * count:
        raise RuntimeError(
            f"generate returned {sequences.shape[0]} rows for {len(prompts)} prompts x num_return_sequences={count}"
        )
    middles = middle_ids(sequences.cpu(), inputs["input_ids"].shape[1], stop["eos_token_id"])
    texts = [tokenizer.decode(ids) for ids in middles]
    out_leads = [lead for lead in leads for _ in range(count)]
    texts = [text.removeprefix(lead) for text, lead in zip(texts, out_leads)]  # the first token starts with its lead
    return texts[0] if single and count == 1 else texts
