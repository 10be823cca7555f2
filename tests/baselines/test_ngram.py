"""Interpolated modified Kneser-Ney: a hand-worked bigram model, normalisation, back-off, sequence bounds."""

import numpy as np
import pytest

from hf_lmobj.baselines.ngram import KneserNeyLM, flatten_sequences, modified_kn_discounts


def probs(lm, sequences, order=None):
    return np.exp(lm.log_probs(sequences, order))


def test_hand_worked_bigram():
    # Training: [0 1 2 1] and [0 2], vocabulary of 4 (token 3 never seen). Every count-of-count
    # estimate is undefined on so little data, so the fallback discounts D1=0.5, D2=1.0 apply.
    # Unigram continuation counts: 0 opens both sequences (2), 1 follows {0, 2} (2), 2 follows {1, 0} (2):
    #   p1(w) = (2 - D2 + 3 * D2 / 4) / 6 = 1.75 / 6 for w in {0, 1, 2};  p1(3) = 0.75 / 6.
    # Bigram raw counts (top order): (0,1) (1,2) (2,1) (0,2), each once:
    #   p2(1|0) = (1 - 0.5 + 2 * 0.5 * p1(1)) / 2;  p2(2|1) = (1 - 0.5 + 0.5 * p1(2)) / 1;
    #   p2(3|0) = 2 * 0.5 * p1(3) / 2;  context 3 is unseen, so p2(1|3) = p1(1).
    lm = KneserNeyLM.fit([[0, 1, 2, 1], [0, 2]], order=2, vocab_size=4)
    p1 = 1.75 / 6
    expected = [(0.5 + p1) / 2, 0.5 + 0.5 * p1, 0.125 / 2, p1]
    np.testing.assert_allclose(probs(lm, [[0, 1, 2], [0, 3, 1]]), expected, rtol=1e-12)
    # order=1: the unigram alone; the first token of each sequence is context only, never scored
    np.testing.assert_allclose(probs(lm, [[0, 1, 3]], order=1), [p1, 0.125], rtol=1e-12)


def test_continuation_counts_replace_raw_counts_below_the_top_order():
    # "b" (1) is frequent but always after "a" (0): as a unigram it has one left extension only.
    lm = KneserNeyLM.fit([[0, 1, 0, 1, 0, 1, 0, 1, 2, 3]], order=2, vocab_size=4)
    unigram = lm.orders[0]
    assert unigram.raw.tolist() == [4, 4, 1, 1]
    assert unigram.continuation.tolist() == [2, 1, 1, 1]  # 0 opens the sequence and follows 1


@pytest.mark.parametrize("top", [1, 2, 3, 4])
def test_every_distribution_sums_to_one(top):
    rng = np.random.default_rng(0)
    sequences = [[0, *rng.integers(1, 12, rng.integers(1, 80)).tolist()] for _ in range(60)]
    lm = KneserNeyLM.fit(sequences, order=4, vocab_size=14)  # ids 12, 13 never occur
    contexts = [[0], [0, 5], [0, 5, 7], [0, 5, 7, 9], [0, 13, 5, 6], sequences[3][:6], sequences[7][-3:]]
    for context in contexts:
        total = sum(probs(lm, [[*context, w]], order=top)[-1] for w in range(14))
        assert total == pytest.approx(1.0, abs=1e-12)


def test_ngrams_never_span_two_sequences():
    lm = KneserNeyLM.fit([[0, 1], [2, 3]], order=2, vocab_size=4)
    assert lm.orders[1].keys.size == 2  # (0,1) and (2,3); no (1,2)


def test_sequence_nll_sums_log_probs_per_sequence():
    lm = KneserNeyLM.fit([[0, 1, 2, 1], [0, 2]], order=3, vocab_size=4)
    sequences = [[0, 1, 2, 1], [0], [0, 2]]
    logp = lm.log_probs(sequences)
    assert logp.size == 4
    assert lm.sequence_nll(sequences) == pytest.approx([-logp[:3].sum(), 0.0, -logp[3]])


def test_modified_discounts_and_fallback():
    counts = np.array([1] * 40 + [2] * 20 + [3] * 10 + [4] * 5)
    np.testing.assert_allclose(modified_kn_discounts(counts), [0, 0.5, 1.25, 2.0])
    np.testing.assert_allclose(modified_kn_discounts(np.array([1, 1, 2])), [0, 0.5, 1.0, 1.5])


def test_flatten_and_bad_inputs():
    tokens, position = flatten_sequences([[4], [5, 6]])
    assert tokens.tolist() == [4, 5, 6] and position.tolist() == [0, 0, 1]
    with pytest.raises(ValueError, match="order must be at least 1"):
        KneserNeyLM.fit([[0, 1]], order=0, vocab_size=2)
    with pytest.raises(ValueError, match=r"token ids must be in \[0, 2\)"):
        KneserNeyLM.fit([[0, 2]], order=2, vocab_size=2)
    lm = KneserNeyLM.fit([[0, 1]], order=2, vocab_size=2)
    with pytest.raises(ValueError, match=r"order must be in \[1, 2\]"):
        lm.log_probs([[0, 1]], order=3)
