"""hf_lmobj: causal, masked and span-corruption objectives for the Hugging Face stack.

Example:
    >>> import hf_lmobj
    >>> hf_lmobj.compute_input_and_target_lengths(512, 0.15, 3.0)
    (568, 114)
"""

from hf_lmobj.collators.causal import DataCollatorForCausalLM
from hf_lmobj.collators.fim import DataCollatorForFillInTheMiddle, fim_dataset
from hf_lmobj.collators.fim_format import FimTokens
from hf_lmobj.collators.masked import DataCollatorForMaskedLM
from hf_lmobj.collators.span import DataCollatorForSpanCorruption
from hf_lmobj.collators.span_noise import compute_input_and_target_lengths
from hf_lmobj.generation.fim_prompting import fim_prompts, infill
from hf_lmobj.infilling_eval import evaluate_infilling, single_line_cases
from hf_lmobj.losses import causal_lm_loss, linear_cross_entropy, masked_lm_loss, seq2seq_lm_loss
from hf_lmobj.sampling import SamplingLogitsProcessor
from hf_lmobj.trainer import ObjectiveTrainer

__version__ = "0.1.0"

__all__ = [
    "DataCollatorForCausalLM",
    "DataCollatorForMaskedLM",
    "DataCollatorForSpanCorruption",
    "compute_input_and_target_lengths",
    "causal_lm_loss",
    "masked_lm_loss",
    "seq2seq_lm_loss",
    "linear_cross_entropy",
    "ObjectiveTrainer",
    "SamplingLogitsProcessor",
    "DataCollatorForFillInTheMiddle",
    "fim_dataset",
    "FimTokens",
    "fim_prompts",
    "infill",
    "single_line_cases",
    "evaluate_infilling",
]
