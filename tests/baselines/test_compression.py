import random

import pytest

from hf_lmobj.baselines.compression import compression_bits_per_byte


def test_compressors_rank_redundant_text_below_random_bytes():
    rng = random.Random(0)
    noise = "".join(chr(rng.randrange(33, 127)) for _ in range(20000))
    redundant = compression_bits_per_byte(["x = 1\n" * 5000])
    random_rates = compression_bits_per_byte([noise])
    assert all(redundant[k] < 0.1 for k in redundant)
    # 94 equiprobable symbols carry log2(94) = 6.55 bits; no compressor beats that bound
    assert all(6.5 < random_rates[k] < 8.5 for k in random_rates)
    with pytest.raises(ValueError, match="empty"):
        compression_bits_per_byte([""])
