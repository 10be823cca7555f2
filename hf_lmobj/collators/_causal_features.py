"""A batch of causal-LM features read into one flat token stream and its documents, checked.

Each feature is one document (``{"input_ids": [...]}``, optional ``labels`` / ``attention_mask``)
or one pre-packed row of several documents whose boundaries come with it, in any of three forms:

* ``attention_mask`` numbering the row's documents (:data:`MASK_FIRST_NUMBERS`): ``2, 2, 2, 3, 3``
  as :func:`~hf_lmobj.packing.dataset.pack_dataset` writes it (numbered from 2, so that even a
  one-document row reads as packed), or ``1, 1, 1, 2, 2`` (axolotl's convention). Every
  ``transformers`` language model takes ``attention_mask``, so a stock ``Trainer`` keeps it with
  ``remove_unused_columns=True``: the boundaries reach the collator, which turns them into
  ``position_ids`` (and ``labels``) and never hands the numbers to the model. An ``attention_mask``
  of 0s and 1s only is an ordinary mask (1 = real token, 0 = padding).
* ``seq_lengths``: the row's document lengths (TRL's ``pack_dataset``; ours writes them too);
* ``position_ids`` restarting at 0 per document.

A row that carries two of them must give the same documents. Every column is read and checked
element by element with :func:`hf_lmobj.checks.id_column` (one C-level pass for plain Python
lists); its errors name the feature and the field.

Example:
    >>> flat = read_features([{"input_ids": [5, 6]}, {"input_ids": [7, 8, 9], "position_ids": [0, 0, 1]}],
    ...                      vocab_size=10)
    >>> flat.ids.tolist(), flat.doc_starts.tolist(), flat.doc_lengths.tolist(), flat.packed_features.tolist()
    ([5, 6, 7, 8, 9], [0, 2, 3], [2, 1, 2], [False, True])
    >>> flat = read_features([{"input_ids": [5, 6, 7], "attention_mask": [2, 3, 3]}], vocab_size=10)
    >>> flat.doc_lengths.tolist(), flat.packed_features.tolist(), flat.valid is None
    ([1, 2], [True], True)
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from hf_lmobj.checks import check_column_range, id_column, id_sequence
from hf_lmobj.collators.features import check_feature_mapping, numbered_features
from hf_lmobj.constants import IGNORE_INDEX

BOUNDARY_KEYS = ("position_ids", "seq_lengths")  # explicit boundaries; a numbered attention_mask is the third form
MASK_FIRST_NUMBERS = (1, 2)  # a numbered attention_mask starts at 1 (axolotl) or 2 (pack_dataset)
_MASK_FORMS = "0 (padding), 1 (a real token) or a packed row's document numbers (1, 2, ... or 2, 3, ...)"


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
    explicit = np.fromiter((any(f.get(k) is not None for k in BOUNDARY_KEYS) for f in features), bool, len(features))
    numbered, mask_starts = _numbered_rows(features, masks, lengths)
    packed = explicit | numbered
    starts = _document_starts(features, explicit, numbered, mask_starts, lengths)  # (D,) flat, before BOS/EOS
    valid = None if masks is None or masks.all() else masks != 0
    single = ~packed
    add_bos = single & (bos_token_id is not None) & (ids[_starts(lengths)] != (bos_token_id or 0))
    add_eos = single & (eos_token_id is not None) & (ids[_starts(lengths) + lengths - 1] != (eos_token_id or 0))
    old_lengths = lengths
    if add_bos.any() or add_eos.any():
        ids, labels, valid, lengths = _add_special(
            ids, labels, valid, lengths, add_bos, add_eos, bos_token_id, eos_token_id
        )
    owner = np.searchsorted(np.cumsum(old_lengths), starts, side="right")  # (D,)
    starts = starts - _starts(old_lengths)[owner] + _starts(lengths)[owner]  # packed rows gain no token
    doc_lengths = np.diff(np.append(starts, lengths.sum()))  # documents tile the stream in order
    return FlatFeatures(ids, labels, valid, lengths, starts, doc_lengths, owner, packed)


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


# ----------------------------------------------------------------------------- boundaries
def _numbered_rows(
    features: Sequence[Mapping], masks: np.ndarray | None, lengths: np.ndarray
) -> tuple[np.ndarray, np.ndarray | None]:
    """Which features number their documents in ``attention_mask`` (some value > 1), checked.

    Returns ``(numbered, starts)``: (F,) bool, and (N,) bool True at the first token of every
    feature and of every document of a numbered feature (None when no feature is numbered).
    """
    numbered = np.zeros(lengths.size, dtype=bool)
    if masks is None:
        return numbered, None
    first_token = _starts(lengths)  # (F,)
    negative = np.flatnonzero(masks < 0)
    if negative.size:
        raise _mask_error(negative[0], lengths, masks, f"attention_mask must hold {_MASK_FORMS}")
    numbered = numbered_features(masks, lengths)  # (F,)
    if not numbered.any():
        return numbered, None
    inside = np.repeat(numbered, lengths)  # (N,) token of a numbered feature
    zeros = np.flatnonzero(inside & (masks == 0))
    if zeros.size:
        raise _mask_error(
            zeros[0], lengths, masks,
            "attention_mask numbers this packed row's documents but holds 0 (padding); a packed row has no "
            "padding: pack with pack_dataset (rows of at most max_length, never padded)",
        )  # fmt: skip
    first = masks[first_token]  # (F,)
    wrong_start = np.flatnonzero(numbered & ~np.isin(first, MASK_FIRST_NUMBERS))
    if wrong_start.size:
        index = int(wrong_start[0])
        raise ValueError(
            f"feature {index}: attention_mask numbers a packed row's documents from {int(first[index])}; number "
            "them 1, 2, ... (or 2, 3, ..., as pack_dataset does) from the row's first token"
        )
    step = np.diff(masks)  # (N-1,) step t-1 -> t
    within = inside[1:].copy()
    within[first_token[1:] - 1] = False  # the step into the next feature
    wrong_step = np.flatnonzero(within & (step != 0) & (step != 1))
    if wrong_step.size:
        at = int(wrong_step[0]) + 1
        raise _mask_error(
            at, lengths, masks,
            f"attention_mask document numbers must stay or go up by 1 (the next document), got {int(masks[at])} "
            f"after {int(masks[at - 1])}",
        )  # fmt: skip
    for index in np.flatnonzero(numbered & (first == 1)).tolist():  # 1s and 0s only may be bools: refuse them
        id_sequence(features[index]["attention_mask"], "attention_mask", f"feature {index}")
    starts = np.zeros(masks.size, dtype=bool)
    starts[1:] = within & (step == 1)
    starts[first_token] = True
    return numbered, starts


def _mask_error(position: int, lengths: np.ndarray, masks: np.ndarray, what: str) -> ValueError:
    index = _feature_of(int(position), lengths)
    offset = int(position) - int(_starts(lengths)[index])
    return ValueError(f"feature {index}: {what} (value {int(masks[position])} at offset {offset})")


def _document_starts(
    features: Sequence[Mapping],
    explicit: np.ndarray,
    numbered: np.ndarray,
    mask_starts: np.ndarray | None,
    lengths: np.ndarray,
) -> np.ndarray:
    """(D,) flat index of the first token of every document, in stream order: one per plain
    feature, one per document of a pre-packed row. A row with two forms of boundaries must agree."""
    first_token = _starts(lengths)
    starts = np.zeros(int(lengths.sum()), dtype=bool) if mask_starts is None else mask_starts.copy()
    starts[first_token] = True
    if explicit.any():
        given = _explicit_starts(features, explicit, lengths)  # (N,) bool
        both = np.repeat(explicit & numbered, lengths)
        differs = np.flatnonzero(both & (given != starts))
        if differs.size:
            index = _feature_of(int(differs[0]), lengths)
            raise ValueError(
                f"feature {index}: its attention_mask numbers documents of lengths "
                f"{_sizes(starts, lengths, index)} but its {_explicit_key(features[index])} gives "
                f"{_sizes(given, lengths, index)}; a packed row's boundaries must agree (re-pack it with pack_dataset)"
            )
        starts |= given
    return np.flatnonzero(starts)


def _sizes(starts: np.ndarray, lengths: np.ndarray, index: int) -> list[int]:
    begin = int(_starts(lengths)[index])
    local = np.flatnonzero(starts[begin : begin + int(lengths[index])])
    return np.diff(np.append(local, lengths[index])).tolist()


def _explicit_key(feature: Mapping) -> str:
    return "position_ids" if feature.get("position_ids") is not None else "seq_lengths"


def _explicit_starts(features: Sequence[Mapping], explicit: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """(N,) bool: True at every document start of the features carrying ``seq_lengths`` / ``position_ids``."""
    which = np.flatnonzero(explicit)  # (W,)
    first_token = _starts(lengths)
    local = _seq_length_documents(features, which, lengths)
    if local is None:  # per row: the error names the feature and the fault
        local = [_row_documents(features[i], i, int(lengths[i])) for i in which.tolist()]
        counts = np.fromiter(map(len, local), np.int64, len(local))
        local = np.concatenate(local), counts
    sizes, counts = local  # (D,), (W,)
    row_first = np.cumsum(counts) - counts  # (W,) first document of each row among the D
    within = np.cumsum(sizes) - sizes  # (D,) tokens before each document, over all rows
    within -= np.repeat(within[row_first], counts)
    starts = np.zeros(int(lengths.sum()), dtype=bool)
    starts[np.repeat(first_token[which], counts) + within] = True
    return starts


def _seq_length_documents(
    features: Sequence[Mapping], which: np.ndarray, lengths: np.ndarray
) -> tuple[np.ndarray, np.ndarray] | None:
    """Document sizes and counts of rows ``which`` in one pass when they all carry valid ``seq_lengths``
    (pipeline and pack_dataset rows); None when any row's are off or a row has position_ids."""
    chosen = [features[i] for i in which.tolist()]
    if any(f.get("position_ids") is not None for f in chosen):
        return None
    try:
        sizes, counts = id_column([f["seq_lengths"] for f in chosen], "seq_lengths")  # (D,), (W,)
    except (TypeError, ValueError):
        return None
    if (
        not counts.all()
        or (sizes <= 0).any()
        or (np.add.reduceat(sizes, np.cumsum(counts) - counts) != lengths[which]).any()
    ):
        return None
    return sizes, counts


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
    if sizes.size == 0:
        raise ValueError(f"feature {index}: seq_lengths is empty; it must list the row's document lengths")
    if (sizes <= 0).any():
        raise ValueError(f"feature {index}: seq_lengths must be positive, got {sizes.tolist()}")
    if int(sizes.sum()) != length:
        raise ValueError(f"feature {index}: seq_lengths sum to {int(sizes.sum())}, not {length}")
    return sizes


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
