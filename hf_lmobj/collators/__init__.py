"""Data collators, one public module per objective: causal, masked, span, ul2, text_infilling.

Every collator is a ``DataCollatorMixin`` dataclass called with a list of feature dicts and returning
``torch.Tensor``s a stock ``Trainer`` passes to the model. Shared meanings: ``model=`` (attention
implementation, mask dtype, decoder start token), ``seed`` keys an example's randomness by (seed,
epoch, example) only, ``return_tensors="pt"``, the same feature validation. Two modules here serve
other packages too: ``seeding`` (the per-example randomness) and ``features`` (the feature checks);
the private ones (``_attention``, ``_causal_features``, ``_masking``, ``_noise``) serve the
collators only. Packing has its own package (:mod:`hf_lmobj.packing`), and so has fill-in-the-middle
(:mod:`hf_lmobj.fim`); their collator-facing names (``pack_dataset``, ``DataCollatorForFillInTheMiddle``,
``fim_dataset``, ``FimTokens``) are importable from here as well.

Example:
    >>> from hf_lmobj.collators import DataCollatorForCausalLM, pack_dataset
    >>> DataCollatorForCausalLM.__name__, pack_dataset.__name__
    ('DataCollatorForCausalLM', 'pack_dataset')
"""

from hf_lmobj.collators._noise import compute_input_and_target_lengths
from hf_lmobj.collators.causal import DataCollatorForCausalLM
from hf_lmobj.collators.masked import DataCollatorForMaskedLM
from hf_lmobj.collators.seeding import CollatorEpochCallback
from hf_lmobj.collators.span import DataCollatorForSpanCorruption
from hf_lmobj.collators.text_infilling import DataCollatorForTextInfilling
from hf_lmobj.collators.ul2 import DataCollatorForUL2, Denoiser

# hf_lmobj.fim builds on modules of this package, so this package loads first (as hf_lmobj/__init__.py has it)
from hf_lmobj.fim import DataCollatorForFillInTheMiddle, FimTokens, fim_dataset
from hf_lmobj.packing import pack_dataset

__all__ = [
    "DataCollatorForCausalLM",
    "DataCollatorForMaskedLM",
    "DataCollatorForSpanCorruption",
    "DataCollatorForUL2",
    "Denoiser",
    "DataCollatorForTextInfilling",
    "DataCollatorForFillInTheMiddle",
    "FimTokens",
    "fim_dataset",
    "pack_dataset",
    "CollatorEpochCallback",
    "compute_input_and_target_lengths",
]
