"""The recipe side of the auxiliary objectives: the shipped configs, the model builder, a wired run."""

from __future__ import annotations

import pytest
from transformers import AutoModelForCausalLM, ElectraForPreTraining, TrainingArguments

from hf_lmobj.config import load_yaml_config, parse_args_with_config
from hf_lmobj.data.prepare import DataArguments
from hf_lmobj.data.prepare_run import prepare_run_data
from hf_lmobj.data.run_sources import open_sources
from hf_lmobj.models.pretraining import (
    AUXILIARY_BASE_OBJECTIVE,
    AuxiliaryArguments,
    build_pretraining_model,
    token_predictor,
)
from hf_lmobj.models.stock import ModelArguments
from hf_lmobj.objectives import get_objective
from hf_lmobj.trainer.auxiliary import AuxiliaryObjectiveTrainer
from tests.testing_utils import CONFIGS, ROOT, load_recipe

PRETRAIN = load_recipe().ARGUMENT_CLASSES
#: The shipped configs that set an auxiliary objective (themselves or through their base).
AUXILIARY_CONFIGS = [c for c in CONFIGS if load_yaml_config(c, PRETRAIN).get("auxiliary_objective")]
TINY = ModelArguments(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, max_position_embeddings=64)


def _parse(config, *extra):
    """The config parsed as the recipe parses it; its data, model, auxiliary, report, runtime and training groups."""
    groups = {type(g).__name__: g for g in parse_args_with_config(PRETRAIN, ["--config", str(config), *extra])}
    names = ("DataArguments", "ModelArguments", "AuxiliaryArguments", "ReportArguments", "RuntimeArguments")
    return (*(groups[name] for name in names), groups["TrainingArguments"])


def test_both_auxiliary_configs_ship():
    assert sorted(c.relative_to(ROOT / "recipes/configs").as_posix() for c in AUXILIARY_CONFIGS) == [
        "causal/mtp_demo.yaml",
        "masked/electra_tiny.yaml",
    ]


@pytest.mark.parametrize("config", AUXILIARY_CONFIGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_auxiliary_configs_parse_with_the_auxiliary_arguments(config):
    data, model, aux, report, runtime, train = _parse(config)
    assert AUXILIARY_BASE_OBJECTIVE[aux.auxiliary_objective] == data.objective
    assert get_objective(data.objective).template == config.parent.name  # the folder is named by the objective family
    text = config.read_text()
    assert text.startswith("#") and "recipes/pretrain.py --config " + str(config.relative_to(ROOT)) in text
    keys = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert all("#" in line for line in keys), "every key and section carries a comment"


def test_builder_refuses_mismatched_settings(tokenizer):
    with pytest.raises(ValueError, match="set objective: causal"):
        build_pretraining_model("masked", tokenizer, TINY, AuxiliaryArguments("mtp"))
    with pytest.raises(ValueError, match="model_type: electra"):
        build_pretraining_model("masked", tokenizer, ModelArguments(model_type="bert"), AuxiliaryArguments("electra"))
    with pytest.raises(ValueError, match="auxiliary_objective"):
        AuxiliaryArguments("t5")
    with pytest.raises(ValueError, match="architecture"):
        AuxiliaryArguments("mtp", mtp_architecture="tree")
    assert type(build_pretraining_model("causal", tokenizer, TINY)).__name__ == "LlamaForCausalLM"


@pytest.mark.slow
@pytest.mark.parametrize("objective,aux", [("causal", "mtp"), ("masked", "electra")])
def test_a_wired_run_trains_evaluates_and_saves_a_stock_model(
    objective, aux, tokenizer, corpus, tmp_path, one_torch_thread
):
    """What recipes/pretrain.py does once wired (see the report of issue 16), a few steps."""
    model = build_pretraining_model(objective, tokenizer, TINY, AuxiliaryArguments(aux, mtp_num_depths=2))
    data_args = DataArguments(objective=objective, max_length=64, max_eval_rows=8)
    data = prepare_run_data(open_sources(data_args, corpus), objective, tokenizer, data_args, 4, model)
    args = TrainingArguments(str(tmp_path), max_steps=3, per_device_train_batch_size=4, per_device_eval_batch_size=4,
                             learning_rate=1e-3, report_to=[], use_cpu=True, save_strategy="no", logging_steps=1,
                             remove_unused_columns=False, disable_tqdm=True)  # fmt: skip
    trainer = AuxiliaryObjectiveTrainer(model=model, args=args, data_collator=data.collator,
                                        train_dataset=data.train_dataset, eval_dataset=data.eval_dataset,
                                        callbacks=data.callbacks)  # fmt: skip
    trainer.train()
    metrics = trainer.evaluate()
    assert metrics["eval_loss"] > 0
    assert trainer.model.num_parameters() > token_predictor(trainer.model).num_parameters()
    trainer.save_model(str(tmp_path / "out"))
    stock_class = AutoModelForCausalLM if aux == "mtp" else ElectraForPreTraining
    stock = stock_class.from_pretrained(tmp_path / "out")
    assert type(stock) is type(trainer.model.stock_model)
    logged = [entry for entry in trainer.state.log_history if "loss" in entry]
    assert ("mtp_depth_2_loss" if aux == "mtp" else "rtd_loss") in logged[-1]
