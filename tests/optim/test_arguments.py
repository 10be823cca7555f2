"""The pre-training recipe's optimizer choice: the Trainer's own or Muon + AdamW, and where Muon is refused."""

import pytest
from transformers import TrainingArguments

from hf_lmobj.optim.arguments import OptimizerArguments, optimizer_cls_and_kwargs
from hf_lmobj.optim.muon import MuonAdamWFactory


def _args(tmp_path, **kwargs) -> TrainingArguments:
    return TrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True, **kwargs)


def test_trainer_choice_leaves_the_trainer_its_own_optimizer(tmp_path):
    assert optimizer_cls_and_kwargs(OptimizerArguments(), _args(tmp_path)) is None


def test_muon_takes_the_runs_hyperparameters(tmp_path):
    args = _args(tmp_path, learning_rate=3e-3, weight_decay=0.05, adam_beta1=0.8, adam_beta2=0.9, adam_epsilon=1e-7)
    factory, kwargs = optimizer_cls_and_kwargs(OptimizerArguments("muon", muon_momentum=0.9), args)
    assert factory is MuonAdamWFactory
    assert kwargs == {"lr": 3e-3, "weight_decay": 0.05, "betas": (0.8, 0.9), "eps": 1e-7, "momentum": 0.9}


@pytest.mark.parametrize(
    ("env", "refused"),
    [
        ({"ACCELERATE_USE_DEEPSPEED": "true"}, True),
        ({"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "1"}, True),
        ({"ACCELERATE_USE_FSDP": "true"}, True),  # accelerate's default version is 1
        ({"ACCELERATE_USE_FSDP": "true", "FSDP_VERSION": "2"}, False),  # DTensor matrices keep their shape
    ],
)
def test_muon_is_refused_where_matrices_are_flattened(tmp_path, monkeypatch, env, refused):
    args = _args(tmp_path)  # built first: TrainingArguments itself reads the flags (and imports deepspeed)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    if refused:
        with pytest.raises(ValueError, match="flatten them.*--optimizer trainer"):
            optimizer_cls_and_kwargs(OptimizerArguments("muon"), args)
    else:
        assert optimizer_cls_and_kwargs(OptimizerArguments("muon"), args)[0] is MuonAdamWFactory


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"optimizer": "sgd"}, "optimizer must be one of"), ({"muon_momentum": 1.0}, "muon_momentum must lie")],
)
def test_bad_values_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        OptimizerArguments(**kwargs)
