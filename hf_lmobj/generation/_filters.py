"""Pure tensor filters behind :class:`~hf_lmobj.generation.sampling.SamplingLogitsProcessor`.

Each filter takes float32 (or float64) scores ``x`` of shape ``(B, V)`` (filtered tokens already
``-inf``) and one parameter per row, and returns new scores with the tokens it drops set to
``-inf``. Rows whose parameter switches the step off, and rows entirely ``-inf``, are unchanged.

Ties: every filter keeps a token exactly when its score is at least the score of the last token
the textbook rule keeps (a threshold on the value), so tokens tied with that boundary token are
all kept, never an arbitrary subset of them; without ties the kept sets are the textbook ones.

Top-p without a full sort: the best ``INITIAL_TOP_P_TOKENS`` of each row are selected and sorted
(a partial sort). Their cumulative sums are bit for bit the prefix of a full sort's, so when they
reach ``top_p`` the cutoff is exactly the full sort's. Probabilities, their cumulative sums and
``top_p`` itself are float64 whatever the scores' dtype (the log-normalizer too): in float32 the
sums of a peaked row stall below a ``top_p`` such as 0.999999 and no cut would be made at all.
A row whose prefix falls short is retried with the size :func:`predicted_size` extrapolates from
it (at least ``GROWTH`` times more), up to the whole vocabulary: the kept set is always exactly
:func:`top_p_filter_full_sort`'s.

Example:
    >>> x = torch.tensor([[2.0, 1.0, 0.1]]).log_softmax(-1)
    >>> top_p_filter(x, torch.tensor([0.9])).isfinite().tolist()
    [[True, True, False]]
"""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as F

NEG_INF = float("-inf")
INITIAL_TOP_P_TOKENS = 1024  # first partial sort; covers top_p in one go for most LM steps
GROWTH = 2  # a row whose prefix falls short retries with at least this many times more tokens


def greedy_filter(x: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """In ``rows``, keep only the argmax (the first, as ``torch.argmax`` and greedy ``generate``).

    Example:
        >>> greedy_filter(torch.tensor([[0.0, 3.0, 3.0]]), torch.tensor([True])).tolist()
        [[-inf, 3.0, -inf]]
    """
    best = x.argmax(-1, keepdim=True)  # (B, 1)
    keep = torch.zeros_like(x, dtype=torch.bool).scatter_(1, best, True)  # (B, V)
    return x.masked_fill(~keep & rows[:, None], NEG_INF)


def top_k_filter(x: torch.Tensor, top_k: torch.Tensor, min_tokens_to_keep: int = 1) -> torch.Tensor:
    """Keep the ``top_k[b]`` best tokens of row b (and any tied with the last); 0 = row off.

    Example:
        >>> x = torch.tensor([[1.0, 3.0, 2.0], [1.0, 3.0, 2.0]])
        >>> top_k_filter(x, torch.tensor([1, 0])).tolist()
        [[-inf, 3.0, -inf], [1.0, 3.0, 2.0]]
    """
    vocab = x.shape[-1]
    active = top_k > 0  # (B,)
    k = top_k.clamp(min=min_tokens_to_keep, max=vocab).masked_fill(~active, 1)  # (B,)
    k_max = int(k.max())
    kth = sorted_top_values(x, k_max).gather(1, (k - 1)[:, None])  # (B, 1)
    kth = kth.masked_fill(~active[:, None], NEG_INF)
    return x.masked_fill(x < kth, NEG_INF)


def min_p_filter(x: torch.Tensor, min_p: torch.Tensor, min_tokens_to_keep: int = 1) -> torch.Tensor:
    """Drop tokens whose probability is below ``min_p[b]`` times the row's top probability.

    Example:
        >>> x = torch.tensor([[2.0, 1.0, 0.1]]).log()
        >>> min_p_filter(x, torch.tensor([0.4])).isfinite().tolist()
        [[True, True, False]]
    """
    active = (min_p > 0) & x.amax(-1).isfinite()  # (B,)
    probs = x.softmax(-1)  # (B, V)
    remove = probs < min_p[:, None] * probs.amax(-1, keepdim=True)  # (B, V)
    if min_tokens_to_keep > 1:
        k = min(min_tokens_to_keep, x.shape[-1])
        remove &= probs < sorted_top_values(probs, k)[:, -1:]
    return x.masked_fill(remove & active[:, None], NEG_INF)


def top_p_filter(x: torch.Tensor, top_p: torch.Tensor, min_tokens_to_keep: int = 1) -> torch.Tensor:
    """Keep the smallest set of best tokens whose probability reaches ``top_p[b]``; >= 1 is off.

    A token is kept when the probability of the tokens ranked above it is below ``top_p`` (the
    rule of transformers' ``TopPLogitsWarper``). Same result as :func:`top_p_filter_full_sort`,
    usually without sorting the vocabulary.

    Example:
        >>> x = torch.tensor([[0.5, 0.3, 0.2], [0.5, 0.3, 0.2]]).log()
        >>> top_p_filter(x, torch.tensor([0.6, 1.0])).isfinite().tolist()
        [[True, True, False], [True, True, True]]
    """
    return _top_p(x, top_p, min_tokens_to_keep, full_sort=False)


def top_p_filter_full_sort(x: torch.Tensor, top_p: torch.Tensor, min_tokens_to_keep: int = 1) -> torch.Tensor:
    """Reference top-p with a full sort of every row (what :func:`top_p_filter` must equal).

    Example:
        >>> x = torch.tensor([[0.5, 0.3, 0.2]]).log()
        >>> top_p_filter_full_sort(x, torch.tensor([0.6])).isfinite().tolist()
        [[True, True, False]]
    """
    return _top_p(x, top_p, min_tokens_to_keep, full_sort=True)


def _top_p(x: torch.Tensor, top_p: torch.Tensor, min_keep: int, full_sort: bool) -> torch.Tensor:
    vocab = x.shape[-1]
    top_p = top_p.double()  # (B,)
    if not bool((top_p < 1).any()):
        return x
    active = (top_p < 1) & x.amax(-1).isfinite()  # (B,) rows with some finite score
    if not bool(active.any()):
        return x
    all_rows = bool(active.all())
    rows = None if all_rows else active.nonzero().squeeze(1)  # (A,)
    xa = x if all_rows else x.index_select(0, rows)  # (A, V)
    pa = top_p if all_rows else top_p.index_select(0, rows)  # (A,)
    lse = log_normalizer(xa)  # (A, 1) float64: probabilities exact to ~1e-16
    first = vocab if full_sort else min(vocab, max(INITIAL_TOP_P_TOKENS, min_keep))
    thresholds = _top_p_thresholds(xa, lse, pa, first, min_keep)  # (A,)
    filtered = xa.masked_fill(xa < thresholds[:, None], NEG_INF)  # (A, V)
    return filtered if all_rows else x.index_copy(0, rows, filtered)


def log_normalizer(x: torch.Tensor, block: int = 2**16) -> torch.Tensor:
    """``logsumexp`` of each row of ``x`` (R, V) in float64, as (R, 1); rows must have a finite maximum.

    Exact to float64 rounding whatever ``x``'s dtype (a float32 log-normalizer is off by up to
    ~1e-6 at |lse| ~ 20, as much as ``1 - top_p`` for ``top_p = 0.999999``). Rows are converted
    ``block`` elements at a time, so the float64 copy stays in cache.

    Example:
        >>> log_normalizer(torch.tensor([[0.0, 0.0], [1.0, -float("inf")]])).flatten().tolist()
        [0.6931471805599453, 1.0]
    """
    top = x.amax(-1, keepdim=True).double()  # (R, 1)
    sums = torch.empty_like(top)  # (R, 1)
    step = max(1, block // max(x.shape[-1], 1))
    for start in range(0, x.shape[0], step):
        chunk = x[start : start + step].to(torch.float64, copy=True)  # (r, V), never x itself
        sums[start : start + step] = chunk.sub_(top[start : start + step]).exp_().sum(-1, keepdim=True)
    return top + sums.log_()


def sorted_top_values(x: torch.Tensor, k: int, rows: torch.Tensor | None = None) -> torch.Tensor:
    """The ``k`` largest values of each row (R, V) in descending order (R, k); ``rows``: a subset.

    On CPU this is numpy's introselect + sort of the k values (faster there than ``torch.topk`` /
    ``torch.sort``); elsewhere ``torch.topk``. Values only, so ties are moot.

    Example:
        >>> sorted_top_values(torch.tensor([[1.0, 4.0, -float("inf"), 3.0]]), 3).tolist()
        [[4.0, 3.0, 1.0]]
    """
    vocab = x.shape[-1]
    if x.device.type != "cpu" or x.requires_grad or x.dtype not in (torch.float32, torch.float64):
        x = x if rows is None else x.index_select(0, rows)
        return x.topk(k, dim=-1, sorted=True).values
    array = x.detach().numpy() if rows is None else x.detach().numpy()[rows.numpy()]
    top = array if k >= vocab else np.partition(array, vocab - k, axis=-1)[:, vocab - k :]
    return torch.from_numpy(np.sort(top, axis=-1)[:, ::-1].copy())  # (R, k)


def _top_p_thresholds(
    x: torch.Tensor, lse: torch.Tensor, top_p: torch.Tensor, first: int, min_keep: int
) -> torch.Tensor:
    """Per row (A,), the score of the last kept token, from partial sorts grown until they cover."""
    vocab = x.shape[-1]
    thresholds = torch.empty(top_p.shape, dtype=x.dtype, device=x.device)  # (A,)
    pending = torch.arange(x.shape[0], device=x.device)  # rows not yet covered
    size = torch.full_like(pending, first)  # (A,) partial-sort size wanted by each pending row
    while pending.numel():
        retry, retry_size = [], []
        octave = torch.log2(size.double()).ceil()  # (P,) rows within a power of two share a sort
        for key in sorted(set(octave.tolist())):
            in_group = octave == key
            group, group_size = pending[in_group], int(size[in_group].max())  # (G,)
            group_size = vocab if group_size > vocab // 2 else group_size
            rows = None if len(group) == len(x) else group
            thr, covered, wanted = _prefix_thresholds(x, rows, lse, top_p, group_size, min_keep)
            thresholds.index_copy_(0, group[covered], thr[covered])
            retry.append(group[~covered])
            retry_size.append(wanted[~covered])
        pending, order = torch.cat(retry).sort()  # ascending: a full-length group is all of x
        size = torch.cat(retry_size)[order]
    return thresholds


def _prefix_thresholds(
    x: torch.Tensor,
    rows: torch.Tensor | None,
    lse: torch.Tensor,
    top_p: torch.Tensor,
    size: int,
    min_keep: int,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Cutoff from the ``size`` best tokens of the rows ``rows`` (G,) of x (A, V), None = all.

    Returns the score of the last kept token (G,), whether the prefix reaches ``top_p`` so that
    the cutoff is final (G,), and the size to retry with where it is not (G,).
    """
    vocab = x.shape[-1]
    if rows is not None:
        lse, top_p = lse.index_select(0, rows), top_p.index_select(0, rows)  # (G, 1), (G,)
    best = sorted_top_values(x, size, rows)  # (G, size)
    probs = (best.double() - lse).exp()  # (G, size) float64 (lse and top_p are float64)
    mass = probs.cumsum(-1)  # (G, size)
    above = F.pad(mass[:, :-1], (1, 0))  # (G, size) mass of the tokens ranked above
    n_keep = (above < top_p[:, None]).sum(-1).clamp(min=min(min_keep, size))  # (G,)
    covered = (mass[:, -1] >= top_p) | (size >= vocab)  # (G,)
    wanted = predicted_size(probs, mass, top_p).clamp(min=GROWTH * size, max=vocab)  # (G,)
    return best.gather(1, (n_keep - 1)[:, None]).squeeze(1), covered, wanted


def predicted_size(probs: torch.Tensor, mass: torch.Tensor, top_p: torch.Tensor) -> torch.Tensor:
    """How many best tokens (G,) likely reach ``top_p``, extrapolated from a sorted prefix (G, k).

    The tail is taken as a power law ``p(r) = p_k (r / k) ** -s`` (what language models' ranked
    probabilities look like), with ``s`` fitted to the prefix's mass in ranks (k/4, k/2] and
    (k/2, k]; solving ``sum_{k < r <= n} p(r) = top_p - mass_k`` for n, plus 20%. Never less than
    the bound that every later token is at most ``p_k``. Only a size hint: the caller checks the
    exact sums. Rows the fit cannot reach get 2**62 (the caller caps it at the vocabulary).

    Example:
        >>> probs = torch.arange(1, 50001, dtype=torch.float64) ** -1.1  # Zipf, V = 50000
        >>> probs = (probs / probs.sum())[None, :256]  # (1, 256) the best 256
        >>> predicted_size(probs, probs.cumsum(-1), torch.tensor([0.9])).item()  # exact: 7293
        8488
    """
    k = probs.shape[-1]
    probs, mass, top_p = probs.double(), mass.double(), top_p.double()
    last, missing = probs[:, -1], (top_p - mass[:, -1]).clamp(min=0)  # (G,)
    bound = k + missing / last  # (G,) every later token is at most as likely as the last
    if k >= 4:
        near = mass[:, -1] - mass[:, k // 2 - 1]  # (G,) mass of ranks (k/2, k]
        far = mass[:, k // 2 - 1] - mass[:, k // 4 - 1]  # (G,) mass of ranks (k/4, k/2]
        one_minus_s = torch.log2(near / far).clamp(min=-4.0, max=0.9)  # (G,) 1 - s, fitted
        one_minus_s = torch.where(one_minus_s.abs() < 1e-3, -1e-3, one_minus_s)
        ratio = 1 + missing * one_minus_s / (last * k)  # (G,) (n / k) ** (1 - s)
        fitted = k * ratio.clamp(min=1e-300) ** (1 / one_minus_s)  # (G,)
        fitted = torch.where(ratio > 0, 1.2 * fitted, math.inf)  # tail too thin: unreachable
        bound = torch.maximum(bound, fitted)
    return bound.nan_to_num(math.inf).clamp(max=2.0**62).ceil().long()
