"""Adversarial hyper-parameters of ``MuonAdamW``: what ``torch.optim.AdamW`` refuses is refused too, and more.

Input classes: negative, NaN and infinite learning rates, weight decays and epsilons; betas and
momentum outside ``[0, 1)`` or of the wrong shape; Newton-Schulz step counts below 1 or not ints;
truthy strings for flags; param groups added later (``add_param_group``) with their own bad values,
non-matrices in a Muon group, misspelled keys, sets; ``muon_param_groups`` given bad decay or no model.
"""

from __future__ import annotations

import math

import pytest
import torch

from hf_lmobj.optim.muon import MuonAdamW, muon_param_groups


def matrix() -> torch.nn.Parameter:
    return torch.nn.Parameter(torch.randn(4, 3, generator=torch.Generator().manual_seed(0)))


ADAMW_REFUSES = [
    ("lr", -1e-3),
    ("lr", math.nan),
    ("weight_decay", -0.1),
    ("weight_decay", math.nan),
    ("eps", -1e-8),
    ("eps", math.nan),
    ("betas", (0.9, 1.0)),
    ("betas", (-0.1, 0.95)),
    ("betas", (math.nan, 0.95)),
]


@pytest.mark.parametrize("key, value", ADAMW_REFUSES)
def test_what_torch_adamw_refuses_is_refused(key, value):
    with pytest.raises(ValueError):
        torch.optim.AdamW([matrix()], **{key: value})  # the reference: torch refuses it
    field = "betas" if key == "betas" else key
    with pytest.raises(ValueError, match=field):
        MuonAdamW([matrix()], **{key: value})


@pytest.mark.parametrize(
    "kwargs, error, word",
    [
        ({"lr": math.inf}, ValueError, "lr must be a finite number"),
        ({"weight_decay": math.inf}, ValueError, "weight_decay"),  # torch's AdamW takes it: weights become NaN
        ({"lr": True}, TypeError, "lr must be a number"),
        ({"lr": "1e-3"}, TypeError, "lr"),
        ({"momentum": 1.0}, ValueError, "momentum"),
        ({"momentum": -0.1}, ValueError, "momentum"),
        ({"momentum": math.nan}, ValueError, "momentum"),
        ({"betas": (0.9,)}, TypeError, "pair"),
        ({"betas": 0.9}, TypeError, "pair"),
        ({"betas": "ab"}, TypeError, "pair"),
        ({"ns_steps": 0}, ValueError, "ns_steps"),
        ({"ns_steps": -1}, ValueError, "ns_steps"),
        ({"ns_steps": 2.5}, TypeError, "ns_steps"),
        ({"ns_steps": True}, TypeError, "ns_steps"),
        ({"nesterov": "yes"}, TypeError, "nesterov"),
        ({"nesterov": 1}, TypeError, "nesterov"),
    ],
)
def test_hostile_hyperparameters_are_refused(kwargs, error, word):
    with pytest.raises(error, match=word):
        MuonAdamW([{"params": [matrix()], "use_muon": True}], **kwargs)


def test_edge_values_are_accepted_and_step():
    weight = matrix()
    optimizer = MuonAdamW([{"params": [weight], "use_muon": True}], lr=0.0, weight_decay=0.0, momentum=0.0,
                          ns_steps=1, betas=(0.0, 0.0), eps=0.0)  # fmt: skip
    before = weight.detach().clone()
    weight.grad = torch.ones_like(weight)
    optimizer.step()
    assert torch.equal(weight.detach(), before)  # lr 0: nothing moves
    assert optimizer.param_groups[0]["betas"] == (0.0, 0.0)


@pytest.mark.parametrize(
    "group, error, word",
    [
        ({"params": [torch.nn.Parameter(torch.zeros(3))], "use_muon": True}, ValueError, "not 2-D"),
        ({"params": [torch.nn.Parameter(torch.zeros(2, 2, 2))], "use_muon": True}, ValueError, "not 2-D"),
        ({"params": [matrix()], "weight_decay": -0.1}, ValueError, "param group 1: weight_decay"),
        ({"params": [matrix()], "lr": math.nan}, ValueError, "param group 1: lr"),
        ({"params": [matrix()], "betas": (0.9, 1.5)}, ValueError, r"param group 1: betas\[1\]"),
        ({"params": [matrix()], "use_muon": "True"}, TypeError, "use_muon"),
        ({"params": [matrix()], "use_moun": True}, ValueError, "unknown setting.*use_moun"),
        ({"params": {matrix()}}, TypeError, "not a set"),
        ({"lr": 1e-3}, ValueError, "'params'"),
        ([matrix()], TypeError, "must be a dict"),
    ],
)
def test_add_param_group_applies_the_same_checks(group, error, word):
    optimizer = MuonAdamW([matrix()])
    with pytest.raises(error, match=word):
        optimizer.add_param_group(group)
    assert len(optimizer.param_groups) == 1  # nothing half-added


def test_add_param_group_keeps_a_valid_muon_group():
    optimizer = MuonAdamW([matrix()])
    optimizer.add_param_group({"params": matrix(), "use_muon": True, "lr": 2e-3})
    assert [(g["use_muon"], g["lr"], len(g["params"])) for g in optimizer.param_groups] == [
        (False, 1e-3, 1),
        (True, 2e-3, 1),
    ]


def test_a_group_given_to_the_constructor_is_checked_by_its_index():
    with pytest.raises(ValueError, match="param group 1: weight_decay"):
        MuonAdamW([{"params": [matrix()]}, {"params": [matrix()], "weight_decay": math.nan}])


@pytest.mark.parametrize("weight_decay, error", [(math.nan, ValueError), (-0.1, ValueError), ("0.1", TypeError)])
def test_muon_param_groups_check_the_decay(weight_decay, error):
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Linear(4, 2))
    with pytest.raises(error, match="weight_decay"):
        muon_param_groups(model, weight_decay=weight_decay)


def test_muon_param_groups_needs_a_module():
    with pytest.raises(TypeError, match="nn.Module"):
        muon_param_groups([matrix()])
