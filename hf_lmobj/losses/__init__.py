"""Token-mean cross-entropy losses, exact under gradient accumulation and data parallelism.

:mod:`.functional` holds the objective losses on logits; :mod:`.linear_cross_entropy` the chunked
head + cross-entropy that never holds the full ``[tokens, vocab]`` logits (its chunks :mod:`.head_chunks`);
:mod:`.vocab_parallel` the loss under tensor parallelism; :mod:`.targets` what an objective's loss scores
(``objective_targets``) and how many (``count_targets``).

Example:
    >>> import torch
    >>> from hf_lmobj.losses import linear_cross_entropy
    >>> h, w = torch.randn(6, 8), torch.randn(11, 8)
    >>> t = torch.tensor([1, 2, -100, 4, 5, 6])
    >>> ref = torch.nn.functional.cross_entropy(h @ w.T, t)
    >>> bool(torch.allclose(linear_cross_entropy(h, w, t), ref, atol=1e-5))
    True
"""

from typing import TYPE_CHECKING

from hf_lmobj.lazy_faces import lazy_face

if TYPE_CHECKING:
    from hf_lmobj.losses.functional import causal_lm_loss, masked_lm_loss, seq2seq_lm_loss
    from hf_lmobj.losses.linear_cross_entropy import linear_cross_entropy, linear_token_losses

__all__ = ["causal_lm_loss", "masked_lm_loss", "seq2seq_lm_loss", "linear_cross_entropy", "linear_token_losses"]

__getattr__, __dir__ = lazy_face(__name__, __all__)
