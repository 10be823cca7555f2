"""Contamination: which evaluation documents a run's training data holds, by shared n-grams (exact hits).

* :mod:`.index` (:class:`ContaminationIndex`): the evaluation documents' n-grams, a scan of training sources,
  and the pipeline's filter of contaminated training documents (``drop_contaminated``);
* :mod:`.ngrams`: the n-gram table under it; :mod:`.sources`: each kind of training source read as its units;
* :mod:`.report` (:class:`ContaminationReport`): per evaluation document the share of its n-grams seen.
"""

from typing import TYPE_CHECKING

from hf_lmobj.lazy_faces import lazy_face

if TYPE_CHECKING:
    from hf_lmobj.contamination.index import ContaminationIndex
    from hf_lmobj.contamination.report import ContaminationReport

__all__ = ["ContaminationIndex", "ContaminationReport"]

__getattr__, __dir__ = lazy_face(__name__, __all__)
