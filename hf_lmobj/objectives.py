"""The one objective vocabulary: a frozen spec per objective word, and the lookup every module uses.

The words are ``causal``, ``masked``, ``span``, ``ul2``, ``text_infilling`` and ``prefix_lm`` (the
pre-training objectives) plus ``sequence_classification`` (the fine-tuning card); fill-in-the-middle
and multi-token prediction are variants of ``causal``, ELECTRA of ``masked``. A spec says what the
loss scores, which collator shapes the batches (a ``"module:Class"`` path that
:meth:`ObjectiveSpec.collator_class` imports on first use), which architectures and Auto class fit, which card
and Hub task describe the model, how the recipes prepare its data and what their report shows.
Code reads these attributes; no module outside this one compares objective names.
"""

from __future__ import annotations

import importlib
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal


@dataclass(frozen=True)
class ObjectiveSpec:
    """What one objective is, trains on and reports; every field is read, never a name compared.

    ``next_token``: targets are each position's next token (labels aligned with the inputs, the model
    shifts); ``encoder_decoder``: the decoder reads the labels shifted right; neither: the labels are
    the targets in place (masked LM). ``data`` says how the recipes shape pre-training text:
    ``"packed"`` rows of whole documents, ``"pieces"`` of one document each, None when the recipes
    do not pre-train it. ``template`` names ``model_cards/<template>.md``.

    Example:
        >>> causal = OBJECTIVES["causal"]  # every objective word -> its spec
        >>> causal.next_token, causal.auto_class, causal.data, causal.variants
        (True, 'AutoModelForCausalLM', 'packed', ('fim', 'mtp'))
        >>> causal.collator_class().__name__, OBJECTIVES["masked"].labels_in_place
        ('DataCollatorForCausalLM', True)
        >>> spec = get_objective("ul2")
        >>> spec.encoder_decoder, spec.auto_class, spec.template
        (True, 'AutoModelForSeq2SeqLM', 'span')
        >>> get_objective(spec) is spec, objective_names(pretraining=True)[:3]
        (True, ('causal', 'masked', 'span'))
    """

    name: str
    title: str
    summary: str
    next_token: bool
    encoder_decoder: bool
    auto_class: str  # the transformers Auto class that loads the model
    task: str  # Hub task id of the model-index results
    pipeline_tag: str | None  # a transformers pipeline that runs the model (None: transformers has none)
    template: str
    architectures: tuple[str, ...] = ()  # model types the recipes build from config; the first is the default
    collator: str | None = None  # "module:Class" of the public collator class that shapes its batches
    data: Literal["packed", "pieces"] | None = None
    accuracy_metric: str | None = None  # the report's target-token accuracy key (None: it scores text instead)
    pretraining: bool = True
    variants: tuple[str, ...] = ()  # what rides on it: fim and mtp on causal, electra on masked

    def __post_init__(self) -> None:
        if self.next_token and self.encoder_decoder:
            raise ValueError(f"objective {self.name!r}: next_token and encoder_decoder exclude each other")
        if self.data not in (None, "packed", "pieces"):
            raise ValueError(f"objective {self.name!r}: data must be 'packed', 'pieces' or None, got {self.data!r}")
        if self.collator is not None and not _is_import_path(self.collator):
            raise ValueError(
                f"objective {self.name!r}: collator must be an import path 'package.module:Class' "
                f"(e.g. 'hf_lmobj.collators.causal:DataCollatorForCausalLM'), got {self.collator!r}"
            )

    @property
    def labels_in_place(self) -> bool:
        """Whether the targets are the labels at their own positions (masked LM: no shift, no decoder)."""
        return not (self.next_token or self.encoder_decoder)

    @property
    def scores_text(self) -> bool:
        """Whether the report scores held-out text (perplexity, bits per byte): a left-to-right LM."""
        return self.next_token

    def collator_class(self) -> type:
        """The collator class of :attr:`collator`, imported from its module (on first use: the registry imports none).

        Example:
            >>> get_objective("span").collator_class().__name__
            'DataCollatorForSpanCorruption'
        """
        if self.collator is None:
            raise ValueError(f"objective {self.name!r} has no collator of its own (its spec's collator is None)")
        module, name = self.collator.split(":")
        return getattr(importlib.import_module(module), name)


def _is_import_path(path: object) -> bool:
    """``"package.module:Class"``: dotted identifiers, a colon, an identifier."""
    if not isinstance(path, str) or path.count(":") != 1:
        return False
    module, name = path.split(":")
    return name.isidentifier() and all(part.isidentifier() for part in module.split("."))


_CAUSAL = "the model reads the true prefix under a causal mask and predicts each next token"
_SEQ2SEQ = dict(encoder_decoder=True, next_token=False, auto_class="AutoModelForSeq2SeqLM",
                task="text2text-generation", pipeline_tag=None, template="span")  # fmt: skip

_SPECS = (
    ObjectiveSpec(
        "causal", "Causal language modeling (CLM, GPT)", f"Decoder-only; {_CAUSAL}.", next_token=True,
        encoder_decoder=False, auto_class="AutoModelForCausalLM", task="text-generation",
        pipeline_tag="text-generation", template="causal", architectures=("llama", "gpt2", "qwen3"),
        collator="hf_lmobj.collators.causal:DataCollatorForCausalLM", data="packed", variants=("fim", "mtp"),
    ),
    ObjectiveSpec(
        "masked", "Masked language modeling (MLM, BERT)",
        "Encoder-only; a fraction of the tokens is selected, most replaced by the mask token, some by a random "
        "token, some kept, and the model predicts the originals.", next_token=False, encoder_decoder=False,
        auto_class="AutoModelForMaskedLM", task="fill-mask", pipeline_tag="fill-mask", template="masked",
        architectures=("bert", "roberta"), collator="hf_lmobj.collators.masked:DataCollatorForMaskedLM",
        data="pieces", accuracy_metric="eval_masked_accuracy", variants=("electra",),
    ),
    ObjectiveSpec(
        "span", "Span corruption (T5)",
        "Encoder-decoder; noise spans of the input are each replaced by one sentinel and the decoder emits every "
        "sentinel followed by the span it replaced.", **_SEQ2SEQ, architectures=("t5",),
        collator="hf_lmobj.collators.span:DataCollatorForSpanCorruption", data="pieces",
        accuracy_metric="eval_span_accuracy",
    ),
    ObjectiveSpec(
        "ul2", "Mixture of denoisers (UL2)",
        "Encoder-decoder; a mixture of regular span corruption [R], sequential prefix-LM [S] and extreme "
        "corruption [X], each example tagged with its mode token.", **_SEQ2SEQ, architectures=("t5",),
        collator="hf_lmobj.collators.ul2:DataCollatorForUL2", data="pieces", accuracy_metric="eval_span_accuracy",
    ),
    ObjectiveSpec(
        "text_infilling", "Denoising autoencoder (BART)",
        "Encoder-decoder; the input is corrupted (text infilling with the mask token, sentence permutation) and "
        "the decoder reconstructs the original text.", **_SEQ2SEQ, architectures=("bart",),
        collator="hf_lmobj.collators.text_infilling:DataCollatorForTextInfilling",
    ),
    ObjectiveSpec(
        "prefix_lm", "Prefix language modeling (prefix-LM)",
        "Decoder-only; the prefix is attended bidirectionally and the model predicts each token of the "
        "continuation.", next_token=True, encoder_decoder=False, auto_class="AutoModelForCausalLM",
        task="text-generation", pipeline_tag="text-generation", template="causal",
    ),
    ObjectiveSpec(
        "sequence_classification", "Sequence classification (fine-tuned encoder)",
        "A classification head on a pre-trained encoder, fine-tuned on labelled examples.", next_token=False,
        encoder_decoder=False, auto_class="AutoModelForSequenceClassification", task="text-classification",
        pipeline_tag="text-classification", template="classifier", pretraining=False,
    ),
)  # fmt: skip

#: Every objective word -> its spec (read-only).
OBJECTIVES: Mapping[str, ObjectiveSpec] = MappingProxyType({spec.name: spec for spec in _SPECS})


def objective_names(pretraining: bool | None = None) -> tuple[str, ...]:
    """The objective words in registry order; ``pretraining=True`` / ``False`` keeps only those kinds."""
    return tuple(name for name, spec in OBJECTIVES.items() if pretraining is None or spec.pretraining == pretraining)


def get_objective(
    objective: str | ObjectiveSpec, *, field: str = "objective", among: Collection[str] | None = None
) -> ObjectiveSpec:
    """The spec of an objective word (or the spec itself); anything else is refused.

    ``field`` names the argument in the messages (``--objective``, ``objective=``); ``among`` limits the
    words the caller takes (default: every word), and the messages list exactly those.

    Example:
        >>> get_objective("masked").accuracy_metric
        'eval_masked_accuracy'
        >>> get_objective("gpt", among=("causal", "masked"))
        Traceback (most recent call last):
        ...
        ValueError: objective must be one of ['causal', 'masked'], got 'gpt'
    """
    if isinstance(objective, ObjectiveSpec):
        return objective
    if not isinstance(objective, str):
        raise TypeError(f"{field} must be an objective word (a str), got {type(objective).__name__}: {objective!r}")
    allowed = list(OBJECTIVES) if among is None else list(among)
    if objective not in allowed:
        raise ValueError(f"{field} must be one of {allowed}, got {objective!r}")
    return OBJECTIVES[objective]


def loss_family(objective: str | ObjectiveSpec) -> str:
    """The first objective word whose targets are scored alike (span for every encoder-decoder objective).

    Stored data that depends on the loss alone (a checkpoint's data fingerprint) records this word, so
    an inferred objective and an explicit one of the same family agree.

    >>> loss_family("ul2"), loss_family("text_infilling"), loss_family("prefix_lm")
    ('span', 'span', 'causal')
    """
    spec = get_objective(objective)
    return next(
        s.name
        for s in OBJECTIVES.values()
        if (s.next_token, s.encoder_decoder) == (spec.next_token, spec.encoder_decoder)
    )


def objective_of_variant(variant: str) -> ObjectiveSpec:
    """The objective a variant (``fim``, ``mtp``, ``electra``) rides on.

    >>> objective_of_variant("electra").name
    'masked'
    """
    for spec in OBJECTIVES.values():
        if variant in spec.variants:
            return spec
    raise ValueError(
        f"{variant!r} is no objective's variant; variants: {[v for s in OBJECTIVES.values() for v in s.variants]}"
    )
