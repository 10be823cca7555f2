"""A batch of causal-LM features read into one flat token stream and its documents, checked.

Each feature is one document (``{"input_ids": [...]}``, optional ``labels`` / ``attention_mask``)
or one pre-packed row of several documents whose boundaries come with it (``position_ids``
restarting at 0 per document, or ``seq_lengths``). Every column is read and checked element by
element with :func:`hf_lmobj.validation.id_column` (one C-level pass for plain Python lists); its
errors name the feature and the field.

A row packed by :func:`~hf_lmobj.packing.dataset.pack_dataset` carries ``seq_lengths``
only: a row that lost that column on the way (a stock ``Trainer`` with ``remove_unused_columns=True``)
looks like one document and cannot be told apart. A row whose ``attention_mask`` numbers its
documents 1, 2, ... is refused when it arrives without ``position_ids``.

Example:
    >>> flat = read_features([{"input_ids": [5, 6]}, {"input_ids": [7, 8, 9], "position_ids": [0, 0, 1]}],
    ...                      vocab_size=10)
    >>> flat.ids.tolist(), flat.doc_starts.tolist(), flat.doc_lengths.tolist(), flat.packed_features.tolist()
    ([5, 6, 7, 8, 9], [0, 2, 3], [2, 1, 2], [False, True])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hf_lmobj.collators.features import check_feature_mapping
from hf_lmobj.constants import IGNORE_INDEX
from hf_lmobj.validation import check_column_range, id_column, id_sequence

__all__ = ["BOUNDARY_KEYS", "FlatFeatures", "read_features", "document_lengths_from_position_ids"]

BOUNDARY_KEYS = ("position_ids", "seq_lengths")


@dataclass(frozen=True)
class FlatFeatures:
    """Every feature's tokens back to back, and the documents they hold."""

    ids: np.ndarray  # (N,) int64
    labels: np.ndarray  # (N,) int64: the feature's labels, else its ids
    valid: np.ndarray | None  # (N,) bool from the features' attention_mask; None = all real
    feature_lengths: np.ndarray  # (F,) tokens per feature
    doc_starts: np.ndarray  # (D,) flat index of each document's first token
    doc_lengths: np.ndarray  # (D,)
    doc_feature: np.ndarray  # (D,) the feature each document came from
    packed_features: np.ndarray  # (F,) bool: the feature is a pre-packed row (carried its boundaries)

    @property
    def prepacked(self) -> bool:
        """Some feature is a pre-packed row."""
        return bool(self.packed_features.any())


def read_features(
    features: Sequence[Any],
    vocab_size: int,
    bos_token_id: int | None = None,
    eos_token_id: int | None = None,
) -> FlatFeatures:
    """Read and check ``features``; put BOS first / EOS last in single-document features lacking them.

    ``bos_token_id`` / ``eos_token_id`` None: add nothing. Raises ``TypeError`` / ``ValueError``
    naming the feature, the field and the fix.
    """
    if len(features) == 0:
        raise ValueError("empty batch: the collator needs at least one feature")
    for index, feature in enumerate(features):
        check_feature_mapping(feature, index)
    ids, lengths = id_column([f["input_ids"] for f in features], "input_ids")
    if not lengths.all():
        raise ValueError(f"feature {int(np.argmin(lengths))}: input_ids is empty; filter out empty documents first")
    check_column_range(ids, lengths, vocab_size)
    labels = _labels(features, ids, lengths, vocab_size)
    masks = _aligned(features, "attention_mask", lengths)
    packed = np.fromiter((any(f.get(k) is not None for k in BOUNDARY_KEYS) for f in features), bool, len(features))
    if masks is not None:
        _check_boundaries_kept(masks, lengths, packed)
    valid = None if masks is None or masks.all() else masks != 0
    single = ~packed
    add_bos = single & (bos_token_id is not None) & (ids[_starts(lengths)] != (bos_token_id or 0))
    add_eos = single & (eos_token_id is not None) & (ids[_starts(lengths) + lengths - 1] != (eos_token_id or 0))
    if add_bos.any() or add_eos.any():
        ids, labels, valid, lengths = _add_special(
            ids, labels, valid, lengths, add_bos, add_eos, bos_token_id, eos_token_id
        )
    starts, doc_lengths, doc_feature = _documents(features, packed, lengths)
    return FlatFeatures(ids, labels, valid, lengths, starts, doc_lengths, doc_feature, packed)


def _starts(lengths: np.ndarray) -> np.ndarray:
    return np.cumsum(lengths) - lengths


def _feature_of(position: int, lengths: np.ndarray) -> int:
    return int(np.searchsorted(np.cumsum(lengths), position, side="right"))


def _aligned(features: Sequence[Mapping], name: str, lengths: np.ndarray) -> np.ndarray | None:
    """A per-token column as long as input_ids (flat), or None when no feature has it.

    Features without it get ``fill``: ones for ``attention_mask``.
    """
    present = [f.get(name) is not None for f in features]
    if not any(present):
        return None
    if all(present):
        flat, got = id_column([f[name] for f in features], name, allow_bool=True)
    else:
        rows = [f[name] if p else [1] * int(n) for f, p, n in zip(features, present, lengths.tolist())]
        flat, got = id_column(rows, name, allow_bool=True)
    mismatch = np.flatnonzero(got != lengths)
    if mismatch.size:
        index = int(mismatch[0])
        raise ValueError(
            f"feature {index}: {name} has length {int(got[index])} but input_ids has "
            f"{int(lengths[index])}; {name} must align with input_ids"
        )
    return flat


def _labels(features: Sequence[Mapping], ids: np.ndarray, lengths: np.ndarray, vocab: int) -> np.ndarray:
    present = [f.get("labels") is not None for f in features]
    if not any(present):
        return ids.copy()
    if all(present):  # one pass; an error names the feature by its index in the batch
        flat, got = id_column([f["labels"] for f in features], "labels")
    else:
        flat, got = _indexed(features, present)
    which = np.flatnonzero(present)  # (P,) features that bring labels
    mismatch = np.flatnonzero(got != lengths[which])
    if mismatch.size:
        index = int(which[mismatch[0]])
        raise ValueError(
            f"feature {index}: labels has length {int(got[mismatch[0]])} but input_ids has "
            f"{int(lengths[index])}; labels must align with input_ids (-100 = not trained)"
        )
    bad = np.flatnonzero((flat != IGNORE_INDEX) & ((flat < 0) | (flat >= vocab)))
    if bad.size:
        index = int(which[_feature_of(int(bad[0]), got)])
        raise ValueError(f"feature {index}: labels must be -100 or in [0, {vocab})")
    labels = ids.copy()
    starts = _starts(lengths)[which]  # (P,)
    dest = np.repeat(starts - _starts(got), got) + np.arange(flat.size)  # (sum got,)
    labels[dest] = flat
    return labels


def _indexed(features: Sequence[Mapping], present: list[bool]) -> tuple[np.ndarray, np.ndarray]:
    """The labels of the features that have them, read one by one (errors name the feature)."""
    arrays = [id_sequence(f["labels"], "labels", f"feature {i}") for i, f in enumerate(features) if present[i]]
    return np.concatenate(arrays), np.fromiter((a.size for a in arrays), np.int64, len(arrays))


def _check_boundaries_kept(masks: np.ndarray, lengths: np.ndarray, packed: np.ndarray) -> None:
    """Refuse a row whose attention_mask numbers several documents (older pack_dataset rows) but
    that carries no boundaries: its position_ids were lost on the way."""
    several = np.flatnonzero(masks > 1)
    if not several.size:
        return
    feature_of = np.searchsorted(np.cumsum(lengths), several, side="right")  # (K,)
    lost = feature_of[~packed[feature_of]]
    if lost.size:
        raise ValueError(
            f"feature {int(lost[0])} is a packed row (its attention_mask numbers several documents, as "
            "older pack_dataset versions wrote it) but carries no position_ids, so its documents would "
            "attend to each other. Something dropped that column: a stock Trainer does with "
            "remove_unused_columns=True when the model's forward takes no position_ids. Set "
            "remove_unused_columns=False to keep position_ids (or re-pack with pack_dataset, which writes "
            "seq_lengths); a model whose forward takes none (Bloom, MPT, Mamba, RWKV, XLNet, ...) cannot "
            "isolate packed documents at all: train it on unpacked rows (packing=False)"
        )


def _add_special(ids, labels, valid, lengths, add_bos, add_eos, bos, eos) -> tuple[np.ndarray, ...]:
    """Insert BOS before / EOS after the flagged features (labels: -100 for BOS, EOS for EOS)."""
    starts = _starts(lengths)
    eos_at, bos_at = (starts + lengths)[add_eos], starts[add_bos]
    at = np.concatenate([eos_at, bos_at])  # insertion points in the old stream
    # one feature's EOS and the next one's BOS share a point: EOS goes first
    order = np.lexsort((np.repeat([0, 1], [eos_at.size, bos_at.size]), at))
    id_values = np.repeat([eos or 0, bos or 0], [eos_at.size, bos_at.size])[order]
    label_values = np.repeat([eos or 0, IGNORE_INDEX], [eos_at.size, bos_at.size])[order]
    at = at[order]
    ids, labels = np.insert(ids, at, id_values), np.insert(labels, at, label_values)
    if valid is not None:
        valid = np.insert(valid, at, True)
    return ids, labels, valid, lengths + add_bos + add_eos


def _documents(features: Sequence[Mapping], packed: np.ndarray, lengths: np.ndarray) -> tuple[np.ndarray, ...]:
    """(starts, lengths, feature) of every document: one per plain feature, several per packed row."""
    feature_starts = _starts(lengths)
    if not packed.any():
        return feature_starts, lengths.copy(), np.arange(lengths.size)
    if packed.all() and all(f.get("position_ids") is None for f in features):
        fast = _seq_length_documents(features, lengths)
        if fast is not None:
            return fast
    starts, sizes, owner = [], [], []
    for index in range(lengths.size):
        if not packed[index]:
            starts.append(feature_starts[index : index + 1])
            sizes.append(lengths[index : index + 1])
            owner.append(np.full(1, index))
            continue
        local = _row_documents(features[index], index, int(lengths[index]))  # (d,) sizes
        starts.append(feature_starts[index] + np.cumsum(local) - local)
        sizes.append(local)
        owner.append(np.full(local.size, index))
    return np.concatenate(starts), np.concatenate(sizes), np.concatenate(owner)


def _seq_length_documents(features: Sequence[Mapping], lengths: np.ndarray) -> tuple[np.ndarray, ...] | None:
    """``_documents`` in one pass for rows that all carry valid ``seq_lengths`` (pipeline and pack_dataset
    rows); None when any row's are off (the per-row reading then names the feature and the fault)."""
    try:
        sizes, counts = id_column([f["seq_lengths"] for f in features], "seq_lengths")  # (D,), (F,)
    except (TypeError, ValueError):
        return None
    if not counts.all() or (sizes <= 0).any() or (np.add.reduceat(sizes, _starts(counts)) != lengths).any():
        return None
    return np.cumsum(sizes) - sizes, sizes, np.repeat(np.arange(lengths.size), counts)  # documents tile the rows


def _row_documents(feature: Mapping, index: int, length: int) -> np.ndarray:
    """Document lengths of one pre-packed row, from its position_ids or seq_lengths."""
    if feature.get("position_ids") is not None:
        positions = id_sequence(feature["position_ids"], "position_ids", f"feature {index}")  # (L,)
        if positions.size != length:
            raise ValueError(f"feature {index}: position_ids length differs from input_ids")
        try:
            return document_lengths_from_position_ids(positions)
        except ValueError as error:
            raise ValueError(f"feature {index}: {error}") from None
    sizes = id_sequence(feature["seq_lengths"], "seq_lengths", f"feature {index}")
    if (sizes <= 0).any():
        raise ValueError(f"feature {index}: seq_lengths must be positive, got {sizes.tolist()}")
    if int(sizes.sum()) != length:
        raise ValueError(f"feature {index}: seq_lengths sum to {int(sizes.sum())}, not {length}")
    return sizes


def document_lengths_from_position_ids(positions: np.ndarray) -> np.ndarray:
    """Lengths of the documents of one row whose positions restart at 0 per document.

    Raises ``ValueError`` unless positions restart at 0 for each document and count up by one.

    Example:
        >>> document_lengths_from_position_ids(np.array([0, 1, 2, 0, 1, 0])).tolist()
        [3, 2, 1]
    """
    pos = np.asarray(positions, dtype=np.int64)  # (L,)
    bad = np.flatnonzero((pos[1:] != 0) & (pos[1:] != pos[:-1] + 1)) + 1
    if pos.size and pos[0] != 0:
        bad = np.concatenate([[0], bad])
    if bad.size:
        offset = int(bad[0])
        previous = "the row start" if offset == 0 else int(pos[offset - 1])
        raise ValueError(
            "position_ids must restart at 0 for each document and count up by 1 "
            f"(got {int(pos[offset])} after {previous} at offset {offset})"
        )
    starts = np.flatnonzero(pos == 0)  # (D,)
    return np.diff(np.append(starts, pos.size))
