"""The one route from a run's sources to its batches: source -> per-document transform -> mix -> rows -> collator.

Every run goes through :func:`prepare_run_data`, whatever its data (:mod:`hf_lmobj.data.run_sources`): text held
in memory (the embedded corpus, a ``DatasetDict``, local files or a Hub id read whole) is encoded once into a
random-access source (planned epochs: exactly once, any world size, elastic resume); a stream is encoded as it
is read; a token store is read as it is. Each text goes through one encoder (:class:`~hf_lmobj.data.sources.TextStream`:
BOS / EOS by id, or FIM pieces), which leaves out the held-out, empty, whitespace-only and one-token documents and
counts them. The training data is one :class:`~hf_lmobj.data.PretrainingStream`; the eval set is the validation
text cut into rows by the same row code, batched by the same collator.

Example:
    >>> from hf_lmobj.corpus import build_tokenizer
    >>> from hf_lmobj.data.run_sources import open_sources
    >>> tok = build_tokenizer(vocab_size=512, max_documents=20)
    >>> args = DataArguments(max_length=64, max_documents=200, validation_fraction=0.05)
    >>> data = prepare_run_data(open_sources(args), "causal", tok, args, batch_size=4)
    >>> batch = next(iter(data.train_dataset))["batch"]
    >>> batch["input_ids"].shape[0], data.provenance["validation"]["documents"] == len(data.validation_texts)
    (4, True)
"""

from __future__ import annotations

import functools
import hashlib
import warnings
from typing import Any

import datasets
import numpy as np
import pyarrow as pa
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from hf_lmobj.data.pipeline import PretrainingStream
from hf_lmobj.data.prepare import DataArguments, ObjectiveData, eval_subset, objective_collator
from hf_lmobj.data.prepare_fim import PIECE_SLACK, FimArguments
from hf_lmobj.data.random_access import DatasetSource, DocumentSubset
from hf_lmobj.data.run_sources import RunSources, SourceSpec
from hf_lmobj.data.sources import TextStream
from hf_lmobj.data.streamed import UnitReader
from hf_lmobj.held_out import LEFT_OUT, SKIP_REASONS, HeldOut
from hf_lmobj.objectives import ObjectiveSpec, get_objective
from hf_lmobj.packing.dataset import FIRST_DOCUMENT_NUMBER
from hf_lmobj.store.token_store import TokenStore

#: Training tokens the report's statistics fit on when the run streams (``report_sample_tokens: null``):
#: the n-gram baseline's memory grows with its tokens, so a streamed run's peak does not follow the corpus.
STREAMED_SAMPLE_TOKENS = 5_000_000
_ENCODE_BATCH = 1000  # texts per tokenizer call


def prepare_run_data(
    sources: RunSources,
    objective: str | ObjectiveSpec,
    tokenizer: PreTrainedTokenizerBase,
    args: DataArguments,
    batch_size: int,
    model: PreTrainedModel | None = None,
    seed: int = 0,
    fim_args: FimArguments | None = None,
    exclude: Any = None,
) -> ObjectiveData:
    """The stream, the eval set and the collator of a run, with its validation text and provenance.

    With ``fim_args.fim_rate > 0`` (causal only) each text is cut into row-sized pieces and FIM'd
    (:class:`~hf_lmobj.data.transforms.FimPieces`), the validation text as the training text. ``exclude`` is the
    filter of a run with ``drop_contaminated``, built by the caller from the validation text:
    ``ContaminationIndex.build(sources.validation_texts, sources.validation_domains, tokenizer)``
    (:mod:`hf_lmobj.contamination`); a training document it calls contaminated is left out and counted.
    """
    _check_exclude(args.drop_contaminated, exclude)
    spec = objective if isinstance(objective, ObjectiveSpec) else get_objective(objective)
    collator, fmt, hyperparameters = objective_collator(spec, tokenizer, args, model, seed)
    encode = _fim_encoder(spec, tokenizer, args, fim_args or FimArguments(), seed)
    if encode is not None:
        hyperparameters.update(fim_rate=fim_args.fim_rate, fim_spm_rate=fim_args.fim_spm_rate,
                               fim_level=fim_args.fim_level, fim_piece_max_tokens=encode.max_tokens)  # fmt: skip
    opened, left_out = [], np.zeros(len(LEFT_OUT), dtype=np.int64)
    for source_spec, source in zip(sources.specs, sources.opened):
        made, counts = _training_source(source_spec, source, tokenizer, spec, encode, sources.held_out, exclude)
        opened.append(made)
        left_out += counts
    weights = [s.weight for s in sources.specs] if len(sources.specs) > 1 else None
    stream = PretrainingStream(opened, fmt, collator, batch_size, weights=weights, seed=seed,
                               names=[s.name for s in sources.specs], block_documents=args.block_documents)  # fmt: skip
    evaluation = _eval_rows(sources.validation_texts, tokenizer, spec, encode, fmt, args)
    hyperparameters.update(_row_hyperparameters(stream, sources.specs, fmt))
    provenance = {
        "training": [s.record() for s in sources.specs],
        "validation": sources.validation,
        "skipped_documents": {
            "training": {reason: int(n) for reason, n in zip(LEFT_OUT, left_out) if reason in SKIP_REASONS},
            "validation": dict(sources.skipped_validation),
        },
        "held_out_training_documents": int(left_out[LEFT_OUT.index("held_out")]),
    }
    if exclude is not None:
        provenance["contaminated_training_documents"] = int(left_out[LEFT_OUT.index("contaminated")])
    sample = functools.partial(_sample_documents, stream, _sample_tokens(stream, args))
    return ObjectiveData(stream, evaluation, collator, hyperparameters, list(sources.validation_texts),
                         list(sources.validation_domains), provenance, sample)  # fmt: skip


def _fim_encoder(spec: ObjectiveSpec, tokenizer, args: DataArguments, fim_args: FimArguments, seed: int) -> Any:
    if fim_args.fim_rate <= 0:
        return None
    from hf_lmobj.data.transforms import FimPieces
    from hf_lmobj.fim.transform import FimTransform

    if "fim" not in spec.variants:
        raise ValueError(f"FIM trains causal LMs: objective must be 'causal', got {spec.name!r}")
    fim = FimTransform(tokenizer, fim_args.fim_rate, fim_args.fim_spm_rate, fim_args.fim_level)
    return FimPieces(fim, args.max_length - PIECE_SLACK, seed)


def _encoder(tokenizer, spec: ObjectiveSpec, text_column: str, encode: Any, held_out: HeldOut | None, name: str,
             rows: Any, exclude: Any = None) -> TextStream:  # fmt: skip
    """The one text encoder of a run (an encoder-decoder's collator adds its own EOS)."""
    return TextStream(rows, tokenizer, text_column, spec.next_token, not spec.encoder_decoder, name=name,
                      encode=encode, held_out=held_out, exclude=exclude)  # fmt: skip


def _check_exclude(drop_contaminated: bool, exclude: Any) -> None:
    if drop_contaminated and exclude is None:
        raise ValueError(
            "drop_contaminated=True needs exclude=ContaminationIndex.build(sources.validation_texts, "
            "sources.validation_domains, tokenizer) (hf_lmobj.contamination): the filter of the validation n-grams"
        )
    if exclude is not None and not drop_contaminated:
        raise ValueError("exclude filters a run with drop_contaminated=True: set it, or pass exclude=None")


def _training_source(
    spec: SourceSpec,
    source: Any,
    tokenizer,
    objective: ObjectiveSpec,
    encode: Any,
    held_out: HeldOut,
    exclude: Any = None,
) -> tuple[Any, np.ndarray]:
    """A pipeline source of one run source's training side, and the documents left out of it (by LEFT_OUT)."""
    if isinstance(source, TokenStore):
        if encode is not None:
            raise ValueError(
                f"source {spec.name!r}: fim_rate > 0 cuts the documents' text, which a token store does not "
                "hold; stream the text (dataset_name with streaming: true) or set fim_rate: 0"
            )
        source.check_tokenizer(tokenizer, f"source {spec.name!r}")  # another tokenizer's ids are refused by name
        return _store_subset(source, spec, held_out, exclude)
    encoder = _encoder(tokenizer, objective, spec.text_column, encode, held_out, spec.name, source, exclude)
    if spec.streaming:
        return encoder, np.zeros(len(LEFT_OUT), dtype=np.int64)  # counted as it is read
    return _encoded(encoder, source, spec)


def _encoded(encoder: TextStream, rows: datasets.Dataset, spec: SourceSpec) -> tuple[Any, np.ndarray]:
    """In-memory text encoded once into a random-access source (token ids as compact int32 Arrow lists)."""
    left_out = np.zeros(len(LEFT_OUT), dtype=np.int64)
    documents: list[np.ndarray] = []
    column = rows.data.column(spec.text_column)  # the encoder refused a dataset without it
    for start in range(0, rows.num_rows, _ENCODE_BATCH):
        texts = column.slice(start, _ENCODE_BATCH).to_pylist()
        for doc in encoder.documents_or_reasons(encoder.read_texts(iter({spec.text_column: t} for t in texts),
                                                                   len(texts), rows, start)):  # fmt: skip
            if isinstance(doc, str):
                left_out[LEFT_OUT.index(doc)] += 1
            else:
                documents.append(doc)
    if not documents:
        raise ValueError(f"source {spec.name!r} has no document left to train on (left out: "
                         f"{dict(zip(LEFT_OUT, left_out.tolist()))}); give it non-empty documents")  # fmt: skip
    return DatasetSource(_as_dataset(documents)), left_out


def _as_dataset(documents: list[np.ndarray]) -> datasets.Dataset:
    """Token id lists as a ``datasets.Dataset`` (int32 Arrow lists) whose fingerprint is its content's hash."""
    offsets = np.concatenate([[0], np.cumsum([d.size for d in documents])]).astype(np.int64)
    values = np.concatenate(documents).astype(np.int32) if documents else np.zeros(0, dtype=np.int32)
    digest = hashlib.blake2b(offsets.tobytes(), digest_size=16)
    digest.update(values.tobytes())
    column = pa.LargeListArray.from_arrays(pa.array(offsets), pa.array(values))
    return datasets.Dataset(pa.table({"input_ids": column}), fingerprint=digest.hexdigest())


def _store_subset(
    store: TokenStore, spec: SourceSpec, held_out: HeldOut, exclude: Any = None
) -> tuple[Any, np.ndarray]:
    """The store's documents a run may train: not held out (by their content hashes), of 2 tokens or more, and
    (``exclude``) holding no n-gram of the validation text."""
    left_out = np.zeros(len(LEFT_OUT), dtype=np.int64)
    keep = store.lengths >= 2
    left_out[LEFT_OUT.index("one_token")] = int((~keep).sum())
    hashes = store.document_hashes
    if hashes is None:
        warnings.warn(
            f"token store {spec.location} records no content hash per document (an imported or older store), so "
            "its documents cannot be checked against the run's held-out text; rebuild it with "
            "recipes/tokenize_corpus.py",
            UserWarning,
            stacklevel=3,
        )
    else:
        held = held_out.mask(hashes) & keep
        left_out[LEFT_OUT.index("held_out")] = int(held.sum())
        keep &= ~held
    if exclude is not None:
        hit = np.array([bool(k) and exclude.contaminated(store.document(i)) for i, k in enumerate(keep)], dtype=bool)
        left_out[LEFT_OUT.index("contaminated")] = int(hit.sum())
        keep &= ~hit
    if keep.all():
        return store, left_out
    return DocumentSubset(store, np.flatnonzero(keep)), left_out


def _eval_rows(
    texts: list[str], tokenizer, spec: ObjectiveSpec, encode: Any, fmt, args: DataArguments
) -> datasets.Dataset:
    """The validation text in rows (the training rows' code, in order), ``max_eval_rows`` of them drawn evenly."""
    rows = datasets.Dataset.from_dict({"text": texts})
    encoder = _encoder(tokenizer, spec, "text", encode, None, "validation", rows)
    documents = [doc for doc in encoder.documents_or_reasons(texts) if not isinstance(doc, str)]
    if not documents:
        raise ValueError("the validation text gives no document of 2 tokens or more; give it longer documents")
    reader = UnitReader([DatasetSource(_as_dataset(documents))], fmt, block_documents=len(documents),
                        shuffle=False)  # fmt: skip
    features = [feature for feature, _, _ in reader.rows(0, 1, 0)]
    columns = {"input_ids": [np.asarray(f["input_ids"]).tolist() for f in features]}
    if "seq_lengths" in features[0]:  # packed: each token's document numbered from 2 (what a stock Trainer keeps)
        columns["attention_mask"] = [
            np.repeat(np.arange(FIRST_DOCUMENT_NUMBER, FIRST_DOCUMENT_NUMBER + len(f["seq_lengths"])),
                      f["seq_lengths"]).tolist() for f in features
        ]  # fmt: skip
    return eval_subset(datasets.Dataset.from_dict(columns), args.max_eval_rows)


def _row_hyperparameters(stream: PretrainingStream, specs: list[SourceSpec], fmt) -> dict:
    found: dict[str, Any] = {"rows": fmt.kind}
    if len(specs) > 1:
        found["sources"] = [{"name": s.name, "kind": s.kind, "weight": s.weight} for s in specs]
    if stream.planned:
        tokens = int(np.asarray(stream.sources[0].lengths).sum())
        found.update(train_rows=stream.plan.num_rows, train_tokens=tokens)
        if fmt.kind == "packed":
            found["packing_efficiency"] = round(tokens / max(stream.plan.num_rows * fmt.max_length, 1), 4)
    return found


def _sample_tokens(stream: PretrainingStream, args: DataArguments) -> int | None:
    """Training tokens the report's statistics fit on: all of a planned source unless limited, 5M of a stream."""
    if args.report_sample_tokens is not None:
        return args.report_sample_tokens
    return None if stream.planned else STREAMED_SAMPLE_TOKENS


def _sample_documents(stream: PretrainingStream, max_tokens: int | None) -> datasets.Dataset:
    """The first training documents (a planned source's, in corpus order) or rows (a stream's), up to about
    ``max_tokens`` tokens (None: all), as compact int32 Arrow lists."""
    if stream.planned:
        source = stream.sources[0]
        lengths = np.asarray(source.lengths)
        keep = lengths.size if max_tokens is None else int((np.cumsum(lengths) < max_tokens).sum()) + 1
        rows = [source.document(i) for i in range(min(keep, lengths.size))]
    else:
        rows, total = [], 0
        for feature, _, _ in stream.reader.rows(0, 1, 0):
            rows.append(np.asarray(feature["input_ids"], dtype=np.int32))
            total += rows[-1].size
            if total >= (max_tokens or STREAMED_SAMPLE_TOKENS):
                break
    return _as_dataset(rows)
