"""Score texts with a causal LM: per-text summed NLL over strided sliding windows, batched across texts.

The one scoring loop behind both metric folders (``perplexity/`` and ``bits_per_byte/`` load it as
their sibling ``scoring.py``, so this file imports nothing from ``hf_lmobj``) and the recipes.

Windows. A text of ``N`` tokens (BOS included when ``add_start_token``) has ``N - 1`` targets:
token ``p + 1`` is predicted from the logits at position ``p``. The logit positions ``0 .. N - 2``
are cut into consecutive blocks, the first ``max_length`` long and each later one ``stride`` long;
a block ending at ``end`` is scored by one forward pass over the input tokens
``[max(0, end - max_length), end)``. So every token is scored exactly once, with up to
``max_length`` tokens of context (at least ``max_length - stride + 1`` after the first window), and
the target of a window's last position comes from the text itself, never dropped.

Example:
    >>> plan_windows(10, max_length=4, stride=2)
    [(0, 0, 4), (2, 4, 6), (4, 6, 8), (5, 8, 9)]
    >>> round(perplexity_from_sums([3.912], [3]), 3), round(bits_per_byte_from_sums([math.log(4)], [2]), 3)
    (3.684, 1.0)
"""

from __future__ import annotations

import math
import os
from typing import NamedTuple, Sequence

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm


class TextScore(NamedTuple):
    """One text's summed negative log-likelihood (nats), scored tokens and UTF-8 bytes."""

    nll: float
    num_tokens: int
    num_bytes: int


def plan_windows(num_tokens: int, max_length: int, stride: int) -> list[tuple[int, int, int]]:
    """``(begin, first_scored, end)`` windows: input ``[begin, end)``, logits ``[first_scored, end)`` scored.

    The scored blocks partition the logit positions ``0 .. num_tokens - 2``; ``end - begin`` never
    exceeds ``max_length``. A text with fewer than two tokens has no target and no window.

    Example:
        >>> plan_windows(9, max_length=4, stride=4)
        [(0, 0, 4), (4, 4, 8)]
        >>> plan_windows(3, max_length=8, stride=2)
        [(0, 0, 2)]
    """
    if max_length < 1 or not 1 <= stride <= max_length:
        raise ValueError(f"need 1 <= stride <= max_length, got stride={stride}, max_length={max_length}")
    windows, done, last = [], 0, num_tokens - 1  # logit positions [0, last) have a target
    while done < last:
        end = min(done + (max_length if done == 0 else stride), last)
        windows.append((max(0, end - max_length), done, end))
        done = end
    return windows


def check_sums(nll: Sequence[float], counts: Sequence[int], count_name: str) -> tuple[list[float], list[int]]:
    """Validate per-entry NLL sums and their counts (tokens or bytes); return them as plain lists.

    Raises ValueError for a length mismatch, an empty input, a NaN or negative NLL, or a count that
    is not a positive integer (an entry that scored nothing has no perplexity; leave it out).

    Example:
        >>> check_sums([1.5], [0], "num_tokens")
        Traceback (most recent call last):
        ...
        ValueError: num_tokens[0] is 0; every entry needs at least one scored token/byte (drop empty texts)
    """
    nll, counts = list(nll), list(counts)
    if len(nll) != len(counts):
        raise ValueError(f"nll has {len(nll)} entries but {count_name} has {len(counts)}; pass one of each per text")
    if not nll:
        raise ValueError(f"nll and {count_name} are empty; pass at least one entry")
    for i, (value, count) in enumerate(zip(nll, counts)):
        if value is None or math.isnan(value) or value < 0:
            raise ValueError(f"nll[{i}] is {value}; it must be a summed negative log-likelihood >= 0 (nats)")
        if isinstance(count, float) and not count.is_integer():
            raise ValueError(f"{count_name}[{i}] is {count}; counts must be whole numbers")
        if count is None or count < 0:
            raise ValueError(f"{count_name}[{i}] is {count}; counts cannot be negative")
        if count == 0:
            raise ValueError(
                f"{count_name}[{i}] is 0; every entry needs at least one scored token/byte (drop empty texts)"
            )
    return [float(v) for v in nll], [int(c) for c in counts]


def perplexity_from_sums(nll: Sequence[float], num_tokens: Sequence[int]) -> float:
    """Corpus perplexity ``exp(sum nll / sum num_tokens)`` (token-weighted, not a mean of ratios)."""
    nll, num_tokens = check_sums(nll, num_tokens, "num_tokens")
    return math.exp(math.fsum(nll) / sum(num_tokens))


def bits_per_byte_from_sums(nll: Sequence[float], num_bytes: Sequence[int]) -> float:
    """Corpus bits per byte ``sum nll / ln 2 / sum num_bytes`` (bytes of the original UTF-8 text)."""
    nll, num_bytes = check_sums(nll, num_bytes, "num_bytes")
    return math.fsum(nll) / math.log(2) / sum(num_bytes)


def load_model_and_tokenizer(model, tokenizer=None, device: str | torch.device | None = None):
    """Resolve ``model`` (a path / Hub id, or an in-memory causal LM) and its tokenizer, on ``device``.

    A path or id is loaded once with ``AutoModelForCausalLM`` / ``AutoTokenizer``; an in-memory
    model needs ``tokenizer=`` and stays on its device unless ``device`` is given.
    """
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if isinstance(model, (str, os.PathLike)):
        tokenizer = tokenizer if tokenizer is not None else model
        model = AutoModelForCausalLM.from_pretrained(model)
        device = device or ("cuda" if torch.cuda.is_available() else "cpu")
    elif not isinstance(model, torch.nn.Module):
        raise TypeError(f"model must be a path, a Hub id or a torch causal LM, got {type(model).__name__}")
    elif tokenizer is None:
        raise TypeError("an in-memory model needs its tokenizer: pass tokenizer=<tokenizer or path>")
    if isinstance(tokenizer, (str, os.PathLike)):
        tokenizer = AutoTokenizer.from_pretrained(tokenizer)
    if device is not None:
        model = model.to(device)
    return model, tokenizer


def default_max_length(model) -> int:
    """The model's context size (``max_position_embeddings`` / ``n_positions``)."""
    config = getattr(model, "config", None)
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length"):
        value = getattr(config, name, None) if config is not None else None
        if isinstance(value, int) and value > 0:
            return value
    raise ValueError("cannot read the model's context size from its config; pass max_length=<int>")


def encode_texts(tokenizer, texts: Sequence[str], add_start_token: bool) -> list[list[int]]:
    """Token ids per text (no special tokens but an optional leading BOS); each must have a target."""
    if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
        raise TypeError("texts must be a list of strings (wrap a single text in a list)")
    if not texts:
        raise ValueError("texts is empty; pass at least one text")
    bos = []
    if add_start_token:
        if tokenizer.bos_token_id is None:
            raise ValueError("tokenizer has no bos_token; pass add_start_token=False (or set one)")
        bos = [tokenizer.bos_token_id]
    ids = [bos + row for row in tokenizer(list(texts), add_special_tokens=False)["input_ids"]]
    for i, row in enumerate(ids):
        if len(row) < 2:
            hint = "it is empty" if add_start_token else "use add_start_token=True or drop it"
            raise ValueError(f"texts[{i}] gives {len(row)} token(s), nothing to predict ({hint})")
    return ids


def _window_batch(ids, windows, pad_id: int, device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Right-padded inputs, attention mask and targets (-100 where not scored) for some windows."""
    width = max(end - begin for _, begin, _, end in windows)
    inputs = torch.full((len(windows), width), pad_id, dtype=torch.long)  # (B, T)
    targets = torch.full((len(windows), width), -100, dtype=torch.long)  # (B, T)
    mask = torch.zeros((len(windows), width), dtype=torch.long)  # (B, T)
    for row, (text, begin, first, end) in enumerate(windows):
        tokens = ids[text]
        inputs[row, : end - begin] = torch.tensor(tokens[begin:end])
        targets[row, first - begin : end - begin] = torch.tensor(tokens[first + 1 : end + 1])
        mask[row, : end - begin] = 1
    return inputs.to(device), mask.to(device), targets.to(device)


@torch.inference_mode()
def score_texts(
    model,
    tokenizer,
    texts: Sequence[str],
    max_length: int | None = None,
    stride: int | None = None,
    add_start_token: bool = True,
    batch_size: int = 8,
    device: str | torch.device | None = None,
    progress: bool = True,
) -> list[TextScore]:
    """Summed NLL (nats), scored tokens and UTF-8 bytes for each text, under a causal LM.

    Args:
        model: an in-memory causal LM, or a local path / Hub id loaded once for this call.
        tokenizer: its tokenizer (or a path); may be None when ``model`` is a path.
        texts: the texts, scored whole (never truncated).
        max_length: tokens per forward pass (default: the model's context size).
        stride: logit positions scored per window after the first (default ``max_length``: disjoint
            blocks, the fastest; smaller strides give each token more context for more compute).
        add_start_token: prepend BOS so that the text's first token is scored too.
        batch_size: windows per forward pass; windows of different texts share a batch, longest first.
        device: where to run (default: the in-memory model's device, else CUDA when available).
        progress: show a tqdm bar over windows.

    Returns:
        One :class:`TextScore` per text, in order.
    """
    model, tokenizer = load_model_and_tokenizer(model, tokenizer, device)
    max_length = default_max_length(model) if max_length is None else max_length
    stride = max_length if stride is None else stride
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
    ids = encode_texts(tokenizer, texts, add_start_token)
    windows = [(t, *w) for t, row in enumerate(ids) for w in plan_windows(len(row), max_length, stride)]
    windows.sort(key=lambda w: w[3] - w[1], reverse=True)  # longest first: little padding per batch
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    device = next(model.parameters()).device
    nll = torch.zeros(len(ids), dtype=torch.float64)  # (num_texts,)
    was_training = model.training
    model.eval()
    try:
        with tqdm(total=len(windows), desc="scoring windows", disable=not progress) as bar:
            for start in range(0, len(windows), batch_size):
                batch = windows[start : start + batch_size]
                inputs, mask, targets = _window_batch(ids, batch, pad_id, device)
                logits = model(input_ids=inputs, attention_mask=mask, use_cache=False).logits  # (B, T, V)
                token_nll = F.cross_entropy(logits.float().transpose(1, 2), targets, reduction="none")  # (B, T)
                rows = torch.tensor([w[0] for w in batch])
                nll.index_add_(0, rows, token_nll.sum(dim=1).double().cpu())
                bar.update(len(batch))
    finally:
        model.train(was_training)
    return [
        TextScore(float(value), len(row) - 1, len(text.encode("utf-8")))
        for value, row, text in zip(nll.tolist(), ids, texts)
    ]


MODEL_KWARGS = ("model_id", "model", "tokenizer", "max_length", "stride", "add_start_token", "batch_size",
                "device", "progress")


def sums_from_compute_args(predictions, references, kwargs: dict, count_name: str) -> dict:
    """The dispatch shared by the metrics' ``compute``: the ``nll=`` / ``<count_name>=`` sums to add.

    With ``predictions`` (texts) and a model, the texts are scored and their sums returned in
    ``kwargs``; without, ``kwargs`` already hold the sums and are returned as they are. Checks that
    exactly one way in is used.
    """
    model_kwargs = {k: kwargs.pop(k) for k in MODEL_KWARGS if k in kwargs}
    if references is not None:
        raise ValueError(f"this metric takes no references; pass predictions=texts or nll=/{count_name}=")
    if predictions is None:
        if model_kwargs:
            raise ValueError(f"{sorted(model_kwargs)} need predictions=<list of texts> to score")
        return kwargs
    if "nll" in kwargs or count_name in kwargs:
        raise ValueError(f"pass either predictions=texts (with a model) or nll=/{count_name}=, not both")
    model, model_id = model_kwargs.pop("model", None), model_kwargs.pop("model_id", None)
    if (model is None) == (model_id is None):
        raise ValueError("scoring texts needs exactly one of model_id=<path or Hub id> or model=<causal LM>")
    tokenizer = model_kwargs.pop("tokenizer", None)
    scores = score_texts(model if model is not None else model_id, tokenizer, predictions, **model_kwargs)
    return {**kwargs, "nll": [s.nll for s in scores], count_name: [getattr(s, count_name) for s in scores]}
