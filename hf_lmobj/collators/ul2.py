"""UL2's mixture of denoisers, for encoder-decoder models and (as a prefix LM) decoder-only ones.

Each example draws one denoiser (by weight, from its own seeded generator):

* R (regular span corruption): mean span 3 and 8, 15% noise;
* X (extreme): mean span 3 and 8 at 50% noise, 64 at 15% and at 50%;
* S (sequential, prefix LM): the last 25% of the tokens are the target.

The denoiser's mode token (``[R]``, ``[S]``, ``[X]``) is prepended to the input. Encoder-decoder
output is the same as :class:`~hf_lmobj.collators.span.DataCollatorForSpanCorruption`'s.
With ``decoder_only=True`` input and target form one sequence ``[mode] inputs targets``; ``labels``
are -100 on the prefix and ``attention_mask`` is a 4D additive float mask ``(B, 1, T, T)``
(0.0 = may attend, ``finfo.min`` = blocked, the convention of
:mod:`hf_lmobj.packing.masks`) that is causal over the target and bidirectional over the
prefix; pass it to a model whose attention takes a custom 4D mask (eager / sdpa).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import InitVar, dataclass
from typing import Any

import torch
from transformers.data.data_collator import DataCollatorMixin

from hf_lmobj.checks import check_count, check_flag, check_length, check_number, check_return_tensors
from hf_lmobj.collators._noise import (
    check_noise_args,
    corrupted_lengths,
    random_spans_noise_mask,
    span_corrupt,
)
from hf_lmobj.collators._seq2seq import (
    encoder_decoder_batch,
    feature_tokens,
    pad_rows,
    required_token_id,
    resolve_decoder_start,
)
from hf_lmobj.collators.features import refuse_numpy_call
from hf_lmobj.collators.seeding import example_seeds, resolve_seed
from hf_lmobj.collators.span import check_enough_sentinels, sentinel_token_ids
from hf_lmobj.constants import IGNORE_INDEX, round_up


@dataclass(frozen=True)
class Denoiser:
    """One UL2 denoiser: ``mean_noise_span_length=None`` means S (prefix LM).

    For S, ``noise_density`` is the share of the tokens (at the end) that form the target.

    Example:
        >>> from hf_lmobj.corpus import build_tokenizer
        >>> tok = build_tokenizer(vocab_size=512, max_documents=20)
        >>> s = Denoiser("[S]", None, 0.25)  # prefix LM: the last quarter of the tokens is the target
        >>> s.lengths(20)  # (inputs: mode token + 15 tokens + EOS, targets: 5 tokens + EOS)
        (17, 6)
        >>> batch = DataCollatorForUL2(tok, denoisers=[s], seed=0)([{"input_ids": list(range(200, 220))}])
        >>> tok.convert_ids_to_tokens(batch["input_ids"][0, :1].tolist()), batch["input_ids"][0, 1:].tolist()
        (['[S]'], [200, 201, 202, 203, 204, 205, 206, 207, 208, 209, 210, 211, 212, 213, 214, 2])
        >>> batch["labels"][0].tolist()  # the suffix, then EOS
        [215, 216, 217, 218, 219, 2]
        >>> Denoiser("[X]", 3.0, 1.5)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: noise_density must be a finite number in (0, 1), got 1.5; ...
    """

    mode_token: str
    mean_noise_span_length: float | None
    noise_density: float
    weight: float = 1.0

    def __post_init__(self) -> None:
        if self.mean_noise_span_length is not None:
            check_noise_args(self.noise_density, self.mean_noise_span_length)
        else:
            check_number(
                self.noise_density,
                "S denoiser noise_density",
                0.0,
                1.0,
                low_open=True,
                high_open=True,
                hint="the share of tokens at the end that form the target",
            )
        check_number(self.weight, "Denoiser weight", 0.0, hint="its share of the mixture, relative to the others")

    def lengths(self, length: int) -> tuple[int, int]:
        """``(inputs, targets)`` lengths for ``length`` raw tokens, mode token and EOS included."""
        if self.mean_noise_span_length is None:
            target = suffix_length(length, self.noise_density)
            return length - target + 2, target + 1
        inputs, targets = corrupted_lengths(length, self.noise_density, self.mean_noise_span_length)
        return inputs + 1, targets


UL2_DENOISERS: tuple[Denoiser, ...] = (
    Denoiser("[R]", 3.0, 0.15),
    Denoiser("[R]", 8.0, 0.15),
    Denoiser("[S]", None, 0.25),
    Denoiser("[X]", 3.0, 0.5),
    Denoiser("[X]", 8.0, 0.5),
    Denoiser("[X]", 64.0, 0.15),
    Denoiser("[X]", 64.0, 0.5),
)


def suffix_length(length: int, fraction: float) -> int:
    """Target length of the S denoiser: ``round(length * fraction)`` in ``[1, length - 1]``."""
    return min(max(round(length * fraction), 1), length - 1)


def ul2_lengths(
    input_length: int, denoisers: Sequence[Denoiser] = UL2_DENOISERS, decoder_only: bool = False
) -> tuple[int, int]:
    """``(raw_tokens_length, targets_length)`` so that every denoiser fits in ``input_length``.

    The raw length is the largest for which each denoiser's input (mode token and EOS included;
    with ``decoder_only``, input plus target) fits; the targets length is the longest target any
    denoiser then makes (all lengths grow with the raw length, so shorter examples fit too).

    Example:
        >>> ul2_lengths(512)
        (567, 380)
    """
    input_length = check_length(input_length, "input_length", 4, "a mode token, 2 raw tokens and EOS")

    def need(n: int) -> int:
        return max(sum(d.lengths(n)) if decoder_only else d.lengths(n)[0] for d in denoisers)

    low, high = 2, 2 * input_length  # need(n) > input_length for n = 2 * input_length
    if need(low) > input_length:
        raise ValueError(f"input_length={input_length} cannot hold even 2 tokens for every denoiser")
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if need(middle) <= input_length else (low, middle - 1)
    return low, max(d.lengths(low)[1] for d in denoisers)


def prefix_lm_mask(
    prefix_lengths: torch.Tensor, lengths: torch.Tensor, width: int, dtype: torch.dtype = torch.float32
) -> torch.Tensor:
    """4D additive mask (B, 1, T, T): causal, plus full attention to each row's prefix.

    Query t may attend key s when s is a real token and (s <= t or s < prefix length); every
    query also sees itself, so no softmax row is empty (padding rows are never trained).

    Example:
        >>> m = prefix_lm_mask(torch.tensor([2]), torch.tensor([3]), width=4)
        >>> (m[0, 0] == 0).int().tolist()
        [[1, 1, 0, 0], [1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1]]
    """
    position = torch.arange(width)  # (T,)
    causal = position[None, :] <= position[:, None]  # (T, T) [query, key]
    in_prefix = position[None, None, :] < prefix_lengths[:, None, None]  # (B, 1, T)
    real_key = position[None, None, :] < lengths[:, None, None]  # (B, 1, T)
    allowed = (causal[None] | in_prefix) & real_key  # (B, T, T)
    allowed |= torch.eye(width, dtype=torch.bool)[None]
    mask = torch.zeros(allowed.shape, dtype=dtype)
    mask.masked_fill_(~allowed, torch.finfo(dtype).min)
    return mask[:, None]  # (B, 1, T, T)


@dataclass
class DataCollatorForUL2(DataCollatorMixin):
    """UL2 mixture-of-denoisers collator (encoder-decoder, or prefix LM with ``decoder_only``).

    Args:
        tokenizer: needs sentinels, the mode tokens of the denoisers, EOS and pad.
        denoisers: the mixture (default :data:`UL2_DENOISERS`, equal weights).
        input_length: fixed input length (encoder, or prefix + target when decoder-only);
            examples may then hold at most ``raw_tokens_length`` tokens (see :func:`ul2_lengths`).
        decoder_start_token_id / model: as in ``DataCollatorForSpanCorruption``.
        seed: denoiser choice and masks depend only on (seed, epoch, example), whatever the batch;
            None draws a fresh seed on every call.
        decoder_only: one sequence per example with a 4D prefix-LM mask.
        mask_dtype: dtype of the 4D mask (match the model's, e.g. torch.bfloat16).

    Example:
        >>> from hf_lmobj.corpus import build_tokenizer
        >>> tok = build_tokenizer(vocab_size=512, max_documents=20)
        >>> collator = DataCollatorForUL2(tok, seed=0)
        >>> batch = collator([{"input_ids": list(range(200, 300))} for _ in range(4)])
        >>> sorted(batch), bool(torch.isin(batch["input_ids"][:, 0], collator.mode_ids).all())
        (['attention_mask', 'decoder_input_ids', 'input_ids', 'labels'], True)
    """

    tokenizer: Any
    denoisers: Sequence[Denoiser] = UL2_DENOISERS
    input_length: int | None = None
    decoder_start_token_id: int | None = None
    model: InitVar[Any] = None
    seed: int | None = None
    decoder_only: bool = False
    pad_to_multiple_of: int | None = None
    mask_dtype: torch.dtype = torch.float32
    return_tensors: str = "pt"

    def __post_init__(self, model: Any) -> None:
        if not self.denoisers or not all(isinstance(d, Denoiser) for d in self.denoisers):
            raise TypeError("denoisers must be a non-empty sequence of Denoiser")
        self.decoder_only = check_flag(self.decoder_only, "decoder_only")
        self.pad_to_multiple_of = check_length(self.pad_to_multiple_of, "pad_to_multiple_of", optional=True)
        self.return_tensors = check_return_tensors(self.return_tensors)
        self.weights = torch.tensor([float(d.weight) for d in self.denoisers])
        if float(self.weights.sum()) <= 0:
            raise ValueError("at least one denoiser needs a positive weight")
        self.eos_token_id = required_token_id(self.tokenizer, "eos")
        self.pad_token_id = required_token_id(self.tokenizer, "pad")
        self.sentinel_ids = torch.tensor(sentinel_token_ids(self.tokenizer), dtype=torch.long)
        self.mode_ids = torch.tensor([self._mode_id(d.mode_token) for d in self.denoisers])
        self.decoder_start_token_id = resolve_decoder_start(self.decoder_start_token_id, model, self.tokenizer)
        self.raw_tokens_length = self.targets_length = None
        if self.input_length is not None:
            self.raw_tokens_length, self.targets_length = ul2_lengths(
                self.input_length, self.denoisers, self.decoder_only
            )
            for d in self.denoisers:
                if d.mean_noise_span_length is not None:
                    check_enough_sentinels(
                        self.raw_tokens_length,
                        d.noise_density,
                        d.mean_noise_span_length,
                        len(self.sentinel_ids),
                    )
        if self.seed is not None:
            resolve_seed(self.seed)  # raises ValueError naming `seed` when it is not an int >= 0
        self.epoch = 0

    def _mode_id(self, token: str) -> int:
        vocab = self.tokenizer.get_vocab()
        if token not in vocab:
            raise ValueError(f"tokenizer has no mode token {token!r}; add it as a special token")
        return int(vocab[token])

    def set_epoch(self, epoch: int) -> None:
        """Draw new denoisers and masks for the next epoch."""
        self.epoch = check_count(epoch, "epoch")

    def corrupt(self, feature: Mapping[str, Any], index: int = 0) -> tuple[int, torch.Tensor, torch.Tensor]:
        """``(denoiser index, inputs with mode token, targets)`` for one feature."""
        tokens = self._tokens(feature, index)
        return self._corrupt_tokens(tokens, example_seeds([feature], self.seed, self.epoch)[0])

    def _tokens(self, feature: Mapping[str, Any], index: int) -> torch.Tensor:
        tokens = feature_tokens(feature, self.eos_token_id, len(self.tokenizer), index)  # (T,)
        if len(tokens) < 2:
            raise ValueError(f"example has {len(tokens)} token(s) before EOS; UL2 needs at least 2")
        if self.raw_tokens_length is not None and len(tokens) > self.raw_tokens_length:
            raise ValueError(
                f"example has {len(tokens)} tokens but input_length={self.input_length} takes at "
                f"most raw_tokens_length={self.raw_tokens_length}; chunk the data to that length"
            )
        return tokens

    def _corrupt_tokens(self, tokens: torch.Tensor, seed: int) -> tuple[int, torch.Tensor, torch.Tensor]:
        """Corrupt one example's checked tokens with the generator of its own ``seed``."""
        generator = torch.Generator().manual_seed(seed)
        index = int(torch.multinomial(self.weights, 1, generator=generator))
        denoiser = self.denoisers[index]
        eos = torch.tensor([self.eos_token_id])
        if denoiser.mean_noise_span_length is None:
            cut = len(tokens) - suffix_length(len(tokens), denoiser.noise_density)
            inputs, targets = torch.cat([tokens[:cut], eos]), torch.cat([tokens[cut:], eos])
        else:
            if bool(torch.isin(tokens, self.sentinel_ids).any()):
                raise ValueError("example already contains a sentinel token; remove it from the text")
            mask = random_spans_noise_mask(
                len(tokens), denoiser.noise_density, denoiser.mean_noise_span_length, generator
            )
            inputs, targets = span_corrupt(tokens, mask, self.sentinel_ids, self.eos_token_id)
        return index, torch.cat([self.mode_ids[index : index + 1], inputs]), targets

    numpy_call = refuse_numpy_call  # DataCollatorMixin's return_tensors='np' route: refused by name

    def torch_call(self, features: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        if not features:
            raise ValueError("cannot collate an empty list of features")
        tokens = [self._tokens(feature, index) for index, feature in enumerate(features)]
        seeds = example_seeds(features, self.seed, self.epoch)  # seed=None: fresh on every call
        parts = [self._corrupt_tokens(t, s)[1:] for t, s in zip(tokens, seeds)]
        if self.decoder_only:
            return self._decoder_only_batch(parts)
        return encoder_decoder_batch(
            [p[0] for p in parts],
            [p[1] for p in parts],
            pad_token_id=self.pad_token_id,
            decoder_start_token_id=self.decoder_start_token_id,
            input_width=self.input_length,
            target_width=self.targets_length,
            pad_to_multiple_of=self.pad_to_multiple_of,
        )

    def _decoder_only_batch(self, parts: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> dict[str, torch.Tensor]:
        rows = [torch.cat([prefix, target]) for prefix, target in parts]
        width = self.input_length or round_up(max(map(len, rows)), self.pad_to_multiple_of)
        prefix_lengths = torch.tensor([len(prefix) for prefix, _ in parts])  # (B,)
        lengths = torch.tensor([len(row) for row in rows])  # (B,)
        label_rows = [torch.cat([torch.full_like(p, IGNORE_INDEX), t]) for p, t in parts]
        return {
            "input_ids": pad_rows(rows, width, self.pad_token_id),  # (B, T)
            "attention_mask": prefix_lm_mask(prefix_lengths, lengths, width, self.mask_dtype),
            "labels": pad_rows(label_rows, width, IGNORE_INDEX),  # (B, T)
        }
