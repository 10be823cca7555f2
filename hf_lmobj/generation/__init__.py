"""Decoding: the ``LogitsProcessor`` sampler (:mod:`.sampling`: temperature, top-k, top-p, min-p).

Fill-in-the-middle prompts and token healing live in :mod:`hf_lmobj.fim` (``fim_prompts``,
``infill``, ``heal_prompts``, ``LeadLogitsProcessor``).

Example:
    >>> from hf_lmobj.generation import sampling_generate_kwargs
    >>> kwargs = sampling_generate_kwargs(temperature=0.7, top_p=0.9)
    >>> type(kwargs["logits_processor"][0]).__name__
    'SamplingLogitsProcessor'
"""

from typing import TYPE_CHECKING

from hf_lmobj.lazy_faces import lazy_face

if TYPE_CHECKING:
    from hf_lmobj.generation.sampling import SamplingLogitsProcessor, sampling_generate_kwargs

__all__ = [
    "SamplingLogitsProcessor",
    "sampling_generate_kwargs",
]

__getattr__, __dir__ = lazy_face(__name__, __all__)
