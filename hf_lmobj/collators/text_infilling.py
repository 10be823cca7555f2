"""BART denoising: text infilling with Poisson span lengths, optional sentence permutation.

Text infilling (Lewis et al., 2019): span lengths are drawn from Poisson(3.0) until
``ceil(mask_ratio * n)`` tokens are covered (the last length is trimmed to the budget, so exactly
that many tokens are masked); each span becomes one mask token, and a length-0 span inserts a mask
token where there was none. Spans never overlap and are separated by at least one kept token
(when the sequence leaves room), so each mask stands for exactly one span. With
``permute_sentences=True`` the sentences (runs ending in one of ``sentence_end_token_ids``) are
shuffled first. The target is always the original sequence, ``<s> ... </s>``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import InitVar, dataclass
from typing import Any

import torch
from transformers.data.data_collator import DataCollatorMixin

from hf_lmobj.checks import (
    check_count,
    check_flag,
    check_id_range,
    check_length,
    check_number,
    check_return_tensors,
    id_sequence,
)
from hf_lmobj.collators._noise import random_segmentation
from hf_lmobj.collators._seq2seq import encoder_decoder_batch, required_token_id, resolve_decoder_start
from hf_lmobj.collators.features import refuse_numpy_call, token_ids
from hf_lmobj.collators.seeding import example_seeds, resolve_seed


def poisson_span_lengths(budget: int, rate: float, generator: torch.Generator) -> torch.Tensor:
    """Poisson(``rate``) lengths drawn until they cover ``budget``; the last one trimmed to fit.

    Returns an int64 tensor summing to exactly ``budget`` (zeros included: they are insertions).

    Example:
        >>> int(poisson_span_lengths(30, 3.0, torch.Generator().manual_seed(0)).sum())
        30
    """
    if budget <= 0:
        return torch.zeros(0, dtype=torch.long)
    draws = max(budget, 4)
    lengths = torch.poisson(torch.full((draws,), float(rate)), generator=generator).long()  # (D,)
    while int(lengths.sum()) < budget:
        more = torch.poisson(torch.full((draws,), float(rate)), generator=generator).long()
        lengths = torch.cat([lengths, more])
    total = lengths.cumsum(0)  # (D,)
    last = int(torch.searchsorted(total, budget))  # first index reaching the budget
    lengths = lengths[: last + 1].clone()
    lengths[last] -= int(total[last]) - budget
    return lengths


def text_infilling(
    tokens: torch.Tensor,
    mask_ratio: float,
    poisson_rate: float,
    mask_token_id: int,
    generator: torch.Generator,
) -> torch.Tensor:
    """Mask ``ceil(mask_ratio * len(tokens))`` tokens in Poisson-length spans, one mask per span.

    Shapes: ``tokens`` (n,) -> (m,), where m = n - masked + spans + insertions.

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> noised = text_infilling(torch.arange(10, 30), 0.3, 3.0, mask_token_id=4, generator=g)
        >>> kept = noised[noised != 4]
        >>> len(kept), bool(torch.isin(kept, torch.arange(10, 30)).all())  # 20 - ceil(0.3 * 20)
        (14, True)
    """
    n = len(tokens)
    lengths = poisson_span_lengths(math.ceil(mask_ratio * n), poisson_rate, generator)
    spans = lengths[lengths > 0].tolist()
    inserts = int((lengths == 0).sum())
    kept = n - sum(spans)
    while len(spans) > kept + 1:  # too few kept tokens to separate every span: merge the last two
        spans[-2:] = [spans[-2] + spans[-1]]
    mask = torch.tensor([mask_token_id], dtype=tokens.dtype)
    segments: list[torch.Tensor] = []
    if spans:
        gaps = random_segmentation(kept + 2, len(spans) + 1, generator)  # (S + 1,), each >= 1
        gaps[0] -= 1
        gaps[-1] -= 1  # the outer gaps may be empty
        start = 0
        for gap, span in zip(gaps.tolist(), spans + [0]):
            segments.append(tokens[start : start + gap])
            start += gap + span
            if span:
                segments.append(mask)
    else:
        segments.append(tokens)
    noised = torch.cat(segments)  # (n - masked + spans,)
    if inserts:
        total = len(noised) + inserts
        at = torch.randperm(total, generator=generator)[:inserts]  # positions of the new masks
        is_new = torch.zeros(total, dtype=torch.bool)
        is_new[at] = True
        out = torch.full((total,), mask_token_id, dtype=tokens.dtype)
        out[~is_new] = noised
        noised = out
    return noised


def permute_sentences(tokens: torch.Tensor, end_token_ids: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Shuffle the sentences of ``tokens``; a sentence ends after any of ``end_token_ids``.

    Example:
        >>> out = permute_sentences(torch.tensor([1, 2, 0, 3, 0, 4]), torch.tensor([0]),
        ...                         torch.Generator().manual_seed(0))
        >>> sorted(out.tolist()) == sorted([1, 2, 0, 3, 0, 4]), len(out)
        (True, 6)
    """
    ends = torch.isin(tokens, end_token_ids).nonzero().flatten() + 1  # exclusive sentence ends
    bounds = torch.cat([torch.tensor([0]), ends[ends < len(tokens)], torch.tensor([len(tokens)])])
    sentences = [tokens[a:b] for a, b in zip(bounds[:-1].tolist(), bounds[1:].tolist())]
    order = torch.randperm(len(sentences), generator=generator).tolist()
    return torch.cat([sentences[i] for i in order])


@dataclass
class DataCollatorForTextInfilling(DataCollatorMixin):
    """BART denoising batches for ``BartForConditionalGeneration``.

    Outputs ``input_ids`` (``<s> noised </s>``), ``attention_mask``, ``labels`` (``<s> original
    </s>``, -100 on padding) and ``decoder_input_ids`` (labels shifted right, starting with the
    model's ``decoder_start_token_id``, which is ``</s>`` for BART; the EOS id when no model is given).
    An example's own leading BOS / trailing EOS are not noised. With ``seed`` set, noise depends
    only on (seed, epoch, example), whatever the batch (advance with :meth:`set_epoch`); ``seed=None``
    draws fresh noise on every call.

    Example:
        >>> from hf_lmobj.corpus import build_tokenizer
        >>> tok = build_tokenizer(vocab_size=512, max_documents=20)
        >>> (tok.bos_token_id, tok.eos_token_id, tok.mask_token_id)
        (1, 2, 4)
        >>> collator = DataCollatorForTextInfilling(tok, seed=0)  # 30% of the tokens, Poisson(3) span lengths
        >>> batch = collator([{"input_ids": list(range(200, 210))}, {"input_ids": [300, 301, 302]}])
        >>> batch["input_ids"][0].tolist()  # <s> noised </s>: 200 201 and 206 (3 = ceil(0.3 * 10)) became 2 masks
        [1, 4, 202, 203, 204, 205, 4, 207, 208, 209, 2]
        >>> batch["labels"][1].tolist()  # <s> original </s>, -100 on padding
        [1, 300, 301, 302, 2, -100, -100, -100, -100, -100, -100, -100]
        >>> batch["decoder_input_ids"][1, :3].tolist()  # the labels shifted right after </s> (BART's start)
        [2, 1, 300]
    """

    tokenizer: Any
    mask_ratio: float = 0.3
    poisson_rate: float = 3.0
    permute_sentences: bool = False
    sentence_end_token_ids: Sequence[int] | None = None
    decoder_start_token_id: int | None = None
    model: InitVar[Any] = None
    seed: int | None = None
    pad_to_multiple_of: int | None = None
    return_tensors: str = "pt"

    def __post_init__(self, model: Any) -> None:
        self.mask_ratio = check_number(
            self.mask_ratio,
            "mask_ratio",
            0.0,
            1.0,
            low_open=True,
            high_open=True,
            hint="the share of tokens masked (BART: 0.3)",
        )
        self.poisson_rate = check_number(
            self.poisson_rate, "poisson_rate", 0.0, low_open=True, hint="the mean span length (BART: 3.0)"
        )
        self.permute_sentences = check_flag(self.permute_sentences, "permute_sentences")
        self.pad_to_multiple_of = check_length(self.pad_to_multiple_of, "pad_to_multiple_of", optional=True)
        self.return_tensors = check_return_tensors(self.return_tensors)
        self.bos_token_id = required_token_id(self.tokenizer, "bos")
        self.eos_token_id = required_token_id(self.tokenizer, "eos")
        self.pad_token_id = required_token_id(self.tokenizer, "pad")
        self.mask_token_id = required_token_id(self.tokenizer, "mask")
        if self.decoder_start_token_id is None and model is None:
            self.decoder_start_token_id = self.eos_token_id  # BART's convention
        self.decoder_start_token_id = resolve_decoder_start(self.decoder_start_token_id, model, self.tokenizer)
        end_ids = id_sequence(list(self.sentence_end_token_ids or []), "sentence_end_token_ids")
        check_id_range(end_ids, len(self.tokenizer), "sentence_end_token_ids")
        self.end_ids = torch.from_numpy(end_ids)
        if self.permute_sentences and not len(self.end_ids):
            raise ValueError("permute_sentences=True needs sentence_end_token_ids (e.g. '.' or newline ids)")
        if self.seed is not None:
            resolve_seed(self.seed)  # raises ValueError naming `seed` when it is not an int >= 0
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Draw new noise for the next epoch."""
        self.epoch = check_count(epoch, "epoch")

    def _body(self, feature: Mapping[str, Any], index: int) -> torch.Tensor:
        tokens = torch.from_numpy(token_ids(feature, index, len(self.tokenizer)))  # (T,)
        if len(tokens) and int(tokens[0]) == self.bos_token_id:
            tokens = tokens[1:]
        if len(tokens) and int(tokens[-1]) == self.eos_token_id:
            tokens = tokens[:-1]
        if len(tokens) < 1:
            raise ValueError("example has no token besides BOS/EOS; text infilling needs at least 1")
        return tokens

    def noise(self, feature: Mapping[str, Any], index: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        """``(source, target)`` of one feature, both wrapped in BOS ... EOS."""
        body = self._body(feature, index)  # (n,)
        return self._noise_body(body, example_seeds([feature], self.seed, self.epoch)[0])

    def _noise_body(self, body: torch.Tensor, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Noise one example's checked body with the generator of its own ``seed``."""
        generator = torch.Generator().manual_seed(seed)
        source = body
        if self.permute_sentences:
            source = permute_sentences(source, self.end_ids, generator)
        source = text_infilling(source, self.mask_ratio, self.poisson_rate, self.mask_token_id, generator)
        bos, eos = torch.tensor([self.bos_token_id]), torch.tensor([self.eos_token_id])
        return torch.cat([bos, source, eos]), torch.cat([bos, body, eos])

    numpy_call = refuse_numpy_call  # DataCollatorMixin's return_tensors='np' route: refused by name

    def torch_call(self, features: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        if not features:
            raise ValueError("cannot collate an empty list of features")
        bodies = [self._body(feature, index) for index, feature in enumerate(features)]
        seeds = example_seeds(features, self.seed, self.epoch)  # seed=None: fresh on every call
        pairs = [self._noise_body(body, seed) for body, seed in zip(bodies, seeds)]
        return encoder_decoder_batch(
            [p[0] for p in pairs],
            [p[1] for p in pairs],
            pad_token_id=self.pad_token_id,
            decoder_start_token_id=self.decoder_start_token_id,
            pad_to_multiple_of=self.pad_to_multiple_of,
        )
