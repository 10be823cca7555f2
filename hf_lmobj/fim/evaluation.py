"""Single-line infilling on held-out code: hide one line inside a function, let the model write it.

HumanEval-style single-line infilling (Bavarian et al. 2022), scored by exact match rather than unit
tests: :func:`single_line_cases` picks a fixed, seeded sample of non-blank, non-comment lines inside
function bodies (after any docstring) of the given source files, and :func:`evaluate_infilling` has
a causal LM fill each one in, in one of three ways:

* ``"psm"`` / ``"spm"``: the FIM prompt (:mod:`hf_lmobj.fim.prompting`) with the prefix
  and suffix around the gap; the model writes the middle and ends it with EOS. ``"spm"`` ends with
  the prefix running into the middle (encoded as one text by the FIM transform) and is healed as
  ``"prefix_only"`` is, so the two differ only by the suffix and the sentinels around it.
* ``"prefix_only"``: left to right, the only way a plain causal LM can. The prompt is the prefix
  *as the model tokenizes it in running text*: the token(s) that straddle the line start (``"\\n   "``
  in a byte-level BPE) are left for the model to write (token healing:
  :class:`~hf_lmobj.fim.healing.LeadLogitsProcessor`), so a plain model is not judged
  on a token split it never saw.

Source text stays text: prefixes, suffixes, lines and targets are encoded with special-token parsing
off (:mod:`hf_lmobj.plain_text`), so a file that mentions ``'<fim_middle>'`` or ``'</s>'`` is scored on
those characters; the model may write no control token but the end-of-middle EOS
(:func:`~hf_lmobj.fim.prompting.fim_generate_kwargs`).

The hidden text is the whole line *with its newline*: the prefix ends at the line's start and the
suffix starts at the next line's (an editor's cursor on an empty line; what ``fim_level="line"``
trains). The prediction is the generated text up to its first newline: an exact match when it
equals the hidden line (indentation included), with partial credit from its edit similarity
(:func:`edit_similarity`: CodeXGLUE / CrossCodeEval's ``fuzz.ratio`` divided by 100). The NLL of the
hidden text is teacher forced from the same prompt, in bits per UTF-8 byte of the text it covers: in
``"psm"`` the middle as the FIM transform encodes it (line and newline, which ends the middle); in
``"prefix_only"`` and ``"spm"`` the line as running text encodes it, from the straddled prefix
characters to the line's end (its newline would merge with the next line's indentation, which these
prompts do not show).
"""

from __future__ import annotations

import ast
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from transformers import LogitsProcessorList, PreTrainedTokenizerBase

from hf_lmobj.checks import check_count, check_flag, check_length
from hf_lmobj.fim.format import fim_layout, fim_token_ids
from hf_lmobj.fim.healing import LeadLogitsProcessor
from hf_lmobj.fim.prompting import (
    check_model_vocabulary,
    fim_generate_kwargs,
    fim_prompts,
    left_padded,
    middle_ids,
    model_positions,
)
from hf_lmobj.fim.transform import line_starts
from hf_lmobj.losses.functional import token_nll
from hf_lmobj.plain_text import check_texts, encode_plain

INFILLING_MODES = ("psm", "spm", "prefix_only")


@dataclass(frozen=True)
class InfillingCase:
    """One hidden line: ``prefix + middle + suffix`` is a window of the source file."""

    prefix: str  # the lines before, ending with "\n"
    middle: str  # the hidden line with its "\n" (none only for a file's last, unterminated line)
    suffix: str  # the lines after, from the next line's start
    source: str  # "<file>:<line number>"

    @property
    def line(self) -> str:
        """The hidden line without its newline: what an exact match must equal."""
        return self.middle.removesuffix("\n")


@dataclass(frozen=True)
class InfillingResult:
    """How one model did on a list of cases in one mode."""

    mode: str
    cases: int
    exact_match: float  # share of cases whose first generated line is the hidden line
    edit_similarity: float  # mean edit_similarity(first generated line, hidden line) over the cases
    middle_nll: float  # mean NLL of the scored text (the module doc says which) per case, nats
    middle_bits_per_byte: float  # total NLL / ln 2 / total UTF-8 bytes of the scored text


def edit_similarity(prediction: str, reference: str) -> float:
    """Indel similarity of two strings in [0, 1]: ``2 * LCS / (len(a) + len(b))`` of their characters, 1 for
    two empty strings (``rapidfuzz.fuzz.ratio`` / 100, the edit similarity of line-completion benchmarks).

    >>> edit_similarity("    return x", "    return y")
    0.9166666666666666
    >>> edit_similarity("pass", "pass"), edit_similarity("", "x")
    (1.0, 0.0)
    """
    for name, value in (("prediction", prediction), ("reference", reference)):
        if not isinstance(value, str):
            raise TypeError(f"{name} must be a string, got {type(value).__name__} ({value!r})")
    if not prediction and not reference:
        return 1.0
    row = [0] * (len(reference) + 1)  # row[j]: LCS of the prefix of prediction seen so far and reference[:j]
    for char in prediction:
        diagonal = 0
        for j, other in enumerate(reference, start=1):
            diagonal, row[j] = row[j], diagonal + 1 if char == other else max(row[j], row[j - 1])
    return 2 * row[-1] / (len(prediction) + len(reference))


def function_body_lines(text: str, max_line_chars: int = 100) -> list[int]:
    """0-based numbers of the lines that can be hidden: inside a function body, after its docstring,
    neither blank nor a comment, at most ``max_line_chars`` long. A file that does not parse has none.

    >>> function_body_lines('def f():\\n    \"\"\"Doc.\"\"\"\\n\\n    # note\\n    return 1\\nx = 2\\n')
    [4]
    """
    if not isinstance(text, str):
        raise TypeError(f"text must be a string (a Python source file), got {type(text).__name__}")
    max_line_chars = check_length(max_line_chars, "max_line_chars", 1)
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError):
        return []
    lines = text.split("\n")
    chosen: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or not node.body:
            continue
        first = node.body[0]
        start = first.lineno  # 1-based line of the first statement
        docstring = isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
        if docstring and isinstance(first.value.value, str):
            start = first.end_lineno + 1  # skip the docstring
        for number in range(start, (node.end_lineno or 0) + 1):
            line = lines[number - 1]
            if line.strip() and not line.strip().startswith("#") and len(line) <= max_line_chars:
                chosen.add(number - 1)
    return sorted(chosen)


def single_line_cases(
    texts: Sequence[str],
    num_cases: int = 200,
    seed: int = 0,
    names: Sequence[str] | None = None,
    prefix_lines: int = 32,
    suffix_lines: int = 16,
    max_line_chars: int = 100,
) -> list[InfillingCase]:
    """A fixed sample (``seed``) of ``num_cases`` hidden lines across ``texts``, in file and line order.

    Each case keeps up to ``prefix_lines`` lines before and ``suffix_lines`` lines after the hidden
    line (the prompt is cut to the model's context later, at token level). ``names`` label the
    sources (default: the text's index).

    Example:
        >>> text = "def f(x):\\n    y = x + 1\\n    return y\\n"
        >>> cases = single_line_cases([text], num_cases=5, seed=0)
        >>> [(c.line, c.source) for c in cases]
        [('    y = x + 1', '0:2'), ('    return y', '0:3')]
        >>> cases[0].middle, cases[0].suffix
        ('    y = x + 1\\n', '    return y\\n')
        >>> cases[0].prefix + cases[0].middle + cases[0].suffix == text
        True
    """
    if isinstance(num_cases, bool) or not isinstance(num_cases, int) or num_cases <= 0:
        raise ValueError(f"num_cases must be a positive int, got {num_cases!r}")
    texts = check_texts(texts, "texts")
    seed = check_count(seed, "seed")
    prefix_lines = check_length(prefix_lines, "prefix_lines", 0, why="lines kept before the hidden one")
    suffix_lines = check_length(suffix_lines, "suffix_lines", 0, why="lines kept after the hidden one")
    if names is not None and isinstance(names, (str, bytes)):
        raise TypeError(f"names must be a list with one name per text, got a string {names!r}")
    if names is not None and len(names) != len(texts):
        raise ValueError(f"names has {len(names)} entries for {len(texts)} texts; give one name per text")
    candidates = [(t, line) for t, text in enumerate(texts) for line in function_body_lines(text, max_line_chars)]
    if not candidates:
        raise ValueError("no line inside a function body to hide; pass Python source files")
    rng = np.random.default_rng(seed)
    picked = sorted(rng.choice(len(candidates), size=min(num_cases, len(candidates)), replace=False).tolist())
    cases = []
    for t, line in (candidates[i] for i in picked):
        text = texts[t]
        starts = line_starts(text)[: line + suffix_lines + 2]  # where lines 0, 1, ... start (then the end)
        at = [*starts, *[len(text)] * (line + suffix_lines + 2 - len(starts))]  # lines past the end start there
        cases.append(InfillingCase(
            prefix=text[at[max(line - prefix_lines, 0)] : at[line]], middle=text[at[line] : at[line + 1]],
            suffix=text[at[line + 1] : at[line + 1 + suffix_lines]],
            source=f"{names[t] if names is not None else t}:{line + 1}",
        ))  # fmt: skip
    return cases


def _prefix_only_prompt(tokenizer: PreTrainedTokenizerBase, case: InfillingCase) -> tuple[list[int], list[int], str]:
    """(context tokens, tokens to score, straddled prefix text): running-text tokens split at the gap."""
    joint, alone = encode_plain(tokenizer, [case.prefix + case.line, case.prefix])
    k = 0
    while k < min(len(joint), len(alone)) and joint[k] == alone[k]:
        k += 1
    while k and not case.prefix.startswith(tokenizer.decode(joint[:k])):
        k -= 1  # a token shared by both encodings that still reaches into the middle
    return joint[:k], joint[k:], case.prefix[len(tokenizer.decode(joint[:k])) :]


def _healed_prompts(tokenizer, cases, bos: list[int], prefix_room: int, suffix_room: int | None) -> tuple:
    """Prefix-only prompts (``suffix_room=None``) or SPM ones (the suffix's first ``suffix_room`` tokens
    first), both ending with the healed running-text prefix: (prompts, targets, leads)."""
    spm = suffix_room is not None
    ids = fim_token_ids(tokenizer) if spm else None
    suffixes = encode_plain(tokenizer, [c.suffix for c in cases]) if spm else [[]] * len(cases)
    prompts, targets, leads = [], [], []
    for case, suffix in zip(cases, suffixes):
        context, target, lead = _prefix_only_prompt(tokenizer, case)
        context = context[max(len(context) - prefix_room, 0) :]
        prompts.append(bos + (fim_layout(context, [], suffix[:suffix_room], ids, spm=True) if spm else context))
        targets.append(target)
        leads.append(lead)
    return prompts, targets, leads


def _prompts(tokenizer, cases, mode: str, budget: int, add_bos: bool) -> tuple[list, list, list[str]]:
    """Prompts, the teacher-forced targets after each, and the text each prediction must start with."""
    bos = [tokenizer.bos_token_id] if add_bos else []
    if mode == "prefix_only":
        return _healed_prompts(tokenizer, cases, bos, budget - len(bos), None)
    room = budget - len(bos) - 3  # the three sentinels; a third of it for the suffix
    if mode == "spm":  # the suffix, then the prefix running into the middle, healed as in prefix_only
        return _healed_prompts(tokenizer, cases, bos, room - room // 3, room // 3)
    prompts = fim_prompts(
        tokenizer,
        [c.prefix for c in cases],
        [c.suffix for c in cases],
        add_bos=add_bos,
        max_prefix_tokens=room - room // 3,
        max_suffix_tokens=room // 3,
    )
    targets = encode_plain(tokenizer, [c.middle for c in cases])
    return prompts, targets, [""] * len(cases)


def _target_nll(model, prompts, targets, pad_id: int, batch_size: int) -> list[float]:
    """Summed NLL (nats) of each row's target tokens given its prompt (teacher forcing, right-padded)."""
    device = next(model.parameters()).device
    out = []
    for start in range(0, len(prompts), batch_size):
        rows = [p + t for p, t in zip(prompts[start : start + batch_size], targets[start : start + batch_size])]
        width = max(len(r) for r in rows)
        inputs = torch.full((len(rows), width), pad_id, dtype=torch.long)  # (B, T)
        mask = torch.zeros_like(inputs)  # (B, T)
        labels = torch.full_like(inputs, -100)  # (B, T): label of position t is the token at t
        for i, (row, prompt) in enumerate(zip(rows, prompts[start : start + batch_size])):
            inputs[i, : len(row)] = torch.tensor(row)
            mask[i, : len(row)] = 1
            labels[i, len(prompt) : len(row)] = torch.tensor(row[len(prompt) :], dtype=torch.long)
        logits = model(input_ids=inputs.to(device), attention_mask=mask.to(device), use_cache=False).logits
        logits = logits[:, :-1].float()  # (B, T-1, V): position t predicts token t + 1
        nll = token_nll(logits, labels[:, 1:].to(device))  # (B, T-1), 0 where ignored
        out.extend(nll.sum(dim=1).double().cpu().tolist())
    return out


@torch.inference_mode()
def evaluate_infilling(
    model: Any,
    tokenizer: PreTrainedTokenizerBase,
    cases: Sequence[InfillingCase],
    mode: str = "psm",
    max_length: int | None = None,
    max_new_tokens: int = 48,
    batch_size: int = 16,
    add_bos: bool | None = None,
) -> InfillingResult:
    """Exact match and middle NLL of ``model`` on ``cases`` (greedy decoding), in ``mode``.

    Args:
        model: a causal LM (FIM-trained for ``"psm"`` / ``"spm"``; any for ``"prefix_only"``).
        tokenizer: its tokenizer (the FIM tokens are looked up by name in the FIM modes).
        cases: from :func:`single_line_cases`.
        mode: ``"psm"``, ``"spm"`` or ``"prefix_only"``.
        max_length: the model's context; prompts are cut (prefix from the left, suffix from the
            right) so that prompt + ``max_new_tokens`` fit. None reads ``max_position_embeddings``;
            more than the model's positions is refused.
        max_new_tokens: generation budget per case (also the longest scored line, in tokens).
        batch_size: cases per ``generate`` / forward call.
        add_bos: put BOS first; None = when the tokenizer has one.

    Refused before anything runs: an unknown mode, no cases (or not :class:`InfillingCase`), counts
    that are not positive ints, a ``max_length`` beyond the model's positions or that leaves fewer than
    8 prompt tokens after ``max_new_tokens``, and a tokenizer larger than the model's embeddings.

    Example:
        >>> from transformers import GPT2Config, GPT2LMHeadModel
        >>> from hf_lmobj.corpus import build_tokenizer
        >>> tok = build_tokenizer(vocab_size=512, max_documents=20)
        >>> _ = torch.manual_seed(0)  # an untrained tiny model: it writes no line right
        >>> model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tok), n_embd=32, n_layer=1, n_head=2, n_positions=64,
        ...                                    bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id))
        >>> cases = single_line_cases(["def f(x):\\n    y = x + 1\\n    return y\\n"], num_cases=2, seed=0)
        >>> result = evaluate_infilling(model, tok, cases, mode="psm", max_new_tokens=8)
        >>> result.mode, result.cases, result.exact_match, 0 <= result.edit_similarity < 1
        ('psm', 2, 0.0, True)
        >>> result.middle_bits_per_byte > 1  # the hidden lines' NLL, in bits per UTF-8 byte
        True
        >>> evaluate_infilling(model, tok, cases, mode="middle")
        Traceback (most recent call last):
        ...
        ValueError: mode must be one of ('psm', 'spm', 'prefix_only'), got 'middle'
    """
    if mode not in INFILLING_MODES:
        raise ValueError(f"mode must be one of {INFILLING_MODES}, got {mode!r}")
    if isinstance(cases, (str, bytes)) or not isinstance(cases, Sequence) or not cases:
        raise ValueError("cases is empty (or not a list); build them with single_line_cases()")
    for i, case in enumerate(cases):
        if not isinstance(case, InfillingCase):
            raise TypeError(
                f"cases[{i}] must be an InfillingCase (from single_line_cases()), got {type(case).__name__}"
            )
    max_new_tokens = check_length(max_new_tokens, "max_new_tokens", 1, why="the generation budget per case")
    batch_size = check_length(batch_size, "batch_size", 1, why="cases per generate call")
    positions = model_positions(model)
    max_length = check_length(max_length, "max_length", 1, optional=True)
    if max_length is None:
        if positions is None:
            raise ValueError("the model's config names no max_position_embeddings / n_positions; pass max_length=")
        max_length = positions
    if positions is not None and max_length > positions:
        raise ValueError(
            f"max_length={max_length} is more than the model's {positions} positions; pass max_length <= {positions}"
        )
    add_bos = check_flag(add_bos, "add_bos", optional=True)
    add_bos = tokenizer.bos_token_id is not None if add_bos is None else add_bos
    if add_bos and tokenizer.bos_token_id is None:
        raise ValueError("add_bos=True but the tokenizer has no bos_token; pass add_bos=False")
    budget = max_length - max_new_tokens
    if budget < 8:
        raise ValueError(
            f"max_length={max_length} leaves {budget} prompt tokens after max_new_tokens={max_new_tokens} (at least "
            "8 needed: BOS, 3 sentinels and some context); lower max_new_tokens or raise max_length"
        )
    check_model_vocabulary(model, tokenizer)  # the prompts are cut to the budget below
    prompts, targets, leads = _prompts(tokenizer, cases, mode, budget, add_bos)
    targets = [t[:max_new_tokens] for t in targets]  # lines longer than the budget are scored on their start
    stop = fim_generate_kwargs(tokenizer)
    was_training = model.training
    model.eval()
    predictions: list[str] = []
    try:
        device = next(model.parameters()).device
        for start in range(0, len(prompts), batch_size):
            inputs = left_padded(prompts[start : start + batch_size], stop["pad_token_id"])
            width = inputs["input_ids"].shape[1]
            heal = LogitsProcessorList([LeadLogitsProcessor(tokenizer, leads[start : start + batch_size], width)])
            sequences = model.generate(
                **{k: v.to(device) for k, v in inputs.items()},
                max_new_tokens=max_new_tokens,
                do_sample=False,
                logits_processor=heal,
                **stop,
            )  # (B, T + new): each healed row writes its lead first
            predictions += [tokenizer.decode(ids) for ids in middle_ids(sequences.cpu(), width, stop["eos_token_id"])]
        nll = _target_nll(model, prompts, targets, stop["pad_token_id"], batch_size)
    finally:
        model.train(was_training)
    lines = [p[len(lead) :].split("\n")[0] if p.startswith(lead) else None for p, lead in zip(predictions, leads)]
    hits = [line == case.line for line, case in zip(lines, cases)]
    similarity = [edit_similarity(line or "", case.line) for line, case in zip(lines, cases)]
    scored_bytes = sum(len(tokenizer.decode(t).encode("utf-8")) for t in targets)
    return InfillingResult(
        mode=mode,
        cases=len(cases),
        exact_match=sum(hits) / len(cases),
        edit_similarity=sum(similarity) / len(cases),
        middle_nll=sum(nll) / len(cases),
        middle_bits_per_byte=sum(nll) / math.log(2) / max(scored_bytes, 1),
    )
