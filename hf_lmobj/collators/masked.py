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

from __future__ import annotations

import itertools
import numbers
from collections.abc import Iterable, Mapping
from dataclasses import InitVar, dataclass
from typing import Any

import numpy as np
import torch
from torch import nn
from transformers import PreTrainedTokenizerBase
from transformers.data.data_collator import DataCollatorMixin
from transformers.tokenization_utils_base import VERY_LARGE_INTEGER

from hf_lmobj.checks import (
    check_column_range,
    check_count,
    check_flag,
    check_length,
    check_number,
    check_return_tensors,
    id_column,
    id_sequence,
)
from hf_lmobj.collators import _masking as masking
from hf_lmobj.collators._attention import (
    attention_from_model,
    check_attn_implementation,
    check_dense_mask,
    is_flash_attention,
)
from hf_lmobj.collators.features import refuse_numpy_call
from hf_lmobj.collators.seeding import example_seeds, resolve_seed
from hf_lmobj.packing.masks import block_attention_mask, flash_attention_kwargs
from hf_lmobj.packing.rows import Layout, chunk_documents, pack_layout

MASK_ATTENTION = ("eager", "sdpa")
ENCODER_PACKED_ATTENTION = ("auto", "4d_mask", "cu_seq_lens")
PER_TOKEN_KEYS = ("special_tokens_mask", "word_ids", "token_type_ids")
ACCEPTED_KEYS = frozenset({"input_ids", "attention_mask", "idx", "index", *PER_TOKEN_KEYS})


@dataclass(frozen=True)
class _RowLimits:
    """What a model (or, without one, the tokenizer) allows a batch: see "Row limit" in the module docstring.

    Attributes:
        positions: longest row (None: no known limit).
        source: who sets it, for messages (the model's class name, or the tokenizer's model_max_length).
        from_model: the limit is the model's position table (a longer row fails inside its forward).
        first_position: the model's first position id (RoBERTa: pad_token_id + 1), else 0.
        vocab_rows: rows of the model's input embedding (None without a model).
        type_vocab_size: the model's token-type vocabulary (None when it has none or without a model).
    """

    positions: int | None
    source: str
    from_model: bool = False
    first_position: int = 0
    vocab_rows: int | None = None
    type_vocab_size: int | None = None

    @classmethod
    def of(cls, model: nn.Module | None, tokenizer: PreTrainedTokenizerBase) -> _RowLimits:
        if model is None:
            limit = getattr(tokenizer, "model_max_length", None)
            real = (
                isinstance(limit, numbers.Integral) and not isinstance(limit, bool) and 0 < limit < VERY_LARGE_INTEGER
            )
            return cls(int(limit) if real else None, f"the tokenizer (model_max_length={limit})")
        # not at the top: hf_lmobj.models imports hf_lmobj.collators (no cycle at import time)
        from hf_lmobj.models.stock import model_position_limit, position_limit

        config = getattr(model, "config", None)
        table = getattr(config, "max_position_embeddings", None)
        own = position_limit(config) if config is not None else None
        first = table - own if isinstance(table, int) and isinstance(own, int) else 0
        embedding = model.get_input_embeddings() if hasattr(model, "get_input_embeddings") else None
        rows = getattr(getattr(embedding, "weight", None), "shape", (None,))[0]
        types = getattr(config, "type_vocab_size", None)
        limit = model_position_limit(model)
        return cls(limit, type(model).__name__, limit is not None, max(first, 0), rows, types)


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
        layout = self._placement(starts, lengths)
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
            batch.update(self._packed_masks(place, chunk_len, chunk_start, fill, width))
        if self.return_sparse_indices:
            batch["masked_positions"] = torch.nonzero(batch["labels"].view(-1) != -100).flatten()
        return batch

    def _placement(self, starts: np.ndarray, lengths: np.ndarray) -> Layout:
        """Chunks of at most ``max_length`` tokens: best-fit-decreasing into rows when packing, else one per row."""
        if self.packing:
            return pack_layout(starts, lengths, self.max_length)
        chunk_start, chunk_len, _ = chunk_documents(starts, lengths, self.max_length)
        return Layout(chunk_start, chunk_len, np.arange(chunk_len.size), np.zeros_like(chunk_len), chunk_len)

    def _packed_masks(self, place, chunk_len, chunk_start, fill, width) -> dict[str, Any]:
        """Position ids restarting per document (padding is a run of its own) and the mask."""
        tail = torch.arange(width)[None, :] - torch.from_numpy(fill)[:, None]  # (R, width)
        first = torch.from_numpy(np.repeat(chunk_start, chunk_len))  # (N,)
        within = torch.arange(first.numel()) - first  # (N,) position inside its chunk
        positions = torch.where(tail >= 0, tail, place(within, 0))  # (R, width); padding: 0, 1, ...
        out: dict[str, Any] = {"position_ids": positions + self.position_ids_start}
        flash = is_flash_attention(self.attn_implementation) and self.packed_attention == "auto"
        if flash or self.packed_attention == "cu_seq_lens":
            out.update(flash_attention_kwargs(positions))
            return out
        check_dense_mask(width, asked=self.packed_attention == "4d_mask")
        chunk_of_token = torch.from_numpy(np.repeat(np.arange(len(chunk_len)), chunk_len))  # (N,)
        documents = place(chunk_of_token, -1)  # (R, width), padding = -1
        mask = block_attention_mask(documents, causal=False, dtype=self.mask_dtype)  # (R, 1, T, T)
        if self.sliding_window is None:
            out["attention_mask"] = mask
            return out
        index = torch.arange(width)
        far = (index[:, None] - index[None, :]).abs() > self.sliding_window  # (T, T)
        local = mask.masked_fill(far, torch.finfo(self.mask_dtype).min)
        out["attention_mask"] = {"full_attention": mask, "sliding_attention": local}
        return out


def _as_mapping(feature: Any, index: int) -> Mapping[str, Any]:
    if isinstance(feature, Mapping):
        unknown = set(feature) - ACCEPTED_KEYS
        if unknown:
            raise ValueError(
                f"feature {index} has keys {sorted(unknown)} the masked-LM collator does not use; "
                f"remove those columns (it reads {sorted(ACCEPTED_KEYS)} and makes the labels)"
            )
        if "input_ids" not in feature:
            raise ValueError(f"feature {index} has no 'input_ids'")
        return feature
    if isinstance(feature, (list, tuple, np.ndarray, torch.Tensor)):
        return {"input_ids": feature}
    raise TypeError(
        f"feature {index} must be a dict with 'input_ids' or a sequence of ids, got {type(feature).__name__}"
    )


def _flatten(features: list[Mapping[str, Any]]) -> tuple[torch.Tensor, np.ndarray, dict[str, Any]]:
    """(N,) int64 ids of all features back to back, their lengths, and the per-token extras."""
    rows = [f["input_ids"] for f in features]
    lengths = np.fromiter((_length(r, "input_ids", i) for i, r in enumerate(rows)), dtype=np.int64, count=len(rows))
    for i, (feature, n) in enumerate(zip(features, lengths.tolist())):
        if n == 0:
            raise ValueError(f"feature {i} has no tokens; filter empty examples out first")
        _check_attention_mask(feature.get("attention_mask"), n, i)
    ids = torch.from_numpy(id_column(rows, "input_ids")[0])  # (N,)
    extras = {}
    for name in PER_TOKEN_KEYS:
        present = [name in f for f in features]
        if any(present) and not all(present):
            raise ValueError(f"{name!r} is in some features but not all; give it to every feature")
        if all(present):
            values = [f[name] for f in features]
            for i, (value, n) in enumerate(zip(values, lengths.tolist())):
                if _length(value, name, i) != n:
                    raise ValueError(
                        f"feature {i}: {name!r} has {len(value)} entries but input_ids has {n}; "
                        f"{name!r} must be as long as input_ids in every feature (one entry per token)"
                    )
            extras[name] = _per_token(name, values, int(lengths.sum()))
    return ids, lengths, extras


def _length(value: Any, field: str, index: int) -> int:
    """``len(value)`` of a per-token sequence, or a TypeError naming the feature (None, a number, a 0-d tensor)."""
    if isinstance(value, (torch.Tensor, np.ndarray)) and value.ndim == 0 or not hasattr(value, "__len__"):
        raise TypeError(
            f"feature {index}: {field} must be a 1D list of ints (one per token), got {type(value).__name__}"
        )
    return len(value)


def _check_attention_mask(mask: Any, length: int, index: int) -> None:
    """A feature's own ``attention_mask`` (optional): all ones, as long as its ids; zeros mean it was padded."""
    if mask is None:
        return
    if type(mask) is list and len(mask) == length and mask.count(1) == length and set(map(type, mask)) <= {int, bool}:
        return  # the common case (a tokenizer's all-ones list), at C speed; anything else is read below
    values = id_sequence(mask, "attention_mask", f"feature {index}", allow_bool=True)  # (L,)
    if values.size != length:
        raise ValueError(
            f"feature {index}: attention_mask has {values.size} entries but input_ids has {length}; "
            "drop the attention_mask column (the collator builds its own)"
        )
    if bool(((values != 0) & (values != 1)).any()):
        found = sorted(set(values.tolist()))
        hint = ""
        if found[-1] > 1:
            hint = (
                "; values above 1 look like a pack_dataset row (causal packing, its documents numbered in "
                "attention_mask): give this collator the documents unpacked, with max_length=N to split them "
                "(and packing=True to pack them)"
            )
        raise ValueError(f"feature {index}: attention_mask must hold 0 / 1, got {found}{hint}")
    if not bool(values.all()):
        raise ValueError(
            f"feature {index} is padded (attention_mask has zeros); pass unpadded features, the collator pads"
        )


def _per_token(name: str, values: list[Any], total: int) -> torch.Tensor:
    """One per-token extra as a flat (N,) tensor, checked: word ids, a 0 / 1 special-token mask, token types >= 0."""
    if name == "word_ids":
        return _word_ids(values, total)
    flat, lengths = id_column(values, name, allow_bool=name == "special_tokens_mask")  # (N,)
    bad = ((flat != 0) & (flat != 1)) if name == "special_tokens_mask" else flat < 0
    if bool(bad.any()):
        first = int(np.flatnonzero(bad)[0])
        index = int(np.searchsorted(np.cumsum(lengths), first, side="right"))
        rule = "0 / 1 (1 = never select)" if name == "special_tokens_mask" else "token type ids >= 0"
        raise ValueError(f"feature {index}: {name} must hold {rule}, got {int(flat[first])}")
    return torch.from_numpy(flat)


def _check_token_types(token_types: torch.Tensor, lengths: np.ndarray, limits: _RowLimits) -> None:
    """``token_type_ids`` below the model's ``type_vocab_size`` (known with ``model=``)."""
    size = limits.type_vocab_size
    if size is None or not token_types.numel() or int(token_types.max()) < size:
        return
    first = int((token_types >= size).nonzero()[0])
    index = int(np.searchsorted(np.cumsum(lengths), first, side="right"))
    raise ValueError(
        f"feature {index}: token_type_ids must lie in [0, type_vocab_size={size}) of {limits.source}, "
        f"got {int(token_types[first])}"
    )


def _word_ids(rows: list[Any], total: int) -> torch.Tensor:
    """Word ids of every token as one flat float64 tensor (None, for special tokens, becomes NaN).

    A fast tokenizer's ``word_ids()``: ints >= 0, or None for tokens outside any word. Anything
    else (strings, floats, bools, nesting, negative ids) is refused with the feature named.
    """
    if all(type(r) is list for r in rows) and set(map(type, itertools.chain.from_iterable(rows))) <= {int, type(None)}:
        flat = np.array(list(itertools.chain.from_iterable(rows)), dtype=np.float64)  # (N,), None -> NaN
        if not bool((flat < 0).any()):
            return torch.from_numpy(flat if flat.size else np.zeros(total))
    return torch.from_numpy(np.concatenate([_word_id_row(row, index) for index, row in enumerate(rows)]))


def _word_id_row(row: Any, index: int) -> np.ndarray:
    """One feature's word ids as float64 (None -> NaN), each checked; the error names the feature."""
    where = f"feature {index}: word_ids"
    if isinstance(row, (torch.Tensor, np.ndarray)):
        array = row.detach().cpu().numpy() if isinstance(row, torch.Tensor) else row
        if array.ndim != 1 or array.dtype.kind not in "iu":
            raise TypeError(f"{where} must be one flat sequence of ints, got shape {array.shape} {array.dtype}")
        values = array.astype(np.float64)
    else:
        kinds = set(map(type, row))
        odd = [k for k in kinds if k is not type(None) and (not issubclass(k, numbers.Integral) or k is bool)]
        odd += [k for k in kinds if issubclass(k, np.bool_)]
        if odd:
            raise TypeError(
                f"{where} must hold ints (None for tokens outside any word, as a fast tokenizer's "
                f"word_ids() gives), got a {odd[0].__name__}"
            )
        values = np.array(row, dtype=np.float64)  # (L,), None -> NaN
    if bool((values < 0).any()):
        raise ValueError(f"{where} must be >= 0 (None for tokens outside any word), got {int(np.nanmin(values))}")
    return values
