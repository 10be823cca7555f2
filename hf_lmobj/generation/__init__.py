"""Decoding: the ``LogitsProcessor`` sampler (:mod:`.sampling`), fill-in-the-middle prompts (:mod:`.fim_prompting`)
and token healing (:mod:`.token_healing`).

Example:
    >>> from hf_lmobj.generation import sampling_generate_kwargs
    >>> kwargs = sampling_generate_kwargs(temperature=0.7, top_p=0.9)
    >>> type(kwargs["logits_processor"][0]).__name__
    'SamplingLogitsProcessor'
"""

from hf_lmobj.generation.fim_prompting import fim_prompts, infill
from hf_lmobj.generation.sampling import SamplingLogitsProcessor, sampling_generate_kwargs
from hf_lmobj.generation.token_healing import LeadLogitsProcessor, heal_prompts

__all__ = [
    "SamplingLogitsProcessor",
    "sampling_generate_kwargs",
    "fim_prompts",
    "infill",
    "LeadLogitsProcessor",
    "heal_prompts",
]
