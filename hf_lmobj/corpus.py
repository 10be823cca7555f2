"""The embedded default corpus (the Python standard library's own source) and tokenizers trained on any text.

Nothing here touches the network: the corpus is read from the running interpreter's ``Lib/``
folder and tokenizers are trained locally with the ``tokenizers`` library, then cached on disk by a
fingerprint of the text they were trained on (:func:`train_tokenizer`). Users who want a Hub dataset or
tokenizer use ``datasets.load_dataset`` / ``AutoTokenizer.from_pretrained`` as usual; every function in
this package accepts those too.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sysconfig
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import datasets
from transformers import PreTrainedTokenizerFast

from hf_lmobj.checks import check_length
from hf_lmobj.fim.format import FIM_TOKENS
from hf_lmobj.held_out import (
    DEFAULT_VALIDATION_FRACTION,
    HeldOut,
    text_problem,
    texts_fingerprint,
)

PAD, BOS, EOS, UNK, MASK = "<pad>", "<s>", "</s>", "<unk>", "<mask>"
NUM_SENTINELS = 100
SENTINELS = tuple(f"<extra_id_{i}>" for i in range(NUM_SENTINELS))
UL2_MODE_TOKENS = ("[R]", "[S]", "[X]")
# FIM_TOKENS: the fill-in-the-middle sentinels, named as StarCoder's (bigcode) tokenizer names them
SPECIAL_TOKENS = (PAD, BOS, EOS, UNK, MASK, *SENTINELS, *UL2_MODE_TOKENS, *FIM_TOKENS)
#: The vocabulary size of a tokenizer trained here when none is named (pretrain, tokenize_corpus, build_tokenizer).
DEFAULT_VOCAB_SIZE = 8192
#: The most UTF-8 bytes of text a tokenizer is trained on: the first documents of the training side up to it.
TOKENIZER_SAMPLE_BYTES = 64 * 2**20
# bump when the trained tokenizer's recipe changes (invalidates the cache); 2: FIM tokens; 3: keyed by the sample
_TOKENIZER_FORMAT = 3


def stdlib_root() -> Path:
    """The folder holding the running interpreter's standard library (``Lib/`` on Windows)."""
    return Path(sysconfig.get_paths()["stdlib"])


def is_validation_path(relative_path: str, validation_fraction: float = DEFAULT_VALIDATION_FRACTION) -> bool:
    """The embedded corpus's published validation split (keyed by a file's path) and the labelled sets' (keyed by
    ``path::qualname``, :mod:`hf_lmobj.labelled_sets`): by the key's SHA-1.

    The bucket is ``int(sha1(key)) % 100``; the split depends only on the key, so it is the same on
    every machine. A corpus that names no validation split is split by content instead
    (:class:`hf_lmobj.held_out.HeldOut`).

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

    ``site-packages`` (third-party code) is skipped; so are the few files that are not UTF-8, and
    the empty or whitespace-only ones (nothing to learn from).
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


def _stdlib_documents(validation_fraction: float, max_documents: int | None) -> Iterator[tuple[str, str, bool]]:
    """``(path, text, in validation)`` of the first ``max_documents`` stdlib files; the split by path."""
    validation_fraction = HeldOut(validation_fraction).fraction  # a number in [0, 1), refused by name otherwise
    max_documents = check_length(max_documents, "max_documents", 1, "None = every file", optional=True)
    for index, (path, text) in enumerate(iter_stdlib_sources()):
        if max_documents is not None and index >= max_documents:
            return
        yield path, text, is_validation_path(path, validation_fraction)


def load_stdlib_corpus(
    validation_fraction: float = DEFAULT_VALIDATION_FRACTION, max_documents: int | None = None
) -> datasets.DatasetDict:
    """The standard library's source as ``DatasetDict(train=..., validation=...)``.

    One document per file, columns ``text`` and ``path``, in path order. A file is in ``validation`` when
    :func:`is_validation_path` ``(path, validation_fraction)`` puts it there: the corpus's own published split,
    the same on every machine (37 files, 604,522 bytes at 0.02 on Python 3.11), which a run treats as any
    dataset's named validation split (a training document equal to a validation text is never trained) and
    ``recipes/tokenize_corpus.py`` writes to the store's ``held_out.jsonl``. ``max_documents`` keeps the first
    N documents in path order (before the split), for quick tests.

    Example:
        >>> splits = load_stdlib_corpus(max_documents=300)
        >>> sorted(splits.keys()), splits["train"].column_names, splits["train"].num_rows
        (['train', 'validation'], ['text', 'path'], 295)
        >>> splits["validation"]["path"][:2]  # the same files on every machine with this Python
        ['decimal.py', 'distutils/command/build_clib.py']
    """
    rows: dict[str, dict[str, list[str]]] = {
        "train": {"text": [], "path": []},
        "validation": {"text": [], "path": []},
    }
    for path, text, held_out in _stdlib_documents(validation_fraction, max_documents):
        split = rows["validation" if held_out else "train"]
        split["text"].append(text)
        split["path"].append(path)
    features = datasets.Features({"text": datasets.Value("string"), "path": datasets.Value("string")})
    return datasets.DatasetDict(
        {name: datasets.Dataset.from_dict(cols, features=features) for name, cols in rows.items()}
    )


def default_cache_dir() -> Path:
    """``$HF_LMOBJ_CACHE`` or ``~/.cache/hf_lmobj``."""
    return Path(os.environ.get("HF_LMOBJ_CACHE", Path.home() / ".cache" / "hf_lmobj"))


@dataclass(frozen=True)
class _Sample:
    """The texts a tokenizer is trained on: their UTF-8 size and their fingerprint (content and order)."""

    texts: list[str]
    num_bytes: int
    fingerprint: str


def _read_sample(texts: Iterable[str], max_bytes: int) -> _Sample:
    """The texts in order, empty and whitespace-only ones left out, until ``max_bytes`` UTF-8 bytes are reached.

    Whole texts only: the one that reaches the bound is kept and nothing after it is read.
    """
    if isinstance(texts, (str, bytes)) or not isinstance(texts, Iterable):
        raise TypeError(f"texts must be an iterable of strings (a list, a generator), got {type(texts).__name__}")
    taken: list[str] = []
    size = 0
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise TypeError(f"texts[{index}] is a {type(text).__name__}, not a string; give the texts themselves")
        if text_problem(text) is not None:
            continue
        try:
            size += len(text.encode("utf-8"))
        except UnicodeEncodeError as error:
            raise ValueError(
                f"texts[{index}] is not valid Unicode (a lone surrogate at position {error.start}); clean the text"
            ) from None
        taken.append(text)
        if size >= max_bytes:
            break
    return _Sample(taken, size, texts_fingerprint(taken))


def _cache_key(sample_fingerprint: str, vocab_size: int) -> str:
    """The cache folder's name: the trained tokenizer's recipe, its vocabulary size and its sample's fingerprint."""
    parts = (_TOKENIZER_FORMAT, vocab_size, sample_fingerprint)
    return hashlib.blake2b(repr(parts).encode(), digest_size=8).hexdigest()


def _tokenizer_cache_key(
    vocab_size: int, validation_fraction: float = DEFAULT_VALIDATION_FRACTION, max_documents: int | None = None
) -> str:
    """The cache folder :func:`build_tokenizer` uses for these arguments (its sample's key)."""
    sample = _read_sample(_stdlib_training_texts(validation_fraction, max_documents), TOKENIZER_SAMPLE_BYTES)
    return _cache_key(sample.fingerprint, vocab_size)


def _stdlib_training_texts(validation_fraction: float, max_documents: int | None) -> Iterator[str]:
    return (text for _, text, held_out in _stdlib_documents(validation_fraction, max_documents) if not held_out)


def train_tokenizer(
    texts: Iterable[str],
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    max_bytes: int = TOKENIZER_SAMPLE_BYTES,
    cache_dir: str | os.PathLike | None = None,
) -> tuple[PreTrainedTokenizerFast, dict[str, Any]]:
    """Train (or load from cache) a byte-level BPE on a bounded sample of ``texts``; return it and its origin.

    The sample is ``texts`` read in order, empty and whitespace-only texts left out, up to ``max_bytes``
    UTF-8 bytes (whole texts: the one reaching the bound is the last read). Give the training side only
    (held-out documents excluded). The tokenizer is cached under ``<cache_dir>/tokenizers/<key>``, the key a
    fingerprint of the sample's content and order, ``vocab_size`` and the training recipe: the same sample
    loads the cached tokenizer, another sample or size trains a new one. It carries every special token the
    objectives need: ``<pad>``, ``<s>``, ``</s>``, ``<unk>``, ``<mask>``, the T5 sentinels ``<extra_id_0>`` ...
    ``<extra_id_99>``, the UL2 mode tokens ``[R]``, ``[S]``, ``[X]`` and StarCoder's fill-in-the-middle tokens
    ``<fim_prefix>``, ``<fim_middle>``, ``<fim_suffix>``, ``<fim_pad>``. Like GPT-2's, it adds no special token
    when encoding. A small sample may give fewer than ``vocab_size`` ids (no more merges to learn).

    Returns:
        The tokenizer and a JSON-able record of its origin: ``{"origin": "trained", "vocab_size": <asked>,
        "sample_documents": n, "sample_bytes": b, "sample_fingerprint": <16 hex digits>}``.

    Example:
        >>> tok, origin = train_tokenizer(["zorvu taleki zorvu"] * 50, vocab_size=400)
        >>> tok.decode(tok("zorvu taleki")["input_ids"]), origin["sample_documents"], origin["sample_bytes"]
        ('zorvu taleki', 50, 900)

    Raises:
        TypeError: ``texts`` not an iterable of strings (a lone string is refused), ``vocab_size`` or
            ``max_bytes`` not an int.
        ValueError: ``vocab_size`` below the 256 bytes + the special tokens, ``max_bytes`` below 1, a text
            with a lone surrogate, no text left to train on (none given, or all empty / whitespace-only).
    """
    least = 256 + len(SPECIAL_TOKENS)
    vocab_size = check_length(vocab_size, "vocab_size", least, "the 256 bytes + the special tokens")
    max_bytes = check_length(max_bytes, "max_bytes", 1, "the sample's bound in UTF-8 bytes")
    sample = _read_sample(texts, max_bytes)
    if not sample.texts:
        raise ValueError(
            "no text to train a tokenizer on: every text given was empty or whitespace-only (or none was given); "
            "give the training texts, or name a tokenizer (--tokenizer_name)"
        )
    folder = Path(cache_dir or default_cache_dir()) / "tokenizers" / _cache_key(sample.fingerprint, vocab_size)
    if not (folder / "tokenizer.json").exists():
        _publish_tokenizer(_train_byte_level_bpe(sample.texts, vocab_size), folder)
    origin = {
        "origin": "trained",
        "vocab_size": vocab_size,
        "sample_documents": len(sample.texts),
        "sample_bytes": sample.num_bytes,
        "sample_fingerprint": sample.fingerprint,
    }
    return PreTrainedTokenizerFast.from_pretrained(folder), origin


def build_tokenizer(
    vocab_size: int = DEFAULT_VOCAB_SIZE,
    validation_fraction: float = DEFAULT_VALIDATION_FRACTION,
    max_documents: int | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> PreTrainedTokenizerFast:
    """:func:`train_tokenizer` on the embedded corpus's training side (its first ``max_documents`` files).

    The documents :func:`load_stdlib_corpus` ``(validation_fraction, max_documents)`` puts in ``train``, in
    path order; cached like any trained tokenizer (by that sample and ``vocab_size``).

    Example:
        >>> tok = build_tokenizer(vocab_size=512, max_documents=20)
        >>> tok.decode(tok("def f(x):\\n    return x")["input_ids"])
        'def f(x):\\n    return x'
    """
    least = 256 + len(SPECIAL_TOKENS)
    vocab_size = check_length(vocab_size, "vocab_size", least, "the 256 bytes + the special tokens")
    texts = _stdlib_training_texts(validation_fraction, max_documents)
    return train_tokenizer(texts, vocab_size, cache_dir=cache_dir)[0]


def _publish_tokenizer(tokenizer: PreTrainedTokenizerFast, folder: Path) -> None:
    """Save ``tokenizer`` into a temporary sibling of ``folder`` of its own, then rename it to ``folder`` (atomic).

    The temporary name is unique (pid and a random part: two containers may share a pid and a cache),
    so no two writers ever share one. When another process has published ``folder`` first (the same
    tokenizer: the key is the sample and the recipe), its copy is kept and this one removed; a ``folder``
    that holds no ``tokenizer.json`` is not a cache entry and is refused by name.
    """
    folder.parent.mkdir(parents=True, exist_ok=True)
    tmp = folder.with_name(f".{folder.name}.tmp-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    try:
        tokenizer.save_pretrained(tmp)
        try:
            tmp.rename(folder)
        except OSError:  # another process won the race (its copy is identical), or folder is not a cache entry
            if not (folder / "tokenizer.json").is_file():
                raise ValueError(
                    f"{folder} is in the tokenizer cache but holds no tokenizer.json (not written by train_tokenizer); "
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
