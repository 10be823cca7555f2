from __future__ import annotations

import pytest
import torch

from hf_lmobj.models.stock import OBJECTIVE_ARCHITECTURES, ModelArguments, build_model

TINY = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, max_position_embeddings=64)


@pytest.mark.parametrize(
    "objective,model_type",
    [(o, t) for o, types in OBJECTIVE_ARCHITECTURES.items() for t in types],
)
def test_every_objective_builds_a_stock_model_that_runs(tokenizer, objective, model_type):
    model = build_model(objective, tokenizer, ModelArguments(model_type=model_type, **TINY))
    assert model.config.vocab_size == len(tokenizer)
    ids = torch.tensor([[tokenizer.bos_token_id, 300, 301, tokenizer.eos_token_id]])
    extra = {"decoder_input_ids": ids} if model.config.is_encoder_decoder else {}
    out = model(input_ids=ids, labels=ids, **extra)
    assert torch.isfinite(out.loss) and out.logits.shape[-1] == len(tokenizer)


def test_model_saved_and_loaded_by_path(tokenizer, tmp_path):
    model = build_model("causal", tokenizer, ModelArguments(**TINY))
    model.save_pretrained(tmp_path)
    again = build_model("causal", tokenizer, ModelArguments(model_name_or_path=str(tmp_path)))
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values()))


def test_bad_model_arguments(tokenizer):
    with pytest.raises(ValueError, match="objective"):
        build_model("gan", tokenizer)
    with pytest.raises(ValueError, match="does not fit objective"):
        build_model("causal", tokenizer, ModelArguments(model_type="bert", **TINY))
    with pytest.raises(ValueError, match="multiple of num_attention_heads"):
        ModelArguments(hidden_size=30, num_attention_heads=4)
    with pytest.raises(ValueError, match="hidden_size"):
        ModelArguments(hidden_size=0)


@pytest.mark.parametrize("model_type", ["llama", "qwen3"])
def test_the_demo_levers_shape_the_built_decoder(tokenizer, model_type):
    args = ModelArguments(model_type=model_type, hidden_act="relu2", tie_word_embeddings=False, zero_init_head=True,
                          **TINY)  # fmt: skip
    model = build_model("causal", tokenizer, args)
    assert model.config.hidden_act == "relu2" and not model.config.tie_word_embeddings
    assert model.lm_head.weight.count_nonzero() == 0 and model.model.embed_tokens.weight.count_nonzero() > 0
    tied = build_model("causal", tokenizer, ModelArguments(model_type=model_type, **TINY))
    assert tied.lm_head.weight is tied.model.embed_tokens.weight and tied.config.hidden_act == "silu"
    assert hasattr(model.model.layers[0].self_attn, "q_norm") == (model_type == "qwen3")  # QK-norm


@pytest.mark.parametrize(("kwargs", "objective", "error", "words"), [
    ({"hidden_act": "swish9"}, "causal", ValueError, "hidden_act 'swish9' is not an activation"),
    ({"zero_init_head": True}, "causal", ValueError, "zero_init_head needs an untied head"),
    ({"tie_word_embeddings": "no"}, "causal", TypeError, "tie_word_embeddings must be True or False"),
    ({"hidden_act": "relu2", "model_type": "gpt2"}, "causal", ValueError, "hidden_act shape a Llama / Qwen3"),
    ({"tie_word_embeddings": False, "model_type": "bert"}, "masked", ValueError, "not the model_type 'bert'"),
])  # fmt: skip
def test_the_decoder_levers_are_refused_where_they_do_not_apply(tokenizer, kwargs, objective, error, words):
    with pytest.raises(error, match=words):
        build_model(objective, tokenizer, ModelArguments(**{**TINY, **kwargs}))
