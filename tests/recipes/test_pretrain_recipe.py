"""recipes/pretrain.py end to end: every shipped config, every objective, 2 processes, resume."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from huggingface_hub import ModelCard
from safetensors.torch import load_file
from transformers import TrainingArguments

from hf_lmobj.config import load_yaml_config, parse_args_with_config
from hf_lmobj.data.prepare import DataArguments
from hf_lmobj.data.prepare_fim import FimArguments
from hf_lmobj.models.pretraining import AuxiliaryArguments
from hf_lmobj.models.stock import ModelArguments
from hf_lmobj.objectives import get_objective
from hf_lmobj.optim.arguments import OptimizerArguments
from hf_lmobj.recipes.report.report_arguments import ReportArguments
from hf_lmobj.trainer.cpu_threads import RuntimeArguments
from tests.testing_utils import CONFIGS, QUICK, load_recipe

ROOT = Path(__file__).resolve().parents[2]
PRETRAIN = load_recipe().ARGUMENT_CLASSES
#: Every shipped config, flattened (its base and sections resolved) with the pre-training recipe's groups.
FLAT = {c: load_yaml_config(c, PRETRAIN) for c in CONFIGS if "objective" in load_yaml_config(c, PRETRAIN)}
PRETRAIN_CONFIGS = sorted(FLAT)
# small and fast: 200 documents, a 1024-token vocabulary, a 2-layer model of width 32


@pytest.mark.parametrize("config", PRETRAIN_CONFIGS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_shipped_config_parses_and_names_its_objective(config):
    data, model, aux, fim, report, runtime, optimizer, train = parse_args_with_config(
        (
            DataArguments,
            ModelArguments,
            AuxiliaryArguments,
            FimArguments,
            ReportArguments,
            RuntimeArguments,
            OptimizerArguments,
            TrainingArguments,
        ),
        ["--config", str(config)],
    )
    flat = FLAT[config]
    groups = {type(g).__name__: g for g in (data, model, aux, fim, report, runtime, optimizer)}
    for group in groups.values():  # every key the config (or its base) gives reaches its field as written
        for name in set(flat) & {f.name for f in dataclasses.fields(group)} - {"objective"}:
            assert getattr(group, name) == flat[name], (config.name, name)
    assert (fim.fim_rate > 0) == (flat.get("fim_rate", 0) > 0) and (
        fim.fim_rate == 0 or get_objective(data.objective).data == "packed"
    )
    assert optimizer.optimizer == flat.get("optimizer", "trainer")
    assert get_objective(data.objective).template == config.parent.name  # the folder is named by the objective family
    assert train.output_dir == flat["output_dir"] and train.max_steps == flat["max_steps"] > 0
    text = config.read_text()
    assert text.startswith("#") and "recipes/pretrain.py --config " + str(config.relative_to(ROOT)) in text
    keys = [line for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    assert all("#" in line for line in keys), "every key and section carries a comment"


@pytest.mark.slow
@pytest.mark.parametrize(
    "config,objective",
    [
        ("causal/demo.yaml", "causal"),
        ("masked/bert_tiny.yaml", "masked"),
        ("span/t5_tiny.yaml", "span"),
        ("span/ul2_t5_tiny.yaml", "ul2"),
    ],
)
def test_each_objective_trains_a_few_steps_and_writes_its_card(tmp_path, config, objective):
    recipe = load_recipe()
    out = tmp_path / objective
    metrics = recipe.main(
        ["--config", str(ROOT / "recipes/configs" / config), *QUICK, "--max_steps", "4", "--output_dir", str(out)]
    )
    saved = json.loads((out / "metrics.json").read_text())
    assert saved == pytest.approx(metrics)
    assert (out / "model.safetensors").exists() and (out / "tokenizer.json").exists()
    assert (out / "loss_curve.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    card = ModelCard.load(out / "README.md")
    results = {r.metric_type: r.metric_value for r in card.data.eval_results}
    assert results["loss"] == saved["eval_loss"]
    assert objective in card.data.tags
    assert 0 < saved["train_unigram_entropy"] < math.log(1024)
    if objective == "causal":
        assert results["bits_per_byte"] == saved["validation_bits_per_byte"]
        assert saved["validation_bytes"] > saved["validation_tokens"] > 0
        baselines = {k for k in saved if k.startswith("baseline_")}
        assert baselines == {f"baseline_kneser_ney_{n}_gram_bits_per_byte" for n in (3, 4, 5)} | {
            "baseline_zlib_9_bits_per_byte",
            "baseline_bz2_9_bits_per_byte",
            "baseline_xz_9e_bits_per_byte",
        }
        assert all(0 < saved[k] < 8 for k in baselines)
        assert not any(k.startswith("baseline_") for k in results), "baselines are not the model's results"
    accuracy = {"masked": "eval_masked_accuracy", "span": "eval_span_accuracy", "ul2": "eval_span_accuracy"}
    if objective in accuracy:
        assert 0.0 <= saved[accuracy[objective]] <= 1.0


def test_fim_demo_is_the_causal_demo_plus_fim():
    demo = FLAT[ROOT / "recipes/configs/causal/demo.yaml"]
    fim_demo = FLAT[ROOT / "recipes/configs/causal/fim_demo.yaml"]
    assert set(fim_demo) - set(demo) <= set(FimArguments.__dataclass_fields__)  # nothing but FIM settings added
    assert fim_demo["fim_rate"] == 0.5 and fim_demo["fim_level"] == "line" and fim_demo["infill_cases"] == 200
    differ = {k for k in demo if demo[k] != fim_demo.get(k)}
    assert differ == {"output_dir"}, "the same model, data, budget and optimizer as the plain demo"
    assert fim_demo["fim_baseline_metrics"] == f"{demo['output_dir']}/metrics.json"


VARIANTS = [c for c in PRETRAIN_CONFIGS if "base" in yaml.safe_load(c.read_text())]


def test_the_variants_are_the_demos_over_their_sibling_base():
    bases = {f"{c.parent.name}/{c.stem}": yaml.safe_load(c.read_text())["base"] for c in VARIANTS}
    assert sorted(bases) == ["causal/fim_demo", "causal/mtp_demo", "masked/electra_tiny", "span/ul2_t5_tiny"]
    assert all(base.split("/")[0] == name.split("/")[0] for name, base in bases.items()), bases


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_a_variant_config_holds_only_its_deltas_over_its_base(variant):
    own = yaml.safe_load(variant.read_text())  # the file's own keys, sections as mappings
    base = load_yaml_config(own.pop("base"), PRETRAIN)
    keys = {k: v for section in own.values() for k, v in (section.items() if isinstance(section, dict) else ())}
    keys |= {k: v for k, v in own.items() if not isinstance(v, dict)}
    defaults = {f.name: f.default for group in PRETRAIN for f in dataclasses.fields(group)}
    for key, value in keys.items():
        assert key not in base or base[key] != value, f"{variant.name}: {key} repeats the base's value"
        assert key in base or defaults.get(key) != value, f"{variant.name}: {key} repeats the default"
    assert len(keys) + 1 <= 12, f"{variant.name}: {len(keys)} keys and base"


@pytest.mark.slow
def test_fim_demo_trains_a_few_steps_and_reports_left_to_right_and_infilling(tmp_path, capsys):
    recipe = load_recipe()
    baseline = tmp_path / "plain-metrics.json"
    from hf_lmobj.data.prepare import DataArguments
    from hf_lmobj.data.run_sources import open_sources

    same_text = open_sources(DataArguments(max_documents=200)).validation["fingerprint"]  # QUICK's data
    baseline.write_text(json.dumps({"validation_bits_per_byte": 3.0, "validation_infill_prefix_only_exact_match": 0.0,
                                    "validation_fingerprint": same_text}))  # fmt: skip
    out = tmp_path / "fim"
    metrics = recipe.main(
        ["--config", str(ROOT / "recipes/configs/causal/fim_demo.yaml"), *QUICK, "--max_steps", "3",
         "--infill_cases", "4", "--infill_max_new_tokens", "8", "--ngram_orders", "3",
         "--fim_baseline_metrics", str(baseline), "--output_dir", str(out)]
    )  # fmt: skip
    report = capsys.readouterr().out
    saved = json.loads((out / "metrics.json").read_text())
    assert saved == pytest.approx(metrics)
    assert saved["validation_infill_samples"] == 4
    for mode in ("psm", "spm", "prefix_only"):
        assert 0.0 <= saved[f"validation_infill_{mode}_exact_match"] <= 1.0
        assert saved[f"validation_infill_{mode}_exact_match"] <= saved[f"validation_infill_{mode}_edit_similarity"] <= 1
        assert 0.0 < saved[f"validation_infill_{mode}_middle_bits_per_byte"] < 32
    assert f"left-to-right bits per byte {saved['validation_bits_per_byte']:.3f}" in report
    assert "single-line infilling (4 cases), by prompt:" in report
    assert re.search(r"edit similarity +prefix_only [\d.]+, psm [\d.]+, spm [\d.]+", report)
    assert re.search(r"left-to-right bits per byte\s+[\d.]+\s+3\.000", report)  # beside the plain run
    card = ModelCard.load(out / "README.md")
    results = {r.metric_type: r.metric_value for r in card.data.eval_results}
    assert results["bits_per_byte"] == saved["validation_bits_per_byte"]
    assert results["infill_psm_exact_match"] == saved["validation_infill_psm_exact_match"]
    assert "## Fill-in-the-middle" in card.text and "0.5 of the training pieces" in card.text
    assert "line-start positions" in card.text
    assert "| `fim_rate` | 0.5 |" in card.text and "| `fim_level` | line |" in card.text


def test_plain_clm_run_evaluates_no_infilling_unless_asked():
    assert FimArguments().infill_cases == 0
    assert FimArguments(fim_rate=0.5).infill_cases == 200
    assert FimArguments(infill_cases=7).infill_cases == 7


def run_recipe(args: list[str], launcher: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [*launcher, str(ROOT / "recipes" / "pretrain.py"), *args]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


@pytest.mark.slow
def test_two_cpu_processes_write_one_checkpoint_and_one_card(tmp_path):
    accelerate = [
        sys.executable,
        "-m",
        "accelerate.commands.launch",
        "--config_file",
        str(ROOT / "recipes/accelerate_configs/multi_process.yaml"),
    ]
    out = tmp_path / "ddp"
    result = run_recipe(
        [
            "--config",
            str(ROOT / "recipes/configs/causal/demo.yaml"),
            *QUICK,
            "--max_steps",
            "2",
            "--save_strategy",
            "steps",
            "--save_steps",
            "2",
            "--output_dir",
            str(out),
        ],
        accelerate,
    )
    assert result.stdout.count("== causal run written to") == 1  # the report comes from rank 0 only
    assert sorted(p.name for p in out.glob("checkpoint-*")) == ["checkpoint-2"]
    state = json.loads((out / "checkpoint-2" / "trainer_state.json").read_text())
    assert state["global_step"] == 2
    assert len(list(out.glob("README.md"))) == 1 and (out / "metrics.json").exists()
    # two ranks really trained together: each step saw 2 x 4 rows
    args = torch.load(out / "training_args.bin", weights_only=False)
    assert args.world_size == 2


@pytest.mark.slow
def test_resuming_from_a_checkpoint_gives_the_uninterrupted_parameters(tmp_path):
    recipe = load_recipe()
    common = [
        "--config",
        str(ROOT / "recipes/configs/causal/demo.yaml"),
        *QUICK,
        "--max_steps",
        "4",
        "--save_strategy",
        "steps",
        "--save_steps",
        "2",
        "--eval_strategy",
        "no",
    ]
    recipe.main([*common, "--output_dir", str(tmp_path / "full")])
    recipe.main(
        [
            *common,
            "--output_dir",
            str(tmp_path / "resumed"),
            "--resume_from_checkpoint",
            str(tmp_path / "full" / "checkpoint-2"),
        ]
    )
    full = load_file(tmp_path / "full" / "model.safetensors")
    resumed = load_file(tmp_path / "resumed" / "model.safetensors")
    assert full.keys() == resumed.keys()
    for name in full:
        torch.testing.assert_close(resumed[name], full[name], rtol=0, atol=1e-6, msg=name)
    start = load_file(tmp_path / "full" / "checkpoint-2" / "model.safetensors")
    assert any(not torch.equal(start[n], full[n]) for n in full), "steps 3-4 changed the weights"
