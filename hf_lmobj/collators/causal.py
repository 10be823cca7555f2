"""``DataCollatorForCausalLM``: padded or packed batches whose causal-LM loss is right by construction.

Two modes:

* **padding** (default): one row per feature, right-padded; ``attention_mask`` marks real tokens
  and ``labels`` are -100 wherever the mask is 0 (decided by the mask, never by token id, so EOS is
  trained even when ``pad_token == eos_token``). A feature longer than ``max_length`` is split into
  several rows, never truncated.
* **packing** (``packing=True``, ``max_length`` required): the batch's documents (longer ones split
  into ``max_length`` chunks) are bin-packed best-fit-decreasing (O(n log n)) into rows;
  ``position_ids`` restart at 0 per document. Every packed batch is exactly
  ``round_up(max_length, pad_to_multiple_of)`` wide, so all batches of a run have one shape (what
  accelerate's ``dispatch_batches`` concatenates across processes); the padding tail is ignored
  (labels -100) and its positions count 0, 1, ... as a dummy document of its own. Documents are
  isolated in the cheapest form the model reads (:mod:`hf_lmobj.collators._attention`): no mask and
  ``use_cache=False`` by default, ``cu_seq_lens_q/k`` for flash-attention (both O(B x T) at any row
  length), a 4D ``[B, 1, T, T]`` mask for a ``model=`` whose mask ignores ``position_ids``.

Features may be pre-packed rows (from :func:`hf_lmobj.packing.dataset.pack_dataset`, TRL's or
axolotl's) whose documents are given by an ``attention_mask`` numbering them (``2, 2, 3, ...`` as
``pack_dataset`` writes it, or ``1, 1, 2, ...``), by ``seq_lengths`` or by ``position_ids`` (see
:mod:`hf_lmobj.collators._causal_features`): in both modes each one is one batch row, never
re-packed or split, with its documents isolated and the batch as wide as a packed one
(``max_length``, rounded up; the longest row when ``max_length`` is None). A pre-packed row longer
than ``max_length`` is a ``ValueError``. A stock ``Trainer`` keeps ``attention_mask`` (every language
model's ``forward`` takes it) even with ``remove_unused_columns=True``, so ``pack_dataset``'s rows keep
their boundaries there; the numbers never reach the model (packed batches carry ``position_ids``).
Given ``model=``, a model that cannot isolate packed documents (``forward`` without
``position_ids``: Bloom, MPT, Mamba, ...) is refused: in packing mode when the collator is built, in
padding mode at the first pre-packed row (also with ``packed_attention`` given by name). Without
``model=`` and with ``packed_attention="auto"`` (and no flash-attention), nothing checks that the
model reads the ``position_ids`` that keep the documents apart (Llama / GPT-2 family models do;
Bloom and other ALiBi models ignore them): the first batch that relies on them (every packed batch,
or a padding-mode batch holding a pre-packed row) raises a ``UserWarning``, once per collator
instance (:data:`UNCHECKED_POSITION_IDS`). Pass ``model=`` to have the model checked, or
``packed_attention="position_ids"`` to state that it reads them; either silences it.

Every mode emits ``labels`` (HF convention: aligned with ``input_ids``, the model shifts; -100 at
padding and at every document's first token) and ``shift_labels`` (``shift_labels[:, t] ==
labels[:, t + 1]``, -100 at the last position), which transformers' causal-LM loss uses as given.
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import InitVar, dataclass, field
from typing import Any

import numpy as np
import torch
from transformers import PreTrainedTokenizerBase
from transformers.data.data_collator import DataCollatorMixin

from hf_lmobj.checks import check_flag, check_has_targets, check_length, check_return_tensors
from hf_lmobj.collators._attention import (
    PACKED_ATTENTION,
    attention_from_model,
    check_attn_implementation,
    choose_packed_attention,
    packed_attention_inputs,
)
from hf_lmobj.collators._causal_features import FlatFeatures, read_features
from hf_lmobj.collators.features import refuse_numpy_call
from hf_lmobj.constants import IGNORE_INDEX, round_up
from hf_lmobj.packing.rows import (
    MIN_ROW_LENGTH,
    ROW_NEEDS,
    Layout,
    PackingStats,
    assemble_rows,
    next_fit_layout,
    pack_layout,
    stack_layouts,
)

_NO_TARGET_FIX = (
    "every document is a single token or every label is -100; drop features without a trained token "
    "(e.g. a prompt whose completion was cut off)"
)
UNCHECKED_POSITION_IDS = (
    "{name}: this batch keeps its packed documents apart by position_ids only (restarting at 0 per "
    "document; no mask). Most models (Llama, GPT-2 with sdpa, ...) use them to keep documents apart, but "
    "some (Bloom, ALiBi models) ignore them, and then the documents of a row attend to each other. No model "
    "was checked: pass model=<the model> so that the collator checks it (and refuses one that cannot isolate "
    "documents), or packed_attention='position_ids' to state that the model takes them (which silences this "
    "warning). Warned once per collator."
)


def _tokenizer_adds(tokenizer: PreTrainedTokenizerBase) -> tuple[bool, bool]:
    """Whether the tokenizer itself puts BOS first / EOS last when encoding (its convention)."""
    probe = tokenizer("a", add_special_tokens=True)["input_ids"]
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    return bos is not None and probe[:1] == [bos], eos is not None and probe[-1:] == [eos]


def _prepacked_refusal(flat: FlatFeatures, reason: str) -> str:
    """The message for pre-packed rows given to a collator whose ``model=`` cannot isolate their documents."""
    index = int(np.argmax(flat.packed_features))
    count = int((flat.doc_feature == index).sum())
    return (
        f"these features are pre-packed rows (feature {index} holds {count} document(s), marked by pack_dataset's "
        f"numbered attention_mask, seq_lengths or position_ids), but {reason}. For this model, do not pack the "
        "dataset: give the collator one document per feature (tokenize, skip pack_dataset) with packing=False"
    )


@dataclass
class DataCollatorForCausalLM(DataCollatorMixin):
    """Pad or pack causal-LM features into a batch a stock ``AutoModelForCausalLM`` trains on.

    Args:
        tokenizer: gives ``pad_token_id`` (padding), ``bos/eos_token_id`` and the vocabulary size.
        max_length: longest row, >= 2; longer documents are split into chunks (never truncated).
            Required with ``packing=True``. Packed and pre-packed batches are this wide (rounded up).
        packing: bin-pack the batch's documents into rows of ``max_length``.
        pad_to_multiple_of: round the row length up to a multiple of this.
        attn_implementation: the model's attention ("eager", "sdpa", "flex_attention",
            "flash_attention_2/3"); read from ``model`` when that is given.
        packed_attention: how packed rows tell the model where documents are (see
            :mod:`hf_lmobj.collators._attention`): "auto" (default: ``position_ids`` +
            ``use_cache=False``, or ``cu_seq_lens`` for flash-attention; what ``model`` needs when
            given), "position_ids", "cu_seq_lens" or "4d_mask" (a ``[B, 1, T, T]`` float mask, at any
            row length). "position_ids" by name states that the model reads them (no warning); a
            ``model`` given beside any form is still checked.
        model: optional, read once and not kept: its attention implementation, its dtype (for a 4D
            mask) and whether it can isolate packed documents from ``position_ids`` (else it gets
            the 4D mask, or a ``ValueError`` when it cannot isolate them at all). Without it (and
            with "auto", no flash-attention) the first batch relying on ``position_ids`` warns.
        add_bos / add_eos: put BOS first / EOS last in each (unpacked) feature unless already
            there. ``None`` follows the tokenizer: add exactly what it adds when encoding.
        return_shift_labels: emit ``shift_labels``; switch off for a model whose ``forward`` takes
            no ``**kwargs`` (``labels`` alone give the same loss: they are -100 at document starts).
        return_use_cache: put ``use_cache=False`` in packed batches (a Python bool). Switch off where
            a batch must hold tensors only (accelerate's ``dispatch_batches``, on by default for an
            ``IterableDataset`` on several processes, broadcasts tensors and raises on a bool); then
            the model must run without a cache some other way: a ``Trainer`` sets
            ``config.use_cache = TrainingArguments.use_cache`` (False by default).
        mask_dtype: dtype of a 4D additive mask (use the model's dtype for half precision).
        return_tensors: only ``"pt"``.

    Example:
        >>> from hf_lmobj.corpus import build_tokenizer
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
        >>> packed["position_ids"].tolist(), packed["use_cache"], "attention_mask" in packed
        ([[0, 1, 2, 0, 1, 0, 1, 2]], False, False)
        >>> rows = collator([{"input_ids": [10, 11, eos, 12, eos], "attention_mask": [2, 2, 2, 3, 3]}])  # pack_dataset's
        >>> rows["position_ids"].tolist(), rows["labels"].tolist() == [[-100, 11, eos, -100, eos]]
        ([[0, 1, 2, 0, 1]], True)
        >>> collator([{"input_ids": [10, 11, eos, 12, eos], "seq_lengths": [3, 2]}])["position_ids"].tolist()
        [[0, 1, 2, 0, 1]]
    """

    tokenizer: PreTrainedTokenizerBase
    max_length: int | None = None
    packing: bool = False
    pad_to_multiple_of: int | None = None
    attn_implementation: str = "sdpa"
    packed_attention: str = "auto"
    model: InitVar[Any] = None
    add_bos: bool | None = None
    add_eos: bool | None = None
    return_shift_labels: bool = True
    return_use_cache: bool = True
    mask_dtype: torch.dtype = torch.float32
    return_tensors: str = "pt"
    _bos_eos: tuple[bool, bool] = field(default=(False, False), init=False, repr=False)
    _form: str = field(default="position_ids", init=False, repr=False)
    _refusal: str = field(default="", init=False, repr=False)
    _unchecked: bool = field(default=False, init=False, repr=False, compare=False)  # warn at the next packed batch

    def __post_init__(self, model: Any) -> None:
        self.max_length = check_length(self.max_length, "max_length", MIN_ROW_LENGTH, ROW_NEEDS, optional=True)
        self.packing = check_flag(self.packing, "packing")
        if self.packing and self.max_length is None:
            raise ValueError("packing=True needs max_length (the row length to pack documents into)")
        self.pad_to_multiple_of = check_length(self.pad_to_multiple_of, "pad_to_multiple_of", optional=True)
        for name in ("add_bos", "add_eos"):
            setattr(self, name, check_flag(getattr(self, name), name, optional=True))
        for name in ("return_shift_labels", "return_use_cache"):
            setattr(self, name, check_flag(getattr(self, name), name))
        self.attn_implementation, self.mask_dtype = attention_from_model(
            model, self.attn_implementation, self.mask_dtype
        )
        self.attn_implementation = check_attn_implementation(self.attn_implementation)
        self.return_tensors = check_return_tensors(self.return_tensors)
        if not self.mask_dtype.is_floating_point:
            raise ValueError(f"mask_dtype must be a floating dtype (additive mask), got {self.mask_dtype}")
        if self.packed_attention not in PACKED_ATTENTION:
            raise ValueError(f"packed_attention must be one of {PACKED_ATTENTION}, got {self.packed_attention!r}")
        try:  # a model that cannot isolate packed documents is refused where it would see them
            self._form = choose_packed_attention(self.packed_attention, self.attn_implementation, model)
        except ValueError as error:
            if self.packing:
                raise
            self._form, self._refusal = "", str(error)  # padding mode: only pre-packed rows fail
        # position_ids nobody checked the model reads (a model= was checked; a named form is the user's word)
        self._unchecked = model is None and self.packed_attention == "auto" and self._form == "position_ids"
        default_bos, default_eos = _tokenizer_adds(self.tokenizer)
        add_bos = default_bos if self.add_bos is None else self.add_bos
        add_eos = default_eos if self.add_eos is None else self.add_eos
        for flag, name in ((add_bos, "bos"), (add_eos, "eos")):
            if flag and getattr(self.tokenizer, f"{name}_token_id") is None:
                raise ValueError(f"add_{name}=True but the tokenizer has no {name}_token")
        self._bos_eos = (add_bos, add_eos)

    # ----------------------------------------------------------------------------- layout
    def _read(self, features: Sequence[Any]) -> FlatFeatures:
        add_bos, add_eos = self._bos_eos
        flat = read_features(
            features,
            len(self.tokenizer),
            self.tokenizer.bos_token_id if add_bos else None,
            self.tokenizer.eos_token_id if add_eos else None,
        )
        if (self.packing or flat.prepacked) and flat.valid is not None:
            raise ValueError(
                "packed / pre-packed features must not contain padding (attention_mask zeros); tokenize without padding"
            )
        too_long = np.flatnonzero(flat.packed_features & (flat.feature_lengths > (self.max_length or np.inf)))
        if too_long.size:
            index = int(too_long[0])
            raise ValueError(
                f"feature {index} is a pre-packed row of {int(flat.feature_lengths[index])} tokens, longer than "
                f"max_length={self.max_length}; pre-packed rows are never split: pack them with "
                f"pack_dataset(dataset, max_length={self.max_length}) or set the collator's max_length to the "
                "rows' length"
            )
        return flat

    def _layout(self, flat: FlatFeatures) -> Layout:
        """Rows of chunks: one per pre-packed feature, then the documents bin-packed (packing) or one
        feature per row (padding mode)."""
        if not self.packing:
            return next_fit_layout(flat.doc_starts, flat.doc_lengths, flat.doc_feature, self.max_length)
        kept = flat.packed_features[flat.doc_feature]  # (D,) the document is part of a pre-packed row
        if not kept.any():
            return pack_layout(flat.doc_starts, flat.doc_lengths, self.max_length)
        rows = next_fit_layout(flat.doc_starts[kept], flat.doc_lengths[kept], flat.doc_feature[kept], None)
        if kept.all():
            return rows
        return stack_layouts(rows, pack_layout(flat.doc_starts[~kept], flat.doc_lengths[~kept], self.max_length))

    def _width(self, layout: Layout, packed: bool) -> int:
        """Packed batches: ``max_length`` (one shape per run); padding mode: the longest row. Rounded up."""
        if packed and self.max_length is not None:
            return round_up(self.max_length, self.pad_to_multiple_of)
        return round_up(layout.longest_row, self.pad_to_multiple_of)

    def _pad_id(self, layout: Layout, width: int, packed: bool) -> int:
        pad = self.tokenizer.pad_token_id
        if pad is None:
            if packed or bool((layout.fills == width).all()):
                return 0  # never attended by a real token, never a target (a packed tail is its own document)
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
        flat = self._read(features)
        layout = self._layout(flat)
        width = self._width(layout, self.packing or flat.prepacked)
        real = flat.ids.size if flat.valid is None else int(flat.valid.sum())
        return PackingStats(real, layout.num_rows, width)

    # ----------------------------------------------------------------------------- batch out
    numpy_call = refuse_numpy_call  # DataCollatorMixin's return_tensors='np' route: refused by name

    def torch_call(self, features: Sequence[Any]) -> dict[str, Any]:
        flat = self._read(features)
        layout = self._layout(flat)
        packed = self.packing or flat.prepacked
        width = self._width(layout, packed)
        pad_id = self._pad_id(layout, width, packed)
        out = assemble_rows(flat.ids, flat.labels, None if packed else flat.valid, layout, width, pad_id)
        check_has_targets(int((out.shift_labels != IGNORE_INDEX).sum()), "this batch", _NO_TARGET_FIX)
        batch: dict[str, Any] = {"input_ids": out.input_ids, "labels": out.labels}  # (B, T) each
        if self.return_shift_labels:
            batch["shift_labels"] = out.shift_labels  # (B, T)
        if not packed:
            batch["attention_mask"] = torch.from_numpy(out.real.numpy().astype(np.int64))  # (B, T)
            return batch
        if self._refusal:
            raise ValueError(_prepacked_refusal(flat, self._refusal))
        if self._unchecked:
            self._unchecked = False  # once per instance (a DataLoader worker process holds a copy of its own)
            warnings.warn(UNCHECKED_POSITION_IDS.format(name=type(self).__name__), UserWarning, stacklevel=3)
        batch["position_ids"] = out.position_ids  # (B, T)
        asked = self.packed_attention != "auto"
        batch.update(packed_attention_inputs(self._form, out.position_ids, self.mask_dtype, True, asked))
        if not self.return_use_cache:
            del batch["use_cache"]
        return batch
