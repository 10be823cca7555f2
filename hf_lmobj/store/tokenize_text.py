"""Tokenizing raw text into a token store: :func:`tokenize_to_token_store`.

Each text is sorted before it is tokenized: an empty or whitespace-only text is skipped (counted),
a text the held-out rule (:class:`~hf_lmobj.held_out.HeldOut`, by content hash) picks goes to
``held_out.jsonl``, every other one is tokenized and stored with its content hash, unless it gives
fewer than 2 tokens (skipped, counted as ``one_token``: nothing to predict). A ``datasets.Dataset``
is tokenized in ``num_proc`` processes (contiguous shards, joined in order: the bytes do not depend
on ``num_proc``), a streamed ``IterableDataset`` in one; the store is written, checked and renamed
into place by :mod:`hf_lmobj.store.writer`.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import warnings
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import datasets
    from transformers import PreTrainedTokenizerBase

from hf_lmobj.checks import check_flag, check_length, check_name
from hf_lmobj.held_out import DEFAULT_VALIDATION_FRACTION, HeldOut, content_hash, text_problem
from hf_lmobj.store.files import _as_path
from hf_lmobj.store.token_store import TokenStore
from hf_lmobj.store.tokenizer import _check_origin, _save_tokenizer, _tokenizer_meta
from hf_lmobj.store.writer import _atomic_folder, _TokenWriter


def _text_batches(
    dataset: datasets.Dataset | datasets.IterableDataset, text_column: str, batch_size: int, first_row: int = 0
) -> Iterator[list[str]]:
    """The texts of ``text_column`` in batches, in order; a missing column or a value that is not a string is
    refused, the row named (``first_row`` is the index of the dataset's first row in the whole corpus)."""
    names = dataset.column_names
    if names is not None:
        if text_column not in names:
            raise ValueError(f"the dataset has no column {text_column!r} (has {names}); set text_column=")
        dataset = dataset.select_columns([text_column])
    row = first_row
    for batch in dataset.iter(batch_size=batch_size):
        if text_column not in batch:
            raise ValueError(f"the dataset has no column {text_column!r} (has {list(batch)}); set text_column=")
        texts = batch[text_column]
        for index, text in enumerate(texts):
            if not isinstance(text, str):
                raise TypeError(
                    f"column {text_column!r} must hold strings: row {row + index} holds {type(text).__name__} "
                    f"({str(text)[:40]!r}); fix that row or choose another text_column"
                )
        row += len(texts)
        yield texts


def training_texts(
    dataset: datasets.Dataset | datasets.IterableDataset,
    text_column: str = "text",
    validation_fraction: float = DEFAULT_VALIDATION_FRACTION,
    batch_size: int = 1000,
    held_out_texts: Sequence[str] = (),
) -> Iterator[str]:
    """The texts of ``dataset`` in order, less those the held-out rule picks and those equal to one of
    ``held_out_texts`` (a named validation split): a tokenizer's training side.

    Give it to :func:`hf_lmobj.corpus.train_tokenizer` (which reads a bounded sample and leaves out empty
    texts). A ``datasets.Dataset`` or a streamed ``IterableDataset``; only what is consumed is read.

    Example:
        >>> import datasets
        >>> list(training_texts(datasets.Dataset.from_dict({"text": ["a", "b", "c"]}), validation_fraction=0.5))
        ['b']
    """
    rule = _rule(validation_fraction, held_out_texts)
    text_column = check_name(text_column, "text_column")
    batch_size = check_length(batch_size, "batch_size", 1, "texts read per step")
    for texts in _text_batches(dataset, text_column, batch_size):
        yield from (text for text in texts if not rule.holds_out(content_hash(text)))


def _rule(validation_fraction: float, held_out_texts: Sequence[str]) -> HeldOut:
    """The held-out rule of a store: the share by content hash, and the named validation texts."""
    if isinstance(held_out_texts, str) or not all(isinstance(text, str) for text in held_out_texts):
        raise TypeError("held_out_texts must be a sequence of strings (a named validation split's texts)")
    return HeldOut(validation_fraction, frozenset(content_hash(text) for text in held_out_texts))


def _tokenize_into(
    writer: _TokenWriter,
    dataset: datasets.Dataset | datasets.IterableDataset,
    tokenizer: PreTrainedTokenizerBase,
    text_column: str,
    add_bos: bool,
    add_eos: bool,
    batch_size: int,
    first_row: int = 0,
) -> None:
    """Sort every text of ``dataset`` into ``writer``: skipped, held out, or tokenized and stored with its hash."""
    from hf_lmobj.plain_text import encode_texts_as_documents  # split_special_tokens=True, BOS / EOS by id

    row = first_row
    for texts in _text_batches(dataset, text_column, batch_size, first_row):
        kept, digests = [], []
        for index, text in enumerate(texts, row):
            problem = text_problem(text)
            if problem is not None:
                writer.skip(problem)
                continue
            digest = content_hash(text)
            if writer.rule.by_rule(digest):
                writer.hold_out(text, f"row {index} of column {text_column!r}", digest)
            elif digest in writer.rule.validation:
                writer.held_copies += 1  # the same text as a named held-out one: never trained, counted
            else:
                kept.append(text)
                digests.append(digest)
        row += len(texts)
        documents = encode_texts_as_documents(tokenizer, kept, add_bos, add_eos) if kept else []
        for ids, digest in zip(documents, digests, strict=True):
            if ids.size < 2:
                writer.skip("one_token")
            else:
                writer.add(ids, digest)


def _tokenize_shard(
    shard: datasets.Dataset, tokenizer: PreTrainedTokenizerBase, folder: Path, first_row: int, options: dict
) -> None:
    """One worker process: tokenize ``shard`` into a part folder (joined in order by the parent)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # one thread per worker process
    folder.mkdir(parents=True)
    writer = _TokenWriter(folder, options["vocab_size"], **options["writer"])
    try:
        _tokenize_into(writer, shard, tokenizer, first_row=first_row, **options["encode"])
        writer.finish_part()
    finally:
        writer.close()


def tokenize_to_token_store(
    dataset: datasets.Dataset | datasets.IterableDataset,
    tokenizer: PreTrainedTokenizerBase,
    path: str | os.PathLike,
    *,
    text_column: str = "text",
    add_bos: bool = True,
    add_eos: bool = True,
    num_proc: int | None = None,
    batch_size: int = 1000,
    overwrite: bool = False,
    save_tokenizer: bool = False,
    validation_fraction: float = 0.0,
    tokenizer_origin: dict[str, Any] | None = None,
    held_out_texts: Sequence[str] = (),
) -> TokenStore:
    """Tokenize the raw text of ``dataset`` (one document per row) into a store at ``path``.

    Each text is sorted first: empty and whitespace-only texts are skipped; a text that
    :class:`~hf_lmobj.held_out.HeldOut` ``(validation_fraction)`` holds out by its content hash is
    written, as text, to ``path/held_out.jsonl`` (one ``{"text": ...}`` per line, in source order; no file
    when ``validation_fraction`` is 0 and no ``held_out_texts``); ``held_out_texts`` (a named validation split, e.g.
    the embedded corpus's) are written there first, and a row equal to one of them is left out (counted as
    ``held_out.copies``); every other text is encoded and stored, with its content hash in
    ``document_hashes.npy``, unless it gives fewer than 2 tokens (skipped as ``one_token``). ``meta.json``
    records ``held_out`` (hash, fraction, documents, bytes), ``skipped_documents`` (``empty``,
    ``whitespace``, ``one_token``) and ``tokenizer_origin`` (``{"origin": "given", "name": ...}`` unless
    given, e.g. :func:`~hf_lmobj.corpus.train_tokenizer`'s record).

    Texts are encoded in batches of ``batch_size`` with ``add_special_tokens=False`` and
    ``split_special_tokens=True`` (a literal ``"</s>"`` in the text stays characters), then BOS /
    EOS are added by id when asked. ``vocab_size`` is ``len(tokenizer)``. A map-style ``Dataset``
    with ``num_proc > 1`` is split into ``num_proc`` contiguous shards, each tokenized by its own
    process into a shard folder, then concatenated in order: the bytes written do not depend on
    ``num_proc``. A streamed ``IterableDataset`` is tokenized in this process, batch by batch,
    never materialised (``num_proc`` is ignored, with a warning); it gives the same bytes as the
    map-style dataset of the same rows. ``meta.json`` records the tokenizer's name and its
    ``tokenizer_fingerprint``, which :meth:`TokenStore.check_tokenizer` compares with a run's
    tokenizer. ``save_tokenizer=True`` saves the tokenizer as ``path/tokenizer/`` inside the temporary
    folder, before any text is tokenized, and checks that it loads back with
    ``AutoTokenizer.from_pretrained`` as the same tokenizer: the store appears with its tokenizer or
    not at all (a failed save leaves no store and no temporary folder).

    Example:
        >>> import datasets, tempfile
        >>> from hf_lmobj.corpus import build_tokenizer
        >>> texts = datasets.Dataset.from_dict({"text": ["def f(): pass", "", "x = 1", "import os"]})
        >>> store = tokenize_to_token_store(texts, build_tokenizer(512, max_documents=20),
        ...                                 f"{tempfile.mkdtemp()}/store", held_out_texts=["import os"])
        >>> store.num_documents, store.skipped_documents["empty"], store.held_out_texts(), store.held_out_info["copies"]
        (2, 1, ['import os'], 1)

    Raises:
        TypeError: ``batch_size`` / ``num_proc`` not ints, a flag not a bool, ``tokenizer`` not a tokenizer,
            ``validation_fraction`` not a number, a row whose text is not a string (the row named).
        ValueError: no ``text_column``, ``add_bos`` / ``add_eos`` without the token, ``path`` exists
            and not ``overwrite`` (or is not a store), ``batch_size`` / ``num_proc`` below 1,
            ``validation_fraction`` outside ``[0, 1)``, no document left to store (no row, or every
            row held out or skipped: the counts are named), a saved tokenizer that does not load back as
            itself.
    """
    import datasets

    from hf_lmobj.corpus import require_columns

    path = _as_path(path, "path")
    text_column = check_name(text_column, "text_column")
    add_bos, add_eos = check_flag(add_bos, "add_bos"), check_flag(add_eos, "add_eos")
    overwrite = check_flag(overwrite, "overwrite")
    save_tokenizer = check_flag(save_tokenizer, "save_tokenizer")
    batch_size = check_length(batch_size, "batch_size", 1, "texts per tokenizer call")
    num_proc = check_length(num_proc, "num_proc", 1, "None = one process", optional=True)
    rule = _rule(validation_fraction, held_out_texts)
    tokenizer_meta = _tokenizer_meta(tokenizer, None)
    origin = {"origin": "given", "name": tokenizer_meta["tokenizer"]} if tokenizer_origin is None else tokenizer_origin
    for flag, role in ((add_bos, "bos"), (add_eos, "eos")):
        if flag and getattr(tokenizer, f"{role}_token_id") is None:
            raise ValueError(f"add_{role}=True but the tokenizer has no {role}_token; pass add_{role}=False")
    streaming = isinstance(dataset, datasets.IterableDataset)
    if not streaming and not isinstance(dataset, datasets.Dataset):
        raise TypeError(f"dataset must be a datasets.Dataset or IterableDataset, got {type(dataset).__name__}")
    if streaming and (num_proc or 1) > 1:
        warnings.warn("a streamed IterableDataset is tokenized in one process; num_proc is ignored", stacklevel=2)
    if not streaming:
        require_columns(dataset, text_column=text_column)
    elif dataset.column_names is not None and text_column not in dataset.column_names:
        raise ValueError(f"the dataset has no column {text_column!r} (has {dataset.column_names}); set text_column=")
    vocab_size = len(tokenizer)
    encode = {"text_column": text_column, "add_bos": add_bos, "add_eos": add_eos, "batch_size": batch_size}
    meta = {**tokenizer_meta, "add_bos": add_bos, "add_eos": add_eos, "text_column": text_column,
            "tokenizer_origin": _check_origin(origin)}  # fmt: skip
    writer_options = {"rule": rule, "held_out": rule.fraction > 0 or bool(held_out_texts), "from_text": True}
    workers = 1 if streaming else max(1, min(num_proc or 1, dataset.num_rows))
    with _atomic_folder(path, overwrite) as tmp:
        if save_tokenizer:
            _save_tokenizer(tokenizer, tmp)
        writer = _TokenWriter(tmp, vocab_size, **writer_options)
        try:
            for index, text in enumerate(held_out_texts):
                writer.hold_out(text, f"held_out_texts[{index}]")
            if workers == 1:
                _tokenize_into(writer, dataset, tokenizer, **encode)
            else:
                _tokenize_in_shards(writer, dataset, tokenizer, tmp / "shards", workers,
                                    {"encode": encode, "vocab_size": vocab_size, "writer": writer_options})  # fmt: skip
            writer.finish(**meta)
        finally:
            writer.close()
    return TokenStore.open(path)


def _tokenize_in_shards(
    writer: _TokenWriter,
    dataset: datasets.Dataset,
    tokenizer: PreTrainedTokenizerBase,
    folder: Path,
    workers: int,
    options: dict,
) -> None:
    """``workers`` processes tokenize contiguous shards into part folders under ``folder``; joined in order."""
    shards = [dataset.shard(workers, index, contiguous=True) for index in range(workers)]
    firsts = np.concatenate([[0], np.cumsum([shard.num_rows for shard in shards])[:-1]]).tolist()
    folders = [folder / f"{index:05d}" for index in range(workers)]
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context()) as pool:
        jobs = [
            pool.submit(_tokenize_shard, *job, options) for job in zip(shards, [tokenizer] * workers, folders, firsts)
        ]
        for job in jobs:
            job.result()
    for part in folders:
        writer.extend_part(part)
    shutil.rmtree(folder)
