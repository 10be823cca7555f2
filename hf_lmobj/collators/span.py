"""T5 span corruption as a ``transformers`` data collator, with optional document-aware packing.

Each example's tokens get a random-spans noise mask (:mod:`hf_lmobj.collators._noise`);
each noise span becomes one sentinel in ``input_ids`` and ``labels`` hold every sentinel followed
by its span; both end with EOS. A trailing EOS on an example is its end marker, not content: it is
taken off before corruption and the collator puts EOS back at the end of inputs and targets.

With ``packing=True`` every document is corrupted on its own (no span crosses a document) and the
corrupted documents are laid back to back, each ending with EOS, into rows of exactly
``input_length`` / ``targets_length``; a document that does not fit is split and its remainder
opens the next row, so no token is dropped. :func:`iter_packed_span_corruption` does the same
over a whole dataset, carrying the remainder from one row to the next.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import InitVar, dataclass
from typing import Any

import torch
from transformers.data.data_collator import DataCollatorMixin

from hf_lmobj.checks import (
    check_count,
    check_flag,
    check_has_targets,
    check_length,
    check_return_tensors,
)
from hf_lmobj.collators._noise import (
    check_noise_args,
    collator_lengths,
    corrupted_lengths,
    largest_fitting_length,
    noise_span_counts,
    random_spans_noise_mask,
    span_corrupt,
)
from hf_lmobj.collators._seq2seq import (
    encoder_decoder_batch,
    feature_tokens,
    required_token_id,
    resolve_decoder_start,
)
from hf_lmobj.collators.features import refuse_numpy_call
from hf_lmobj.collators.seeding import example_seeds, resolve_seed

#: The shortest encoder input that holds a noise span: one kept token, one sentinel, EOS.
MIN_INPUT_LENGTH = corrupted_lengths(2, 0.5, 1.0)[0]
INPUT_NEEDS = "one kept token, one sentinel and EOS: shorter inputs hold no noise span, so no target"
_NO_TARGET_FIX = "every document is a single token (nothing to corrupt); drop such documents"


def sentinel_token_ids(tokenizer: Any) -> list[int]:
    """Ids of ``<extra_id_0>``, ``<extra_id_1>``, ... as the tokenizer defines them, in that order.

    Raises ``ValueError`` when the tokenizer has none.

    Example:
        >>> from hf_lmobj.corpus import build_tokenizer
        >>> ids = sentinel_token_ids(build_tokenizer(vocab_size=512, max_documents=20))
        >>> len(ids), ids[:2]
        (100, [5, 6])
    """
    vocab = tokenizer.get_vocab()
    ids: list[int] = []
    while f"<extra_id_{len(ids)}>" in vocab:
        ids.append(int(vocab[f"<extra_id_{len(ids)}>"]))
    if not ids:
        raise ValueError(
            "tokenizer has no sentinel tokens <extra_id_0>, <extra_id_1>, ...; add them with "
            "tokenizer.add_special_tokens({'additional_special_tokens': [...]}) and resize the "
            "model's embeddings (hf_lmobj.corpus.build_tokenizer() has 100)"
        )
    return ids


def check_enough_sentinels(
    raw_length: int, noise_density: float, mean_noise_span_length: float, available: int
) -> None:
    """Raise early when ``raw_length`` tokens need more spans than the tokenizer has sentinels."""
    if raw_length < 2:
        return
    spans = noise_span_counts(raw_length, noise_density, mean_noise_span_length)[1]
    if spans > available:
        raise ValueError(
            f"{raw_length} raw tokens make {spans} noise spans (noise_density={noise_density}, "
            f"mean_noise_span_length={mean_noise_span_length}) but the tokenizer has {available} "
            "sentinels; use a shorter input_length or add <extra_id_N> tokens"
        )


@dataclass
class DataCollatorForSpanCorruption(DataCollatorMixin):
    """T5 span corruption: ``input_ids``, ``attention_mask``, ``labels``, ``decoder_input_ids``.

    Args:
        tokenizer: needs ``<extra_id_N>`` sentinels, an EOS and a pad token.
        noise_density: share of tokens corrupted, in (0, 1).
        mean_noise_span_length: mean span length (>= 1).
        input_length: fixed encoder length, >= 3 (a kept token, a sentinel, EOS); examples may
            then hold at most ``raw_tokens_length`` tokens and outputs are exactly ``input_length`` /
            ``targets_length`` long. None: pad to the longest in the batch.
        decoder_start_token_id: defaults to ``model.config.decoder_start_token_id`` when
            ``model`` is given, else the pad id (T5's convention).
        model: optional, only read for its decoder start token (not kept).
        seed: masks depend only on (seed, epoch, example), whatever the batch; None draws a fresh
            seed on every call.
        packing: document-aware packing into rows of the fixed lengths (needs ``input_length``).
        pad_to_multiple_of: round padded widths up (padding mode without ``input_length``).

    Example:
        >>> from hf_lmobj.corpus import build_tokenizer
        >>> tok = build_tokenizer(vocab_size=512, max_documents=20)
        >>> collator = DataCollatorForSpanCorruption(tok, input_length=32, seed=0)
        >>> collator.raw_tokens_length, collator.targets_length
        (34, 8)
        >>> batch = collator([{"input_ids": list(range(200, 234))}, {"input_ids": list(range(300, 310))}])
        >>> [tuple(batch[k].shape) for k in ("input_ids", "attention_mask", "labels", "decoder_input_ids")]
        [(2, 32), (2, 32), (2, 8), (2, 8)]
        >>> batch["attention_mask"].sum(1).tolist()  # 34 raw tokens fill the 32 slots exactly
        [32, 10]
    """

    tokenizer: Any
    noise_density: float = 0.15
    mean_noise_span_length: float = 3.0
    input_length: int | None = None
    decoder_start_token_id: int | None = None
    seed: int | None = None
    model: InitVar[Any] = None
    packing: bool = False
    pad_to_multiple_of: int | None = None
    return_tensors: str = "pt"

    def __post_init__(self, model: Any) -> None:
        self.noise_density, self.mean_noise_span_length = check_noise_args(
            self.noise_density, self.mean_noise_span_length
        )
        self.input_length = check_length(
            self.input_length, "input_length", MIN_INPUT_LENGTH, INPUT_NEEDS, optional=True
        )
        self.packing = check_flag(self.packing, "packing")
        self.pad_to_multiple_of = check_length(self.pad_to_multiple_of, "pad_to_multiple_of", optional=True)
        self.return_tensors = check_return_tensors(self.return_tensors)
        self.eos_token_id = required_token_id(self.tokenizer, "eos")
        self.pad_token_id = required_token_id(self.tokenizer, "pad")
        self.sentinel_ids = torch.tensor(sentinel_token_ids(self.tokenizer), dtype=torch.long)
        self.decoder_start_token_id = resolve_decoder_start(self.decoder_start_token_id, model, self.tokenizer)
        self.raw_tokens_length = self.targets_length = None
        if self.input_length is not None:
            self.raw_tokens_length, self.targets_length = collator_lengths(
                self.input_length, self.noise_density, self.mean_noise_span_length
            )
            check_enough_sentinels(
                self.raw_tokens_length,
                self.noise_density,
                self.mean_noise_span_length,
                len(self.sentinel_ids),
            )
        elif self.packing:
            raise ValueError("packing=True needs input_length (the row length to pack into)")
        if self.seed is not None:
            resolve_seed(self.seed)  # raises ValueError naming `seed` when it is not an int >= 0
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Draw new masks for the next epoch (same ``(seed, epoch)`` -> same masks)."""
        self.epoch = check_count(epoch, "epoch")

    numpy_call = refuse_numpy_call  # DataCollatorMixin's return_tensors='np' route: refused by name

    def torch_call(self, features: Sequence[Mapping[str, Any]]) -> dict[str, torch.Tensor]:
        if not features:
            raise ValueError("cannot collate an empty list of features")
        tokens = [self._tokens(f, i) for i, f in enumerate(features)]
        generators = self._generators(features, resolve_seed(self.seed))
        documents = list(zip(tokens, generators))
        if self.packing:
            rows = list(self._packed_rows(documents))
            check_has_targets(sum(len(targets) for _, targets in rows), "this batch", _NO_TARGET_FIX)
        else:
            rows = [self._corrupt_whole(tokens, gen) for tokens, gen in documents]
        return self._assemble(rows)

    def _tokens(self, feature: Mapping[str, Any], index: int) -> torch.Tensor:
        tokens = feature_tokens(feature, self.eos_token_id, len(self.tokenizer), index)  # (T,)
        found = torch.isin(tokens, self.sentinel_ids)
        if bool(found.any()):
            raise ValueError(
                f"example already contains sentinel token id {int(tokens[found][0])}; sentinels "
                "are reserved for the corruption, remove them from the raw text"
            )
        return tokens

    def _generators(self, features: Sequence[Mapping[str, Any]], seed: int) -> list[torch.Generator]:
        """One generator per feature from :func:`~hf_lmobj.collators.seeding.example_seeds`."""
        return [torch.Generator().manual_seed(s) for s in example_seeds(features, seed, self.epoch)]

    def _corrupt_whole(self, tokens: torch.Tensor, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        if len(tokens) < 2:
            raise ValueError(f"example has {len(tokens)} token(s) before EOS; span corruption needs at least 2")
        if self.raw_tokens_length is not None and len(tokens) > self.raw_tokens_length:
            raise ValueError(
                f"example has {len(tokens)} tokens but input_length={self.input_length} takes at "
                f"most raw_tokens_length={self.raw_tokens_length}; chunk the data to that length "
                "(see raw_tokens_length) or use packing=True"
            )
        mask = random_spans_noise_mask(len(tokens), self.noise_density, self.mean_noise_span_length, generator)
        return span_corrupt(tokens, mask, self.sentinel_ids, self.eos_token_id)

    def _packed_rows(
        self, documents: Iterable[tuple[torch.Tensor, torch.Generator]]
    ) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return pack_corrupted(
            documents,
            self.input_length,
            self.targets_length,
            self.sentinel_ids,
            self.eos_token_id,
            self.noise_density,
            self.mean_noise_span_length,
        )

    def _assemble(self, rows: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> dict[str, torch.Tensor]:
        return encoder_decoder_batch(
            [row[0] for row in rows],
            [row[1] for row in rows],
            pad_token_id=self.pad_token_id,
            decoder_start_token_id=self.decoder_start_token_id,
            input_width=self.input_length,
            target_width=self.targets_length if self.input_length is not None else None,
            pad_to_multiple_of=self.pad_to_multiple_of,
        )


def _corrupt_piece(
    piece: torch.Tensor,
    generator: torch.Generator,
    sentinels: torch.Tensor,
    eos: int,
    noise_density: float,
    mean_noise_span_length: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    if len(piece) == 1:  # too short to corrupt: kept as is, nothing to predict
        return torch.cat([piece, torch.tensor([eos])]), piece.new_zeros(0)
    mask = random_spans_noise_mask(len(piece), noise_density, mean_noise_span_length, generator)
    return span_corrupt(piece, mask, sentinels, eos)


def pack_corrupted(
    documents: Iterable[tuple[torch.Tensor, torch.Generator]],
    input_length: int,
    targets_length: int,
    sentinel_ids: torch.Tensor,
    eos_token_id: int,
    noise_density: float,
    mean_noise_span_length: float,
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Corrupt each document on its own and lay the results into rows; yield ``(inputs, targets)``.

    Documents stay in order. Each row takes whole documents while they fit in ``input_length``
    inputs, ``targets_length`` targets and the available sentinels (numbered 0, 1, ... across the
    row, so a row is one ordinary T5 example); a document that does not fit is split, its first
    piece closes the row and the rest continues in the next. Rows are not padded.
    """
    row: list[tuple[torch.Tensor, torch.Tensor]] = []
    rooms = [input_length, targets_length, len(sentinel_ids)]
    for tokens, generator in documents:
        start = 0
        while start < len(tokens):
            left = len(tokens) - start
            size = largest_fitting_length(left, *rooms, noise_density, mean_noise_span_length)
            if size == 0:
                if not row:
                    raise ValueError(f"input_length={input_length} is too small to hold a token")
                yield _join(row)
                row, rooms = [], [input_length, targets_length, len(sentinel_ids)]
                continue
            if left - size == 1 and size >= 3:
                size -= 1  # leave 2 tokens so that the remainder can still be corrupted
            used = input_length - rooms[0], targets_length - rooms[1], len(sentinel_ids) - rooms[2]
            inputs, targets = _corrupt_piece(
                tokens[start : start + size],
                generator,
                sentinel_ids[used[2] :],
                eos_token_id,
                noise_density,
                mean_noise_span_length,
            )
            row.append((inputs, targets))
            spans = int(torch.isin(targets, sentinel_ids).sum())
            rooms = [rooms[0] - len(inputs), rooms[1] - len(targets), rooms[2] - spans]
            start += size
            if start < len(tokens):  # split: this row is full
                yield _join(row)
                row, rooms = [], [input_length, targets_length, len(sentinel_ids)]
    if row:
        yield _join(row)


def _join(row: Sequence[tuple[torch.Tensor, torch.Tensor]]) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.cat([p[0] for p in row]), torch.cat([p[1] for p in row])


def iter_packed_span_corruption(
    dataset: Iterable[Mapping[str, Any]],
    collator: DataCollatorForSpanCorruption,
) -> Iterator[dict[str, list[int]]]:
    """Pack a whole dataset (documents in order, remainders carried over) into fixed-length rows.

    Yields one dict per row (``input_ids``, ``attention_mask``, ``labels``, ``decoder_input_ids``,
    lists of exactly ``input_length`` / ``targets_length``) for ``datasets.Dataset.from_generator``
    or an ``IterableDataset``; batch them with ``transformers.default_data_collator``. Masks use
    the collator's seed, epoch and settings.

    Example:
        >>> from hf_lmobj.corpus import build_tokenizer
        >>> tok = build_tokenizer(vocab_size=512, max_documents=20)
        >>> collator = DataCollatorForSpanCorruption(tok, input_length=16, packing=True, seed=0)
        >>> rows = list(iter_packed_span_corruption([{"input_ids": list(range(200, 240))}], collator))
        >>> len(rows), [len(r["input_ids"]) for r in rows]
        (3, [16, 16, 16])
    """
    if collator.input_length is None:
        raise ValueError("the collator needs input_length to pack a dataset")
    seed = resolve_seed(collator.seed)  # seed=None: one fresh seed for this pass over the dataset
    documents = ((collator._tokens(f, i), collator._generators([f], seed)[0]) for i, f in enumerate(dataset))
    for inputs, targets in collator._packed_rows(documents):
        batch = collator._assemble([(inputs, targets)])
        yield {key: value[0].tolist() for key, value in batch.items()}
