"""Tokenize a corpus once into a token store (memory-mapped tokens + document index) for pre-training.

    python recipes/tokenize_corpus.py --output_dir data/stdlib_store          # the embedded stdlib corpus, its own BPE
    python recipes/tokenize_corpus.py --dataset_name path/to/jsonl_folder --text_column text \\
        --num_proc 8 --output_dir data/store                                 # a BPE trained on that folder
    python recipes/tokenize_corpus.py --dataset_name HuggingFaceFW/fineweb --dataset_config sample-10BT \\
        --streaming true --tokenizer_name gpt2 --output_dir data/fineweb_store   # never materialised
    python -m hf_lmobj.recipes.tokenize_corpus --config my_tokenize.yaml --overwrite true   # from the installed package

``--dataset_name`` is a Hub id, a local folder of ``.jsonl`` / ``.json`` / ``.parquet`` / ``.txt`` /
``.arrow`` files or one such file (through ``datasets.load_dataset``); without it, the embedded
standard-library corpus, whose published validation split (``--validation_fraction`` of its files, by a hash of
their path: the text ``pretrain.py`` validates on) is written to ``<output_dir>/held_out.jsonl`` and never stored.
Any other source is decided by content: ``--validation_fraction`` of its documents (by a hash of their text,
:mod:`hf_lmobj.held_out`; the same documents a stream or an in-memory copy of the same files holds out) are
not stored but written to ``held_out.jsonl``, the run's validation text; empty, whitespace-only and one-token
documents are skipped and counted. Without ``--tokenizer_name``, a byte-level BPE of ``--vocab_size``
is trained on the training side of the very data being tokenized (held-out documents excluded; its
first 64 MiB), cached by a fingerprint of that sample. ``--num_proc N`` tokenizes a map-style dataset
in N processes (same bytes as one); ``--streaming true`` reads in one process (same bytes again).
The store is written to ``--output_dir`` (``tokens.bin``, ``offsets.npy``, ``document_hashes.npy``,
``meta.json``, ``held_out.jsonl``; see ``hf_lmobj.store.token_store``) with the tokenizer in
``<output_dir>/tokenizer/`` (saved before the store is renamed into place: the folder appears with
all of them or not at all), so that a training run reuses both. Every field of
``TokenizeArguments`` can be set in a ``--config`` YAML file or on the command line. One summary
line is printed.
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:
    __package__ = "hf_lmobj.recipes"  # run as a file: resolve relative imports in the shipped package

import time
from dataclasses import dataclass, field
from pathlib import Path

import datasets
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from hf_lmobj.checks import check_flag, check_length, check_name
from hf_lmobj.config import parse_args_with_config
from hf_lmobj.corpus import DEFAULT_VOCAB_SIZE, SPECIAL_TOKENS, load_stdlib_corpus, train_tokenizer
from hf_lmobj.held_out import DEFAULT_VALIDATION_FRACTION, HeldOut
from hf_lmobj.store.token_store import TokenStore
from hf_lmobj.store.tokenize_text import tokenize_to_token_store, training_texts

_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet", ".txt": "text", ".arrow": "arrow"}


@dataclass
class TokenizeArguments:
    """What to tokenize, with which tokenizer, into which store."""

    output_dir: str = field(metadata={"help": "Folder the token store is written to (with tokenizer/ inside)."})
    dataset_name: str | None = field(
        default=None, metadata={"help": "Hub id, local folder or file of text; None = embedded stdlib corpus."}
    )
    dataset_config: str | None = field(default=None, metadata={"help": "Dataset configuration name."})
    split: str = field(default="train", metadata={"help": "Split to tokenize."})
    text_column: str = field(default="text", metadata={"help": "Column holding the raw text."})
    streaming: bool = field(default=False, metadata={"help": "Stream the dataset (never materialised; one process)."})
    tokenizer_name: str | None = field(
        default=None,
        metadata={
            "help": "Hub/local tokenizer; None trains a byte-level BPE on the training side of the data being "
            "tokenized (held-out documents excluded; its first 64 MiB), cached by that sample."
        },
    )
    vocab_size: int = field(
        default=DEFAULT_VOCAB_SIZE, metadata={"help": "Vocabulary of the tokenizer trained when none is named."}
    )
    validation_fraction: float = field(
        default=DEFAULT_VALIDATION_FRACTION,
        metadata={
            "help": "Share of documents held out by a hash of their content (of the embedded corpus's files, by "
            "their path): written to <output_dir>/held_out.jsonl, never stored; 0 holds nothing out."
        },
    )
    num_proc: int | None = field(default=None, metadata={"help": "Tokenizing processes (map-style datasets)."})
    batch_size: int = field(default=1000, metadata={"help": "Texts per tokenizer call."})
    add_bos: bool = field(default=True, metadata={"help": "Start each document with the BOS token."})
    add_eos: bool = field(default=True, metadata={"help": "End each document with the EOS token."})
    max_documents: int | None = field(default=None, metadata={"help": "Tokenize only the first N documents."})
    overwrite: bool = field(default=False, metadata={"help": "Replace an existing store at output_dir."})

    def __post_init__(self) -> None:
        self.max_documents = check_length(self.max_documents, "max_documents", 1, "None = all", optional=True)
        self.output_dir = check_name(self.output_dir, "output_dir")
        for name in ("dataset_name", "dataset_config", "tokenizer_name"):
            setattr(self, name, check_name(getattr(self, name), name, optional=True))
        for name in ("split", "text_column"):
            setattr(self, name, check_name(getattr(self, name), name))
        if self.tokenizer_name is None:
            least = 256 + len(SPECIAL_TOKENS)
            self.vocab_size = check_length(self.vocab_size, "vocab_size", least, "the 256 bytes + the special tokens")
        self.num_proc = check_length(self.num_proc, "num_proc", 1, "None = one process", optional=True)
        self.validation_fraction = HeldOut(self.validation_fraction).fraction
        self.batch_size = check_length(self.batch_size, "batch_size", 1, "texts per tokenizer call")
        for name in ("streaming", "add_bos", "add_eos", "overwrite"):
            setattr(self, name, check_flag(getattr(self, name), name))


def load_texts(args: TokenizeArguments) -> tuple[datasets.Dataset | datasets.IterableDataset, list[str]]:
    """The split to tokenize, in its own order, cut to ``max_documents``, and the texts it names as held out.

    The embedded corpus gives its ``train`` split and its published validation split (files chosen by a hash of
    their path, as ``pretrain.py`` validates on; :func:`~hf_lmobj.corpus.load_stdlib_corpus`), written to
    ``held_out.jsonl``; any other source names none: ``--validation_fraction`` holds its documents out by content.
    """
    if args.dataset_name is None:
        if args.split != "train":
            raise ValueError(
                f"--split {args.split}: the embedded corpus is tokenized from its 'train' split (its validation "
                "split goes to held_out.jsonl); pass --split train"
            )
        corpus = load_stdlib_corpus(args.validation_fraction, args.max_documents)
        return corpus["train"], corpus["validation"]["text"]
    source, builder = Path(args.dataset_name), None
    if source.is_file():
        builder = _BUILDERS.get(source.suffix)
        if builder is None:
            raise ValueError(f"--dataset_name {source}: unknown file type; use one of {sorted(_BUILDERS)}")
    kwargs = {"data_files": {args.split: str(source)}} if builder else {}
    texts = datasets.load_dataset(
        builder or args.dataset_name, args.dataset_config, split=args.split, streaming=args.streaming, **kwargs
    )
    if args.max_documents is not None:
        is_stream = isinstance(texts, datasets.IterableDataset)
        texts = (
            texts.take(args.max_documents) if is_stream else texts.select(range(min(args.max_documents, len(texts))))
        )
    return texts, []


def load_tokenizer(
    args: TokenizeArguments, texts: datasets.Dataset | datasets.IterableDataset, held_out: list[str]
) -> tuple[PreTrainedTokenizerBase, dict]:
    """The named tokenizer, or one trained on the training side of ``texts``; with its origin for ``meta.json``."""
    if args.tokenizer_name is not None:
        return AutoTokenizer.from_pretrained(args.tokenizer_name), {"origin": "given", "name": args.tokenizer_name}
    fraction = 0.0 if held_out else args.validation_fraction
    sample = training_texts(texts, args.text_column, fraction, args.batch_size, held_out)
    return train_tokenizer(sample, args.vocab_size)


def summary(store: TokenStore, seconds: float) -> str:
    """The one line printed: documents, tokens, bytes and speed; what was held out and skipped."""
    size = sum((store.path / name).stat().st_size for name in ("tokens.bin", "offsets.npy"))
    held, skipped = store.held_out_info, store.skipped_documents
    return (
        f"token store {store.path}: {store.num_documents:,} documents, {store.num_tokens:,} tokens "
        f"({store.dtype.name}), {size:,} bytes in {seconds:.1f} s ({store.num_tokens / max(seconds, 1e-9):,.0f} "
        f"tokens/s); held out {held['documents']:,} documents ({held['bytes']:,} bytes, fraction {held['fraction']:g})"
        f"; skipped {skipped['empty']:,} empty, {skipped['whitespace']:,} whitespace-only, "
        f"{skipped['one_token']:,} one-token"
    )


def main(argv: list[str] | None = None) -> TokenStore:
    (args,) = parse_args_with_config((TokenizeArguments,), argv, description=__doc__)
    if (Path(args.output_dir).exists() or Path(args.output_dir).is_symlink()) and not args.overwrite:
        raise ValueError(f"{args.output_dir} already exists; pass --overwrite true to replace it")
    texts, held_out = load_texts(args)
    tokenizer, origin = load_tokenizer(args, texts, held_out)
    start = time.perf_counter()
    store = tokenize_to_token_store(
        texts,
        tokenizer,
        args.output_dir,
        text_column=args.text_column,
        add_bos=args.add_bos,
        add_eos=args.add_eos,
        num_proc=args.num_proc,
        batch_size=args.batch_size,
        overwrite=args.overwrite,
        save_tokenizer=True,  # inside the store before it appears: never a published store without tokenizer/
        validation_fraction=0.0 if held_out else args.validation_fraction,
        tokenizer_origin=origin,
        held_out_texts=held_out,
    )
    print(summary(store, time.perf_counter() - start))
    return store


if __name__ == "__main__":
    main()
