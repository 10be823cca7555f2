"""Pack a whole tokenized dataset into rows of ``max_length`` once, before training.

:func:`pack_dataset` works on a ``datasets.Dataset`` (``Dataset.map``, cached like any map) and on
a streaming ``datasets.IterableDataset`` (lazily, holding at most ``buffer_size`` documents at a
time). Each output row carries ``input_ids`` (plus ``labels`` when the input has them) and
``position_ids`` restarting at 0 for each document, so
:class:`~hf_lmobj.collators.causal.DataCollatorForCausalLM` keeps the documents isolated.
``position_ids`` is an argument of every causal LM's ``forward``, so ``Trainer``'s
``remove_unused_columns`` keeps it.

Two strategies, neither drops a token:

* ``"best_fit"`` (default): best-fit-decreasing of each buffer's documents into rows of *at most*
  ``max_length``; a document is split only when it is longer than ``max_length``.
* ``"fixed"``: documents back to back, cut every ``max_length`` tokens: every row is *exactly*
  ``max_length`` long except the last row of each buffer; a document crossing a row end continues
  in the next row as a new chunk (positions restart, nothing is conditioned across rows).

Other columns (``text``, ``num_bytes``, ...) describe documents, not rows, and are removed.

Example:
    >>> import datasets
    >>> ds = datasets.Dataset.from_dict({"input_ids": [[1, 2, 3], [4, 5], [6, 7, 8, 9]]})
    >>> packed = pack_dataset(ds, max_length=5)
    >>> packed.to_dict()
    {'input_ids': [[6, 7, 8, 9], [1, 2, 3, 4, 5]], 'position_ids': [[0, 1, 2, 3], [0, 1, 2, 0, 1]]}
    >>> pack_dataset(ds, max_length=4, strategy="fixed").to_dict()["input_ids"]
    [[1, 2, 3, 4], [5, 6, 7, 8], [9]]
"""

from __future__ import annotations

import itertools
from typing import Any, Sequence, TypeVar

import datasets

from hf_lmobj.collators.causal_packing import IGNORE_INDEX, Span, pack_spans

STRATEGIES = ("best_fit", "fixed")
DatasetT = TypeVar("DatasetT", datasets.Dataset, datasets.IterableDataset)


def fixed_rows(lengths: Sequence[int], max_length: int) -> list[list[Span]]:
    """Documents back to back cut every ``max_length`` tokens; spans index the concatenation.

    Example:
        >>> fixed_rows([3, 2, 4], max_length=4)
        [[(0, 3), (3, 1)], [(4, 1), (5, 3)], [(8, 1)]]
    """
    rows: list[list[Span]] = [[]]
    room, start = max_length, 0
    for length in lengths:
        while length:
            if room == 0:
                rows.append([])
                room = max_length
            take = min(room, length)
            rows[-1].append((start, take))
            start, length, room = start + take, length - take, room - take
    return rows if rows[-1] else rows[:-1]


def pack_documents(
    documents: Sequence[Sequence[int]],
    max_length: int,
    labels: Sequence[Sequence[int]] | None = None,
    strategy: str = "best_fit",
) -> dict[str, list[list[int]]]:
    """Pack token lists into rows: ``input_ids``, ``position_ids`` (and ``labels`` if given).

    A chunk that continues a document gets label -100 at its first token (it has no prefix in
    its row), as the collator would give it anyway.

    Example:
        >>> pack_documents([[1, 2, 3], [4, 5]], max_length=3)["position_ids"]
        [[0, 1, 2], [0, 1]]
    """
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    lengths = [len(doc) for doc in documents]
    if labels is not None and [len(row) for row in labels] != lengths:
        raise ValueError("labels must have the same length as input_ids in every document")
    if strategy == "best_fit":
        offsets = [0, *itertools.accumulate(lengths)][:-1]
        rows = pack_spans(list(zip(offsets, lengths)), max_length)
    else:
        rows = fixed_rows(lengths, max_length)
    flat_ids = [token for doc in documents for token in doc]
    flat_labels = None if labels is None else [label for row in labels for label in row]
    out: dict[str, list[list[int]]] = {"input_ids": [], "position_ids": []}
    if flat_labels is not None:
        out["labels"] = []
    for row in rows:
        out["input_ids"].append([t for start, n in row for t in flat_ids[start : start + n]])
        out["position_ids"].append([p for _, n in row for p in range(n)])
        if flat_labels is not None:
            out["labels"].append(
                [IGNORE_INDEX if i == 0 else flat_labels[start + i] for start, n in row for i in range(n)]
            )
    return out


def _column_names(dataset: datasets.Dataset | datasets.IterableDataset) -> list[str]:
    """Column names, peeking at the first example of a stream whose features are unknown."""
    if dataset.column_names is not None:
        return list(dataset.column_names)
    first = next(iter(dataset), None)
    return [] if first is None else list(first)


def pack_dataset(
    dataset: DatasetT,
    max_length: int,
    buffer_size: int = 1000,
    strategy: str = "best_fit",
    num_proc: int | None = None,
) -> DatasetT:
    """Rows of ``max_length`` (see the module docstring) from a tokenized dataset's documents.

    Args:
        dataset: a ``Dataset`` or ``IterableDataset`` with an ``input_ids`` column (one document
            per row) and optionally ``labels`` aligned with it.
        max_length: row length; longer documents are split into chunks.
        buffer_size: documents packed together (the map batch size); for a stream, the most
            documents held in memory. Larger buffers pack tighter.
        strategy: ``"best_fit"`` (rows of at most ``max_length``) or ``"fixed"`` (exactly).
        num_proc: worker processes for ``Dataset.map`` (ignored for streams).
    """
    if not isinstance(max_length, int) or max_length <= 0:
        raise ValueError(f"max_length must be a positive int, got {max_length!r}")
    if not isinstance(buffer_size, int) or buffer_size <= 0:
        raise ValueError(f"buffer_size must be a positive int, got {buffer_size!r}")
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")
    columns = _column_names(dataset)
    if columns and "input_ids" not in columns:
        raise ValueError(f"dataset has no 'input_ids' column (columns: {columns}); tokenize it first")
    if "position_ids" in columns or "seq_lengths" in columns:
        raise ValueError("dataset is already packed (it has position_ids / seq_lengths)")

    def pack(batch: dict[str, list[Any]]) -> dict[str, list[list[int]]]:
        return pack_documents(batch["input_ids"], max_length, batch.get("labels"), strategy)

    kwargs: dict[str, Any] = {"batched": True, "batch_size": buffer_size, "remove_columns": columns}
    if isinstance(dataset, datasets.Dataset):
        kwargs.update(num_proc=num_proc, desc=f"pack into rows of {max_length}")
    return dataset.map(pack, **kwargs)
