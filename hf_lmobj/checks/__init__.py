"""The checks of what users pass in: one function per kind of input, shared by every entry point.

Kinds of input and their checks:

* **token ids** (:func:`id_sequence` for one sequence, :func:`id_column` for a batch of them,
  :func:`check_id_range`, :func:`check_token_id`): ints of any Python / numpy / torch integer
  type; every element is checked, bools, floats, strings and ``None`` are refused;
* **label tensors** (:func:`check_labels`): integer class indices in ``[0, num_classes)`` or
  ``ignore_index``, of the expected shape;
* **counts** (:func:`check_count`, :func:`check_counts`, :func:`check_nll_sums`): whole numbers
  such as ``num_items_in_batch`` or a metric's ``num_tokens``, checked before anything casts them;
* **real parameters** (:func:`check_number`, :func:`check_per_row`): probabilities, temperatures,
  loss coefficients; finite, in their interval, scalars or one value per batch row;
* **lengths** (:func:`check_length`): ``max_length``, ``input_length``, ``stride``, ...: ints no
  smaller than what the objective needs, the minimum and its reason named in the error;
* **flags** (:func:`check_flag`): ``True`` / ``False``, never a truthy string.

Each check returns the value in its normal form or raises ``TypeError`` (the wrong kind of value)
or ``ValueError`` (the right kind, a wrong value), with a message that names the field, the value
and the fix. Entry points call them where the input enters, so that nothing malformed reaches
torch, numpy or ``evaluate``. The checks live in :mod:`~hf_lmobj.checks.ids` (token ids, labels)
and :mod:`~hf_lmobj.checks.values` (the rest), all importable from here; they need the standard
library, numpy and torch only.

Example:
    >>> from hf_lmobj.checks import check_length, id_sequence
    >>> check_length(512, "max_length", minimum=2)
    512
    >>> check_length(1, "max_length", minimum=2, why="a token and the next one")
    Traceback (most recent call last):
    ...
    ValueError: max_length must be an int >= 2 (a token and the next one), got 1
    >>> id_sequence([300, True], "input_ids", "feature 0")
    Traceback (most recent call last):
    ...
    TypeError: feature 0: input_ids must be a 1D list of ints, got a bool at position 1
"""

from typing import TYPE_CHECKING

from hf_lmobj.lazy_faces import lazy_face

if TYPE_CHECKING:
    from hf_lmobj.checks.ids import (
        check_column_range,
        check_id_range,
        check_labels,
        check_token_id,
        id_column,
        id_sequence,
    )
    from hf_lmobj.checks.values import (
        SEED_LIMIT,
        check_count,
        check_counts,
        check_flag,
        check_has_targets,
        check_length,
        check_name,
        check_nll_sums,
        check_num_items_in_batch,
        check_number,
        check_per_row,
        check_return_tensors,
        check_seed,
        check_unique_names,
        check_weights,
    )

__all__ = [
    # token ids and labels (.ids)
    "id_sequence",
    "id_column",
    "check_id_range",
    "check_column_range",
    "check_token_id",
    "check_labels",
    # the other values (.values)
    "SEED_LIMIT",
    "check_count",
    "check_counts",
    "check_nll_sums",
    "check_num_items_in_batch",
    "check_number",
    "check_per_row",
    "check_length",
    "check_flag",
    "check_name",
    "check_seed",
    "check_weights",
    "check_unique_names",
    "check_has_targets",
    "check_return_tensors",
]

__getattr__, __dir__ = lazy_face(__name__, __all__)
