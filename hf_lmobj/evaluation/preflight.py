"""What is refused before a model scores any text: a bootstrap past its budget, a window past a model's context,
a compare model whose tokenizer cannot be compared per byte.

Example:
    >>> check_bootstrap_budget(1000, ("code", "wiki"))  # 1000 resamples of a few figures: within the budget
    >>> check_models_fit(None, {"model_name_or_path": "any/model"})  # no window asked: nothing to check
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from types import SimpleNamespace
from typing import Any

from transformers import AutoConfig, AutoTokenizer

from hf_lmobj.metrics.scoring import check_fits_context
from hf_lmobj.metrics.slices import DocumentSums, domain_figures
from hf_lmobj.metrics.uncertainty import MAX_REPLICATE_ENTRIES
from hf_lmobj.store.tokenizer_fingerprint import tokenizer_fingerprint


def check_bootstrap_budget(bootstrap_samples: int, domains: Sequence[str]) -> None:
    """Refuse, before scoring, more resampled values than the bootstrap holds (samples x figure keys)."""
    if not bootstrap_samples:
        return
    count = len(domains)
    keys = len(domain_figures(DocumentSums(nll=[0.0] * count, tokens=[1] * count, bytes=[1] * count,
                                           words=[1] * count, doc_id=list(range(count)), domain=list(domains))))  # fmt: skip
    if bootstrap_samples * keys > MAX_REPLICATE_ENTRIES:
        raise ValueError(
            f"bootstrap_samples {bootstrap_samples} x {keys} figures = {bootstrap_samples * keys} resampled "
            f"values, beyond {MAX_REPLICATE_ENTRIES}; use fewer resamples (1000 is usual)"
        )


def load_compare_tokenizer(compare_model: str | None, tokenizer: Any) -> tuple[Any, bool]:
    """The compare model's own tokenizer and whether it differs from the model's (then the per-byte comparison
    runs, which needs fast tokenizers with a BOS token: checked here, before any scoring)."""
    if compare_model is None:
        return None, False
    try:
        other = AutoTokenizer.from_pretrained(compare_model)
    except (OSError, ValueError) as error:
        raise ValueError(f"compare_model {compare_model!r}: cannot load its tokenizer ({error})") from None
    differs = tokenizer_fingerprint(other) != tokenizer_fingerprint(tokenizer)
    for name, tok in (("model", tokenizer), ("compare_model", other)) if differs else ():
        if not getattr(tok, "is_fast", False) or tok.bos_token_id is None:
            raise ValueError(
                f"compare_model has another tokenizer than the model's, so the run compares them per byte, which needs "
                f"fast tokenizers with a BOS token; the {name}'s {type(tok).__name__} is "
                f"{'not fast' if not getattr(tok, 'is_fast', False) else 'without BOS'}: save it as a fast tokenizer "
                "with a bos_token"
            )
    return other, differs


def check_models_fit(max_length: int | None, models: Mapping[str, str | None]) -> None:
    """Refuse, before any scoring, a ``max_length`` past the context size of a model (``models``: the flag that
    names it -> its folder or Hub id; None: no such model)."""
    if max_length is None:
        return
    for flag, path in models.items():
        if path is not None:
            try:
                check_fits_context(SimpleNamespace(config=AutoConfig.from_pretrained(path)), max_length)
            except (OSError, ValueError) as error:
                raise ValueError(f"{flag} {path!r}: {error}") from None
