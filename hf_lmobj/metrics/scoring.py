"""Score texts with a causal LM: per-text summed NLL over sliding windows, batched across texts.

Contract. :func:`score_texts` returns one :class:`TextScore` per text (summed NLL in nats, scored
tokens, UTF-8 bytes, lm-eval words); :mod:`.sums` turns such sums into corpus figures and feeds the
``evaluate`` metrics (import its names from there; :class:`TextScoringMetric` and
:func:`text_sums_from_compute_args` here are its ``SumsMetric`` and ``sums_from_compute_args`` scoring texts
with :func:`score_texts`). This file imports only the standard library,
``torch``, ``transformers``, ``tqdm`` (a dependency of ``transformers``) and its sibling ``.sums``, never
the rest of ``hf_lmobj``: :func:`hf_lmobj.metrics.export_space` writes both files into each Space folder,
whose script imports both (``from .sums import ...``, ``from .scoring import ...``: siblings that
``evaluate`` copies along), so a Space runs with ``evaluate``, ``torch``, ``transformers`` and
``datasets`` alone.

Windows (``windows="strided"``, the default). A text of ``N`` tokens (BOS included when
``add_start_token``) has ``N - 1`` targets: token ``p + 1`` is predicted from the logits at position
``p``. The logit positions ``0 .. N - 2`` are cut into consecutive blocks, the first ``max_length``
long and each later one ``stride`` long; a block ending at ``end`` is scored by one forward pass over
the input tokens ``[max(0, end - max_length), end)``. So every token is scored exactly once, with up
to ``max_length`` tokens of context (at least ``max_length - stride + 1`` after the first window), and
the target of a window's last position comes from the text itself, never dropped.

lm-evaluation-harness (``windows="lm_eval"``): ``loglikelihood_rolling``'s windows, which are, window
for window, the strided layout above with ``stride = max_length`` over ``[BOS, else EOS] + t`` (``t``
the text encoded without special tokens): disjoint blocks of ``max_length`` targets, each read from
the ``max_length`` tokens before its last target, so the last short window too has a full context.

Per-token NLL (``return_token_nll=True``, off by default). Each text gets a :class:`TokenScore`: the four
sums of :class:`TextScore` plus ``token_nll``, the NLL of every target (float64 numpy, ``num_tokens`` long:
``token_nll[i]`` is the target at index ``t = i + 1`` of the encoded text, BOS at index 0 when
``add_start_token``), and ``token_context``, the tokens of context its window gave it (``t - begin``). Its
``nll`` is then ``math.fsum(token_nll)``, the correctly rounded sum of those very values, so the per-token
figures add up to it exactly; off, ``nll`` is the sum of float32 window sums as ever (the two agree to float32
rounding, ~1e-6 relative). BOS is never a target and no EOS is ever added: a text's last target is its own
last token (an EOS only when the text itself ends with one).

Example:
    >>> plan_windows(10, max_length=4, stride=2)
    [(0, 0, 4), (2, 4, 6), (4, 6, 8), (5, 8, 9)]

Why one module: the package, the recipes and both Spaces score texts with this very code, so their figures agree.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from typing import Any, NamedTuple

import torch
from tqdm.auto import tqdm

from .sums import _check_flag, _check_int, check_window_lengths, count_words
from .sums_metric import SumsMetric, sums_from_compute_args

#: The window layouts of :func:`score_texts`: strided sliding windows, or lm-eval's disjoint rolling ones.
WINDOWS = ("strided", "lm_eval")


class TextScore(NamedTuple):
    """One text's summed negative log-likelihood (nats), scored tokens, UTF-8 bytes and lm-eval words."""

    nll: float
    num_tokens: int
    num_bytes: int
    num_words: int = 0  # 0: not counted


class TokenScore(NamedTuple):
    """A :class:`TextScore`'s sums plus every target's NLL and context (``score_texts(..., return_token_nll=True)``).

    ``token_nll`` (float64 numpy, ``num_tokens`` long): ``token_nll[i]`` is the NLL (nats) of the target at index
    ``i + 1`` of the encoded text (BOS at 0 when a start token was added); ``token_context`` (int64 numpy): the
    tokens of context the window gave that target. ``nll == math.fsum(token_nll)`` exactly.
    """

    nll: float
    num_tokens: int
    num_bytes: int
    num_words: int
    token_nll: Any  # numpy float64 (num_tokens,)
    token_context: Any  # numpy int64 (num_tokens,)

    @property
    def text_score(self) -> TextScore:
        """The four sums alone, as :class:`TextScore`."""
        return TextScore(self.nll, self.num_tokens, self.num_bytes, self.num_words)


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
    check_window_lengths(max_length, stride)
    windows, done, last = [], 0, num_tokens - 1  # logit positions [0, last) have a target
    while done < last:
        end = min(done + (max_length if done == 0 else stride), last)
        windows.append((max(0, end - max_length), done, end))
        done = end
    return windows


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


def check_fits_context(model, max_length: int) -> None:
    """Refuse windows longer than the model's context size (read from its config; unknown sizes pass)."""
    try:
        context = default_max_length(model)
    except ValueError:  # the config names no context size: nothing to check against
        return
    if max_length > context:
        raise ValueError(
            f"max_length={max_length} exceeds the model's context size {context} (its config's "
            f"max_position_embeddings / n_positions): pass max_length <= {context}"
        )


def encode_texts(
    tokenizer, texts: Sequence[str], add_start_token: bool, eos_if_no_bos: bool = False
) -> list[list[int]]:
    """Token ids per text (no special tokens but an optional leading BOS); each must have a target.

    ``eos_if_no_bos`` starts with EOS when the tokenizer has no BOS (lm-eval's ``prefix_token_id``).
    """
    if isinstance(texts, str) or not all(isinstance(t, str) for t in texts):
        raise TypeError("texts must be a list of strings (wrap a single text in a list)")
    if not texts:
        raise ValueError("texts is empty; pass at least one text")
    bos = []
    if add_start_token:
        start = tokenizer.bos_token_id
        if start is None and eos_if_no_bos:
            start = tokenizer.eos_token_id
        if start is None:
            raise ValueError("tokenizer has no bos_token; pass add_start_token=False (or set one)")
        bos = [start]
    ids = [bos + row for row in tokenizer(list(texts), add_special_tokens=False)["input_ids"]]
    for i, row in enumerate(ids):
        if len(row) < 2:
            hint = "it is empty" if add_start_token else "use add_start_token=True or drop it"
            raise ValueError(f"texts[{i}] gives {len(row)} token(s), nothing to predict ({hint})")
    return ids


def model_vocab_size(model) -> int | None:
    """Rows of the model's output head (its global size when tensor-parallel), else ``config.vocab_size``."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    weight = getattr(head, "weight", None)
    if isinstance(weight, torch.Tensor) and weight.dim() == 2:
        return int(weight.shape[0])  # a DTensor reports its global shape
    config = getattr(model, "config", None)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    size = getattr(text, "vocab_size", None)
    return size if isinstance(size, int) else None


def full_vocab_logits(logits: torch.Tensor, vocab_size: int | None = None) -> torch.Tensor:
    """Logits over the whole vocabulary as a plain tensor: a tensor-parallel ``DTensor`` is gathered here.

    A plain tensor narrower than ``vocab_size`` is one rank's vocabulary shard (a ``ColwiseParallel`` head
    that returns its local output): refused, since a softmax or an argmax over it is silently wrong.

    Example:
        >>> full_vocab_logits(torch.zeros(1, 2, 8), vocab_size=8).shape
        torch.Size([1, 2, 8])
    """
    if hasattr(logits, "full_tensor"):  # a DTensor: Shard(-1) over the tensor-parallel ranks, or replicated
        logits = logits.full_tensor()
    if vocab_size is not None and logits.shape[-1] < vocab_size:
        raise ValueError(
            f"the model returned logits over {logits.shape[-1]} of its {vocab_size} vocabulary entries: a "
            "tensor-parallel head's local shard. Gather them in the model: ColwiseParallel(output_layouts="
            "Replicate()) on the head, or use_local_output=False, or load it with tp_plan='auto'"
        )
    return logits


def window_nll(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
    """Per-position ``-log p(target)`` of ``logits`` (B, T, V), float32 (float64 kept), 0 where ignored.

    The formula of :func:`hf_lmobj.losses.functional.token_nll` (``logsumexp - logit of the target``),
    written here so that this file needs nothing else from the package; a test holds them equal.
    """
    keep = targets != ignore_index  # (B, T)
    z = logits[keep].to(torch.float64 if logits.dtype == torch.float64 else torch.float32)  # (M, V)
    picked = targets[keep]  # (M,)
    out = torch.zeros(targets.shape, dtype=z.dtype, device=logits.device)  # (B, T)
    out[keep] = torch.logsumexp(z, dim=-1) - z.gather(1, picked[:, None]).squeeze(1)
    return out


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


def _keep_token_nll(token_nll: list, context: list, windows, nll_rows: torch.Tensor) -> None:
    """Copy each window's scored NLLs (B, T) into its text's per-target arrays, with the context each target had.

    Logit position ``p`` (column ``p - begin``) predicts target index ``p + 1``, i.e. ``token_nll[p]``, read from
    the ``p + 1 - begin`` input tokens ``[begin, p]``.
    """
    for row, (text, begin, first, end) in enumerate(windows):
        token_nll[text][first:end] = nll_rows[row, first - begin : end - begin]
        context[text][first:end] = torch.arange(first + 1 - begin, end + 1 - begin)


def _token_scores(token_nll: list, context: list, ids: list, texts: Sequence[str]) -> list[TokenScore]:
    """One :class:`TokenScore` per text, its ``nll`` the correctly rounded sum of its per-target values."""
    scores = []
    for values, ctx, row, text in zip(token_nll, context, ids, texts):
        array = values.numpy()
        scores.append(
            TokenScore(
                math.fsum(array.tolist()),
                len(row) - 1,
                len(text.encode("utf-8")),
                count_words(text),
                array,
                ctx.numpy(),
            )
        )
    return scores


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
    windows: str = "strided",
    return_token_nll: bool = False,
) -> list[TextScore] | list[TokenScore]:
    """Summed NLL (nats), scored tokens, UTF-8 bytes and lm-eval words for each text, under a causal LM.

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
        windows: ``"strided"`` (the layout above) or ``"lm_eval"``: lm-evaluation-harness's disjoint
            rolling windows (stride ``max_length``, a BOS start token, else EOS; ``stride`` must be
            None or ``max_length`` and ``add_start_token`` True).
        return_token_nll: return :class:`TokenScore` s instead: the same sums plus every target's NLL and the
            context it had (see the module docstring); ``nll`` is then the exact sum of the per-target values.

    Returns:
        One :class:`TextScore` (or :class:`TokenScore`) per text, in order.
    """
    if windows not in WINDOWS:
        raise ValueError(f"windows must be one of {WINDOWS}, got {windows!r}")
    lm_eval = windows == "lm_eval"
    if lm_eval and add_start_token is not True:
        raise ValueError(
            "windows='lm_eval' always scores the first token from a start token; leave add_start_token=True"
        )
    if lm_eval and stride is not None and stride != max_length:
        raise ValueError(f"windows='lm_eval' uses disjoint windows (stride = max_length); got stride={stride!r}")
    batch_size = _check_int(batch_size, "batch_size", 1, "windows per forward pass")
    add_start_token, progress = _check_flag(add_start_token, "add_start_token"), _check_flag(progress, "progress")
    return_token_nll = _check_flag(return_token_nll, "return_token_nll")
    if max_length is not None:  # checked before anything is loaded
        max_length, stride = check_window_lengths(max_length, max_length if stride is None else stride)
    model, tokenizer = load_model_and_tokenizer(model, tokenizer, device)
    if max_length is None:
        max_length = default_max_length(model)
        max_length, stride = check_window_lengths(max_length, max_length if stride is None else stride)
    check_fits_context(model, max_length)
    ids = encode_texts(tokenizer, texts, add_start_token, eos_if_no_bos=lm_eval)
    plan = [(t, *w) for t, row in enumerate(ids) for w in plan_windows(len(row), max_length, stride)]
    plan.sort(key=lambda w: w[3] - w[1], reverse=True)  # longest first: little padding per batch
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
    device, vocab = next(model.parameters()).device, model_vocab_size(model)
    nll = torch.zeros(len(ids), dtype=torch.float64)  # (num_texts,)
    token_nll = [torch.zeros(len(row) - 1, dtype=torch.float64) for row in ids] if return_token_nll else []
    context = [torch.zeros(len(row) - 1, dtype=torch.int64) for row in ids] if return_token_nll else []
    was_training = model.training
    model.eval()
    try:
        with tqdm(total=len(plan), desc="scoring windows", disable=not progress) as bar:
            for start in range(0, len(plan), batch_size):
                batch = plan[start : start + batch_size]
                inputs, mask, targets = _window_batch(ids, batch, pad_id, device)
                logits = model(input_ids=inputs, attention_mask=mask, use_cache=False).logits  # (B, T, V)
                logits = full_vocab_logits(logits, vocab)  # tensor-parallel heads: gathered or refused
                nll_rows = window_nll(logits, targets)  # (B, T), 0 where ignored
                rows = torch.tensor([w[0] for w in batch])
                nll.index_add_(0, rows, nll_rows.sum(dim=1).double().cpu())
                if return_token_nll:
                    _keep_token_nll(token_nll, context, batch, nll_rows.double().cpu())
                bar.update(len(batch))
    finally:
        model.train(was_training)
    if return_token_nll:
        return _token_scores(token_nll, context, ids, texts)
    return [
        TextScore(float(value), len(row) - 1, len(text.encode("utf-8")), count_words(text))
        for value, row, text in zip(nll.tolist(), ids, texts)
    ]


class TextScoringMetric(SumsMetric):
    """:class:`.sums.SumsMetric` whose ``compute(predictions=texts, model_id=...)`` scores with :func:`score_texts`."""

    score_texts = staticmethod(score_texts)


def text_sums_from_compute_args(
    predictions, references, kwargs: dict, count_name: str, optional_counts: Sequence[str] = ()
) -> dict:
    """:func:`.sums.sums_from_compute_args` with texts scored by :func:`score_texts`."""
    return sums_from_compute_args(predictions, references, kwargs, count_name, optional_counts, score_texts)
