"""The embedded default corpus (the Python standard library's own source) and its tokenizer.

Nothing here touches the network: the corpus is read from the running interpreter's ``Lib/``
folder and the tokenizer is trained locally with the ``tokenizers`` library, then cached on disk.
Users who want a Hub dataset or tokenizer use ``datasets.load_dataset`` /
``AutoTokenizer.from_pretrained`` as usual; every function in this package accepts those too.

Example:
    >>> from hf_lmobj.corpus import load_stdlib_corpus
    >>> splits = load_stdlib_corpus(max_documents=50)
    >>> sorted(splits.keys()), splits["train"].column_names
    (['train', 'validation'], ['text', 'path'])
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sysconfig
import uuid
from collections.abc import Iterator
from pathlib import Path

import datasets
from transformers import PreTrainedTokenizerFast

from hf_lmobj.fim.format import FIM_TOKENS

PAD, BOS, EOS, UNK, MASK = "<pad>", "<s>", "</s>", "<unk>", "<mask>"
NUM_SENTINELS = 100
SENTINELS = tuple(f"<extra_id_{i}>" for i in range(NUM_SENTINELS))
UL2_MODE_TOKENS = ("[R]", "[S]", "[X]")
# FIM_TOKENS: the fill-in-the-middle sentinels, named as StarCoder's (bigcode) tokenizer names them
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK, MASK, *SENTINELS, *UL2_MODE_TOKENS, *FIM_TOKENS)
_TOKENIZER_FORMAT = 2  # bump when the trained tokenizer's recipe changes (invalidates the cache); 2: FIM tokens


def stdlib_root() -> Path:
    """The folder holding the running interpreter's standard library (``Lib/`` on Windows)."""
    return Path(sysconfig.get_paths()["stdlib"])


def is_validation_path(relative_path: str, validation_fraction: float = 0.02) -> bool:
    """Deterministic split: a document is held out when its path's SHA-1 falls in the first buckets.

    The bucket is ``int(sha1(path)) % 100``; the split depends only on the relative POSIX path, so
    it is the same on every machine and for every Python build of one version.

    Example:
        >>> is_validation_path("json/decoder.py"), is_validation_path("json/decoder.py", 1.0)
        (False, True)
    """
    if not 0.0 <= validation_fraction <= 1.0:
        raise ValueError(f"validation_fraction must be in [0, 1], got {validation_fraction}")
    bucket = int(hashlib.sha1(relative_path.encode("utf-8")).hexdigest(), 16) % 100
    return bucket < validation_fraction * 100


def iter_stdlib_sources(root: Path | None = None) -> Iterator[tuple[str, str]]:
    """Yield ``(relative_path, text)`` for every UTF-8 ``.py`` file of the standard library, sorted.

    ``site-packages`` (third-party code) is skipped; so are the few files that are not UTF-8.
    """
    root = root or stdlib_root()
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root)
        if "site-packages" in relative.parts or "dist-packages" in relative.parts:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if text.strip():
            yield relative.as_posix(), text


def load_stdlib_corpus(validation_fraction: float = 0.02, max_documents: int | None = None) -> datasets.DatasetDict:
    """The standard library's source as ``DatasetDict(train=..., validation=...)``.

    One document per file, columns ``text`` and ``path``. ``max_documents`` keeps the first N
    documents in path order (before the split), for quick tests.
    """
    if max_documents is not None and max_documents <= 0:
        raise ValueError(f"max_documents must be positive or None, got {max_documents}")
    rows: dict[str, dict[str, list[str]]] = {
        "train": {"text": [], "path": []},
        "validation": {"text": [], "path": []},
    }
    for index, (path, text) in enumerate(iter_stdlib_sources()):
        if max_documents is not None and index >= max_documents:
            break
        split = "validation" if is_validation_path(path, validation_fraction) else "train"
        rows[split]["text"].append(text)
        rows[split]["path"].append(path)
    features = datasets.Features({"text": datasets.Value("string"), "path": datasets.Value("string")})
    return datasets.DatasetDict(
        {name: datasets.Dataset.from_dict(cols, features=features) for name, cols in rows.items()}
    )


def default_cache_dir() -> Path:
    """``$HF_LMOBJ_CACHE`` or ``~/.cache/hf_lmobj``."""
    return Path(os.environ.get("HF_LMOBJ_CACHE", Path.home() / ".cache" / "hf_lmobj"))


def _tokenizer_cache_key(vocab_size: int, validation_fraction: float, max_documents: int | None) -> str:
    import sys

    parts = (_TOKENIZER_FORMAT, sys.version_info[:2], vocab_size, validation_fraction, max_documents)
    return hashlib.sha1(repr(parts).encode()).hexdigest()[:16]


def build_tokenizer(
    vocab_size: int = 8192,
    validation_fraction: float = 0.02,
    max_documents: int | None = None,
    cache_dir: str | Path | None = None,
) -> PreTrainedTokenizerFast:
    """Train (or load from cache) a byte-level BPE on the corpus's train split.

    The tokenizer carries every special token the objectives need: ``<pad>``, ``<s>``, ``</s>``,
    ``<unk>``, ``<mask>``, the T5 sentinels ``<extra_id_0>`` ... ``<extra_id_99>``, the UL2 mode
    tokens ``[R]``, ``[S]``, ``[X]`` and StarCoder's fill-in-the-middle tokens ``<fim_prefix>``,
    ``<fim_middle>``, ``<fim_suffix>``, ``<fim_pad>``. Like GPT-2's, it adds no special token when encoding; the
    collators and :func:`tokenize_corpus` decide where BOS/EOS go.

    Example:
        >>> tok = build_tokenizer(vocab_size=512, max_documents=20)
        >>> tok.decode(tok("def f(x):\\n    return x")["input_ids"])
        'def f(x):\\n    return x'
    """
    if vocab_size < 256 + len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size must be at least {256 + len(SPECIAL_TOKENS)} (bytes + specials)")
    folder = Path(cache_dir or default_cache_dir()) / "tokenizers"
    folder = folder / _tokenizer_cache_key(vocab_size, validation_fraction, max_documents)
    if (folder / "tokenizer.json").exists():
        return PreTrainedTokenizerFast.from_pretrained(folder)
    texts = load_stdlib_corpus(validation_fraction, max_documents)["train"]["text"]
    tokenizer = _train_byte_level_bpe(texts, vocab_size)
    _publish_tokenizer(tokenizer, folder)
    return PreTrainedTokenizerFast.from_pretrained(folder)


def _publish_tokenizer(tokenizer: PreTrainedTokenizerFast, folder: Path) -> None:
    """Save ``tokenizer`` into a temporary sibling of ``folder`` of its own, then rename it to ``folder`` (atomic).

    The temporary name is unique (pid and a random part: two containers may share a pid and a cache),
    so no two writers ever share one. When another process has published ``folder`` first (the same
    tokenizer: the key is the recipe), its copy is kept and this one removed; a ``folder`` that holds no
    ``tokenizer.json`` is not a cache entry and is refused by name.
    """
    tmp = folder.with_name(f".{folder.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        tokenizer.save_pretrained(tmp)
        try:
            tmp.rename(folder)
        except OSError:  # another process won the race (its copy is identical), or folder is not a cache entry
            if not (folder / "tokenizer.json").is_file():
                raise ValueError(
                    f"{folder} is in the tokenizer cache but holds no tokenizer.json (not written by build_tokenizer); "
                    "remove that folder and rerun"
                ) from None
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def _train_byte_level_bpe(texts: list[str], vocab_size: int) -> PreTrainedTokenizerFast:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    core = Tokenizer(models.BPE(unk_token=None, byte_fallback=False))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(texts, trainer=trainer, length=len(texts))
    return PreTrainedTokenizerFast(
        tokenizer_object=core,
        pad_token=PAD,
        bos_token=BOS,
        eos_token=EOS,
        unk_token=UNK,
        mask_token=MASK,
        additional_special_tokens=[*SENTINELS, *UL2_MODE_TOKENS, *FIM_TOKENS],
        model_max_length=1_000_000,
        clean_up_tokenization_spaces=False,
    )


def require_columns(dataset: datasets.Dataset, **columns: str) -> None:
    """Each ``argument=column`` names a column of ``dataset``, or a ValueError says which argument to set.

    Example:
        >>> require_columns(datasets.Dataset.from_dict({"text": ["a"]}), text_column="content")
        Traceback (most recent call last):
        ...
        ValueError: dataset has no column 'content' (has ['text']); set text_column=<column name>
    """
    for argument, column in columns.items():
        if column not in dataset.column_names:
            raise ValueError(
                f"dataset has no column {column!r} (has {dataset.column_names}); set {argument}=<column name>"
            )


def tokenize_corpus(
    dataset: datasets.Dataset,
    tokenizer: PreTrainedTokenizerFast,
    add_bos: bool = False,
    add_eos: bool = True,
    text_column: str = "text",
    num_proc: int | None = None,
) -> datasets.Dataset:
    """Tokenize whole documents (never truncated) into ``input_ids`` plus their ``num_bytes``.

    ``num_bytes`` is the UTF-8 length of the original text, the denominator of bits per byte.
    ``add_bos`` / ``add_eos`` put the tokenizer's BOS / EOS around each document, unless the
    tokenizer already adds them itself.

    Example:
        >>> tok = build_tokenizer(vocab_size=512, max_documents=20)
        >>> ds = datasets.Dataset.from_dict({"text": ["é"]})
        >>> row = tokenize_corpus(ds, tok)[0]
        >>> row["num_bytes"], row["input_ids"][-1] == tok.eos_token_id
        (2, True)
    """
    require_columns(dataset, text_column=text_column)
    probe = tokenizer("a", add_special_tokens=True)["input_ids"]
    bos = [tokenizer.bos_token_id] if add_bos and probe[:1] != [tokenizer.bos_token_id] else []
    eos = [tokenizer.eos_token_id] if add_eos and probe[-1:] != [tokenizer.eos_token_id] else []
    if (add_bos and tokenizer.bos_token_id is None) or (add_eos and tokenizer.eos_token_id is None):
        raise ValueError("tokenizer has no bos/eos token; pass add_bos=False / add_eos=False")

    def encode(batch: dict[str, list[str]]) -> dict[str, list]:
        ids = tokenizer(batch[text_column], add_special_tokens=True)["input_ids"]
        return {
            "input_ids": [bos + row + eos for row in ids],
            "num_bytes": [len(text.encode("utf-8")) for text in batch[text_column]],
        }

    return dataset.map(
        encode,
        batched=True,
        remove_columns=dataset.column_names,
        num_proc=num_proc,
        desc="tokenize",
    )


def load_text_splits(
    dataset_name: str | None = None,
    dataset_config: str | None = None,
    text_column: str = "text",
    validation_fraction: float = 0.02,
    max_documents: int | None = None,
) -> datasets.DatasetDict:
    """Train/validation text splits: the embedded corpus by default, else a Hub or local dataset.

    A named dataset goes through ``datasets.load_dataset`` as usual; without a ``validation``
    split, ``validation_fraction`` of ``train`` is held out with a fixed seed.
    """
    if dataset_name is None:
        return load_stdlib_corpus(validation_fraction, max_documents)
    loaded = datasets.load_dataset(dataset_name, dataset_config)
    if "train" not in loaded:
        raise ValueError(f"dataset {dataset_name!r} has no 'train' split (has {list(loaded)})")
    require_columns(loaded["train"], text_column=text_column)
    train = loaded["train"]
    if max_documents is not None:
        train = train.select(range(min(max_documents, train.num_rows)))
    if "validation" in loaded:
        return datasets.DatasetDict(train=train, validation=loaded["validation"])
    split = train.train_test_split(test_size=validation_fraction, seed=0)
    return datasets.DatasetDict(train=split["train"], validation=split["test"])
