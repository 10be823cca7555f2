"""The pre-training recipe's data past memory: streamed text, token stores and mixtures.

``prepare_pipeline_data`` is what ``recipes/pretrain.py`` calls when ``streaming: true``,
``token_store:`` or ``sources:`` is set. The training data is a :class:`~hf_lmobj.data.PretrainingStream`
(each rank reads its own slice; nothing is tokenized or packed ahead); what the report needs is
bounded: the validation text is at most ``max_validation_documents`` documents, and the statistics
(unigram entropy, the n-gram baseline) fit on the first ``report_sample_tokens`` training tokens
(5M by default), read after training.

Validation text: the named dataset's ``validation`` split (streamed, bounded), else its first
``max_validation_documents`` documents held out of training; for token-store-only runs the
embedded corpus's validation split (what ``recipes/tokenize_corpus.py`` leaves out) or ``dataset_name``'s.

Example:
    >>> spec = source_specs(DataArguments(sources='[{"token_store": "a", "weight": 3}, {"dataset_name": "b", "weight": 1}]'))
    >>> [(s["kind"], s["name"], s["weight"]) for s in spec]
    [('token_store', 'a', 3.0), ('stream', 'b', 1.0)]
"""

from __future__ import annotations

import functools
import itertools
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pyarrow as pa
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from hf_lmobj.corpus import load_stdlib_corpus
from hf_lmobj.data import PretrainingStream, RowFormat, TextStream
from hf_lmobj.data.prepare import (
    DataArguments,
    ObjectiveData,
    prepare_objective_data,
)
from hf_lmobj.data.prepare_fim import PIECE_SLACK, FimArguments, prepare_fim_data
from hf_lmobj.data.token_store import TokenStore
from hf_lmobj.data.transforms import FimPieces
from hf_lmobj.fim.transform import FimTransform
from hf_lmobj.objectives import get_objective

#: Training tokens the report's statistics fit on when the run streams (``report_sample_tokens: null``):
#: the n-gram baseline's memory grows with its tokens, so a streamed run's peak does not follow the corpus.
STREAMED_SAMPLE_TOKENS = 5_000_000


def uses_pipeline(args: DataArguments) -> bool:
    """Whether the run reads its training data through the streaming pipeline."""
    return bool(args.streaming or args.token_store or args.sources)


def source_specs(args: DataArguments) -> list[dict[str, Any]]:
    """The run's sources as ``{"kind", "name", "weight", "location", ...}`` (one when no mixture)."""
    if not args.sources:
        if args.token_store:
            spec = {"kind": "token_store", "name": _short_name(args.token_store), "location": args.token_store}
            return [{**spec, "weight": 1.0}]
        if args.dataset_name is None:
            raise ValueError("streaming: true needs dataset_name (a Hub id or local files); or set token_store")
        return [{"kind": "stream", "name": _short_name(args.dataset_name), "weight": 1.0, "location": args.dataset_name,
                 "dataset_config": args.dataset_config, "text_column": args.text_column}]  # fmt: skip
    specs = []
    for entry in args.sources:
        where = entry.get("token_store") or entry.get("dataset_name")
        kind = "token_store" if entry.get("token_store") else "stream"
        specs.append({
            "kind": kind, "name": str(entry.get("name", _short_name(where))), "weight": float(entry["weight"]), "location": where,
            "dataset_config": entry.get("dataset_config"), "text_column": entry.get("text_column", args.text_column),
        })  # fmt: skip
    names = [s["name"] for s in specs]
    if len(set(names)) != len(names):
        raise ValueError(f"sources: names must differ (got {names}); give each entry a distinct name:")
    return specs


def _short_name(location: str) -> str:
    """What logs call a source: a local folder's or a Hub id's last part (``data/stdlib_store`` -> ``stdlib_store``)."""
    return Path(str(location).rstrip("/")).name or str(location)


def _stream_split(spec: dict[str, Any], split: str) -> datasets.IterableDataset | None:
    try:
        loaded = datasets.load_dataset(spec["location"], spec.get("dataset_config"), streaming=True)
    except StopIteration:  # datasets infers the schema from the first row: an empty file has none
        name = spec.get("name", spec["location"])
        raise ValueError(
            f"source {name!r}: {spec['location']} holds no rows (an empty file?); give it at least one document"
        ) from None
    return loaded[split] if split in loaded else None


def _open_source(spec: dict[str, Any], tokenizer, objective: str, held_out: int, encode=None) -> Any:
    if spec["kind"] == "token_store":
        if encode is not None:
            raise ValueError(
                f"source {spec['name']!r}: fim_rate > 0 cuts the documents' text, which a token store does not "
                "hold; stream the text (dataset_name with streaming: true) or set fim_rate: 0"
            )
        store = TokenStore.open(spec["location"])
        store.check_tokenizer(tokenizer, f"source {spec['name']!r}")  # another tokenizer's ids are refused by name
        return store
    train = _stream_split(spec, "train")
    if train is None:
        raise ValueError(f"source {spec['name']!r} has no 'train' split")
    if held_out:
        train = train.skip(held_out)
    objective_spec = get_objective(objective)  # an encoder-decoder's collator adds its own EOS
    add_bos, add_eos = objective_spec.next_token, not objective_spec.encoder_decoder
    return TextStream(train, tokenizer, spec["text_column"], add_bos, add_eos, name=spec["name"], encode=encode)


def _validation_text(specs: list[dict[str, Any]], args: DataArguments) -> tuple[datasets.Dataset, int]:
    """At most ``max_validation_documents`` texts, and how many the first stream holds out of training."""
    limit = args.max_validation_documents
    stream = next((s for s in specs if s["kind"] == "stream"), None)
    if stream is None and args.dataset_name is None:
        texts = load_stdlib_corpus(args.validation_fraction)["validation"][args.text_column][:limit]
        return datasets.Dataset.from_dict({args.text_column: texts}), 0
    spec = stream or {
        "location": args.dataset_name,
        "dataset_config": args.dataset_config,
        "text_column": args.text_column,
    }
    column = spec["text_column"]
    validation = _stream_split(spec, "validation")
    held_out = 0
    if validation is None:
        validation, held_out = _stream_split(spec, "train"), limit
    texts = [_row_text(row, column, spec["location"], i) for i, row in enumerate(itertools.islice(validation, limit))]
    if not texts:
        raise ValueError(f"no validation text in {spec['location']!r}; it needs at least one document")
    return datasets.Dataset.from_dict({args.text_column: texts}), held_out if stream is not None else 0


def _row_text(row: dict[str, Any], column: str, location: str, index: int) -> str:
    """The text of one validation row, refused by row and column when it is missing or not a string."""
    if column not in row:
        raise ValueError(
            f"{location!r}: validation row {index} has no {column!r} column (columns: {sorted(row)}); "
            "name the text column with text_column="
        )
    if not isinstance(row[column], str):
        raise TypeError(f"{location!r}: validation row {index} {column!r} must be a string, got {row[column]!r}")
    return row[column]


def bounded_documents(dataset: datasets.Dataset, max_tokens: int) -> datasets.Dataset:
    """The first rows of a tokenized ``dataset`` holding at most about ``max_tokens`` tokens (all when fewer)."""
    lengths = dataset.data.column("input_ids").combine_chunks().value_lengths().to_numpy(zero_copy_only=False)
    keep = int((lengths.cumsum() < max_tokens).sum()) + 1
    return dataset if keep >= dataset.num_rows else dataset.select(range(keep))


def _sample_documents(stream: PretrainingStream, max_tokens: int) -> datasets.Dataset:
    """The first rows of the training mixture, up to ``max_tokens`` tokens, as compact int32 Arrow lists."""
    rows, total = [], 0
    for feature, _, _ in stream.reader.rows(0, 1, 0):
        rows.append(np.asarray(feature["input_ids"], dtype=np.int32))
        total += rows[-1].size
        if total >= max_tokens:
            break
    offsets = np.concatenate([[0], np.cumsum([r.size for r in rows])]).astype(np.int32)
    values = np.concatenate(rows) if rows else np.zeros(0, dtype=np.int32)
    column = pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))
    return datasets.Dataset(pa.table({"input_ids": column}))


def prepare_pipeline_data(
    objective: str,
    tokenizer: PreTrainedTokenizerBase,
    args: DataArguments,
    batch_size: int,
    model: PreTrainedModel | None = None,
    seed: int = 0,
    fim_args: FimArguments | None = None,
) -> tuple[ObjectiveData, datasets.Dataset]:
    """The stream, the bounded eval set and the collator of a pipeline run, and its validation text.

    With ``fim_args.fim_rate > 0`` (causal only) each streamed text is cut into row-sized pieces and
    FIM'd on the fly (:class:`~hf_lmobj.data.transforms.FimPieces`), as :func:`prepare_fim_data` does.
    """
    specs = source_specs(args)
    validation, held_out = _validation_text(specs, args)
    local = datasets.DatasetDict(train=validation.select(range(min(8, validation.num_rows))), validation=validation)
    fim_args = fim_args or FimArguments()
    encode = None
    if fim_args.fim_rate > 0:
        data = prepare_fim_data(tokenizer, local, args, fim_args, model, seed)  # FIM'd eval set + the collator
        fim = FimTransform(tokenizer, fim_args.fim_rate, fim_args.fim_spm_rate, fim_args.fim_level)
        encode = FimPieces(fim, args.max_length - PIECE_SLACK, seed)
    else:
        data = prepare_objective_data(objective, tokenizer, local, args, model, seed)  # eval set + the collator
    first_stream = next((i for i, s in enumerate(specs) if s["kind"] == "stream"), None)  # gave the validation text
    sources = [
        _open_source(s, tokenizer, objective, held_out if i == first_stream else 0, encode) for i, s in enumerate(specs)
    ]
    if get_objective(objective).data == "packed":
        fmt = RowFormat("packed", args.max_length)
    else:
        fmt = RowFormat("pieces", getattr(data.collator, "raw_tokens_length", args.max_length))
    weights = [s["weight"] for s in specs] if len(specs) > 1 else None
    stream = PretrainingStream(sources, fmt, data.collator, batch_size, weights=weights,
                               names=[s["name"] for s in specs], seed=seed, block_documents=args.block_documents)  # fmt: skip
    data.train_dataset, data.callbacks = stream, []
    data.train_documents = None  # read after training, when the report needs it (not before the first step)
    sample_tokens = args.report_sample_tokens or STREAMED_SAMPLE_TOKENS
    data.sample_documents = functools.partial(_sample_documents, stream, sample_tokens)
    data.hyperparameters = {
        **{k: v for k, v in data.hyperparameters.items() if not k.startswith("train_")},
        "rows": fmt.kind,
        "sources": [{"name": s["name"], "kind": s["kind"], "weight": s["weight"]} for s in specs],
        "report_sample_tokens": sample_tokens,
    }
    return data, validation
