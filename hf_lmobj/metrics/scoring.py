"""Score texts with a causal LM: per-text summed NLL over sliding windows, batched across texts.

The one scoring core behind both metric folders and the recipes. It imports only the standard
library, ``torch``, ``transformers`` and ``tqdm`` (a dependency of ``transformers``), never the rest of
``hf_lmobj``: :func:`hf_lmobj.metrics.export_space` copies this very file into each Space folder as
``scoring.py`` (the scripts import it with ``from .scoring import ...``, a sibling file ``evaluate``
copies along), so a Space runs with ``evaluate``, ``torch``, ``transformers`` and ``datasets`` alone.

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
lm-eval's unit counts are :func:`count_words` (``len(re.split(r"\\s+", text))``) and the UTF-8 bytes;
its aggregates are ``word_perplexity = exp(sum nll / sum words)``, ``byte_perplexity = exp(sum nll /
sum bytes)`` and ``bits_per_byte = sum nll / sum bytes / ln 2``.

Example:
    >>> plan_windows(10, max_length=4, stride=2)
    [(0, 0, 4), (2, 4, 6), (4, 6, 8), (5, 8, 9)]
    >>> round(perplexity_from_sums([3.912], [3]), 3), round(bits_per_byte_from_sums([math.log(4)], [2]), 3)
    (3.684, 1.0)
"""

from __future__ import annotations

import math
import numbers
import os
import re
from collections.abc import Sequence
from typing import Any, NamedTuple

import torch
from tqdm.auto import tqdm

__all__ = [
    "EMPTY_ENTRY_FIX",
    "WINDOWS",
    "TextScore",
    "full_vocab_logits",
    "model_vocab_size",
    "check_fits_context",
    "count_words",
    "plan_windows",
    "check_window_lengths",
    "check_sums",
    "exp_or_inf",
    "perplexity_from_sums",
    "bits_per_byte_from_sums",
    "byte_perplexity_from_sums",
    "word_perplexity_from_sums",
    "load_model_and_tokenizer",
    "default_max_length",
    "encode_texts",
    "score_texts",
    "MODEL_KWARGS",
    "SumsMetric",
    "sums_from_compute_args",
]

#: What to do about an entry that scored nothing (it has no perplexity).
EMPTY_ENTRY_FIX = "every entry needs at least one scored token/byte (drop empty texts)"

#: The window layouts of :func:`score_texts`: strided sliding windows, or lm-eval's disjoint rolling ones.
WINDOWS = ("strided", "lm_eval")


class TextScore(NamedTuple):
    """One text's summed negative log-likelihood (nats), scored tokens, UTF-8 bytes and lm-eval words."""

    nll: float
    num_tokens: int
    num_bytes: int
    num_words: int = 0  # 0: not counted


def count_words(text: str) -> int:
    """lm-evaluation-harness's word count, ``len(re.split(r"\\s+", text))`` (so never 0).

    Example:
        >>> count_words("def f(x):\\n    return x"), count_words(" a b "), count_words("")
        (4, 4, 1)
    """
    return len(re.split(r"\s+", text))


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


def _is_bool(value: Any) -> bool:
    return isinstance(value, bool) or type(value).__name__ == "bool_"  # numpy bools too


def check_length(value: Any, field: str, minimum: int = 1, why: str = "") -> int:
    """An int ``>= minimum`` (numpy ints accepted; bools and floats refused), as an int."""
    reason = f" ({why})" if why else ""
    if _is_bool(value) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{field} must be an int >= {minimum}{reason}, got {value!r}")
    if value < minimum:
        raise ValueError(f"{field} must be an int >= {minimum}{reason}, got {value!r}")
    return int(value)


def check_flag(value: Any, field: str) -> bool:
    """``True`` or ``False`` (numpy bools too); a string such as ``"False"`` is refused."""
    if not _is_bool(value):
        raise TypeError(f"{field} must be True or False, got {value!r}")
    return bool(value)


def _as_list(values: Any, field: str) -> list:
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__"):
        raise TypeError(f"{field} must be a list with one entry per text, got {type(values).__name__}")
    shape = tuple(getattr(values, "shape", (len(values),)))
    if len(shape) != 1:
        raise ValueError(f"{field} must be 1-D (one entry per text), got shape {shape}")
    if isinstance(values, torch.Tensor):
        values = values.detach().cpu()
    return list(values)


def _scalar(value: Any) -> Any:
    if isinstance(value, torch.Tensor) and value.numel() == 1 and value.dtype != torch.bool:
        return value.item()
    return value


def check_counts(values: Any, field: str, minimum: int = 1, fix: str = "") -> list[int]:
    """Whole numbers ``>= minimum``, one per text (integral floats accepted; bools, NaN, 1.5 refused)."""
    out = []
    for i, value in enumerate(_as_list(values, field)):
        value, name = _scalar(value), f"{field}[{i}]"
        if _is_bool(value) or not isinstance(value, numbers.Real):
            raise TypeError(f"{name} must be a whole number, got {value!r}")
        if not isinstance(value, numbers.Integral) and not (math.isfinite(value) and float(value).is_integer()):
            raise ValueError(f"{name} is {value}; counts must be whole numbers >= {minimum}")
        count = int(value)
        if count < minimum:
            problem = "counts cannot be negative" if count < 0 else f"it must be >= {minimum}"
            raise ValueError(f"{name} is {count}; {problem}{'; ' + fix if fix else ''}")
        out.append(count)
    return out


def check_nll_sums(values: Any, field: str = "nll") -> list[float]:
    """Summed negative log-likelihoods (nats), each a real number ``>= 0`` (``inf`` allowed, NaN not)."""
    out = []
    for i, value in enumerate(_as_list(values, field)):
        value = _scalar(value)
        if _is_bool(value) or not isinstance(value, numbers.Real):
            raise TypeError(f"{field}[{i}] must be a number (a summed negative log-likelihood in nats), got {value!r}")
        if math.isnan(value) or value < 0:
            raise ValueError(f"{field}[{i}] is {value}; it must be a summed negative log-likelihood >= 0 (nats)")
        out.append(float(value))
    return out


def check_window_lengths(max_length: int, stride: int) -> tuple[int, int]:
    """``max_length`` (>= 1) and ``stride`` (in ``[1, max_length]``) of the sliding windows, as ints.

    Example:
        >>> check_window_lengths(8, 9)
        Traceback (most recent call last):
        ...
        ValueError: stride must be an int in [1, max_length=8] (new tokens scored per window), got 9
    """
    max_length = check_length(max_length, "max_length", 1, "tokens per forward pass")
    stride = check_length(stride, "stride", 1, "new tokens scored per window after the first")
    if stride > max_length:
        raise ValueError(
            f"stride must be an int in [1, max_length={max_length}] (new tokens scored per window), got {stride}"
        )
    return max_length, stride


def check_sums(nll: Sequence[float], counts: Sequence[int], count_name: str) -> tuple[list[float], list[int]]:
    """Validate per-entry NLL sums and their counts (tokens or bytes) before any cast; return plain lists.

    Every entry is checked: ``TypeError`` for a value that is not a number (a string, a bool);
    ``ValueError`` for a length mismatch, an empty input, a NaN or negative NLL, or a count that is
    not a whole number >= 1 (1.5 is refused, not truncated; an entry that scored nothing has no
    perplexity: leave it out).

    Example:
        >>> check_sums([1.5], [0], "num_tokens")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: num_tokens[0] is 0; it must be >= 1; every entry needs at least one scored token/byte ...
        >>> check_sums([1.0], [1.5], "num_tokens")
        Traceback (most recent call last):
        ...
        ValueError: num_tokens[0] is 1.5; counts must be whole numbers >= 1
    """
    nll, counts = check_nll_sums(nll, "nll"), check_counts(counts, count_name, 1, EMPTY_ENTRY_FIX)
    if len(nll) != len(counts):
        raise ValueError(f"nll ({len(nll)}) and {count_name} ({len(counts)}) must have one entry per text each")
    if not nll:
        raise ValueError(f"nll and {count_name} are empty; pass at least one entry")
    return nll, counts


def exp_or_inf(x: float) -> float:
    """``exp(x)``, and ``inf`` where that overflows a float: the perplexity of a hopeless model, everywhere.

    Example:
        >>> exp_or_inf(0.0), exp_or_inf(1e6)
        (1.0, inf)
    """
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def perplexity_from_sums(nll: Sequence[float], num_tokens: Sequence[int]) -> float:
    """Corpus perplexity ``exp(sum nll / sum num_tokens)`` (token-weighted, not a mean of ratios); inf on overflow."""
    nll, num_tokens = check_sums(nll, num_tokens, "num_tokens")
    return exp_or_inf(math.fsum(nll) / sum(num_tokens))


def bits_per_byte_from_sums(nll: Sequence[float], num_bytes: Sequence[int]) -> float:
    """Corpus bits per byte ``sum nll / ln 2 / sum num_bytes`` (bytes of the original UTF-8 text)."""
    nll, num_bytes = check_sums(nll, num_bytes, "num_bytes")
    return math.fsum(nll) / math.log(2) / sum(num_bytes)


def byte_perplexity_from_sums(nll: Sequence[float], num_bytes: Sequence[int]) -> float:
    """lm-eval's ``byte_perplexity``, ``exp(sum nll / sum num_bytes)`` (``2 ** bits_per_byte``); inf on overflow."""
    nll, num_bytes = check_sums(nll, num_bytes, "num_bytes")
    return exp_or_inf(math.fsum(nll) / sum(num_bytes))


def word_perplexity_from_sums(nll: Sequence[float], num_words: Sequence[int]) -> float:
    """lm-eval's ``word_perplexity``, ``exp(sum nll / sum num_words)`` (words: :func:`count_words`)."""
    nll, num_words = check_sums(nll, num_words, "num_words")
    return exp_or_inf(math.fsum(nll) / sum(num_words))


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
) -> list[TextScore]:
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

    Returns:
        One :class:`TextScore` per text, in order.
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
    batch_size = check_length(batch_size, "batch_size", 1, "windows per forward pass")
    add_start_token, progress = check_flag(add_start_token, "add_start_token"), check_flag(progress, "progress")
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
                bar.update(len(batch))
    finally:
        model.train(was_training)
    return [
        TextScore(float(value), len(row) - 1, len(text.encode("utf-8")), count_words(text))
        for value, row, text in zip(nll.tolist(), ids, texts)
    ]


MODEL_KWARGS = (
    "model_id",
    "model",
    "tokenizer",
    "max_length",
    "stride",
    "add_start_token",
    "batch_size",
    "device",
    "progress",
    "windows",
)


class SumsMetric:
    """Mixin for an ``evaluate.Metric`` fed ``nll=`` / ``<count_name>=`` sums, or texts and a model.

    ``compute``, ``add_batch`` and ``add`` check every entry here, before ``evaluate`` casts the
    counts to int64 (which would truncate 1.5 to 1 and hide it). Set ``count_name`` in the subclass,
    and ``optional_counts`` for more count columns (e.g. ``num_words``): an entry given without them
    gets 0 there (not counted), so one feature set serves both kinds of input.
    """

    count_name: str = ""
    optional_counts: tuple[str, ...] = ()

    def _checked(self, sums: dict) -> dict:
        if "nll" not in sums or self.count_name not in sums:
            raise ValueError(f"pass nll=[...] and {self.count_name}=[...] (one entry per text)")
        sums["nll"], sums[self.count_name] = check_sums(sums["nll"], sums[self.count_name], self.count_name)
        for name in self.optional_counts:
            if name not in sums:
                sums[name] = [0] * len(sums["nll"])
                continue
            sums[name] = check_counts(sums[name], name, minimum=0)  # 0: not counted
            if len(sums[name]) != len(sums["nll"]):
                raise ValueError(
                    f"nll ({len(sums['nll'])}) and {name} ({len(sums[name])}) must have one entry per text each"
                )
        return sums

    def compute(self, *, predictions=None, references=None, **kwargs):
        """``compute(nll=..., <count_name>=...)``, or ``compute(predictions=texts, model_id=...)``."""
        sums = sums_from_compute_args(predictions, references, kwargs, self.count_name, self.optional_counts)
        if "nll" in sums or self.count_name in sums:
            sums = self._checked(sums)
        return super().compute(**sums)

    def add_batch(self, *, predictions=None, references=None, **kwargs):
        """Add per-text sums (``nll=``, ``<count_name>=``), or texts scored with a model."""
        sums = sums_from_compute_args(predictions, references, kwargs, self.count_name, self.optional_counts)
        return super().add_batch(**self._checked(sums))

    def add(self, *, prediction=None, reference=None, **kwargs):
        """Add one text's sums: ``add(nll=..., <count_name>=...)``."""
        if prediction is not None or reference is not None:
            raise ValueError(f"add takes nll= and {self.count_name}= (one text's sums); score texts with add_batch")
        if "nll" not in kwargs or self.count_name not in kwargs:
            raise ValueError(f"add needs nll= and {self.count_name}= (one text's sums)")
        names = ("nll", self.count_name, *(n for n in self.optional_counts if n in kwargs))
        one = self._checked({name: [kwargs.pop(name)] for name in names})
        return super().add(**{name: values[0] for name, values in one.items()}, **kwargs)


def sums_from_compute_args(
    predictions, references, kwargs: dict, count_name: str, optional_counts: Sequence[str] = ()
) -> dict:
    """The dispatch shared by the metrics' ``compute``: the ``nll=`` / ``<count_name>=`` sums to add.

    With ``predictions`` (texts) and a model, the texts are scored and their sums returned in
    ``kwargs`` (with ``optional_counts`` taken from the scores too); without, ``kwargs`` already hold
    the sums and are returned as they are. Checks that exactly one way in is used.
    """
    model_kwargs = {k: kwargs.pop(k) for k in MODEL_KWARGS if k in kwargs}
    if references is not None:
        raise ValueError(f"this metric takes no references; pass predictions=texts or nll=/{count_name}=")
    if predictions is None:
        if model_kwargs:
            raise ValueError(f"{sorted(model_kwargs)} need predictions=<list of texts> to score")
        return kwargs
    if "nll" in kwargs or count_name in kwargs or any(name in kwargs for name in optional_counts):
        raise ValueError(f"pass either predictions=texts (with a model) or nll=/{count_name}=, not both")
    model, model_id = model_kwargs.pop("model", None), model_kwargs.pop("model_id", None)
    if (model is None) == (model_id is None):
        raise ValueError("scoring texts needs exactly one of model_id=<path or Hub id> or model=<causal LM>")
    tokenizer = model_kwargs.pop("tokenizer", None)
    scores = score_texts(model if model is not None else model_id, tokenizer, predictions, **model_kwargs)
    counts = {name: [getattr(s, name) for s in scores] for name in (count_name, *optional_counts)}
    return {**kwargs, "nll": [s.nll for s in scores], **counts}
