"""Small models of stock architectures, built from config for each objective (no download).

``build_model`` returns a stock ``transformers`` model: a Llama, GPT-2 or Qwen3 (Llama with normalized queries
and keys) decoder for ``causal``, a
BERT or RoBERTa encoder for ``masked``, a T5 encoder-decoder for ``span`` and ``ul2``, a BART for
``text_infilling`` (each objective's ``architectures`` in :mod:`hf_lmobj.objectives`). With ``model_name_or_path`` it loads that checkpoint instead, through
the normal ``from_pretrained`` path (a Hub id or a local folder).

A model reads at most :func:`position_limit` tokens per row (its position table; none for T5's
relative positions): :func:`check_positions` refuses a length past it by name, for the stock models
built here and for a checkpoint's config alike, before anything is trained.

Example:
    >>> from hf_lmobj.corpus import build_tokenizer
    >>> tok = build_tokenizer(vocab_size=512, max_documents=20)
    >>> model = build_model("causal", tok, ModelArguments(hidden_size=32, num_hidden_layers=1))
    >>> type(model).__name__, model.config.vocab_size == len(tok)
    ('LlamaForCausalLM', True)
    >>> position_limit(model.config), position_limit(transformers.T5Config())
    (1024, None)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import transformers
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from hf_lmobj.checks import check_flag, check_length, check_name, check_number
from hf_lmobj.objectives import OBJECTIVES, get_objective

#: Pre-training objective -> the model types built from config for it (the first is the default).
OBJECTIVE_ARCHITECTURES = {name: spec.architectures for name, spec in OBJECTIVES.items() if spec.architectures}
#: The decoders built from config with rotary positions (Qwen3: a Llama with RMS-normed queries and keys).
ROTARY_DECODERS = ("llama", "qwen3")


@dataclass
class ModelArguments:
    """Which model to train: a checkpoint, or a small stock architecture built from config."""

    #: The YAML config section of these fields (hf_lmobj.config): ``model: {...}``.
    SECTION: ClassVar[str] = "model"

    model_name_or_path: str | None = field(
        default=None, metadata={"help": "Hub id or local folder; None builds a model from config."}
    )
    model_type: str | None = field(
        default=None,
        metadata={"help": "llama | gpt2 (causal), bert | roberta (masked), t5 (span, ul2), bart (text_infilling)."},
    )
    hidden_size: int = field(default=256, metadata={"help": "Width of the model built from config."})
    num_hidden_layers: int = field(default=4, metadata={"help": "Layers (per stack for T5/BART)."})
    num_attention_heads: int = field(default=4, metadata={"help": "Attention heads."})
    intermediate_size: int | None = field(
        default=None, metadata={"help": "MLP width; None = 4x hidden (8/3x for Llama)."}
    )
    max_position_embeddings: int = field(default=1024, metadata={"help": "Longest position the model supports."})
    dropout: float = field(default=0.0, metadata={"help": "Dropout of the model built from config."})
    attn_implementation: str = field(default="sdpa", metadata={"help": "eager | sdpa | flash_attention_2."})
    hidden_act: str | None = field(
        default=None, metadata={"help": "Llama / Qwen3 MLP activation (e.g. silu, relu2); None = the architecture's."}
    )
    tie_word_embeddings: bool = field(
        default=True, metadata={"help": "Llama / Qwen3: the output head shares the input embedding matrix."}
    )
    zero_init_head: bool = field(
        default=False, metadata={"help": "Start an untied output head at zero (tie_word_embeddings false)."}
    )

    def __post_init__(self) -> None:
        self.model_name_or_path = check_name(self.model_name_or_path, "model_name_or_path", optional=True)
        known = sorted({name for names in OBJECTIVE_ARCHITECTURES.values() for name in names} | {"electra"})
        if self.model_type is not None and self.model_type not in known:
            raise ValueError(
                f"model_type must be one of {known} (or None: the objective's first), got {self.model_type!r}"
            )
        for name in ("hidden_size", "num_hidden_layers", "num_attention_heads", "max_position_embeddings"):
            setattr(self, name, check_length(getattr(self, name), name, 1))
        self.intermediate_size = check_length(self.intermediate_size, "intermediate_size", 1, optional=True)
        if self.hidden_size % self.num_attention_heads:
            raise ValueError("hidden_size must be a multiple of num_attention_heads")
        self.dropout = check_number(self.dropout, "dropout", 0.0, 1.0, high_open=True)
        self.attn_implementation = check_name(self.attn_implementation, "attn_implementation")
        self.hidden_act = check_name(self.hidden_act, "hidden_act", optional=True)
        if self.hidden_act is not None and self.hidden_act not in transformers.activations.ACT2FN:
            raise ValueError(f"hidden_act {self.hidden_act!r} is not an activation transformers knows (e.g. silu, "
                             "relu2, gelu)")  # fmt: skip
        self.tie_word_embeddings = check_flag(self.tie_word_embeddings, "tie_word_embeddings")
        self.zero_init_head = check_flag(self.zero_init_head, "zero_init_head")
        if self.zero_init_head and self.tie_word_embeddings:
            raise ValueError("zero_init_head needs an untied head: pass tie_word_embeddings false too (a tied head "
                             "is the input embedding, which must not start at zero)")  # fmt: skip


def build_model(
    objective: str, tokenizer: PreTrainedTokenizerBase, args: ModelArguments | None = None
) -> PreTrainedModel:
    """A stock model for ``objective``: loaded from ``args.model_name_or_path`` or built from config."""
    args = args or ModelArguments()
    model_type = resolve_model_type(objective, args)
    _check_decoder_options(model_type, args)
    auto_class = getattr(transformers, get_objective(objective).auto_class)
    if args.model_name_or_path:
        return auto_class.from_pretrained(args.model_name_or_path, attn_implementation=args.attn_implementation)
    config = _small_config(model_type, tokenizer, args)
    model = auto_class.from_config(config, attn_implementation=args.attn_implementation)
    if args.zero_init_head:  # modded-nanogpt's untied head starting at zero: the first steps shape the features
        nn.init.zeros_(model.get_output_embeddings().weight)
    return model


def _check_decoder_options(model_type: str, args: ModelArguments) -> None:
    """The Llama / Qwen3 options are refused for a checkpoint or another architecture rather than ignored."""
    changed = [name for name, value, default in (("hidden_act", args.hidden_act, None),
               ("tie_word_embeddings", args.tie_word_embeddings, True), ("zero_init_head", args.zero_init_head, False))
               if value != default]  # fmt: skip
    if changed and (args.model_name_or_path or model_type not in ROTARY_DECODERS):
        built = f"checkpoint {args.model_name_or_path}" if args.model_name_or_path else f"model_type {model_type!r}"
        raise ValueError(f"{', '.join(changed)} shape a Llama / Qwen3 built from config, not the {built}; "
                         "leave them at their defaults")  # fmt: skip


def resolve_model_type(objective: str, args: ModelArguments) -> str:
    """``args.model_type``, or the objective's first architecture; refused when it does not fit ``objective``.

    Example:
        >>> resolve_model_type("causal", ModelArguments()), resolve_model_type("span", ModelArguments())
        ('llama', 't5')
    """
    objective = get_objective(objective, among=OBJECTIVE_ARCHITECTURES).name
    model_type = args.model_type or OBJECTIVE_ARCHITECTURES[objective][0]
    if model_type not in OBJECTIVE_ARCHITECTURES[objective]:
        raise ValueError(
            f"model_type {model_type!r} does not fit objective {objective!r}; "
            f"use one of {OBJECTIVE_ARCHITECTURES[objective]}"
        )
    return model_type


def _small_config(model_type: str, tok: PreTrainedTokenizerBase, a: ModelArguments):
    h, layers, heads = a.hidden_size, a.num_hidden_layers, a.num_attention_heads
    special = dict(
        vocab_size=len(tok),
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    if model_type in ROTARY_DECODERS:
        extra = {"head_dim": h // heads} if model_type == "qwen3" else {}
        return (transformers.LlamaConfig if model_type == "llama" else transformers.Qwen3Config)(
            hidden_size=h,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=heads,
            intermediate_size=a.intermediate_size or _round_up(8 * h // 3, 64),
            hidden_act=a.hidden_act or "silu",
            tie_word_embeddings=a.tie_word_embeddings,
            max_position_embeddings=a.max_position_embeddings,
            attention_dropout=a.dropout,
            **extra,
            **special,
        )
    inter = a.intermediate_size or 4 * h
    if model_type == "gpt2":
        return transformers.GPT2Config(
            n_embd=h,
            n_layer=layers,
            n_head=heads,
            n_inner=inter,
            n_positions=a.max_position_embeddings,
            resid_pdrop=a.dropout,
            embd_pdrop=a.dropout,
            attn_pdrop=a.dropout,
            **special,
        )
    if model_type in ("bert", "roberta"):
        config_class = transformers.BertConfig if model_type == "bert" else transformers.RobertaConfig
        return config_class(
            hidden_size=h,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            intermediate_size=inter,
            max_position_embeddings=a.max_position_embeddings + 2,
            hidden_dropout_prob=a.dropout,
            attention_probs_dropout_prob=a.dropout,
            **special,
        )
    if model_type == "t5":
        return transformers.T5Config(
            d_model=h,
            d_kv=h // heads,
            d_ff=inter,
            num_layers=layers,
            num_decoder_layers=layers,
            num_heads=heads,
            dropout_rate=a.dropout,
            feed_forward_proj="gated-gelu",
            decoder_start_token_id=tok.pad_token_id,
            tie_word_embeddings=True,
            **special,
        )
    return transformers.BartConfig(
        d_model=h,
        encoder_layers=layers,
        decoder_layers=layers,
        encoder_attention_heads=heads,
        decoder_attention_heads=heads,
        encoder_ffn_dim=inter,
        decoder_ffn_dim=inter,
        max_position_embeddings=a.max_position_embeddings,
        dropout=a.dropout,
        decoder_start_token_id=tok.eos_token_id,
        forced_eos_token_id=tok.eos_token_id,
        **special,
    )


#: Model types whose position ids start after the padding index (``padding_idx + 1``): fewer usable positions.
_PADDING_OFFSET_POSITIONS = ("roberta", "xlm-roberta", "camembert")


def position_limit(config: Any) -> int | None:
    """Longest row a model of ``config`` reads (its ``max_position_embeddings`` / ``n_positions``), None
    when its positions are relative (T5); RoBERTa's table loses the ``pad_token_id + 1`` rows below its first id.

    Example:
        >>> position_limit(transformers.GPT2Config(n_positions=32))
        32
        >>> position_limit(transformers.RobertaConfig(max_position_embeddings=66, pad_token_id=1))
        64
    """
    limit = getattr(config, "max_position_embeddings", None) or getattr(config, "n_positions", None)
    if limit is None:
        return None
    if getattr(config, "model_type", None) in _PADDING_OFFSET_POSITIONS:
        limit -= (getattr(config, "pad_token_id", None) or 0) + 1
    return int(limit)


def rotary_positions(config: Any) -> bool:
    """Whether positions are rotary (Llama): nothing fails past the limit, the model only never saw such positions."""
    return getattr(config, "rope_parameters", None) is not None or getattr(config, "rope_theta", None) is not None


def model_position_limit(model: nn.Module) -> int | None:
    """The smallest :func:`position_limit` of the stock models inside ``model`` (an MTP / ELECTRA wrapper too)."""
    limits = [position_limit(m.config) for m in model.modules() if isinstance(m, PreTrainedModel)]
    known = [limit for limit in limits if limit is not None]
    return min(known) if known else None


def check_positions(needed: int, limit: int | None, what: str, fix: str) -> None:
    """Refuse ``needed`` positions (``what`` says for what) past a model's ``limit``; ``fix`` says how to fit.

    Example:
        >>> check_positions(128, 32, "max_length 128", "raise max_position_embeddings or lower max_length")
        Traceback (most recent call last):
        ...
        ValueError: max_length 128 needs 128 positions but the model has 32 (max_position_embeddings); raise max_position_embeddings or lower max_length
    """
    if limit is not None and needed > limit:
        raise ValueError(f"{what} needs {needed} positions but the model has {limit} (max_position_embeddings); {fix}")


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple
