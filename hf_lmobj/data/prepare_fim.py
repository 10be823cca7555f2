"""The fill-in-the-middle arguments of pre-training, and what a FIM run's rows must fit.

The pre-training recipe parses :class:`FimArguments` and trains a causal LM with FIM when
``fim_rate > 0`` (see ``recipes/configs/causal/fim_demo.yaml``); its texts go through
:class:`~hf_lmobj.data.transforms.FimPieces` on the run's one data path (:mod:`hf_lmobj.data.prepare_run`):

1. each document is tokenized once and cut into *pieces* of ``max_length - 10`` tokens (the
   pieces' tokens are the document's, sliced; the last piece is shorter), so that a FIM'd piece
   (3 sentinels, BOS, EOS and a token or two of re-encoding at the cuts) nearly always fits one
   row and its middle is trained with its prefix and suffix in view: context-level FIM in
   Bavarian et al.'s terms, never a span across documents (the rare FIM'd piece that re-encodes
   longer than a row is split like any long document, nothing dropped). As in plain CLM, only a
   document's first piece starts with BOS and only its last ends with EOS: a piece from inside a
   file opens mid-text, like a row of whole-file packing and like the scoring windows after a
   file's first (a BOS on every piece cost 4.5% bits per byte at 2,000 steps, ``fim_experiments.md``);
2. the seeded FIM transform rewrites ``fim_rate`` of the pieces (keyed by the piece's tokens: the same cut on any
   rank, worker or resume);
3. the pipeline packs them into full rows, which the plain
   :class:`~hf_lmobj.collators.causal.DataCollatorForCausalLM` batches (documents isolated).

The infilling report of such a run (the ``infill_*`` fields) is the recipes' (``recipes/report/infilling.py``).

Example:
    >>> FimArguments(fim_rate=0.5).infill_cases  # a FIM run evaluates infilling by default
    200
    >>> FimArguments().infill_cases  # a plain run only when asked
    0
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from hf_lmobj.checks import SEED_LIMIT, check_name
from hf_lmobj.fim.transform import FIM_LEVELS, check_rate
from hf_lmobj.objectives import get_objective

DEFAULT_INFILL_CASES = 200  # infilling cases of a FIM run when infill_cases is not given
MIN_PIECE_TOKENS = 4  # a piece never ends inside a character: up to 4 byte-level tokens each
PIECE_SLACK = 10  # a row keeps room for BOS, 3 sentinels, EOS and up to 5 tokens of re-encoding at the cuts
#: Prompt tokens :func:`~hf_lmobj.fim.evaluation.evaluate_infilling` needs after ``max_new_tokens`` (its own floor).
INFILL_MIN_PROMPT_TOKENS = 8


@dataclass
class FimArguments:
    """Fill-in-the-middle training and the single-line infilling report (causal objective)."""

    #: The YAML config section of these fields (hf_lmobj.config): ``fim: {...}``.
    SECTION: ClassVar[str] = "fim"

    fim_rate: float = field(default=0.0, metadata={"help": "Share of pieces FIM'd (0 = plain CLM; StarCoder 0.5)."})
    fim_spm_rate: float = field(default=0.5, metadata={"help": "Share of FIM'd pieces in SPM rather than PSM order."})
    fim_level: str = field(default="char", metadata={"help": f"Where cuts fall: one of {FIM_LEVELS}."})
    infill_cases: int | None = field(
        default=None,
        metadata={
            "help": "Single-line infilling cases (validation); 0 = none; None = 200 for a FIM run, 0 for a plain one."
        },
    )
    infill_seed: int = field(default=0, metadata={"help": "Seed of the sample of infilling cases."})
    infill_max_new_tokens: int = field(default=48, metadata={"help": "Generation budget per infilling case."})
    fim_baseline_metrics: str | None = field(
        default=None, metadata={"help": "metrics.json of a plain CLM run to print beside this one."}
    )

    def __post_init__(self) -> None:
        self.fim_rate = check_rate("fim_rate", self.fim_rate)
        self.fim_spm_rate = check_rate("fim_spm_rate", self.fim_spm_rate)
        if self.infill_cases is None:
            self.infill_cases = DEFAULT_INFILL_CASES if self.fim_rate > 0 else 0
        if self.fim_level not in FIM_LEVELS:
            raise ValueError(f"fim_level must be one of {FIM_LEVELS}, got {self.fim_level!r}")
        for name, least in (("infill_cases", 0), ("infill_seed", 0), ("infill_max_new_tokens", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"{name} must be an int >= {least}, got {value!r}")
        if self.infill_seed >= SEED_LIMIT:
            raise ValueError(f"infill_seed must be an int in [0, 2**32) (numpy's seed range), got {self.infill_seed}")
        self.fim_baseline_metrics = check_name(self.fim_baseline_metrics, "fim_baseline_metrics", optional=True)
        _check_baseline_file(self.fim_baseline_metrics)


def _check_baseline_file(path: str | None) -> None:
    """A ``fim_baseline_metrics`` file that exists must be a metrics.json (a JSON mapping); a missing one is
    allowed (the report then says how to make it)."""
    if path is None or not Path(path).exists():
        return
    try:
        baseline = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"fim_baseline_metrics {path} is not a metrics.json a run wrote: {error}") from None
    if not isinstance(baseline, dict):
        raise ValueError(f"fim_baseline_metrics {path} must hold a JSON mapping of metric: value (a metrics.json)")


def check_fim_fits(fim_args: FimArguments, objective: str, max_length: int) -> None:
    """FIM and infilling against the run they ride on, before any data: both need packed next-token rows (causal); a FIM
    piece needs rows longer than :data:`PIECE_SLACK`; the infilling prompts need
    :data:`INFILL_MIN_PROMPT_TOKENS` of ``max_length`` after ``infill_max_new_tokens``.

    Example:
        >>> check_fim_fits(FimArguments(fim_rate=0.5, infill_max_new_tokens=48), "causal", 32)
        Traceback (most recent call last):
        ...
        ValueError: infilling needs max_length - infill_max_new_tokens >= 8 prompt tokens, but max_length 32 - infill_max_new_tokens 48 leaves -16; lower infill_max_new_tokens (to <= 24), raise max_length or set infill_cases 0
    """
    if "fim" not in get_objective(objective).variants:  # FIM rides on packed next-token rows (causal)
        asked = [
            f"{name} {getattr(fim_args, name)}" for name in ("fim_rate", "infill_cases") if getattr(fim_args, name)
        ]
        if asked:
            raise ValueError(
                f"{' and '.join(asked)}: fill-in-the-middle and the infilling report are for causal LMs; "
                f"objective must be 'causal', got {objective!r} (or set fim_rate 0 and infill_cases 0)"
            )
        return
    if fim_args.fim_rate > 0 and max_length - PIECE_SLACK < MIN_PIECE_TOKENS:
        raise ValueError(
            f"fim_rate > 0 cuts documents into pieces of max_length - {PIECE_SLACK} tokens, at least "
            f"{MIN_PIECE_TOKENS} (one UTF-8 character can take 4 byte-level tokens); max_length {max_length} leaves "
            f"{max_length - PIECE_SLACK}: raise max_length to >= {PIECE_SLACK + MIN_PIECE_TOKENS}"
        )
    budget = max_length - fim_args.infill_max_new_tokens
    if fim_args.infill_cases and budget < INFILL_MIN_PROMPT_TOKENS:
        raise ValueError(
            f"infilling needs max_length - infill_max_new_tokens >= {INFILL_MIN_PROMPT_TOKENS} prompt tokens, but "
            f"max_length {max_length} - infill_max_new_tokens {fim_args.infill_max_new_tokens} leaves {budget}; "
            f"lower infill_max_new_tokens (to <= {max_length - INFILL_MIN_PROMPT_TOKENS}), raise max_length "
            "or set infill_cases 0"
        )
