"""What a pre-training run reports beside its text scores: its training and its data.

:func:`train_statistics` (throughput, unigram entropy of the training sample), :func:`record_realized_tokens`
(the streams' counts written into the run's provenance record: tokens per training source, documents passed
over) and :func:`data_figures` (the validation text's identity and the skipped documents, read from that
record). The provenance record is :func:`hf_lmobj.cards.provenance.check_provenance`'s shape.

Example:
    >>> record = {"validation": {"documents": 3, "fingerprint": "0123456789abcdef"}, "held_out_training_documents": 2,
    ...           "skipped_documents": {"training": {"empty": 1}, "validation": {"empty": 0}}}
    >>> data_figures(record)  # doctest: +NORMALIZE_WHITESPACE
    {'validation_documents': 3, 'validation_fingerprint': '0123456789abcdef', 'train_skipped_empty_documents': 1,
     'validation_skipped_empty_documents': 0, 'train_held_out_documents': 2}
"""

from __future__ import annotations

from typing import Any

from hf_lmobj.metrics.token_statistics import unigram_entropy


def train_statistics(train_metrics: dict, train_documents: Any, tokens_seen: int) -> dict[str, float]:
    """Training throughput (tokens per second of the training phase, when ``tokens_seen``: the Trainer's
    ``num_input_tokens_seen``) and the unigram entropy of the report's training sample ``train_documents``."""
    stats = {
        "train_runtime": train_metrics["train_runtime"],
        "train_unigram_entropy": unigram_entropy(train_documents),
    }
    if tokens_seen:
        stats["train_tokens_seen"] = tokens_seen
        stats["train_tokens_per_second"] = tokens_seen / train_metrics["train_runtime"]
    return stats


def record_realized_tokens(provenance: dict, counts: dict[str, int]) -> None:
    """The card's training sources with the tokens each gave, and the documents the streams passed over: written
    into ``provenance``; the counts of documents passed over are taken out of ``counts``."""
    for source in provenance["training"]:
        source["tokens"] = counts.get(f"train_tokens_{source['name']}")
    skipped = provenance["skipped_documents"]["training"]
    for reason in skipped:
        skipped[reason] += counts.pop(f"train_{reason}_documents", 0)
    provenance["held_out_training_documents"] += counts.pop("train_held_out_documents", 0)
    dropped = counts.pop("train_contaminated_documents", 0)
    if "contaminated_training_documents" in provenance:
        provenance["contaminated_training_documents"] += dropped


def data_figures(provenance: dict) -> dict[str, Any]:
    """What metrics.json says of the data: the validation text's identity and the documents skipped."""
    figures: dict[str, Any] = {
        "validation_documents": provenance["validation"]["documents"],
        "validation_fingerprint": provenance["validation"]["fingerprint"],
    }
    for side, skipped in provenance["skipped_documents"].items():
        prefix = "train" if side == "training" else side
        figures.update({f"{prefix}_skipped_{reason}_documents": count for reason, count in skipped.items()})
    figures["train_held_out_documents"] = provenance["held_out_training_documents"]
    if "contaminated_training_documents" in provenance:
        figures["train_contaminated_documents"] = provenance["contaminated_training_documents"]
    return figures
