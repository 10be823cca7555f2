"""Names shared by the whole package.

Example:
    >>> from hf_lmobj.constants import IGNORE_INDEX, round_up
    >>> IGNORE_INDEX, round_up(5, 8), round_up(16, 8), round_up(5, None)
    (-100, 8, 16, 5)
"""

from __future__ import annotations

IGNORE_INDEX = -100  # a label that is not trained (PyTorch's cross_entropy default, Hugging Face's convention)


def round_up(value: int, multiple: int | None) -> int:
    """``value`` rounded up to a multiple of ``multiple`` (unchanged when ``multiple`` is None)."""
    if not multiple:
        return value
    return -(-value // multiple) * multiple
