"""``DataCollatorForCausalLM``: padded or packed batches whose causal-LM loss is right by construction.

Two modes:

* **padding** (default): one row per feature, right-padded; ``attention_mask`` marks real tokens
  and ``labels`` are -100 wherever the mask is 0 (decided by the mask, never by token id, so EOS is
  trained even when ``pad_token == eos_token``). A feature longer than ``max_length`` is split into
  several rows, never truncated.
* **packing** (``packing=True``, ``max_length`` required): the batch's documents (longer ones split
  into ``max_length`` chunks) are bin-packed best-fit-decreasing into rows of ``max_length``;
  ``position_ids`` restart at 0 per document and the attention mask form suits
  ``attn_implementation``: a 4D additive float mask ``[B, 1, T, T]`` for ``"eager"`` / ``"sdpa"``
  (it isolates documents in train *and* eval mode; ``position_ids`` alone leak once a cache is
  built), or no mask plus ``cu_seq_lens_q/k`` / ``max_length_q/k`` for flash-attention.

Features may be pre-packed rows (from :func:`hf_lmobj.collators.dataset_packing.pack_dataset`)
carrying ``position_ids`` (or ``seq_lengths``); their documents stay isolated in both modes.

Every mode emits ``labels`` (HF convention: aligned with ``input_ids``, the model shifts; -100 at
padding and at every document's first token) and ``shift_labels`` (``shift_labels[:, t] ==
labels[:, t + 1]``, -100 at the last position), which transformers' causal-LM loss uses as given.

Example:
    >>> from hf_lmobj.data import build_tokenizer
    >>> tok = build_tokenizer(vocab_size=512, max_documents=20)
    >>> eos = tok.eos_token_id
    >>> collator = DataCollatorForCausalLM(tok)
    >>> batch = collator([{"input_ids": [10, 11, eos]}, {"input_ids": [12, eos]}])
    >>> batch["attention_mask"].tolist()
    [[1, 1, 1], [1, 1, 0]]
    >>> batch["labels"].tolist() == [[-100, 11, eos], [-100, eos, -100]]
    True
    >>> packed = DataCollatorForCausalLM(tok, max_length=8, packing=True)(
    ...     [{"input_ids": [10, 11, eos]}, {"input_ids": [12, eos]}])
    >>> packed["position_ids"].tolist(), packed["attention_mask"].shape
    ([[0, 1, 2, 0, 1]], torch.Size([1, 1, 5, 5]))
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase
from transformers.data.data_collator import DataCollatorMixin

from hf_lmobj.collators.causal_packing import (
    IGNORE_INDEX,
    PackingStats,
    Span,
    assemble_rows,
    next_fit_rows,
    pack_spans,
    round_up,
    spans_from_position_ids,
    spans_from_seq_lengths,
)
from hf_lmobj.collators.features import as_int_array, token_ids
from hf_lmobj.collators.packing import (
    block_attention_mask,
    document_ids_from_position_ids,
    flash_attention_kwargs,
)

MASK_IMPLEMENTATIONS = ("eager", "sdpa")
FLASH_IMPLEMENTATIONS = ("flash_attention_2", "flash_attention_3")
BOUNDARY_KEYS = ("position_ids", "seq_lengths")


def _tokenizer_adds(tokenizer: PreTrainedTokenizerBase) -> tuple[bool, bool]:
    """Whether the tokenizer itself puts BOS first / EOS last when encoding (its convention)."""
    probe = tokenizer("a", add_special_tokens=True)["input_ids"]
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    return bos is not None and probe[:1] == [bos], eos is not None and probe[-1:] == [eos]


@dataclass
class DataCollatorForCausalLM(DataCollatorMixin):
    """Pad or pack causal-LM features into a batch a stock ``AutoModelForCausalLM`` trains on.

    Args:
        tokenizer: gives ``pad_token_id`` (padding), ``bos/eos_token_id`` and the vocabulary size.
        max_length: longest row; longer documents are split into chunks (never truncated).
            Required with ``packing=True``.
        packing: bin-pack the batch's documents into rows of ``max_length``.
        pad_to_multiple_of: round the row length up to a multiple of this.
        attn_implementation: the model's ``config._attn_implementation``; decides the packed
            mask form ("eager" / "sdpa": 4D float mask; "flash_attention_2/3": cu_seq_lens kwargs).
        add_bos / add_eos: put BOS first / EOS last in each (unpacked) feature unless already
            there. ``None`` follows the tokenizer: add exactly what it adds when encoding.
        return_shift_labels: emit ``shift_labels``; switch off for a model whose ``forward`` takes
            no ``**kwargs`` (``labels`` alone give the same loss: they are -100 at document starts).
        mask_dtype: dtype of the 4D additive mask (use the model's dtype for half precision).
        return_tensors: only ``"pt"``.
    """

    tokenizer: PreTrainedTokenizerBase
    max_length: int | None = None
    packing: bool = False
    pad_to_multiple_of: int | None = None
    attn_implementation: str = "sdpa"
    add_bos: bool | None = None
    add_eos: bool | None = None
    return_shift_labels: bool = True
    mask_dtype: torch.dtype = torch.float32
    return_tensors: str = "pt"
    _bos_eos: tuple[bool, bool] = field(default=(False, False), init=False, repr=False)

    def __post_init__(self) -> None:
        if self.max_length is not None and (not isinstance(self.max_length, int) or self.max_length <= 0):
            raise ValueError(f"max_length must be a positive int or None, got {self.max_length!r}")
        if self.packing and self.max_length is None:
            raise ValueError("packing=True needs max_length (the row length to pack documents into)")
        if self.pad_to_multiple_of is not None and self.pad_to_multiple_of <= 0:
            raise ValueError(f"pad_to_multiple_of must be positive or None, got {self.pad_to_multiple_of}")
        if self.attn_implementation not in MASK_IMPLEMENTATIONS + FLASH_IMPLEMENTATIONS:
            raise ValueError(
                f"attn_implementation must be one of {MASK_IMPLEMENTATIONS + FLASH_IMPLEMENTATIONS}, "
                f"got {self.attn_implementation!r}; pass model.config._attn_implementation"
            )
        if self.return_tensors != "pt":
            raise ValueError(f"return_tensors must be 'pt', got {self.return_tensors!r}")
        if not self.mask_dtype.is_floating_point:
            raise ValueError(f"mask_dtype must be a floating dtype (additive mask), got {self.mask_dtype}")
        default_bos, default_eos = _tokenizer_adds(self.tokenizer)
        add_bos = default_bos if self.add_bos is None else self.add_bos
        add_eos = default_eos if self.add_eos is None else self.add_eos
        for flag, name in ((add_bos, "bos"), (add_eos, "eos")):
            if flag and getattr(self.tokenizer, f"{name}_token_id") is None:
                raise ValueError(f"add_{name}=True but the tokenizer has no {name}_token")
        self._bos_eos = (add_bos, add_eos)

    # ----------------------------------------------------------------------------- features in
    def _read_feature(self, feature: Any, index: int, vocab: int) -> tuple[np.ndarray, ...]:
        """(ids, labels, valid) of one feature, validated; BOS/EOS added when asked."""
        ids = token_ids(feature, index, vocab)  # (L,)
        labels = ids
        if feature.get("labels") is not None:
            labels = as_int_array(feature["labels"], "labels", index)
            if labels.size != ids.size:
                raise ValueError(
                    f"feature {index}: labels has length {labels.size} but input_ids has "
                    f"{ids.size}; labels must align with input_ids (-100 = not trained)"
                )
            if bool(((labels != IGNORE_INDEX) & ((labels < 0) | (labels >= vocab))).any()):
                raise ValueError(f"feature {index}: labels must be -100 or in [0, {vocab})")
        valid = np.ones(ids.size, dtype=bool)
        if feature.get("attention_mask") is not None:
            valid = as_int_array(feature["attention_mask"], "attention_mask", index) != 0
            if valid.size != ids.size:
                raise ValueError(f"feature {index}: attention_mask length differs from input_ids")
        if not any(key in feature for key in BOUNDARY_KEYS):
            ids, labels, valid = self._add_special(ids, labels, valid)
        return ids, labels, valid

    def _add_special(self, ids, labels, valid) -> tuple[np.ndarray, ...]:
        add_bos, add_eos = self._bos_eos
        bos, eos = self.tokenizer.bos_token_id, self.tokenizer.eos_token_id
        if add_bos and int(ids[0]) != bos:
            ids, labels = np.concatenate([[bos], ids]), np.concatenate([[IGNORE_INDEX], labels])
            valid = np.concatenate([[True], valid])
        if add_eos and int(ids[-1]) != eos:
            ids, labels = np.concatenate([ids, [eos]]), np.concatenate([labels, [eos]])
            valid = np.concatenate([valid, [True]])
        return ids, labels, valid

    def _feature_spans(self, feature: Mapping, index: int, start: int, length: int) -> list[Span]:
        """The documents of one feature: itself, or its pre-packed documents."""
        if feature.get("position_ids") is not None:
            positions = as_int_array(feature["position_ids"], "position_ids", index)
            if positions.size != length:
                raise ValueError(f"feature {index}: position_ids length differs from input_ids")
            try:
                return spans_from_position_ids(positions.tolist(), start)
            except ValueError as error:
                raise ValueError(f"feature {index}: {error}") from None
        if feature.get("seq_lengths") is not None:
            lengths = as_int_array(feature["seq_lengths"], "seq_lengths", index).tolist()
            if sum(lengths) != length:
                raise ValueError(f"feature {index}: seq_lengths sum to {sum(lengths)}, not {length}")
            return spans_from_seq_lengths(lengths, start)
        return [(start, length)]

    # ----------------------------------------------------------------------------- layout
    def _layout(self, features: Sequence[Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray, list, bool]:
        """Flat ids / labels / valid, the rows of spans, and whether rows hold several documents."""
        if len(features) == 0:
            raise ValueError("empty batch: the collator needs at least one feature")
        vocab = len(self.tokenizer)
        ids, labels, valid, per_feature = [], [], [], []
        start = 0
        for index, feature in enumerate(features):
            f_ids, f_labels, f_valid = self._read_feature(feature, index, vocab)
            per_feature.append(self._feature_spans(feature, index, start, f_ids.size))
            ids.append(f_ids)
            labels.append(f_labels)
            valid.append(f_valid)
            start += f_ids.size
        flat_valid = np.concatenate(valid)  # (N,)
        prepacked = any(key in f for f in features for key in BOUNDARY_KEYS)
        if self.packing or prepacked:
            if not bool(flat_valid.all()):
                raise ValueError(
                    "packed / pre-packed features must not contain padding (attention_mask zeros); "
                    "tokenize without padding"
                )
        if self.packing:
            rows = pack_spans([span for spans in per_feature for span in spans], self.max_length)
        else:
            rows = [row for spans in per_feature for row in next_fit_rows(spans, self.max_length)]
        return np.concatenate(ids), np.concatenate(labels), flat_valid, rows, self.packing or prepacked

    def _pad_id(self, rows: list, width: int) -> int:
        pad = self.tokenizer.pad_token_id
        if pad is None:
            if all(sum(n for _, n in row) == width for row in rows):
                return 0  # no padding position exists; the id is never placed
            raise ValueError(
                "the tokenizer has no pad_token but this batch needs padding; set "
                "tokenizer.pad_token = tokenizer.eos_token (safe here: padding is decided by the "
                "attention mask, so EOS is still trained) or use packing=True"
            )
        return pad

    def packing_stats(self, features: Sequence[Any]) -> PackingStats:
        """Real tokens, rows and row length of the batch ``features`` would give (nothing else built).

        ``stats.efficiency`` is the real-token fraction of the ``rows x row_length`` rectangle.
        """
        flat_ids, _, flat_valid, rows, _ = self._layout(features)
        width = round_up(max(sum(n for _, n in row) for row in rows), self.pad_to_multiple_of)
        return PackingStats(int(flat_valid.sum()), len(rows), width)

    # ----------------------------------------------------------------------------- batch out
    def torch_call(self, features: Sequence[Any]) -> dict[str, Any]:
        flat_ids, flat_labels, flat_valid, rows, packed = self._layout(features)
        width = round_up(max(sum(n for _, n in row) for row in rows), self.pad_to_multiple_of)
        pad_id = self._pad_id(rows, width)
        out = assemble_rows(flat_ids, flat_labels, None if packed else flat_valid, rows, width, pad_id)
        batch: dict[str, Any] = {"input_ids": out.input_ids, "labels": out.labels}  # (B, T) each
        if self.return_shift_labels:
            batch["shift_labels"] = out.shift_labels  # (B, T)
        if not packed:
            batch["attention_mask"] = torch.from_numpy(out.real.numpy().astype(np.int64))  # (B, T)
            return batch
        batch["position_ids"] = out.position_ids  # (B, T)
        if self.attn_implementation in FLASH_IMPLEMENTATIONS:
            batch.update(flash_attention_kwargs(out.position_ids))
        else:
            documents = document_ids_from_position_ids(out.position_ids)  # (B, T)
            batch["attention_mask"] = block_attention_mask(documents, True, self.mask_dtype)  # (B,1,T,T)
        return batch
