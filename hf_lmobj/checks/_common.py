"""What the two kinds of checks share: the location prefix of a message and the bool test."""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

#: The bool types refused where a number is expected (``True`` is an ``int`` to Python).
BOOLS = (bool, np.bool_)


def where_prefix(where: str) -> str:
    return f"{where}: " if where else ""


def is_bool(value: Any) -> bool:
    return isinstance(value, BOOLS) or (isinstance(value, torch.Tensor) and value.dtype == torch.bool)
