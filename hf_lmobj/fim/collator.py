"""``DataCollatorForFillInTheMiddle``: FIM per document, then padded or packed as the causal collator does.

Fill-in-the-middle (Bavarian et al. 2022) trains one causal model to both continue and infill: a
share of the documents is cut into prefix / middle / suffix and re-ordered around sentinel tokens
by :class:`~hf_lmobj.fim.transform.FimTransform`, whose rules apply: the three parts encoded as plain
text; ``input_ids`` that are not their text's own tokens (text levels) or that hold a FIM sentinel
are refused, naming the feature. The transform runs on each document *first*; only then are they padded
or packed, by a :class:`~hf_lmobj.collators.causal.DataCollatorForCausalLM` that this collator holds.
So a FIM span never crosses documents, packed documents stay isolated (``position_ids`` restart per
document), ``labels`` / ``shift_labels`` are the causal collator's, and no token is dropped.

Two ways in, both seeded by ``(seed, epoch, example)``:

* this collator, on documents (``input_ids`` and, for character-level cuts, ``text``): a fresh
  cut per epoch (advance with ``set_epoch`` or ``CollatorEpochCallback``);
* :func:`fim_dataset` then :func:`~hf_lmobj.packing.dataset.pack_dataset`: the cuts of
  one epoch written into the dataset, then packed once into full rows (what the FIM recipe does).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import InitVar, dataclass, field
from typing import Any, TypeVar

import datasets
import numpy as np
from transformers import PreTrainedTokenizerBase
from transformers.data.data_collator import DataCollatorMixin

from hf_lmobj.checks import check_return_tensors, id_sequence
from hf_lmobj.collators.causal import DataCollatorForCausalLM
from hf_lmobj.collators.features import check_feature_mapping, numbered_features, refuse_numpy_call
from hf_lmobj.collators.seeding import INDEX_KEYS, resolve_seed
from hf_lmobj.fim.format import FimTokens
from hf_lmobj.fim.transform import TEXT_LEVELS, FimTransform

DatasetT = TypeVar("DatasetT", datasets.Dataset, datasets.IterableDataset)
_SHORTCUTS = {"max_length": None, "packing": False, "pad_to_multiple_of": None}


@dataclass
class DataCollatorForFillInTheMiddle(DataCollatorMixin):
    """FIM each document (seeded), then pad or pack the batch exactly as ``DataCollatorForCausalLM``.

    Args:
        tokenizer: holds the FIM tokens (``build_tokenizer`` adds StarCoder's) and an EOS.
        fim_rate: share of documents transformed, in [0, 1] (0.5 as StarCoder; Code Llama 0.9).
        spm_rate: share of transformed documents in SPM order, in [0, 1] (0.5 as StarCoder).
        fim_level: ``"char"`` (default; cuts between characters, needs each feature's text),
            ``"line"`` (cuts at line starts: whole-line middles; needs the text) or ``"token"`` (cuts
            between tokens, keeps the document's tokens exactly).
        seed: cuts depend only on (seed, epoch, example); None draws a fresh seed per call.
        fim_tokens: names of the sentinel tokens (StarCoder's by default).
        text_column: the feature key holding the document's text.
        max_length / packing / pad_to_multiple_of / model: passed to the causal collator this
            collator builds (see :class:`~hf_lmobj.collators.causal.DataCollatorForCausalLM`).
            Packing without ``model=`` warns once (``UserWarning``) at the first batch: nothing checked
            that the model reads the ``position_ids`` that keep documents apart; pass ``model=``, or
            ``causal=DataCollatorForCausalLM(..., packed_attention="position_ids")`` to state it.
        causal: a causal collator of your own for every other option (``attn_implementation``,
            ``packed_attention``, ``add_bos``, ...); then leave the four above unset.
        epoch: mixed into the seed; advance with :meth:`set_epoch`.
        return_tensors: only ``"pt"``.

    Features are single documents: ``input_ids`` (a leading BOS and a trailing EOS are kept in
    place) plus ``text`` at character level, optionally ``idx`` / ``index`` to key the seed. Rows
    packed already (``position_ids`` / ``seq_lengths`` / a numbered ``attention_mask``) and features
    with their own ``labels`` are refused: FIM re-orders whole documents and trains on all of them.

    Example:
        >>> from hf_lmobj.corpus import build_tokenizer
        >>> from hf_lmobj.fim.format import fim_token_ids
        >>> tok = build_tokenizer(vocab_size=512, max_documents=20)
        >>> docs = [{"input_ids": [tok.bos_token_id, *tok(t)["input_ids"], tok.eos_token_id], "text": t}
        ...         for t in ("x = 1\\n", "def f():\\n    pass\\n")]
        >>> collator = DataCollatorForFillInTheMiddle(tok, fim_rate=1.0, seed=0, max_length=32, packing=True)
        >>> batch = collator(docs)
        >>> sorted(batch)
        ['input_ids', 'labels', 'position_ids', 'shift_labels', 'use_cache']
        >>> (batch["input_ids"] == fim_token_ids(tok).prefix).sum().item()  # one FIM'd document each
        2
    """

    tokenizer: PreTrainedTokenizerBase
    fim_rate: float = 0.5
    spm_rate: float = 0.5
    fim_level: str = "char"
    seed: int | None = None
    fim_tokens: FimTokens = field(default_factory=FimTokens)
    text_column: str = "text"
    max_length: int | None = None
    packing: bool = False
    pad_to_multiple_of: int | None = None
    model: InitVar[Any] = None
    causal: DataCollatorForCausalLM | None = None
    epoch: int = 0
    return_tensors: str = "pt"
    transform: FimTransform = field(init=False, repr=False)

    def __post_init__(self, model: Any) -> None:
        self.return_tensors = check_return_tensors(self.return_tensors)
        if self.seed is not None:
            resolve_seed(self.seed)  # raises ValueError naming `seed` when it is not an int >= 0
        self.set_epoch(self.epoch)
        self.transform = FimTransform(
            self.tokenizer, self.fim_rate, self.spm_rate, self.fim_level, self.fim_tokens, self.text_column
        )
        self.fim_rate, self.spm_rate = self.transform.fim_rate, self.transform.spm_rate
        if self.causal is None:
            self.causal = DataCollatorForCausalLM(
                self.tokenizer,
                max_length=self.max_length,
                packing=self.packing,
                pad_to_multiple_of=self.pad_to_multiple_of,
                model=model,
            )
            return
        if not isinstance(self.causal, DataCollatorForCausalLM):
            raise TypeError(f"causal must be a DataCollatorForCausalLM, got {type(self.causal).__name__}")
        changed = [name for name, default in _SHORTCUTS.items() if getattr(self, name) != default]
        if changed or model is not None:
            raise ValueError(
                f"with causal= given, set {changed or ['model']} on that DataCollatorForCausalLM, not here"
            )
        if len(self.causal.tokenizer) != len(self.tokenizer):
            raise ValueError("causal= was built with another tokenizer (its vocabulary size differs)")
        self.max_length, self.packing = self.causal.max_length, self.causal.packing
        self.pad_to_multiple_of = self.causal.pad_to_multiple_of

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch mixed into the seed (each epoch then cuts every document afresh)."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise ValueError(f"epoch must be a non-negative int, got {epoch!r}")
        self.epoch = epoch

    def fim_input_ids(self, features: Sequence[Mapping[str, Any]]) -> list[list[int]]:
        """Each feature's transformed ``input_ids``, before padding / packing (checked as in a batch)."""
        if len(features) == 0:
            raise ValueError("empty batch: the collator needs at least one feature")
        for index, feature in enumerate(features):
            check_feature_mapping(feature, index)
            for key in ("position_ids", "seq_lengths"):
                if feature.get(key) is not None:
                    raise ValueError(
                        f"feature {index} is a packed row (it has {key}); FIM must cut each document "
                        "before packing: give this collator documents, or use fim_dataset() then pack_dataset()"
                    )
            if feature.get("labels") is not None:
                raise ValueError(
                    f"feature {index} carries labels; FIM re-orders the whole document and trains on all of "
                    "it: drop the labels column"
                )
            mask = feature.get("attention_mask")
            if mask is not None:
                mask = id_sequence(mask, "attention_mask", f"feature {index}", allow_bool=True)  # (L,)
            if mask is not None and numbered_features(mask, np.array([mask.size]))[0]:
                raise ValueError(
                    f"feature {index} is a packed row (its attention_mask numbers documents, as pack_dataset "
                    "writes it); FIM must cut each document before packing: give this collator documents, or "
                    "use fim_dataset() then pack_dataset()"
                )
            if mask is not None and bool((mask != 1).any()):
                raise ValueError(f"feature {index} is padded (attention_mask has zeros); pass unpadded documents")
        return self.transform(features, self.seed, self.epoch)

    numpy_call = refuse_numpy_call  # DataCollatorMixin's return_tensors='np' route: refused by name

    def torch_call(self, features: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        documents = self.fim_input_ids(features)
        return self.causal([{"input_ids": ids} for ids in documents])


def fim_dataset(
    dataset: DatasetT,
    tokenizer: PreTrainedTokenizerBase,
    fim_rate: float = 0.5,
    spm_rate: float = 0.5,
    fim_level: str = "char",
    seed: int = 0,
    epoch: int = 0,
    fim_tokens: FimTokens | None = None,
    text_column: str = "text",
    num_proc: int | None = None,
) -> DatasetT:
    """FIM every document of a tokenized dataset once (the cuts of ``epoch``), ready for ``pack_dataset``.

    Each row is keyed by its ``idx`` / ``index`` column when there is one, else by its position in
    the dataset, so the cuts do not depend on ``num_proc`` or on how the map is batched. The text
    column is removed (it no longer matches ``input_ids``); other columns are kept.

    Example:
        >>> from hf_lmobj.corpus import build_tokenizer
        >>> from hf_lmobj.packing.dataset import pack_dataset
        >>> tok = build_tokenizer(vocab_size=512, max_documents=20)
        >>> ds = datasets.Dataset.from_dict({"text": ["a = 1\\n", "b = 2\\n"]})
        >>> ds = ds.map(lambda r: {"input_ids": tok(r["text"])["input_ids"] + [tok.eos_token_id]})
        >>> fimmed = fim_dataset(ds, tok, fim_rate=1.0, fim_level="token", seed=0)
        >>> fimmed.column_names, len(fimmed[0]["input_ids"]) == len(ds[0]["input_ids"]) + 3  # 3 sentinels
        (['input_ids'], True)
        >>> pack_dataset(fimmed, max_length=32).column_names
        ['input_ids', 'attention_mask', 'seq_lengths']
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int (fim_dataset writes one epoch's cuts), got {seed!r}")
    if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
        raise ValueError(f"epoch must be a non-negative int, got {epoch!r}")
    transform = FimTransform(tokenizer, fim_rate, spm_rate, fim_level, fim_tokens or FimTokens(), text_column)
    columns = list(dataset.column_names or [])
    if columns and "input_ids" not in columns:
        raise ValueError(f"dataset has no 'input_ids' column (columns: {columns}); tokenize it first")
    if columns and fim_level in TEXT_LEVELS and text_column not in columns:
        raise ValueError(
            f"dataset has no {text_column!r} column (columns: {columns}); fim_level={fim_level!r} needs each "
            "document's text: keep it when tokenizing, set text_column=<column>, or use fim_level='token'"
        )
    if "labels" in columns or "position_ids" in columns:
        raise ValueError("fim_dataset takes unpacked documents without labels (FIM before pack_dataset)")

    def transform_batch(batch: dict[str, list], indices: list[int]) -> dict[str, list]:
        keys = next((batch[k] for k in INDEX_KEYS if k in batch), indices)
        texts = batch.get(text_column, [None] * len(indices))
        features = [{"input_ids": ids, text_column: text, "idx": key}
                    for ids, text, key in zip(batch["input_ids"], texts, keys)]  # fmt: skip
        return {"input_ids": transform(features, seed, epoch)}

    kwargs: dict[str, Any] = {"batched": True, "with_indices": True}
    if text_column in columns:
        kwargs["remove_columns"] = [text_column]
    if isinstance(dataset, datasets.Dataset):
        kwargs.update(num_proc=num_proc, desc=f"fill-in-the-middle (rate {fim_rate})")
    return dataset.map(transform_batch, **kwargs)
