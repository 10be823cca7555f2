"""Small labelled sets built from the embedded corpus, for the fine-tuning recipes (no download).

Both come from the functions of the Python standard library's source, read with :mod:`ast`:

* an **instruction** set (``prompt`` = a function's signature and docstring, ``response`` = the
  rest of its body), for ``recipes/finetune_lora.py``;
* a **classification** set (``text`` = a function's source, ``label`` = the standard-library
  package it comes from), for ``recipes/finetune_classifier.py``.

Only module-level functions and class methods are used (not functions nested in another, whose
text would leak into their parent's). Everything is deterministic: functions are read in path and
line order and split by a SHA-1 of ``path::qualified_name`` (:func:`hf_lmobj.corpus.is_validation_path`).

Example:
    >>> splits = build_instruction_dataset(packages=("json",), max_chars=600)
    >>> row = splits["train"][0]
    >>> sorted(row), row["prompt"].startswith("def "), '\"\"\"' in row["prompt"]
    (['path', 'prompt', 'response'], True, True)
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import datasets
from transformers import PreTrainedTokenizerBase

from hf_lmobj.constants import IGNORE_INDEX
from hf_lmobj.corpus import is_validation_path, require_columns
from hf_lmobj.corpus_functions import FunctionSource, iter_functions

DEFAULT_PACKAGES = ("asyncio", "email", "logging", "unittest")


def build_instruction_dataset(
    packages: Sequence[str] | None = None,
    max_chars: int | None = 1200,
    validation_fraction: float = 0.1,
    max_examples: int | None = None,
) -> datasets.DatasetDict:
    """Prompt / response pairs: prompt = signature + docstring, response = the function's code.

    ``max_examples`` keeps the first N functions (path order) before the split.
    """
    if max_examples is not None and max_examples <= 0:
        raise ValueError(f"max_examples must be positive or None, got {max_examples}")
    rows = {name: {"prompt": [], "response": [], "path": []} for name in ("train", "validation")}
    for index, function in enumerate(iter_functions(packages, max_chars)):
        if max_examples is not None and index >= max_examples:
            break
        key = f"{function.path}::{function.qualname}"
        split = rows["validation" if is_validation_path(key, validation_fraction) else "train"]
        split["prompt"].append(function.header)
        split["response"].append(function.body)
        split["path"].append(key)
    if not rows["train"]["prompt"]:
        raise ValueError(f"no documented function found in packages={packages!r}; check the names")
    return datasets.DatasetDict({name: datasets.Dataset.from_dict(cols) for name, cols in rows.items()})


def build_package_classification_dataset(
    packages: Sequence[str] = DEFAULT_PACKAGES,
    train_per_class: int = 64,
    eval_per_class: int = 48,
    max_chars: int | None = 800,
) -> datasets.DatasetDict:
    """Which standard-library package a function comes from: balanced ``train`` / ``validation``.

    Each package's functions are ordered by a SHA-1 of ``path::qualname``; the first
    ``eval_per_class`` go to validation and the next ``train_per_class`` to train. Columns:
    ``text`` (the function's source), ``label`` (a ``ClassLabel`` named by ``packages``), ``path``.

    >>> splits = build_package_classification_dataset(("json", "html"), train_per_class=2, eval_per_class=1)
    >>> splits["train"].features["label"].names, list(splits["train"]["label"]), splits["validation"].num_rows
    (['json', 'html'], [0, 0, 1, 1], 2)
    """
    if len(set(packages)) < 2 or len(set(packages)) != len(packages):
        raise ValueError(f"packages must name at least 2 distinct packages, got {packages!r}")
    if train_per_class <= 0 or eval_per_class <= 0:
        raise ValueError("train_per_class and eval_per_class must be positive")
    by_package: dict[str, list[FunctionSource]] = {name: [] for name in packages}
    for function in iter_functions(packages, max_chars):
        by_package[function.package].append(function)
    rows = {name: {"text": [], "label": [], "path": []} for name in ("train", "validation")}
    for label, name in enumerate(packages):
        ranked = sorted(by_package[name], key=lambda f: _sha1(f"{f.path}::{f.qualname}"))
        needed = eval_per_class + train_per_class
        if len(ranked) < needed:
            raise ValueError(
                f"package {name!r} has {len(ranked)} documented functions of <= {max_chars} chars but "
                f"train_per_class + eval_per_class = {needed}; lower them, raise max_chars or pick another package"
            )
        for split, chosen in (("validation", ranked[:eval_per_class]), ("train", ranked[eval_per_class:needed])):
            rows[split]["text"] += [f.source for f in chosen]
            rows[split]["label"] += [label] * len(chosen)
            rows[split]["path"] += [f"{f.path}::{f.qualname}" for f in chosen]
    features = datasets.Features(
        {
            "text": datasets.Value("string"),
            "label": datasets.ClassLabel(names=list(packages)),
            "path": datasets.Value("string"),
        }
    )
    return datasets.DatasetDict({k: datasets.Dataset.from_dict(v, features=features) for k, v in rows.items()})


def _sha1(text: str) -> str:
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


def _special(tokenizer: PreTrainedTokenizerBase) -> tuple[list[int], list[int]]:
    bos = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    return bos, eos


def tokenize_instructions(
    dataset: datasets.Dataset,
    tokenizer: PreTrainedTokenizerBase,
    prompt_column: str = "prompt",
    response_column: str = "response",
) -> datasets.Dataset:
    """``input_ids`` = BOS + prompt + response + EOS; ``labels`` = -100 on BOS and prompt, else the ids.

    Prompt and response are tokenized separately, so the boundary is exact; nothing is truncated.

    >>> from hf_lmobj.corpus import build_tokenizer
    >>> tok = build_tokenizer(vocab_size=512, max_documents=20)
    >>> ds = datasets.Dataset.from_dict({"prompt": ["def f():"], "response": [" pass"]})
    >>> row = tokenize_instructions(ds, tok)[0]
    >>> n = len(tok("def f():")["input_ids"]) + 1
    >>> row["labels"][:n] == [-100] * n, row["labels"][n:] == row["input_ids"][n:]
    (True, True)
    """
    require_columns(dataset, prompt_column=prompt_column, response_column=response_column)
    bos, eos = _special(tokenizer)

    def encode(batch: dict[str, list[str]]) -> dict[str, list[list[int]]]:
        prompts = tokenizer(batch[prompt_column], add_special_tokens=False)["input_ids"]
        responses = tokenizer(batch[response_column], add_special_tokens=False)["input_ids"]
        return {
            "input_ids": [bos + p + r + eos for p, r in zip(prompts, responses)],
            "labels": [[IGNORE_INDEX] * (len(bos) + len(p)) + r + eos for p, r in zip(prompts, responses)],
        }

    return dataset.map(encode, batched=True, remove_columns=dataset.column_names, desc="tokenize instructions")


def tokenize_classification(
    dataset: datasets.Dataset,
    tokenizer: PreTrainedTokenizerBase,
    text_column: str = "text",
    label_column: str = "label",
) -> datasets.Dataset:
    """``input_ids`` = BOS (the pooled position) + text + EOS, ``attention_mask``, ``labels``; never truncated.

    >>> from hf_lmobj.corpus import build_tokenizer
    >>> tok = build_tokenizer(vocab_size=512, max_documents=20)
    >>> row = tokenize_classification(datasets.Dataset.from_dict({"text": ["x = 1"], "label": [3]}), tok)[0]
    >>> row["input_ids"][0] == tok.bos_token_id, row["labels"], sum(row["attention_mask"]) == len(row["input_ids"])
    (True, 3, True)
    """
    require_columns(dataset, text_column=text_column, label_column=label_column)
    bos, eos = _special(tokenizer)

    def encode(batch: dict[str, list]) -> dict[str, list]:
        ids = [bos + row + eos for row in tokenizer(batch[text_column], add_special_tokens=False)["input_ids"]]
        return {"input_ids": ids, "attention_mask": [[1] * len(row) for row in ids], "labels": batch[label_column]}

    return dataset.map(encode, batched=True, remove_columns=dataset.column_names, desc="tokenize")


def build_replaced_token_dataset(
    tokenizer: PreTrainedTokenizerBase,
    packages: Sequence[str] = DEFAULT_PACKAGES,
    train_per_class: int = 64,
    eval_per_class: int = 48,
    max_chars: int | None = 800,
    replace_prob: float = 0.15,
    seed: int = 0,
) -> datasets.DatasetDict:
    """Real or corrupted? Functions, half of them with ``replace_prob`` of their tokens replaced at random.

    A replaced-token detection task (as ELECTRA's discriminator): label 1 = corrupted, 0 = original.
    The functions are those of :func:`build_package_classification_dataset` (same balanced,
    disjoint split); every other one is corrupted, with replacements drawn uniformly from the
    non-special vocabulary by a ``random.Random(seed)``. Returns tokenized rows (BOS + ids + EOS).

    >>> from hf_lmobj.corpus import build_tokenizer
    >>> tok = build_tokenizer(vocab_size=512, max_documents=20)
    >>> splits = build_replaced_token_dataset(tok, ("json", "html"), train_per_class=2, eval_per_class=1)
    >>> list(splits["train"]["labels"]), splits["validation"].num_rows
    ([0, 1, 0, 1], 2)
    """
    import random

    if not 0.0 < replace_prob <= 1.0:
        raise ValueError(f"replace_prob must be in (0, 1], got {replace_prob}")
    functions = build_package_classification_dataset(packages, train_per_class, eval_per_class, max_chars)
    special = set(tokenizer.all_special_ids)
    pool = [i for i in range(len(tokenizer)) if i not in special]
    bos, eos = _special(tokenizer)
    out = {}
    for offset, (name, split) in enumerate(functions.items()):
        rng = random.Random(seed * 1_000_003 + offset)
        rows = {"input_ids": [], "attention_mask": [], "labels": []}
        for index, ids in enumerate(tokenizer(list(split["text"]), add_special_tokens=False)["input_ids"]):
            corrupted = index % 2
            if corrupted:
                ids = [rng.choice(pool) if rng.random() < replace_prob else t for t in ids]
            rows["input_ids"].append(bos + ids + eos)
            rows["attention_mask"].append([1] * (len(ids) + len(bos) + len(eos)))
            rows["labels"].append(corrupted)
        out[name] = datasets.Dataset.from_dict(rows)
    return datasets.DatasetDict(out)
