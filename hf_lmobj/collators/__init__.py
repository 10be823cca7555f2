"""Data collators, one public module per objective, and ``pack_dataset`` for offline packing.

Every collator is a ``DataCollatorMixin`` dataclass called with a list of feature dicts and returning
``torch.Tensor``s a stock ``Trainer`` passes to the model. Shared meanings: ``model=`` (attention
implementation, mask dtype, decoder start token), ``seed`` keys an example's randomness by (seed,
epoch, example) only, ``return_tensors="pt"``, the same feature validation. The kernels other packages
share are public modules (``packing``: bin packing and per-document masks; ``rows``: the row layout;
``seeding``; ``fim_format`` and ``fim_transform``); the private ones (``_attention``, ``_masking``,
``_noise``, ``_features``, ...) serve the collators only.

Example:
    >>> from hf_lmobj.collators import DataCollatorForCausalLM, pack_dataset
    >>> DataCollatorForCausalLM.__name__, pack_dataset.__name__
    ('DataCollatorForCausalLM', 'pack_dataset')
"""

from hf_lmobj.collators._noise import compute_input_and_target_lengths
from hf_lmobj.collators.bart import DataCollatorForTextInfilling
from hf_lmobj.collators.causal import DataCollatorForCausalLM
from hf_lmobj.collators.dataset_packing import pack_dataset
from hf_lmobj.collators.fim import DataCollatorForFillInTheMiddle, fim_dataset
from hf_lmobj.collators.fim_format import FimTokens
from hf_lmobj.collators.masked import DataCollatorForMaskedLM
from hf_lmobj.collators.seeding import CollatorEpochCallback
from hf_lmobj.collators.span import DataCollatorForSpanCorruption
from hf_lmobj.collators.ul2 import DataCollatorForUL2, Denoiser

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
