"""Data collators, one public module per objective: causal, masked, span, ul2, text_infilling.

Every collator is a ``DataCollatorMixin`` dataclass called with a list of feature dicts and returning
``torch.Tensor``s a stock ``Trainer`` passes to the model. Shared meanings: ``model=`` (attention
implementation, mask dtype, decoder start token), ``seed`` keys an example's randomness by (seed,
epoch, example) only, ``return_tensors="pt"``, the same feature validation. Two modules here serve
other packages too: ``seeding`` (the per-example randomness) and ``features`` (the feature checks);
the private ones (``_attention``, ``_causal_features``, ``_masking``, ``_noise``) serve the
collators only. Packing has its own package (:mod:`hf_lmobj.packing`: ``pack_dataset``), and so has
fill-in-the-middle (:mod:`hf_lmobj.fim`: ``DataCollatorForFillInTheMiddle``, ``fim_dataset``, ``FimTokens``).

Example:
    >>> from hf_lmobj.collators import DataCollatorForCausalLM, DataCollatorForMaskedLM
    >>> DataCollatorForCausalLM.__name__, DataCollatorForMaskedLM.__name__
    ('DataCollatorForCausalLM', 'DataCollatorForMaskedLM')
"""

from typing import TYPE_CHECKING

from hf_lmobj.lazy_faces import lazy_face

if TYPE_CHECKING:
    from hf_lmobj.collators._noise import compute_input_and_target_lengths
    from hf_lmobj.collators.causal import DataCollatorForCausalLM
    from hf_lmobj.collators.epoch_callback import CollatorEpochCallback
    from hf_lmobj.collators.masked import DataCollatorForMaskedLM
    from hf_lmobj.collators.span import DataCollatorForSpanCorruption
    from hf_lmobj.collators.text_infilling import DataCollatorForTextInfilling
    from hf_lmobj.collators.ul2 import DataCollatorForUL2, Denoiser

__all__ = [
    "DataCollatorForCausalLM",
    "DataCollatorForMaskedLM",
    "DataCollatorForSpanCorruption",
    "DataCollatorForUL2",
    "Denoiser",
    "DataCollatorForTextInfilling",
    "CollatorEpochCallback",
    "compute_input_and_target_lengths",
]

__getattr__, __dir__ = lazy_face(__name__, __all__)
