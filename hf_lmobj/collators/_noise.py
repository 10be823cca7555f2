"""Pure helpers of T5 span corruption: lengths, random noise spans and sentinel replacement.

These follow T5's reference (``t5/data/preprocessors.py``: ``random_spans_helper``,
``random_spans_noise_mask``, ``noise_span_to_unique_sentinel``) in PyTorch, with explicit
``torch.Generator`` randomness and sentinel ids passed in (never assumed to be ``vocab_size - 1 - N``).

A sequence of ``n`` raw tokens gets exactly ``round(n * noise_density)`` noise tokens (at least 1,
at most ``n - 1``) in exactly ``round(noise / mean_noise_span_length)`` spans (at least 1); spans
alternate non-noise / noise, starting with non-noise, and all such masks are equally likely.

Example:
    >>> compute_input_and_target_lengths(512, 0.15, 3.0)
    (568, 114)
    >>> g = torch.Generator().manual_seed(0)
    >>> mask = random_spans_noise_mask(10, 0.3, 3.0, g)
    >>> int(mask.sum()), bool(mask[0])
    (3, False)
    >>> tokens = torch.arange(10, 20)
    >>> mask = torch.tensor([0, 0, 1, 1, 0, 0, 0, 1, 0, 0], dtype=torch.bool)
    >>> inputs, targets = span_corrupt(tokens, mask, torch.tensor([100, 101]), eos_token_id=1)
    >>> inputs.tolist(), targets.tolist()
    ([10, 11, 100, 14, 15, 16, 101, 18, 19, 1], [100, 12, 13, 101, 17, 1])
"""

from __future__ import annotations

import torch

from hf_lmobj.checks import check_length, check_number


def check_noise_args(noise_density: float, mean_noise_span_length: float) -> tuple[float, float]:
    """Both as floats, or an error unless ``0 < noise_density < 1`` and ``1 <= mean_noise_span_length < inf``."""
    density = check_number(
        noise_density,
        "noise_density",
        0.0,
        1.0,
        low_open=True,
        high_open=True,
        hint="the share of tokens corrupted (T5: 0.15)",
    )
    mean = check_number(mean_noise_span_length, "mean_noise_span_length", 1.0, hint="T5 uses 3.0")
    return density, mean


def noise_span_counts(length: int, noise_density: float, mean_noise_span_length: float) -> tuple[int, int]:
    """``(num_noise_tokens, num_noise_spans)`` for ``length >= 2`` tokens, as T5 computes them.

    Noise tokens are ``round(length * noise_density)`` clamped to ``[1, length - 1]``; spans are
    ``round(noise / mean_noise_span_length)``, at least 1 (and, in degenerate tiny cases, at most
    the number of noise and of non-noise tokens, so that every span is non-empty).

    Example:
        >>> noise_span_counts(568, 0.15, 3.0), noise_span_counts(2, 0.15, 3.0)
        ((85, 28), (1, 1))
    """
    if length < 2:
        raise ValueError(f"a span-corrupted sequence needs at least 2 tokens, got {length}")
    num_noise = min(max(round(length * noise_density), 1), length - 1)
    num_spans = max(round(num_noise / mean_noise_span_length), 1)
    return num_noise, min(num_spans, num_noise, length - num_noise)


def corrupted_lengths(length: int, noise_density: float, mean_noise_span_length: float) -> tuple[int, int]:
    """Lengths ``(inputs, targets)`` (each with its EOS) that ``length`` raw tokens corrupt into.

    Both are non-decreasing in ``length``. A single token is not corrupted: ``(2, 0)``.

    Example:
        >>> corrupted_lengths(568, 0.15, 3.0), corrupted_lengths(1, 0.15, 3.0)
        ((512, 114), (2, 0))
    """
    if length == 1:
        return 2, 0
    num_noise, num_spans = noise_span_counts(length, noise_density, mean_noise_span_length)
    return length - num_noise + num_spans + 1, num_noise + num_spans + 1


def compute_input_and_target_lengths(
    inputs_length: int, noise_density: float, mean_noise_span_length: float
) -> tuple[int, int]:
    """``(raw_tokens_length, targets_length)`` exactly as T5's ``random_spans_helper``.

    ``raw_tokens_length`` is the longest raw sequence whose corrupted input (non-noise tokens, one
    sentinel per span, EOS) fits in ``inputs_length``; ``targets_length`` is the length of its
    target (noise tokens, one sentinel per span, EOS). As in T5, for ``noise_density == 0.5`` the
    raw length is lowered by one when that makes the targets no longer than the inputs.

    Example:
        >>> compute_input_and_target_lengths(128, 0.15, 3.0)
        (141, 29)
        >>> compute_input_and_target_lengths(1024, 0.15, 3.0)
        (1137, 229)
    """
    noise_density, mean_noise_span_length = check_noise_args(noise_density, mean_noise_span_length)
    inputs_length = check_length(inputs_length, "inputs_length", minimum=2)

    def lengths(tokens_length: int) -> tuple[int, int]:
        num_noise = int(round(tokens_length * noise_density))
        num_spans = int(round(num_noise / mean_noise_span_length))
        return tokens_length - num_noise + num_spans + 1, num_noise + num_spans + 1

    tokens_length = inputs_length - 1
    while lengths(tokens_length + 1)[0] <= inputs_length:
        tokens_length += 1
    input_len, targets_length = lengths(tokens_length)
    if noise_density == 0.5 and targets_length > input_len:
        tokens_length -= 1
        targets_length -= 1
    return tokens_length, targets_length


def collator_lengths(inputs_length: int, noise_density: float, mean_noise_span_length: float) -> tuple[int, int]:
    """:func:`compute_input_and_target_lengths`, made safe for the tiny degenerate settings.

    T5's helper counts ``round(noise / mean)`` spans even where that is 0, while its mask always
    makes at least one span; for small inputs with long spans its lengths then overflow by one.
    Here the raw length is lowered until :func:`corrupted_lengths` fits, and the targets length is
    the real one. For every ordinary setting (e.g. 512 / 0.15 / 3.0) the two functions agree.

    Example:
        >>> compute_input_and_target_lengths(32, 0.15, 64.0), collator_lengths(32, 0.15, 64.0)
        ((37, 7), (35, 7))
    """
    raw, targets = compute_input_and_target_lengths(inputs_length, noise_density, mean_noise_span_length)
    while raw > 1:
        real_inputs, real_targets = corrupted_lengths(raw, noise_density, mean_noise_span_length)
        if real_inputs <= inputs_length:
            return raw, max(targets, real_targets)
        raw -= 1
    return raw, targets


def random_segmentation(num_items: int, num_segments: int, generator: torch.Generator) -> torch.Tensor:
    """Split ``num_items`` into ``num_segments`` non-empty parts, every composition equally likely.

    Returns the (num_segments,) int64 part lengths, summing to ``num_items``.

    Example:
        >>> parts = random_segmentation(10, 4, torch.Generator().manual_seed(0))
        >>> int(parts.sum()), len(parts), bool((parts > 0).all())
        (10, 4, True)
    """
    if not 1 <= num_segments <= num_items:
        raise ValueError(f"need 1 <= num_segments <= num_items, got {num_segments}, {num_items}")
    cuts = torch.randperm(num_items - 1, generator=generator)[: num_segments - 1] + 1
    bounds = torch.cat(
        [torch.zeros(1, dtype=torch.long), cuts.sort().values, torch.tensor([num_items])]
    )  # (num_segments + 1,)
    return bounds.diff()  # (num_segments,)


def random_spans_noise_mask(
    length: int,
    noise_density: float,
    mean_noise_span_length: float,
    generator: torch.Generator,
) -> torch.Tensor:
    """T5's random-spans noise mask: (length,) bool, True on noise tokens.

    Exactly the counts of :func:`noise_span_counts`; spans alternate non-noise / noise starting
    with non-noise (so, as in T5, the sequence always ends inside a noise span).

    Example:
        >>> m = random_spans_noise_mask(100, 0.15, 3.0, torch.Generator().manual_seed(1))
        >>> int(m.sum()), int((m[1:] & ~m[:-1]).sum())
        (15, 5)
    """
    num_noise, num_spans = noise_span_counts(length, noise_density, mean_noise_span_length)
    noise_lengths = random_segmentation(num_noise, num_spans, generator)  # (S,)
    keep_lengths = random_segmentation(length - num_noise, num_spans, generator)  # (S,)
    interleaved = torch.stack([keep_lengths, noise_lengths], dim=1).reshape(-1)  # (2S,)
    pattern = torch.tensor([False, True]).repeat(num_spans)  # (2S,)
    return pattern.repeat_interleave(interleaved)  # (length,)


def span_starts(noise_mask: torch.Tensor) -> torch.Tensor:
    """(T,) bool: True on the first token of each noise span."""
    previous = torch.cat([noise_mask.new_zeros(1), noise_mask[:-1]])  # (T,)
    return noise_mask & ~previous


def span_corrupt(
    tokens: torch.Tensor,
    noise_mask: torch.Tensor,
    sentinel_ids: torch.Tensor,
    eos_token_id: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Replace each noise span by the next sentinel; return ``(inputs, targets)``, each + EOS.

    ``inputs`` keeps the non-noise tokens with sentinel k where the k-th span was; ``targets``
    is sentinel k followed by the k-th span, for every span in order. ``sentinel_ids`` (1D)
    gives the id of sentinel 0, 1, 2, ... in whatever order the tokenizer numbers them.
    """
    starts = span_starts(noise_mask)  # (T,)
    num_spans = int(starts.sum())
    if num_spans > len(sentinel_ids):
        raise ValueError(
            f"{num_spans} noise spans but only {len(sentinel_ids)} sentinel tokens; lower "
            "noise_density, raise mean_noise_span_length, use shorter examples or add sentinels"
        )
    span_index = (starts.cumsum(0) - 1).clamp(min=0)  # (T,)
    replaced = torch.where(starts, sentinel_ids[span_index], tokens)  # (T,)
    inputs = replaced[~(noise_mask & ~starts)]  # drop the non-first noise tokens
    repeats = 1 + starts[noise_mask].long()  # (N,) 2 where a sentinel goes before the token
    targets = tokens[noise_mask].repeat_interleave(repeats)  # (N + S,)
    targets[(repeats.cumsum(0) - repeats)[repeats == 2]] = sentinel_ids[:num_spans]
    eos = torch.tensor([eos_token_id], dtype=tokens.dtype)
    return torch.cat([inputs, eos]), torch.cat([targets, eos])


def largest_fitting_length(
    available: int,
    input_room: int,
    target_room: int,
    sentinel_room: int,
    noise_density: float,
    mean_noise_span_length: float,
) -> int:
    """The most raw tokens (<= ``available``) whose corruption fits the rooms left in a row.

    A piece of n tokens needs ``corrupted_lengths(n)`` input / target slots and one sentinel per
    span. Returns 0 when not even one token fits. Binary search (the needs grow with n).

    Example:
        >>> largest_fitting_length(10_000, 512, 114, 100, 0.15, 3.0)
        568
    """

    def fits(n: int) -> bool:
        inputs, targets = corrupted_lengths(n, noise_density, mean_noise_span_length)
        spans = 0 if n == 1 else noise_span_counts(n, noise_density, mean_noise_span_length)[1]
        return inputs <= input_room and targets <= target_room and spans <= sentinel_room

    low, high = 0, available  # invariant: fits(low) or low == 0
    while low < high:
        middle = (low + high + 1) // 2
        if fits(middle):
            low = middle
        else:
            high = middle - 1
    return low
