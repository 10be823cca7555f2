"""Fill-in-the-middle (FIM), from the training data to prompts for ``generate()`` and their evaluation.

* :mod:`.format`: the sentinels (found by name in the tokenizer) and the PSM / SPM layouts;
* :mod:`.transform`: ``FimTransform``, the seeded per-document cut and re-ordering;
* :mod:`.collator`: ``DataCollatorForFillInTheMiddle`` (FIM per document, then padded or packed as
  the causal collator does) and ``fim_dataset`` (one epoch's cuts written into a dataset);
* :mod:`.prompting`: ``fim_prompts`` / ``infill``, the training layout up to ``<fim_middle>``;
* :mod:`.healing`: token healing (``heal_prompts``, ``LeadLogitsProcessor``) for prompts that end
  mid-text, as an SPM prompt does;
* :mod:`.evaluation`: single-line infilling (``single_line_cases``, ``evaluate_infilling``);
  :mod:`.report`: a FIM run beside a plain one, from their metrics.

Example:
    >>> from hf_lmobj.fim import FimTokenIds, fim_layout, undo_fim
    >>> ids = FimTokenIds(prefix=1, middle=2, suffix=3)
    >>> fim_layout([10, 11], [20], [30, 31], ids, spm=False)  # PSM: prefix, suffix, then the middle
    [1, 10, 11, 3, 30, 31, 2, 20]
    >>> undo_fim([1, 10, 11, 3, 30, 31, 2, 20], ids)
    [10, 11, 20, 30, 31]
"""

from typing import TYPE_CHECKING

from hf_lmobj.lazy_faces import lazy_face

if TYPE_CHECKING:
    from hf_lmobj.fim.collator import DataCollatorForFillInTheMiddle, fim_dataset
    from hf_lmobj.fim.evaluation import (
        INFILLING_MODES,
        InfillingCase,
        InfillingResult,
        edit_similarity,
        evaluate_infilling,
        single_line_cases,
    )
    from hf_lmobj.fim.format import FIM_TOKENS, FimTokenIds, FimTokens, fim_layout, fim_token_ids, undo_fim
    from hf_lmobj.fim.healing import LeadLogitsProcessor, heal_prompts
    from hf_lmobj.fim.prompting import fim_prompt_ids, fim_prompts, infill
    from hf_lmobj.fim.report import best_infill, comparison_lines
    from hf_lmobj.fim.transform import FIM_LEVELS, FimTransform

__all__ = [
    # the layout
    "FIM_TOKENS",
    "FimTokens",
    "FimTokenIds",
    "fim_token_ids",
    "fim_layout",
    "undo_fim",
    # training data
    "FIM_LEVELS",
    "FimTransform",
    "DataCollatorForFillInTheMiddle",
    "fim_dataset",
    # generation
    "fim_prompts",
    "fim_prompt_ids",
    "infill",
    "heal_prompts",
    "LeadLogitsProcessor",
    # evaluation
    "INFILLING_MODES",
    "InfillingCase",
    "InfillingResult",
    "single_line_cases",
    "evaluate_infilling",
    "edit_similarity",
    "best_infill",
    "comparison_lines",
]

__getattr__, __dir__ = lazy_face(__name__, __all__)
