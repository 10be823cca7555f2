"""A run's provenance record in words: the card's sentences, summary line and "Training data" section.

Each function renders one part of a checked record (:mod:`.provenance`: :class:`~.provenance.ValidationSet`,
:class:`~.provenance.TokenizerOrigin`, :class:`~.provenance.Provenance`); the record's own methods
(``sentence``, ``summary``, ``skipped_line``, ``markdown``) call them. With ``markdown=True`` names and
locations are quoted as code; every table cell escapes ``|`` and line breaks.

Example:
    >>> skipped_documents_line({"training": {"empty": 1, "whitespace": 2}, "validation": {"empty": 0}})
    'training 1 empty, 2 whitespace-only; validation none'
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hf_lmobj.cards.provenance import Provenance, TokenizerOrigin, ValidationSet

_REASON_WORDS = {"empty": "empty", "whitespace": "whitespace-only", "one_token": "one-token"}


def validation_sentence(validation: ValidationSet, markdown: bool = False) -> str:
    """``37 documents (12,345 bytes) of jsonl (/data/jsonl), held out by ...; text fingerprint ...``."""
    quote = "`" if markdown else ""
    v = validation
    where = "" if v.location in (None, v.source) else f" ({quote}{v.location}{quote})"
    return (f"{v.documents:,} documents ({v.bytes:,} bytes) of {quote}{v.source}{quote}{where}, "
            f"{v.selection}; text fingerprint {quote}{v.fingerprint}{quote}")  # fmt: skip


def tokenizer_sentence(tokenizer: TokenizerOrigin, markdown: bool = False) -> str:
    """``trained on a sample of the training side (...); vocabulary 4,096; fingerprint ...``."""
    quote = "`" if markdown else ""
    t = tokenizer
    if t.origin == "trained":
        counts = ((t.sample_documents, "documents"), (t.sample_bytes, "bytes"))
        sample = ", ".join(f"{count:,} {unit}" for count, unit in counts if count is not None)
        of = " of " + ", ".join(f"{quote}{n}{quote}" for n in t.trained_on) if t.trained_on else ""
        what = f"trained by this run on a sample of its training side{f' ({sample}{of})' if sample or of else ''}"
    else:
        named = f" {quote}{t.name}{quote}" if t.name else ""
        what = f"given{named}" if t.origin == "given" else f"the token store's{named}"
    return f"{what}; vocabulary {t.vocab_size:,}; fingerprint {quote}{t.fingerprint}{quote}"


def data_summary(provenance: Provenance) -> str:
    """The card's first line names the data: ```jsonl``` or ``a mixture of `a` (0.3) and `b` (0.7)``."""
    if len(provenance.training) == 1:
        return f"`{provenance.training[0].dataset_id}`"
    parts = [f"`{s.dataset_id}` ({s.weight:.3g})" for s in provenance.training]
    return f"a mixture of {', '.join(parts[:-1])} and {parts[-1]}"


def skipped_documents_line(skipped_documents: dict[str, dict[str, int]] | None) -> str | None:
    """``training 1 empty, 1 whitespace-only; validation none``; None when nothing was skipped or counted."""
    if not skipped_documents or not any(any(c.values()) for c in skipped_documents.values()):
        return None
    return "; ".join(f"{side} " + (", ".join(f"{n:,} {_REASON_WORDS.get(r, r)}" for r, n in counts.items() if n)
                                   or "none") for side, counts in skipped_documents.items())  # fmt: skip


def training_data_markdown(provenance: Provenance) -> str:
    """The card's "Training data" section body: the sources' table, the validation set, tokenizer, skipped."""
    p = provenance
    lines = ["| source | location | kind | weight | tokens trained |", "| --- | --- | --- | --- | --- |"]
    for s in p.training:
        tokens = f"{s.tokens:,}" if s.tokens is not None else "not recorded"
        where = f"`{_cell(s.location)}`" if s.location is not None else "(in memory)"
        lines.append(f"| `{_cell(s.dataset_id)}` | {where} | {s.kind} | {s.weight:.4g} | {tokens} |")
    bullets = []
    if p.validation is not None:
        bullets.append(f"- **Validation text:** {_cell(validation_sentence(p.validation, markdown=True))} (a figure "
                       "is compared only with a figure on the same fingerprint)")  # fmt: skip
    if p.tokenizer is not None:
        bullets.append(f"- **Tokenizer:** {_cell(tokenizer_sentence(p.tokenizer, markdown=True))}")
    if p.skipped_documents is not None:
        skipped = skipped_documents_line(p.skipped_documents) or "none"
        bullets.append(f"- **Skipped documents** (nothing to learn from; counted, never trained or scored): {skipped}")
    if p.held_out_training_documents is not None:
        held = p.held_out_training_documents
        bullets.append(f"- **Held out of training:** {held:,} documents of the training sources (held-out "
                       "text, wherever it occurs: never trained)")  # fmt: skip
    if p.contaminated_training_documents is not None:
        dropped = p.contaminated_training_documents
        bullets.append(f"- **Dropped as contaminated:** {dropped:,} training documents holding a 13-token n-gram "
                       "of the validation text (drop_contaminated)")  # fmt: skip
    return "\n".join(lines + ([""] + bullets if bullets else []))


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")
