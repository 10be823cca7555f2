"""Tokenizing raw text into a token store: :func:`tokenize_to_token_store`.

A ``datasets.Dataset`` is tokenized in ``num_proc`` processes (contiguous shards, joined in order:
the bytes do not depend on ``num_proc``), a streamed ``IterableDataset`` in one; the store is
written, checked and renamed into place by :mod:`hf_lmobj.data.token_store_writer`.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import warnings
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import datasets
    from transformers import PreTrainedTokenizerBase

from hf_lmobj.checks import check_flag, check_length, check_name
from hf_lmobj.data.token_store import TokenStore
from hf_lmobj.data.token_store_files import _as_path
from hf_lmobj.data.token_store_writer import (
    _atomic_folder,
    _save_tokenizer,
    _tokenizer_meta,
    _TokenWriter,
    _write_files,
)


def _iter_tokenized(
    dataset: datasets.Dataset | datasets.IterableDataset,
    tokenizer: PreTrainedTokenizerBase,
    text_column: str,
    add_bos: bool,
    add_eos: bool,
    batch_size: int,
) -> Iterator[np.ndarray]:
    from hf_lmobj.data.sources import encode_texts_as_documents  # split_special_tokens=True, BOS / EOS by id

    names = dataset.column_names
    if names is not None:
        dataset = dataset.select_columns([text_column])
    for batch in dataset.iter(batch_size=batch_size):
        if text_column not in batch:
            raise ValueError(f"the dataset has no column {text_column!r} (has {list(batch)}); set text_column=")
        texts = batch[text_column]
        if not all(isinstance(text, str) for text in texts):
            raise TypeError(f"column {text_column!r} must hold strings")
        yield from encode_texts_as_documents(tokenizer, texts, add_bos, add_eos)


def _tokenize_shard(
    shard: datasets.Dataset, tokenizer: PreTrainedTokenizerBase, folder: Path, first_document: int, options: dict
) -> None:
    """One worker process: tokenize ``shard`` into the store files of ``folder``."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # one thread per worker process
    folder.mkdir(parents=True)
    documents = _iter_tokenized(shard, tokenizer, **options["encode"])
    _write_files(folder, documents, options["vocab_size"], first_document, **options["meta"])


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
) -> TokenStore:
    """Tokenize the raw text of ``dataset`` (one document per row) into a store at ``path``.

    Texts are encoded in batches of ``batch_size`` with ``add_special_tokens=False`` and
    ``split_special_tokens=True`` (a literal ``"</s>"`` in the text stays characters), then BOS /
    EOS are added by id when asked. ``vocab_size`` is ``len(tokenizer)``. A map-style ``Dataset``
    with ``num_proc > 1`` is split into ``num_proc`` contiguous shards, each tokenized by its own
    process into a shard folder, then concatenated in order: the bytes written do not depend on
    ``num_proc``. A streamed ``IterableDataset`` is tokenized in this process, batch by batch,
    never materialised (``num_proc`` is ignored, with a warning). ``meta.json`` records the
    tokenizer's name and its ``tokenizer_fingerprint``, which :meth:`TokenStore.check_tokenizer`
    compares with a run's tokenizer. ``save_tokenizer=True`` saves the tokenizer as ``path/tokenizer/``
    inside the temporary folder, before any text is tokenized, and checks that it loads back with
    ``AutoTokenizer.from_pretrained`` as the same tokenizer: the store appears with its tokenizer or
    not at all (a failed save leaves no store and no temporary folder).

    Raises:
        TypeError: ``batch_size`` / ``num_proc`` not ints, a flag not a bool, ``tokenizer`` not a tokenizer.
        ValueError: no ``text_column``, ``add_bos`` / ``add_eos`` without the token, ``path`` exists
            and not ``overwrite`` (or is not a store), ``batch_size`` / ``num_proc`` below 1, no row,
            an empty document (an empty text with neither BOS nor EOS; refused by its index, not skipped),
            a saved tokenizer that does not load back as itself.
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
    tokenizer_meta = _tokenizer_meta(tokenizer, None)
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
    meta = {
        **tokenizer_meta,
        "add_bos": add_bos,
        "add_eos": add_eos,
        "text_column": text_column,
    }
    workers = 1 if streaming else max(1, min(num_proc or 1, dataset.num_rows))
    with _atomic_folder(path, overwrite) as tmp:
        if save_tokenizer:
            _save_tokenizer(tokenizer, tmp)
        if workers == 1:
            _write_files(tmp, _iter_tokenized(dataset, tokenizer, **encode), vocab_size, **meta)
        else:
            shards = [dataset.shard(workers, index, contiguous=True) for index in range(workers)]
            firsts = np.concatenate([[0], np.cumsum([shard.num_rows for shard in shards])[:-1]]).tolist()
            folders = [tmp / "shards" / f"{index:05d}" for index in range(workers)]
            options = {"encode": encode, "vocab_size": vocab_size, "meta": meta}
            with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context()) as pool:
                jobs = [
                    pool.submit(_tokenize_shard, *job, options)
                    for job in zip(shards, [tokenizer] * workers, folders, firsts)
                ]
                for job in jobs:
                    job.result()
            writer = _TokenWriter(tmp, vocab_size)
            try:
                for folder in folders:
                    writer.extend(TokenStore.open(folder))
                writer.finish(**meta)
            finally:
                writer.close()
            shutil.rmtree(tmp / "shards")
    return TokenStore.open(path)
