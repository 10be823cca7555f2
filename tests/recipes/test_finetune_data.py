"""hf_lmobj.labelled_sets: the instruction and classification sets built from the stdlib's functions."""

from __future__ import annotations

import datasets
import pytest

from hf_lmobj.constants import IGNORE_INDEX
from hf_lmobj.corpus_functions import extract_functions
from hf_lmobj.labelled_sets import (
    build_instruction_dataset,
    build_package_classification_dataset,
    tokenize_classification,
    tokenize_instructions,
)

SOURCE = '''import os

def top(a, b=1):
    """Add.

    Twice.
    """
    # a comment after the docstring belongs to the response
    return a + b


def no_doc(x):
    return x


class K:
    async def method(self):
        """Only a docstring and a body."""
        await self.other()

    def doc_only(self):
        """Nothing else."""

    def outer(self):
        """Has a nested function."""
        def inner():
            """Nested: not extracted on its own."""
            return 1
        return inner
'''


def test_extract_functions_cuts_at_the_docstring_and_dedents():
    found = extract_functions("pkg/mod.py", SOURCE)
    assert [f.qualname for f in found] == ["top", "K.method", "K.outer"]
    top, method, _ = found
    assert top.header == 'def top(a, b=1):\n    """Add.\n\n    Twice.\n    """\n'
    assert top.body == "    # a comment after the docstring belongs to the response\n    return a + b\n"
    assert method.header == 'async def method(self):\n    """Only a docstring and a body."""\n'
    assert method.body == "    await self.other()\n"
    assert top.source == SOURCE[SOURCE.index("def top") : SOURCE.index("\n\n\ndef no_doc") + 1]
    assert top.package == "pkg"


def test_extract_functions_skips_files_that_do_not_parse():
    assert extract_functions("bad.py", "def broken(:\n") == []


def test_instruction_dataset_is_deterministic_and_splits_by_function():
    first = build_instruction_dataset(packages=("json", "http"), max_chars=800)
    second = build_instruction_dataset(packages=("json", "http"), max_chars=800)
    assert first["train"]["path"] == second["train"]["path"]
    assert not set(first["train"]["path"]) & set(first["validation"]["path"])
    for row in first["train"]:
        assert len(row["prompt"]) + len(row["response"]) <= 800
        assert row["path"].split("/")[0] in ("json", "http")


def test_classification_dataset_is_balanced_disjoint_and_labelled_by_package():
    splits = build_package_classification_dataset(("json", "http", "logging"), train_per_class=3, eval_per_class=2)
    assert list(splits["train"]["label"]) == [0] * 3 + [1] * 3 + [2] * 3
    assert list(splits["validation"]["label"]) == [0] * 2 + [1] * 2 + [2] * 2
    names = splits["train"].features["label"].names
    for split in splits.values():
        for row in split:
            assert row["path"].startswith(names[row["label"]] + "/")
            assert len(row["text"]) <= 800
    assert not set(splits["train"]["path"]) & set(splits["validation"]["path"])


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"packages": ("json",)}, "at least 2 distinct"),
        ({"packages": ("json", "json")}, "at least 2 distinct"),
        ({"packages": ("json", "http"), "train_per_class": 0}, "must be positive"),
        ({"packages": ("json", "http"), "train_per_class": 500}, "package 'json' has"),
        (
            {"packages": ("no_such_package", "json"), "train_per_class": 1, "eval_per_class": 1},
            "package .no_such_package. has 0",
        ),
    ],
)
def test_classification_dataset_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        build_package_classification_dataset(**kwargs)


def test_instruction_dataset_rejects_unknown_packages():
    with pytest.raises(ValueError, match="no documented function"):
        build_instruction_dataset(packages=("no_such_package",))


def test_tokenize_instructions_masks_exactly_bos_and_prompt(tokenizer):
    ds = datasets.Dataset.from_dict({"prompt": ['def f(x):\n    """Doc."""\n'], "response": ["    return x\n"]})
    row = tokenize_instructions(ds, tokenizer)[0]
    prompt = tokenizer('def f(x):\n    """Doc."""\n', add_special_tokens=False)["input_ids"]
    response = tokenizer("    return x\n", add_special_tokens=False)["input_ids"]
    assert row["input_ids"] == [tokenizer.bos_token_id, *prompt, *response, tokenizer.eos_token_id]
    assert row["labels"] == [IGNORE_INDEX] * (1 + len(prompt)) + [*response, tokenizer.eos_token_id]


def test_tokenize_instructions_names_a_missing_column(tokenizer):
    with pytest.raises(ValueError, match="no column 'response'"):
        tokenize_instructions(datasets.Dataset.from_dict({"prompt": ["a"]}), tokenizer)


def test_tokenize_classification_never_truncates(tokenizer):
    text = "x = 1\n" * 500
    row = tokenize_classification(datasets.Dataset.from_dict({"text": [text], "label": [1]}), tokenizer)[0]
    assert tokenizer.decode(row["input_ids"][1:-1]) == text
    assert row["labels"] == 1 and row["attention_mask"] == [1] * len(row["input_ids"])


def test_replaced_token_dataset_corrupts_every_other_function_at_the_given_rate(tokenizer):
    from hf_lmobj.labelled_sets import build_package_classification_dataset, build_replaced_token_dataset

    packages = ("json", "http", "logging")
    texts = build_package_classification_dataset(packages, train_per_class=4, eval_per_class=2)
    splits = build_replaced_token_dataset(tokenizer, packages, train_per_class=4, eval_per_class=2,
                                          replace_prob=0.5, seed=3)  # fmt: skip
    again = build_replaced_token_dataset(tokenizer, packages, train_per_class=4, eval_per_class=2,
                                         replace_prob=0.5, seed=3)  # fmt: skip
    assert splits["train"]["input_ids"] == again["train"]["input_ids"]
    changed = total = 0
    special = set(tokenizer.all_special_ids)
    for row, text in zip(splits["train"], texts["train"]["text"]):
        original = tokenizer(text, add_special_tokens=False)["input_ids"]
        ids = row["input_ids"][1:-1]
        assert len(ids) == len(original)
        if row["labels"] == 0:
            assert ids == original
        else:
            changed += sum(a != b for a, b in zip(ids, original))
            total += len(ids)
            assert not set(ids) - set(original) & special
    assert list(splits["train"]["labels"]) == [0, 1] * 6
    assert 0.4 < changed / total < 0.55  # 0.5 drawn, minus draws that picked the original token


def test_replaced_token_dataset_rejects_a_bad_rate(tokenizer):
    from hf_lmobj.labelled_sets import build_replaced_token_dataset

    with pytest.raises(ValueError, match="replace_prob"):
        build_replaced_token_dataset(tokenizer, ("json", "http"), 1, 1, replace_prob=0.0)
