"""Evaluating a causal LM on held-out text, the parts a script of one's own calls: what the recipes run.

* the documents (:mod:`.documents`): a dataset's evaluation texts, each with its domain;
* validation (:mod:`.validation`): held-out text scored into per-document sums, the figures per domain with
  intervals; the loss by position (:mod:`.loss_positions`);
* several processes (:mod:`.shards`): each scores its share, the gathered rows give the corpus figures;
  what is refused before scoring (:mod:`.preflight`);
* contamination (:mod:`.training_locations`, :mod:`.contamination_scans`): training data named by location,
  or a run's own training tokens, scanned for the evaluation documents' n-grams;
* what a run is read against and reports (:mod:`.baseline_figures`, :mod:`.run_figures`, :mod:`.report_lines`).
"""

from typing import TYPE_CHECKING

from hf_lmobj.lazy_faces import lazy_face

if TYPE_CHECKING:
    from hf_lmobj.evaluation.baseline_figures import baseline_bits_per_byte
    from hf_lmobj.evaluation.contamination_scans import scan_sources, training_contamination
    from hf_lmobj.evaluation.documents import EvalDocuments, score_documents
    from hf_lmobj.evaluation.shards import byte_gap_shard, corpus_figures, score_shard
    from hf_lmobj.evaluation.validation import sliced_figures, validation_figures, validation_sums

__all__ = [
    "EvalDocuments",
    "baseline_bits_per_byte",
    "byte_gap_shard",
    "corpus_figures",
    "scan_sources",
    "score_documents",
    "score_shard",
    "sliced_figures",
    "training_contamination",
    "validation_figures",
    "validation_sums",
]

__getattr__, __dir__ = lazy_face(__name__, __all__)
