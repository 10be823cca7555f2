"""``DataCollatorForMaskedLM``: BERT masking (15%, 80/10/10), whole words, reproducible, packable.

Each call flattens the batch into one token stream, draws two uniforms per token, selects and
corrupts with the pure functions of :mod:`hf_lmobj.collators._masking`, then lays the stream out
in rows: one row per example (padding mode) or several documents per row (``packing=True``).

Reproducibility: with ``seed`` set, each token's uniforms are a counter-based function
(:func:`~hf_lmobj.collators._masking.counter_uniforms`) of its example's seed (from ``(seed, epoch,
example)``: :mod:`hf_lmobj.collators.seeding`) and its position, so a mask does not depend on the
batch, ``num_workers``, world size or the resume point. Advance the epoch with ``set_epoch(n)`` or
``CollatorEpochCallback(collator)`` (:mod:`hf_lmobj.collators.epoch_callback`) (with ``persistent_workers=False``, the default, so
DataLoader workers see it), else every epoch repeats the same masks. ``seed=None`` draws a fresh OS
seed per call (never the global RNG): every call masks afresh.

Output keys:
    * padding mode: ``input_ids``, ``attention_mask`` (B, T), ``labels``;
    * packing, eager / sdpa: ``input_ids``, ``labels``, ``position_ids`` (restarting per document,
      plus ``position_ids_start``), ``attention_mask`` (B, 1, T, T) additive float block mask (a
      dict ``{"full_attention", "sliding_attention"}`` of two when ``sliding_window`` is set). An
      encoder builds its bidirectional mask without ``position_ids``, so this dense mask is the
      only exact form there; rows longer than 1024 tokens get it only when asked for by name
      (``packed_attention="4d_mask"``), else a ``ValueError`` suggests flash-attention;
    * packing, flash-attention: ``input_ids``, ``labels``, ``position_ids`` and
      ``cu_seq_lens_q/k``, ``max_length_q/k``;
    * ``token_type_ids`` when the features carry them;
    * ``masked_positions`` (only with ``return_sparse_indices=True``): int64 (K,) ascending flat
      indices into ``labels.view(-1)`` of the selected tokens, for a loss that runs the MLM head on
      those rows only (pop it before a stock model's forward; it indexes this process's batch;
      :class:`~hf_lmobj.models.electra.ElectraPretrainingModel` takes it as is).

Row limit: with ``model=`` the collator knows how many positions the model reads (its
``max_position_embeddings``, less RoBERTa's ``pad_token_id + 1`` offset) and never emits a longer
row: without ``max_length`` a longer feature is refused by name (pass ``max_length`` to split it
into rows, and ``packing=True`` to pack them; nothing is ever truncated), and a ``max_length`` or a
``pad_to_multiple_of`` that would exceed the limit is refused too. Without ``model=`` the
tokenizer's ``model_max_length`` (when it is a real limit, not transformers' 1e30 placeholder)
bounds the features collated without ``max_length`` in the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import InitVar, dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from transformers import PreTrainedTokenizerBase
from transformers.data.data_collator import DataCollatorMixin

from hf_lmobj.checks import (
    check_column_range,
    check_count,
    check_flag,
    check_length,
    check_number,
    check_return_tensors,
)
from hf_lmobj.collators import _masking as masking
from hf_lmobj.collators._attention import attention_from_model, check_attn_implementation
from hf_lmobj.collators._masked_features import (
    _as_mapping,
    _check_token_types,
    _flatten,
    _RowLimits,
)
from hf_lmobj.collators._masked_layout import _packed_masks, _placement
from hf_lmobj.collators.features import refuse_numpy_call
from hf_lmobj.collators.seeding import example_seeds, resolve_seed

MASK_ATTENTION = ("eager", "sdpa")
ENCODER_PACKED_ATTENTION = ("auto", "4d_mask", "cu_seq_lens")


@dataclass
class DataCollatorForMaskedLM(DataCollatorMixin):
    """Collate token ids into a masked-LM batch (see the module docstring for the output keys).

    Args:
        tokenizer: supplies the mask, pad and special ids (and token strings for whole words).
        mlm_probability: share of eligible (non-special, non-pad) tokens selected for prediction.
        mask_replace_prob: share of selected tokens replaced by the mask token.
        random_replace_prob: share replaced by a random non-special token; the rest stay.
        whole_word_mask: select whole words (from features' ``word_ids`` if present, else the
            token strings' ``##`` / ``Ġ`` / ``▁`` markers); 80/10/10 still applies per token.
        seed: makes masks a function of (seed, epoch, example) only, whatever the batch; None draws
            a fresh OS seed on every call.
        pad_to_multiple_of: round the row length up to a multiple of this.
        max_length: longest row. Longer examples are split into chunks (never truncated); each
            chunk is its own row (padding mode) or bin item (packing). Required for packing.
        packing: put several documents in one row, each attending only to itself.
        attn_implementation: the model's, deciding the packing mask: "eager" / "sdpa" (4D float
            mask) or a flash-attention one (``cu_seq_lens``).
        packed_attention: "auto" (from ``attn_implementation``), "4d_mask" (the dense mask at any
            row length) or "cu_seq_lens" (see :mod:`hf_lmobj.collators._attention`).
        return_sparse_indices: add ``masked_positions`` (flat indices of selected tokens).
        sliding_window: packing only (refused without it, as are ``position_ids_start`` and a
            ``packed_attention`` other than "auto"); a model's bidirectional half-window (ModernBERT:
            ``config.sliding_window``) to emit the per-layer-type mask dict it needs.
        position_ids_start: packing only; first position id (RoBERTa: ``config.pad_token_id + 1``).
            None (default): the model's (``model=``) when packing, else 0.
        mask_dtype: dtype of the 4D additive mask (match the model's, e.g. torch.bfloat16).
        model: optional, read once and not kept: its attention implementation and (floating) dtype
            set ``attn_implementation`` and ``mask_dtype``, as in :class:`DataCollatorForCausalLM`;
            its position table bounds the rows (see "Row limit" in the module docstring), its first
            position id sets ``position_ids_start``, and a tokenizer larger than its embedding, or
            ``token_type_ids`` past its ``type_vocab_size``, are refused.
        epoch: mixed into seeded masks; advance with :meth:`set_epoch`.

    With a stock Trainer, ``remove_unused_columns=True`` (its default) drops ``word_ids``,
    ``idx`` and ``special_tokens_mask`` before they reach the collator (whole words then come
    from the token strings and masks are keyed by content); set it False to keep them, and drop
    other columns yourself: unknown keys raise rather than being silently ignored.

    Example:
        >>> from hf_lmobj.corpus import build_tokenizer
        >>> tok = build_tokenizer(vocab_size=512, max_documents=20)
        >>> collator = DataCollatorForMaskedLM(tok, mlm_probability=1.0, seed=0)  # select all eligible
        >>> batch = collator([[300, 301, 302, 303, 304, 305], [tok.bos_token_id, 301]])
        >>> sorted(batch), batch["attention_mask"].tolist()
        (['attention_mask', 'input_ids', 'labels'], [[1, 1, 1, 1, 1, 1], [1, 1, 0, 0, 0, 0]])
        >>> batch["labels"].tolist()  # BOS and padding are never selected
        [[300, 301, 302, 303, 304, 305], [-100, 301, -100, -100, -100, -100]]
        >>> from transformers import BertConfig, BertForMaskedLM
        >>> bert = BertForMaskedLM(BertConfig(vocab_size=len(tok), hidden_size=8, num_hidden_layers=1,
        ...     num_attention_heads=1, intermediate_size=8, max_position_embeddings=4))
        >>> DataCollatorForMaskedLM(tok, model=bert)([[300] * 6])  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: feature 0 has 6 tokens but BertForMaskedLM reads at most 4 positions per row; pass max_length=4 ...
        >>> DataCollatorForMaskedLM(tok, model=bert, max_length=4)([[300] * 6])["input_ids"].shape  # split, not cut
        torch.Size([2, 4])
    """

    tokenizer: PreTrainedTokenizerBase
    mlm_probability: float = 0.15
    mask_replace_prob: float = 0.8
    random_replace_prob: float = 0.1
    whole_word_mask: bool = False
    seed: int | None = None
    pad_to_multiple_of: int | None = None
    max_length: int | None = None
    packing: bool = False
    attn_implementation: str = "sdpa"
    packed_attention: str = "auto"
    return_sparse_indices: bool = False
    sliding_window: int | None = None
    position_ids_start: int | None = None
    mask_dtype: torch.dtype | str = torch.float32
    epoch: int = 0
    return_tensors: str = "pt"
    model: InitVar[Any] = None

    def __post_init__(self, model: Any) -> None:
        if not isinstance(self.tokenizer, PreTrainedTokenizerBase):
            raise TypeError(
                f"tokenizer must be a transformers tokenizer (PreTrainedTokenizerBase), got {type(self.tokenizer).__name__}"
                "; load one with AutoTokenizer.from_pretrained(...)"
            )
        if model is not None and not isinstance(model, nn.Module):
            raise TypeError(
                f"model must be the torch model the batches are for (an nn.Module), got {type(model).__name__}"
            )
        self.attn_implementation, self.mask_dtype = attention_from_model(
            model, self.attn_implementation, self.mask_dtype
        )
        self._check_probabilities()
        if self.tokenizer.pad_token_id is None:
            raise ValueError("tokenizer has no pad token; set tokenizer.pad_token before collating")
        self._check_layout()
        self.return_tensors = check_return_tensors(self.return_tensors)
        dtype = self.mask_dtype
        dtype = getattr(torch, dtype, None) if isinstance(dtype, str) else dtype
        if not isinstance(dtype, torch.dtype) or not dtype.is_floating_point:
            raise ValueError(f"mask_dtype must be a floating torch dtype, got {self.mask_dtype!r}")
        self.mask_dtype = dtype
        self.set_epoch(self.epoch)
        if self.seed is not None:
            resolve_seed(self.seed)  # raises ValueError naming `seed` when it is not an int >= 0
        self._tables, self._word_rule_error = masking.vocabulary_tables(self.tokenizer), None
        if self.whole_word_mask:
            try:
                self._tables = masking.vocabulary_tables(self.tokenizer, "auto")
            except ValueError as error:  # fine as long as every feature brings its word_ids
                self._word_rule_error = error
        if self.random_replace_prob > 0 and self._tables.replacement_ids.numel() == 0:
            raise ValueError("random_replace_prob > 0 but the tokenizer has no non-special token")
        self._limits = self._read_limits(model)

    def _check_probabilities(self) -> None:
        self.mlm_probability = check_number(  # 0 would select nothing: no target, nothing trained
            self.mlm_probability,
            "mlm_probability",
            0.0,
            1.0,
            low_open=True,
            hint="the share of tokens selected for prediction (0 would train nothing; BERT uses 0.15)",
        )
        for name in ("mask_replace_prob", "random_replace_prob"):
            setattr(self, name, check_number(getattr(self, name), name, 0.0, 1.0))
        if self.mask_replace_prob + self.random_replace_prob > 1 + 1e-9:
            raise ValueError(
                "mask_replace_prob + random_replace_prob must not exceed 1 (the rest stay as is), "
                f"got {self.mask_replace_prob} + {self.random_replace_prob}"
            )
        if self.mask_replace_prob > 0 and self.tokenizer.mask_token_id is None:
            raise ValueError(
                "tokenizer has no mask token; add one (tokenizer.add_special_tokens("
                "{'mask_token': '[MASK]'})) or set mask_replace_prob=0"
            )

    def _check_layout(self) -> None:
        """The flags and the row-layout arguments; the packing-only ones refused without packing."""
        for name in ("whole_word_mask", "packing", "return_sparse_indices"):
            setattr(self, name, check_flag(getattr(self, name), name))
        for name in ("pad_to_multiple_of", "max_length", "sliding_window"):
            setattr(self, name, check_length(getattr(self, name), name, optional=True))
        if self.packing and self.max_length is None:
            raise ValueError("packing=True needs max_length (the row length to pack documents into)")
        self.attn_implementation = check_attn_implementation(self.attn_implementation, MASK_ATTENTION)
        if self.packed_attention not in ENCODER_PACKED_ATTENTION:
            raise ValueError(
                f"packed_attention must be one of {ENCODER_PACKED_ATTENTION}, got {self.packed_attention!r} "
                "(encoders build their mask without position_ids: 'position_ids' alone would not isolate)"
            )
        if self.position_ids_start is not None:
            self.position_ids_start = check_length(self.position_ids_start, "position_ids_start", minimum=0)
        if not self.packing:  # 0 (where padding-mode positions start anyway) and "auto" change nothing
            given = {"sliding_window": self.sliding_window, "position_ids_start": self.position_ids_start or None}
            given["packed_attention"] = None if self.packed_attention == "auto" else self.packed_attention
            for name, value in given.items():
                if value is not None:
                    raise ValueError(
                        f"{name}={value!r} applies to packing=True only (in padding mode the model builds its own "
                        f"mask and position ids); drop it, or set packing=True with max_length"
                    )

    def _read_limits(self, model: nn.Module | None) -> _RowLimits:
        """What ``model`` (else the tokenizer) bounds: row length, first position id, ids; checked against the settings."""
        limits = _RowLimits.of(model, self.tokenizer)
        if limits.vocab_rows is not None and len(self.tokenizer) > limits.vocab_rows:
            raise ValueError(
                f"the tokenizer has {len(self.tokenizer)} tokens but {limits.source}'s input embedding has "
                f"{limits.vocab_rows} rows: its ids (and random replacements) would index past it; "
                "call model.resize_token_embeddings(len(tokenizer))"
            )
        if self.position_ids_start is None:  # padding mode: the model numbers positions itself
            self.position_ids_start = limits.first_position if self.packing else 0
        elif model is not None and self.packing and self.position_ids_start != limits.first_position:
            raise ValueError(
                f"position_ids_start={self.position_ids_start} but {limits.source} numbers positions from "
                f"{limits.first_position}; leave position_ids_start unset (model= supplies it) or set "
                f"{limits.first_position}"
            )
        if limits.from_model and self.max_length is not None:
            longest = self._row_width(self.max_length)
            if longest > limits.positions:
                what = f"max_length={self.max_length}"
                if longest != self.max_length:
                    what += f" rounded up to {longest} by pad_to_multiple_of={self.pad_to_multiple_of}"
                raise ValueError(
                    f"{what} exceeds the {limits.positions} positions {limits.source} reads per row; use "
                    f"max_length <= {limits.positions} (longer features are split into rows, never truncated)"
                )
        return limits

    def _row_width(self, longest: int) -> int:
        """The row width for a longest row of ``longest`` tokens (``pad_to_multiple_of`` applied)."""
        if self.pad_to_multiple_of:
            return -(-longest // self.pad_to_multiple_of) * self.pad_to_multiple_of
        return longest

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch mixed into seeded masks (each epoch then masks every example afresh)."""
        self.epoch = check_count(epoch, "epoch")

    numpy_call = refuse_numpy_call  # DataCollatorMixin's return_tensors='np' route: refused by name

    def torch_call(self, features: list[Any]) -> dict[str, Any]:
        """Collate ``features`` (dicts with ``input_ids``, or bare id sequences) into a batch."""
        if isinstance(features, (Mapping, str, bytes)) or not isinstance(features, Iterable):
            raise TypeError(
                f"features must be a list of features (dicts with 'input_ids', or id sequences), got a "
                f"{type(features).__name__}; wrap a single feature in a list: collator([feature])"
            )
        features = list(features)
        if len(features) == 0:
            raise ValueError("empty batch: the collator needs at least one feature")
        features = [_as_mapping(f, i) for i, f in enumerate(features)]
        ids, lengths, extras = _flatten(features)
        check_column_range(ids.numpy(), lengths, self._tables.special.numel())
        self._check_lengths(lengths)
        if "token_type_ids" in extras:
            _check_token_types(extras["token_type_ids"], lengths, self._limits)
        starts = np.zeros(len(lengths), dtype=np.int64)
        np.cumsum(lengths[:-1], out=starts[1:])
        doc_starts = torch.zeros(ids.numel(), dtype=torch.bool)  # (N,)
        doc_starts.scatter_(0, torch.from_numpy(starts), True)
        eligible = ~self._tables.special.index_select(0, ids)  # (N,)
        if "special_tokens_mask" in extras:
            eligible &= extras["special_tokens_mask"] == 0
        if not bool(eligible.any()):
            raise ValueError(
                "no token of this batch can be selected for prediction (every one is a special token or "
                "marked in special_tokens_mask), so it has no target; drop features without ordinary tokens"
            )
        uniform = self._uniforms(features, ids, starts, lengths)  # (2, N) float64
        words = self._word_starts(ids, doc_starts, eligible, extras)
        selected = masking.select_positions(uniform[0], eligible, words, self.mlm_probability)
        inputs, labels = masking.corrupt(
            ids,
            selected,
            uniform[1],
            self.tokenizer.mask_token_id,
            self._tables.replacement_ids,
            self.mask_replace_prob,
            self.random_replace_prob,
        )
        return self._layout(inputs, labels, starts, lengths, extras.get("token_type_ids"))

    def _check_lengths(self, lengths: np.ndarray) -> None:
        """Without ``max_length``, every feature is one row: refuse one longer than the row limit, by name."""
        limit = self._limits.positions
        if self.max_length is not None or limit is None or int(lengths.max()) <= limit:
            return
        index = int(np.argmax(lengths > limit))
        also = "" if self._limits.from_model else ", or pass model= (its position table then sets the limit)"
        raise ValueError(
            f"feature {index} has {int(lengths[index])} tokens but {self._limits.source} reads at most {limit} "
            f"positions per row; pass max_length={limit} to split longer features into rows of at most {limit} "
            f"tokens (nothing is truncated), and packing=True to pack them into rows of {limit}{also}"
        )

    def _word_starts(self, ids, doc_starts, eligible, extras) -> torch.Tensor | None:
        if not self.whole_word_mask:
            return None
        if "word_ids" in extras:
            return masking.word_starts_from_word_ids(extras["word_ids"], doc_starts, eligible)
        if self._word_rule_error is not None:
            raise self._word_rule_error
        return masking.word_starts_from_tokens(ids, doc_starts, eligible, self._tables)

    def _uniforms(self, features, ids, starts, lengths) -> torch.Tensor:
        """(2, N) float64: row 0 selects, row 1 picks mask / random (and which id) / keep.

        One seed per example from :func:`~hf_lmobj.collators.seeding.example_seeds` (its index,
        else its own tokens; a fresh base seed per call when ``seed`` is None), then counter-based
        uniforms for every token of the batch at once.
        """
        array = ids.numpy()
        contents = [array[s : s + n] for s, n in zip(starts.tolist(), lengths.tolist())]
        seeds = example_seeds(features, self.seed, self.epoch, contents=contents)
        return masking.counter_uniforms(seeds, lengths)  # (2, N)

    def _layout(self, inputs, labels, starts, lengths, token_type_ids) -> dict[str, Any]:
        """Place the stream's chunks in rows (the causal collator's row layout) and build the masks / position ids."""
        layout = _placement(starts, lengths, self.max_length, self.packing)
        chunk_start, chunk_len, row, offset, fill = (
            layout.starts,
            layout.lengths,
            layout.rows,
            layout.offsets,
            layout.fills,
        )
        width = self._row_width(int(fill.max()))
        if self._limits.from_model and width > self._limits.positions:  # only pad_to_multiple_of gets here
            raise ValueError(
                f"pad_to_multiple_of={self.pad_to_multiple_of} rounds rows of {int(fill.max())} tokens up to {width}, "
                f"past the {self._limits.positions} positions {self._limits.source} reads; use a pad_to_multiple_of "
                f"that divides {self._limits.positions}, or max_length <= {self._limits.positions} rounded down to it"
            )
        dest = torch.from_numpy(np.repeat(row * width + offset - chunk_start, chunk_len))
        dest += torch.arange(inputs.numel())  # (N,) flat index into (R * width)

        def place(values: torch.Tensor, pad: int) -> torch.Tensor:
            out = torch.full((len(fill) * width,), pad, dtype=values.dtype)
            out.scatter_(0, dest, values)
            return out.view(len(fill), width)  # (R, width)

        batch = {"input_ids": place(inputs, self.tokenizer.pad_token_id)}
        batch["labels"] = place(labels, -100)
        if token_type_ids is not None:
            batch["token_type_ids"] = place(token_type_ids, 0)
        if not self.packing:
            batch["attention_mask"] = place(torch.ones_like(inputs), 0)
        else:
            settings = (self.position_ids_start, self.attn_implementation, self.packed_attention)
            settings += (self.mask_dtype, self.sliding_window)
            batch.update(_packed_masks(place, chunk_len, chunk_start, fill, width, *settings))
        if self.return_sparse_indices:
            batch["masked_positions"] = torch.nonzero(batch["labels"].view(-1) != -100).flatten()
        return batch
