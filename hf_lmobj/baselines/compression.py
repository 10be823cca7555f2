"""Bits per byte of general-purpose compressors: the baseline a language model should beat.

A model's bits per byte (total NLL / ln 2 / UTF-8 bytes) and a compressor's compressed bits per
input byte measure the same thing: how many bits it takes to encode the text. The texts are
joined as they are (no separator) and compressed as one stream.

Example:
    >>> rates = compression_bits_per_byte(["def f(x):\\n    return x\\n" * 50])
    >>> sorted(rates), rates["xz -9e"] < 1.0
    (['bz2 -9', 'xz -9e', 'zlib -9'], True)
"""

from __future__ import annotations

import bz2
import lzma
import zlib
from collections.abc import Callable, Sequence

COMPRESSORS: dict[str, Callable[[bytes], bytes]] = {
    "zlib -9": lambda data: zlib.compress(data, 9),
    "bz2 -9": lambda data: bz2.compress(data, 9),
    "xz -9e": lambda data: lzma.compress(data, preset=9 | lzma.PRESET_EXTREME),
}


def compression_bits_per_byte(texts: Sequence[str]) -> dict[str, float]:
    """Compressed bits per UTF-8 byte of ``texts`` for each compressor in :data:`COMPRESSORS`."""
    data = "".join(texts).encode("utf-8")
    if not data:
        raise ValueError("texts are empty: bits per byte needs at least one byte")
    return {name: len(compress(data)) * 8 / len(data) for name, compress in COMPRESSORS.items()}
