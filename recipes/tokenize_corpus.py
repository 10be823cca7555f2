"""Tokenize a corpus once into a token store (memory-mapped tokens + document index) for pre-training.

    python recipes/tokenize_corpus.py --output_dir data/stdlib_store          # the embedded stdlib corpus, local BPE tokenizer
    python recipes/tokenize_corpus.py --dataset_name path/to/jsonl_folder --text_column text \\
        --tokenizer_name gpt2 --num_proc 8 --output_dir data/store
    python recipes/tokenize_corpus.py --dataset_name HuggingFaceFW/fineweb --dataset_config sample-10BT \\
        --streaming true --tokenizer_name gpt2 --output_dir data/fineweb_store   # never materialised
    python -m hf_lmobj.recipes.tokenize_corpus --config my_tokenize.yaml --overwrite true   # from the installed package

``--dataset_name`` is a Hub id, a local folder of ``.jsonl`` / ``.json`` / ``.parquet`` / ``.txt`` /
``.arrow`` files or one such file (through ``datasets.load_dataset``); without it, the embedded
standard-library corpus (its ``--split``, ``train`` or ``validation``). ``--num_proc N`` tokenizes a
map-style dataset in N processes (same bytes as one); ``--streaming true`` reads in one process.
The store is written to ``--output_dir`` (``tokens.bin``, ``offsets.npy``, ``meta.json``; see
``hf_lmobj.data.token_store``) with the tokenizer in ``<output_dir>/tokenizer/`` (saved before the
store is renamed into place: the folder appears with both or not at all), so that a training run
reuses both. Every field of ``TokenizeArguments`` can be set in a ``--config`` YAML
file or on the command line. One summary line is printed.
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
from hf_lmobj.corpus import SPECIAL_TOKENS, build_tokenizer, load_text_splits
from hf_lmobj.data.token_store import TokenStore
from hf_lmobj.data.tokenize_store import tokenize_to_token_store

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
        default=None, metadata={"help": "Hub/local tokenizer; None trains a byte-level BPE on the stdlib corpus."}
    )
    vocab_size: int = field(default=8192, metadata={"help": "Vocabulary of the locally trained tokenizer."})
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
        self.batch_size = check_length(self.batch_size, "batch_size", 1, "texts per tokenizer call")
        for name in ("streaming", "add_bos", "add_eos", "overwrite"):
            setattr(self, name, check_flag(getattr(self, name), name))


def load_texts(args: TokenizeArguments) -> datasets.Dataset | datasets.IterableDataset:
    """The split to tokenize, in its own order, cut to ``max_documents``."""
    if args.dataset_name is None:
        splits = load_text_splits(max_documents=args.max_documents)  # the first N files, before the split
        if args.split not in splits:
            raise ValueError(f"the embedded corpus has splits {list(splits)}, not {args.split!r}")
        return splits[args.split]
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
    return texts


def load_tokenizer(args: TokenizeArguments) -> PreTrainedTokenizerBase:
    if args.tokenizer_name is not None:
        return AutoTokenizer.from_pretrained(args.tokenizer_name)
    return build_tokenizer(args.vocab_size)


def main(argv: list[str] | None = None) -> TokenStore:
    (args,) = parse_args_with_config((TokenizeArguments,), argv, description=__doc__)
    texts = load_texts(args)
    tokenizer = load_tokenizer(args)
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
    )
    seconds = time.perf_counter() - start
    size = sum((store.path / name).stat().st_size for name in ("tokens.bin", "offsets.npy"))
    print(
        f"token store {store.path}: {store.num_documents:,} documents, {store.num_tokens:,} tokens "
        f"({store.dtype.name}), {size:,} bytes in {seconds:.1f} s ({store.num_tokens / max(seconds, 1e-9):,.0f} tokens/s)"
    )
    return store


if __name__ == "__main__":
    main()
