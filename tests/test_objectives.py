"""The one objective vocabulary: specs read as attributes, other words refused, no name compared outside the registry."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch
import transformers

import hf_lmobj
from hf_lmobj.losses.functional import causal_lm_loss, masked_lm_loss, seq2seq_lm_loss
from hf_lmobj.losses.targets import objective_targets
from hf_lmobj.objectives import OBJECTIVES, ObjectiveSpec, get_objective
from hf_lmobj.trainer.compute_loss import check_objective, infer_objective, make_compute_loss_func
from tests.testing_utils import OBJECTIVES as TESTED_OBJECTIVES
from tests.testing_utils import build_model

REPO = Path(__file__).resolve().parents[1]
WORDS = frozenset(OBJECTIVES)
REGISTRY = REPO / "hf_lmobj" / "objectives.py"


@pytest.mark.parametrize("name", list(OBJECTIVES))
def test_each_spec_names_real_parts(name):
    spec = get_objective(name)
    assert spec.name == name and spec is OBJECTIVES[name]
    assert hasattr(transformers, spec.auto_class), spec.auto_class
    assert (REPO / "model_cards" / f"{spec.template}.md").is_file()
    if spec.collator is not None:  # a "module:Class" path to the collator's home, which the top face also serves
        module, name = spec.collator.split(":")
        collator = spec.collator_class()
        assert (collator.__module__, collator.__name__) == (module, name)
        assert name in hf_lmobj.__all__ and getattr(hf_lmobj, name) is collator, f"{name} is not a public name"
    if spec.data is not None:
        assert spec.pretraining and spec.collator is not None and spec.architectures


def test_unknown_names_and_types_are_refused_by_name():
    with pytest.raises(ValueError, match=r"objective must be one of \['causal'"):
        get_objective("gpt")
    with pytest.raises(TypeError, match="--objective must be an objective word"):
        get_objective(3, field="--objective")
    with pytest.raises(ValueError, match="not a pre-training objective"):
        check_objective("sequence_classification")


def test_a_spec_refuses_contradictory_attributes():
    with pytest.raises(ValueError, match="exclude each other"):
        ObjectiveSpec("x", "t", "s", True, True, "AutoModel", "task", None, "causal")
    with pytest.raises(ValueError, match="data must be"):
        ObjectiveSpec("x", "t", "s", True, False, "AutoModel", "task", None, "causal", data="rows")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="collator must be an import path 'package.module:Class'"):
        ObjectiveSpec(
            "x", "t", "s", True, False, "AutoModel", "task", None, "causal", collator="DataCollatorForCausalLM"
        )
    with pytest.raises(ValueError, match="has no collator of its own"):
        get_objective("prefix_lm").collator_class()


@pytest.mark.parametrize("name", [n for n, s in OBJECTIVES.items() if s.pretraining])
def test_the_loss_follows_the_spec_attributes(name):
    spec = OBJECTIVES[name]
    logits = torch.randn(2, 5, 7, generator=torch.Generator().manual_seed(0))  # (B, T, V)
    labels = torch.tensor([[1, 2, 3, -100, 4], [5, 6, -100, 0, 1]])
    reference = causal_lm_loss if spec.next_token else seq2seq_lm_loss if spec.encoder_decoder else masked_lm_loss
    got = make_compute_loss_func(name)({"logits": logits}, labels)
    torch.testing.assert_close(got, reference(logits, labels))
    targets = objective_targets(name, {"labels": labels})
    assert torch.equal(targets[:, :-1], labels[:, 1:]) if spec.next_token else torch.equal(targets, labels)


@pytest.mark.parametrize("objective", TESTED_OBJECTIVES)
def test_the_inferred_word_loads_the_model_through_its_auto_class(objective):
    model = build_model(objective)
    spec = get_objective(infer_objective(model))
    mapping = getattr(transformers, spec.auto_class)._model_mapping
    assert type(model) in mapping.values()


# ---- the static rule: objective names are compared in the registry only ------------------------------------------


def _words_in(node: ast.AST) -> list[str]:
    """Objective names a comparison operand spells: a string, or the strings of a literal tuple / list / set."""
    items = node.elts if isinstance(node, (ast.Tuple, ast.List, ast.Set)) else [node]
    return [i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str) and i.value in WORDS]


def objective_comparisons(source: str) -> list[tuple[int, str]]:
    """``(line, name)`` of every comparison with an objective name, and of every table keyed by two or more."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            found += [(node.lineno, w) for operand in (node.left, *node.comparators) for w in _words_in(operand)]
        elif isinstance(node, ast.Dict):
            keys = [w for key in node.keys if key is not None for w in _words_in(key)]
            found += [(node.lineno, w) for w in keys] if len(keys) >= 2 else []
    return found


CODE = sorted(p for folder in ("hf_lmobj", "recipes") for p in (REPO / folder).rglob("*.py") if p != REGISTRY)


def test_no_objective_name_is_compared_outside_the_registry():
    """One item for the rule: its failure lists every offending file."""
    found = {
        str(path.relative_to(REPO)): hits
        for path in CODE
        if (hits := objective_comparisons(path.read_text(encoding="utf-8")))
    }
    assert not found, f"modules that compare objective names (read an ObjectiveSpec attribute): {found}"


def test_the_rule_catches_comparisons_and_tables():
    source = 'if objective == "span": pass\nok = kind in ("span", "ul2")\nT = {"causal": 1, "masked": 2}\nx = y == "z"'
    assert objective_comparisons(source) == [(1, "span"), (2, "span"), (2, "ul2"), (3, "causal"), (3, "masked")]
    assert len(CODE) > 50, "the rule must read the package and the recipes"


def test_loss_families_group_the_words_whose_targets_are_scored_alike():
    from hf_lmobj.objectives import loss_family

    assert {name: loss_family(name) for name in OBJECTIVES} == {
        "causal": "causal", "masked": "masked", "span": "span", "ul2": "span", "text_infilling": "span",
        "prefix_lm": "causal", "sequence_classification": "masked",
    }  # fmt: skip
    with pytest.raises(ValueError, match=r"objective must be one of \['causal'.*got 'gpt'"):
        loss_family("gpt")  # an unknown word is refused by name, never a bare KeyError


def test_variants_name_the_objective_they_ride_on():
    from hf_lmobj.objectives import objective_of_variant

    assert objective_of_variant("fim").name == objective_of_variant("mtp").name == "causal"
    assert objective_of_variant("electra").name == "masked"
    with pytest.raises(ValueError, match="no objective's variant"):
        objective_of_variant("bert")


def test_callers_list_only_the_words_they_take():
    with pytest.raises(ValueError, match=r"must be one of \['causal', 'masked'\], got 'ul2'"):
        get_objective("ul2", among=("causal", "masked"))
    with pytest.raises(ValueError) as refused:
        check_objective("gpt")
    assert "sequence_classification" not in str(refused.value)
    assert get_objective("masked", among=("masked",)).name == "masked"


@pytest.mark.parametrize("saved, trained", [("span", "ul2"), ("span", "text_infilling"), ("causal", "prefix_lm")])
def test_a_checkpoint_fingerprint_compares_by_loss_family(saved, trained):
    from hf_lmobj.objectives import loss_family
    from hf_lmobj.trainer.checkpoints import check_fingerprint

    check_fingerprint({"objective": saved, "seed": 0}, {"objective": loss_family(trained), "seed": 0})
    with pytest.raises(ValueError, match="objective"):
        check_fingerprint({"objective": saved}, {"objective": loss_family("masked")})
