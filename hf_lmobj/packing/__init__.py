"""Packing: several documents back to back in one row, none attending to another, no token dropped.

* :mod:`.bins`: chunking and best-fit-decreasing bin packing of document lengths into rows;
* :mod:`.masks`: where a row's documents are, in the forms a model takes (document ids from
  ``position_ids``, the 4D block mask, flash-attention's ``cu_seq_lens``);
* :mod:`.rows`: the row layout of a batch (which chunk goes to which row at which offset) and
  the assembled tensors, behind ``DataCollatorForCausalLM``;
* :mod:`.dataset`: ``pack_dataset``, a whole tokenized dataset packed once before training (each row's
  documents numbered in its ``attention_mask`` (int16; int32 past rows of 32,766), which a stock
  ``Trainer`` keeps). The numbers are not a 0/1 mask: the rows are for ``DataCollatorForCausalLM``,
  which turns them into ``position_ids`` / masks, never for a model's ``forward`` directly or another
  collator (``DataCollatorForLanguageModeling``, ``default_data_collator``);
* :mod:`.pieces`: documents cut into pieces that fit a row, before a per-document transform.

Example:
    >>> import datasets
    >>> from hf_lmobj.packing import pack_dataset
    >>> ds = datasets.Dataset.from_dict({"input_ids": [[1, 2, 3], [4, 5], [6, 7, 8, 9]]})
    >>> pack_dataset(ds, max_length=5).to_dict()  # doctest: +NORMALIZE_WHITESPACE
    {'input_ids': [[6, 7, 8, 9], [1, 2, 3, 4, 5]], 'attention_mask': [[2, 2, 2, 2], [2, 2, 2, 3, 3]],
     'seq_lengths': [[4], [3, 2]]}
"""

from typing import TYPE_CHECKING

from hf_lmobj.lazy_faces import lazy_face

if TYPE_CHECKING:
    from hf_lmobj.packing.bins import best_fit_decreasing, best_fit_placement, chunk_lengths, packing_efficiency
    from hf_lmobj.packing.dataset import STRATEGIES, pack_dataset, pack_documents
    from hf_lmobj.packing.masks import block_attention_mask, document_ids_from_position_ids, flash_attention_kwargs
    from hf_lmobj.packing.pieces import document_pieces, split_documents
    from hf_lmobj.packing.rows import Layout, PackingStats, pack_layout, packing_stats

__all__ = [
    # bins
    "chunk_lengths",
    "best_fit_decreasing",
    "best_fit_placement",
    "packing_efficiency",
    # masks
    "document_ids_from_position_ids",
    "block_attention_mask",
    "flash_attention_kwargs",
    # rows
    "Layout",
    "PackingStats",
    "pack_layout",
    "packing_stats",
    # datasets and documents
    "STRATEGIES",
    "pack_dataset",
    "pack_documents",
    "document_pieces",
    "split_documents",
]

__getattr__, __dir__ = lazy_face(__name__, __all__)
