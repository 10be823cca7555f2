"""The pre-training data pipeline: source -> per-document transform -> mix -> rows -> collator.

* sources (:mod:`.sources`, :mod:`.random_access`): a streamed ``datasets.IterableDataset`` of text, a
  tokenized in-memory ``Dataset``, a token store (:mod:`hf_lmobj.store`: memory-mapped token files + document index);
* rows (:mod:`.block_rows`): packed rows (causal) or pieces (masked, span), from document lengths;
* mix (:mod:`.mixture`): several sources by token weights;
* the stream (:mod:`.pipeline`): collated batches of one rank, planned (random access: exactly
  once, any world size) or streamed (each rank and worker its own slice);
* the loader (:mod:`.loader`): the ``DataLoader`` over it, ranks kept in step;
* the one route every run takes (:mod:`.run_sources`, :mod:`.run_tokenizer`, :mod:`.prepare_run`).
"""

from typing import TYPE_CHECKING

from hf_lmobj.lazy_faces import lazy_face

if TYPE_CHECKING:
    from hf_lmobj.data.block_rows import RowFormat
    from hf_lmobj.data.loader import PipelineLoader
    from hf_lmobj.data.mixture import TokenMixer
    from hf_lmobj.data.pipeline import PretrainingStream, ghost_batch
    from hf_lmobj.data.random_access import DatasetSource
    from hf_lmobj.data.sources import TextStream

__all__ = [
    "PipelineLoader",
    "PretrainingStream",
    "RowFormat",
    "DatasetSource",
    "TextStream",
    "TokenMixer",
    "ghost_batch",
]

__getattr__, __dir__ = lazy_face(__name__, __all__)
