"""Token-level figures of a dataset or a model's targets: unigram entropy and target accuracy.

:func:`unigram_entropy` is the loss of a model that ignores context (the floor a pre-trained model
must beat by a wide margin); :func:`target_token_accuracy` is the share of target positions a
model's argmax gets right (masked positions for MLM, every target token for span corruption).

Example:
    >>> import datasets
    >>> round(unigram_entropy(datasets.Dataset.from_dict({"input_ids": [[1, 2], [1, 1]]})), 4)
    0.5623
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import datasets
import numpy as np
import torch

from hf_lmobj.metrics.scoring import full_vocab_logits, model_vocab_size

if TYPE_CHECKING:
    from transformers import PreTrainedModel


@torch.no_grad()
def target_token_accuracy(model: PreTrainedModel, dataset: datasets.Dataset, collator, batch_size: int = 16) -> float:
    """Share of target (label != -100) positions whose argmax prediction is the label.

    Masked LM: the selected positions, predicted from the corrupted input. Span corruption: every
    target token (sentinels, span tokens, EOS), predicted under teacher forcing from the corrupted
    input and the true target prefix. Batches are collated by ``collator`` (pass a fresh, seeded one
    for comparable figures).
    """
    was_training = model.training
    model.eval()
    correct = total = 0
    vocab = model_vocab_size(model)
    for start in range(0, dataset.num_rows, batch_size):
        batch = collator([dataset[i] for i in range(start, min(start + batch_size, dataset.num_rows))])
        batch = {k: v.to(model.device) for k, v in batch.items() if isinstance(v, torch.Tensor)}
        labels = batch.pop("labels")  # (B, T)
        selected = labels != -100  # (B, T)
        logits = full_vocab_logits(model(**batch).logits, vocab)  # (B, T, V): tensor-parallel heads gathered
        predictions = logits.argmax(-1)  # (B, T)
        correct += int((predictions[selected] == labels[selected]).sum())
        total += int(selected.sum())
    model.train(was_training)
    return correct / max(total, 1)


def unigram_entropy(dataset: datasets.Dataset, column: str = "input_ids") -> float:
    """Entropy (nats per token) of the token frequencies of ``dataset``: the loss of a model that ignores context.

    Example:
        >>> round(unigram_entropy(datasets.Dataset.from_dict({"input_ids": [[1, 2], [1, 1]]})), 4)  # 3/4, 1/4
        0.5623
    """
    flat = dataset.with_format("arrow")[column].combine_chunks().flatten().to_numpy()
    counts = np.bincount(flat)
    p = counts[counts > 0] / flat.size
    return float(-(p * np.log(p)).sum())
