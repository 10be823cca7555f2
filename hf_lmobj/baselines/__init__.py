"""What a language model must beat, in bits per byte: general-purpose compressors and a Kneser-Ney n-gram.

:mod:`.compression` (``compression_bits_per_byte``: zlib, bz2, xz on the same bytes) and :mod:`.ngram`
(``KneserNeyLM``: interpolated modified Kneser-Ney over token ids, numpy only). A report that
gives a model's bits per byte beside these shows what the network learned beyond counting.

Example:
    >>> from hf_lmobj.baselines import KneserNeyLM
    >>> from hf_lmobj.baselines import compression_bits_per_byte
    >>> lm = KneserNeyLM.fit([[0, 1, 2, 3] * 20], order=3, vocab_size=4)
    >>> import math  # 3 predicted tokens, a quarter of the uniform guess's 3 ln 4 nats
    >>> lm.sequence_nll([[0, 1, 2, 3]])[0] < 3 * math.log(4) / 4, sorted(compression_bits_per_byte(["abc" * 100]))
    (True, ['bz2 -9', 'xz -9e', 'zlib -9'])
"""

from typing import TYPE_CHECKING

from hf_lmobj.lazy_faces import lazy_face

if TYPE_CHECKING:
    from hf_lmobj.baselines.compression import COMPRESSORS, compression_bits_per_byte
    from hf_lmobj.baselines.ngram import KneserNeyLM, flatten_sequences, modified_kn_discounts

__all__ = ["COMPRESSORS", "compression_bits_per_byte", "KneserNeyLM", "flatten_sequences", "modified_kn_discounts"]

__getattr__, __dir__ = lazy_face(__name__, __all__)
