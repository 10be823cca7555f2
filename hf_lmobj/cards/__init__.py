"""Model cards from a run's results: ``README.md`` rendered from ``model_cards/``, a loss curve, ``.eval_results/``.

:mod:`.writer` (``write_model_card``, ``plot_loss_curve``, ``write_eval_results``), :mod:`.data`
(what the card says, as data: model-index results, tags, versions) and :mod:`.provenance` (the run's data
record the card names: training sources, validation text, tokenizer, skipped documents). Every recipe writes its card
through it, and so can a user's own ``ObjectiveTrainer`` script. Rendering needs ``jinja2`` and the
plot ``matplotlib`` (the ``[recipes]`` extra); importing this package needs neither.

Example:
    >>> from hf_lmobj.cards import split_metrics
    >>> results, other = split_metrics({"eval_perplexity": 7.4, "train_runtime": 12.0})
    >>> sorted(results), sorted(other)
    (['eval_perplexity'], ['train_runtime'])
"""

from typing import TYPE_CHECKING

from hf_lmobj.lazy_faces import lazy_face

if TYPE_CHECKING:
    from hf_lmobj.cards.data import (
        build_card_data,
        check_results,
        left_out_results,
        split_metrics,
    )
    from hf_lmobj.cards.eval_results import eval_results_entries
    from hf_lmobj.cards.provenance import Provenance, check_provenance
    from hf_lmobj.cards.writer import (
        LEFT_OUT_LINE,
        LOSS_CURVE_NAME,
        plot_loss_curve,
        write_eval_results,
        write_model_card,
    )

__all__ = [
    "write_model_card",
    "plot_loss_curve",
    "write_eval_results",
    "LOSS_CURVE_NAME",
    "LEFT_OUT_LINE",
    "split_metrics",
    "left_out_results",
    "check_results",
    "build_card_data",
    "eval_results_entries",
    "check_provenance",
    "Provenance",
]

__getattr__, __dir__ = lazy_face(__name__, __all__)
