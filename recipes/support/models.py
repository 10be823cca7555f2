"""Small models of stock architectures, built from config for each objective (no download).

``build_model`` returns a stock ``transformers`` model: a Llama or GPT-2 decoder for ``clm``, a
BERT or RoBERTa encoder for ``mlm``, a T5 encoder-decoder for span corruption (``span``, ``ul2``,
``bart`` use T5 or BART). With ``model_name_or_path`` it loads that checkpoint instead, through
the normal ``from_pretrained`` path (a Hub id or a local folder).

Example:
    >>> from hf_lmobj.corpus import build_tokenizer
    >>> tok = build_tokenizer(vocab_size=512, max_documents=20)
    >>> model = build_model("clm", tok, ModelArguments(hidden_size=32, num_hidden_layers=1))
    >>> type(model).__name__, model.config.vocab_size == len(tok)
    ('LlamaForCausalLM', True)
"""

from __future__ import annotations

from dataclasses import dataclass, field

import transformers
from transformers import PreTrainedModel, PreTrainedTokenizerBase

__all__ = ["OBJECTIVE_ARCHITECTURES", "ModelArguments", "build_model"]

OBJECTIVE_ARCHITECTURES = {
    "clm": ("llama", "gpt2"),
    "mlm": ("bert", "roberta"),
    "span": ("t5",),
    "ul2": ("t5",),
    "bart": ("bart",),
}


@dataclass
class ModelArguments:
    """Which model to train: a checkpoint, or a small stock architecture built from config."""

    model_name_or_path: str | None = field(
        default=None, metadata={"help": "Hub id or local folder; None builds a model from config."}
    )
    model_type: str | None = field(
        default=None, metadata={"help": "llama | gpt2 (clm), bert | roberta (mlm), t5 (span, ul2), bart."}
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

    def __post_init__(self) -> None:
        for name in ("hidden_size", "num_hidden_layers", "num_attention_heads", "max_position_embeddings"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError("hidden_size must be a multiple of num_attention_heads")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")


def build_model(
    objective: str, tokenizer: PreTrainedTokenizerBase, args: ModelArguments | None = None
) -> PreTrainedModel:
    """A stock model for ``objective``: loaded from ``args.model_name_or_path`` or built from config."""
    args = args or ModelArguments()
    if objective not in OBJECTIVE_ARCHITECTURES:
        raise ValueError(f"objective must be one of {sorted(OBJECTIVE_ARCHITECTURES)}, got {objective!r}")
    model_type = args.model_type or OBJECTIVE_ARCHITECTURES[objective][0]
    if model_type not in OBJECTIVE_ARCHITECTURES[objective]:
        raise ValueError(
            f"model_type {model_type!r} does not fit objective {objective!r}; "
            f"use one of {OBJECTIVE_ARCHITECTURES[objective]}"
        )
    auto = {"clm": transformers.AutoModelForCausalLM, "mlm": transformers.AutoModelForMaskedLM}
    auto_class = auto.get(objective, transformers.AutoModelForSeq2SeqLM)
    if args.model_name_or_path:
        return auto_class.from_pretrained(args.model_name_or_path, attn_implementation=args.attn_implementation)
    config = _small_config(model_type, tokenizer, args)
    return auto_class.from_config(config, attn_implementation=args.attn_implementation)


def _small_config(model_type: str, tok: PreTrainedTokenizerBase, a: ModelArguments):
    h, layers, heads = a.hidden_size, a.num_hidden_layers, a.num_attention_heads
    special = dict(
        vocab_size=len(tok),
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
    )
    if model_type == "llama":
        inter = a.intermediate_size or _round_up(8 * h // 3, 64)
        return transformers.LlamaConfig(
            hidden_size=h,
            num_hidden_layers=layers,
            num_attention_heads=heads,
            num_key_value_heads=heads,
            intermediate_size=inter,
            tie_word_embeddings=True,
            max_position_embeddings=a.max_position_embeddings,
            attention_dropout=a.dropout,
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


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple
