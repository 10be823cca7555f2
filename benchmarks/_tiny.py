"""Small models from config for the benchmarks: one builder per architecture, shared by every benchmark.

(The tests keep their own builders in tests/testing_utils.py; the benchmarks do not import the tests.)
Each builder takes the width and the depth, then keyword overrides of any field of the model's config:
the attention heads default to width / 64 and the MLP to 4 x width. The weights are drawn right after
``torch.manual_seed(seed)`` (``seed=None``: from the global RNG as it is), and the model comes back as built,
in train mode.
"""

from __future__ import annotations

import torch


def _ids(tokenizer, **names: str) -> dict[str, int]:
    """``{"<key>_token_id": tokenizer.<name>_token_id}`` for each ``key=name``."""
    return {f"{key}_token_id": getattr(tokenizer, f"{name}_token_id") for key, name in names.items()}


def _build(model_class, fields: dict, overrides: dict, seed: int | None):
    if seed is not None:
        torch.manual_seed(seed)
    return model_class(model_class.config_class(**{**fields, **overrides}))


def tiny_llama(vocab_size: int, hidden: int, layers: int, *, heads=None, ffn=None, positions=8192, seed=0, **overrides):
    """A Llama causal LM (as many key / value heads as heads)."""
    from transformers import LlamaForCausalLM

    heads = heads or hidden // 64
    fields = dict(vocab_size=vocab_size, hidden_size=hidden, intermediate_size=ffn or 4 * hidden,
                  num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
                  max_position_embeddings=positions)  # fmt: skip
    return _build(LlamaForCausalLM, fields, overrides, seed)


def tiny_gpt2(tokenizer, hidden: int, layers: int, *, heads=None, positions=1024, seed=0, **overrides):
    """A GPT-2 LM of ``tokenizer``'s vocabulary, with its BOS and EOS ids."""
    from transformers import GPT2LMHeadModel

    fields = dict(vocab_size=len(tokenizer), n_embd=hidden, n_layer=layers, n_head=heads or hidden // 64,
                  n_positions=positions, **_ids(tokenizer, bos="bos", eos="eos"))  # fmt: skip
    return _build(GPT2LMHeadModel, fields, overrides, seed)


def tiny_t5(tokenizer, hidden: int, layers: int, *, heads=None, ffn=None, seed=0, **overrides):
    """A T5 of ``tokenizer``'s vocabulary (``d_kv`` = width / heads), its pad id the decoder's start."""
    from transformers import T5ForConditionalGeneration

    heads = heads or hidden // 64
    fields = dict(vocab_size=len(tokenizer), d_model=hidden, d_kv=hidden // heads, d_ff=ffn or 4 * hidden,
                  num_layers=layers, num_heads=heads,
                  **_ids(tokenizer, decoder_start="pad", pad="pad", eos="eos"))  # fmt: skip
    return _build(T5ForConditionalGeneration, fields, overrides, seed)


def tiny_bert(vocab_size: int, hidden: int, layers: int, *, heads=None, ffn=None, dropout=None, seed=0, **overrides):
    """A BERT masked LM; ``dropout`` sets both dropout probabilities."""
    from transformers import BertForMaskedLM

    fields = dict(vocab_size=vocab_size, hidden_size=hidden, num_hidden_layers=layers,
                  num_attention_heads=heads or hidden // 64, intermediate_size=ffn or 4 * hidden)  # fmt: skip
    if dropout is not None:
        fields.update(hidden_dropout_prob=dropout, attention_probs_dropout_prob=dropout)
    return _build(BertForMaskedLM, fields, overrides, seed)
