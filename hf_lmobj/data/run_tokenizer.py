"""The tokenizer of a run: the one it names, else its token stores' own, else one trained on its training text.

A tokenizer trained here sees a bounded sample of the training side only (never the held-out text) and is
cached by a fingerprint of that sample and the vocabulary size (:func:`hf_lmobj.corpus.train_tokenizer`), so
every rank and every rerun on the same data gets the same one.

Example:
    >>> from hf_lmobj.data.prepare import DataArguments
    >>> from hf_lmobj.data.run_sources import open_sources
    >>> args = DataArguments(max_documents=60, vocab_size=512, validation_fraction=0.2)
    >>> tokenizer, record = run_tokenizer(open_sources(args), args)
    >>> record["origin"], record["vocab_size"] == len(tokenizer)
    ('trained', True)
"""

from __future__ import annotations

from typing import Any

from transformers import AutoTokenizer, PreTrainedTokenizerBase

from hf_lmobj.data.prepare import DataArguments
from hf_lmobj.data.run_sources import RunSources
from hf_lmobj.store.tokenizer_fingerprint import tokenizer_fingerprint


def run_tokenizer(sources: RunSources, args: DataArguments) -> tuple[PreTrainedTokenizerBase, dict[str, Any]]:
    """The run's tokenizer and the card's record of where it came from (origin, name, vocabulary, fingerprint)."""
    if args.tokenizer_name:
        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer_name)
        record: dict[str, Any] = {"origin": "given", "name": args.tokenizer_name}
    elif sources.stores():
        store = sources.stores()[0]
        folder = store.path / "tokenizer"
        if not (folder / "tokenizer_config.json").is_file() and not (folder / "tokenizer.json").is_file():
            raise ValueError(
                f"token store {store.path} holds no tokenizer/ folder; name the tokenizer its ids come from with "
                "tokenizer_name=, or rebuild the store with recipes/tokenize_corpus.py (it saves its tokenizer)"
            )
        tokenizer = AutoTokenizer.from_pretrained(folder)
        record = {"origin": "token store", "name": str(store.path)}
    else:
        from hf_lmobj.corpus import train_tokenizer

        tokenizer, trained = train_tokenizer(sources.training_sample(), args.vocab_size)
        record = {**trained, "origin": "trained", "name": None, "trained_on": [s.name for s in sources.specs]}
    record.update(vocab_size=len(tokenizer), fingerprint=tokenizer_fingerprint(tokenizer))
    return tokenizer, record
