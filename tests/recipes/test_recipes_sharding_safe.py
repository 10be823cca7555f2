"""The recipes in the GPU regime: bf16 pre-training on CPU learns, and no collective runs on one rank.

Under FSDP and DeepSpeed ZeRO-3, saving, evaluating, scoring and generating are collectives: a
recipe that calls one of them inside a main-process-only block hangs the other ranks. The static
check below reads each recipe's source and follows the functions such a block calls.
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest
import torch

from tests.testing_utils import QUICK, ROOT, load_recipe

RECIPES = sorted((ROOT / "recipes").glob("*.py"))
SUPPORT = sorted((ROOT / "recipes").glob("*/*.py"))  # support/, runtime/, report/: what the recipes call
#: Calls that every rank must make together when the model is sharded.
COLLECTIVES = {
    "save_model",
    "evaluate",
    "predict",
    "train",
    "generate",
    "score_texts",
    "score_shard",
    "target_token_accuracy",
    "pipeline_token_counts",
    "close_distributed",
    "get_state_dict",
    "full_state_dict",
    "gather",
    "gather_object",
    "gather_for_metrics",
    "reduce",
    "barrier",
    "wait_for_everyone",
    "sample_continuation",
    "score_validation_texts",
}
MAIN_ONLY = {
    "is_world_process_zero",
    "is_main_process",
    "is_local_process_zero",
    "is_local_main_process",
    "should_save",
}


def _name(node: ast.AST) -> str | None:
    if isinstance(node, ast.Call):
        node = node.func
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None


def _main_only(test: ast.expr) -> bool:
    return any(_name(n) in MAIN_ONLY for n in ast.walk(test))


def _calls(nodes: list[ast.stmt], functions: dict[str, ast.FunctionDef], seen: set[str]) -> set[str]:
    """Names called in ``nodes``, following the module's own functions transitively."""
    called: set[str] = set()
    for node in (n for stmt in nodes for n in ast.walk(stmt)):
        name = _name(node) if isinstance(node, ast.Call) else None
        if name and name not in called:
            called.add(name)
            if name in functions and name not in seen:
                seen.add(name)
                called |= _calls(functions[name].body, functions, seen)
    return called


def _main_only_collectives(recipe: Path, support: dict[str, ast.FunctionDef]) -> list[str]:
    """``"<recipe>:<line> calls [...]"`` for each main-process-only block of ``recipe`` that reaches a collective
    (through the recipe's own functions and ``support``'s, the support modules' functions)."""
    tree = ast.parse(recipe.read_text())
    functions = {**support, **{f.name: f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)}}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and _main_only(node.test):
            if called := sorted(_calls(node.body, functions, set()) & COLLECTIVES):
                found.append(f"{recipe.name}:{node.lineno} calls {called}")
    return found


def test_no_collective_runs_inside_a_main_process_block():
    """One item for the rule over every recipe: its failure lists every offending block."""
    assert RECIPES, "no recipe found: the check would be vacuous"
    support = {
        f.name: f
        for module in SUPPORT
        for f in ast.walk(ast.parse(module.read_text()))
        if isinstance(f, ast.FunctionDef)
    }
    found = [hit for recipe in RECIPES for hit in _main_only_collectives(recipe, support)]
    assert not found, f"collectives on the main process only: {found}"


def test_every_collective_named_is_a_real_callable():
    """A renamed collective would leave a name that matches nothing: the check would pass vacuously."""
    import accelerate
    import torch.distributed as dist
    from transformers import Trainer

    import hf_lmobj.evaluation.shards
    import hf_lmobj.metrics.scoring
    import hf_lmobj.metrics.token_statistics
    import hf_lmobj.models.sharding
    import hf_lmobj.trainer.objective_trainer
    import hf_lmobj.trainer.teardown

    homes = [Trainer, accelerate.Accelerator, dist, hf_lmobj.metrics.scoring, hf_lmobj.metrics.token_statistics,
             hf_lmobj.trainer.objective_trainer.ObjectiveTrainer, hf_lmobj.models.sharding, hf_lmobj.trainer.teardown,
             hf_lmobj.evaluation.shards]  # fmt: skip
    recipe_functions = {f.name for module in (*SUPPORT, *RECIPES) for f in ast.walk(ast.parse(module.read_text()))
                        if isinstance(f, ast.FunctionDef)}  # fmt: skip
    missing = [n for n in COLLECTIVES if n not in recipe_functions and not any(hasattr(h, n) for h in homes)]
    assert not missing, f"COLLECTIVES names {missing}, which no longer exist"


def test_the_pretrain_recipe_has_main_process_blocks_to_check():
    tree = ast.parse((ROOT / "recipes" / "pretrain.py").read_text())
    blocks = [n for n in ast.walk(tree) if isinstance(n, ast.If) and _main_only(n.test)]
    assert blocks, "no main-process block found: the check above would be vacuous for pretrain.py"


def test_the_check_catches_a_rank_zero_save():
    source = "def main(t):\n    if t.is_world_process_zero():\n        _report(t)\n\ndef _report(t):\n    t.save_model('x')\n"
    tree = ast.parse(source)
    functions = {f.name: f for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)}
    block = next(n for n in ast.walk(tree) if isinstance(n, ast.If))
    assert _main_only(block.test) and "save_model" in _calls(block.body, functions, set())


def test_the_rule_lists_each_offending_block_of_a_recipe(tmp_path):
    recipe = tmp_path / "bad.py"
    recipe.write_text(
        "def main(t):\n    if t.is_world_process_zero():\n        _report(t)\n    if t.is_main_process:\n"
        "        t.evaluate()\n        print('ok')\n"
    )
    support = {"_report": ast.parse("def _report(t):\n    t.save_model('x')\n").body[0]}  # a support module's
    assert _main_only_collectives(recipe, support) == ["bad.py:2 calls ['save_model']", "bad.py:4 calls ['evaluate']"]


@pytest.mark.slow
@pytest.mark.parametrize("config", ["causal/demo.yaml", "masked/bert_tiny.yaml", "span/t5_tiny.yaml"])
def test_bf16_pretraining_on_cpu_learns(config, tmp_path):
    recipe = load_recipe()
    metrics = recipe.main(
        [
            "--config",
            str(ROOT / "recipes/configs" / config),
            *QUICK,
            "--max_steps",
            "20",
            "--bf16",
            "true",
            "--learning_rate",
            "3e-3",
            "--warmup_steps",
            "0",
            "--lr_scheduler_type",
            "constant",
            "--eval_strategy",
            "no",
            "--save_strategy",
            "steps",
            "--save_steps",
            "20",
            "--sample_max_new_tokens",
            "8",
            "--output_dir",
            str(tmp_path),
        ]
    )
    state = json.loads((tmp_path / "checkpoint-20" / "trainer_state.json").read_text())
    losses = [entry["loss"] for entry in state["log_history"] if "loss" in entry]
    assert len(losses) == 20
    assert sum(losses[-5:]) / 5 < sum(losses[:5]) / 5 - 0.3, losses  # the loss falls over 20 steps
    assert metrics["eval_loss"] < losses[0]
    assert torch.load(tmp_path / "training_args.bin", weights_only=False).mixed_precision == "bf16"
