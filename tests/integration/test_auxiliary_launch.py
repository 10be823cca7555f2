"""Issue 16 acceptance: both auxiliary objectives train end to end through `accelerate launch
recipes/pretrain.py --config ...` on 1 and 2 CPU processes and write a card (2 steps, tiny overrides)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import torch

from tests.testing_utils import CONFIG_DIR, QUICK_PRETRAIN, REPO, launch_env

AUXILIARY = {  # config -> (objective, stock class saved, folder of the extra modules, a logged auxiliary term)
    "causal/mtp_demo.yaml": ("causal", "LlamaForCausalLM", "mtp", "mtp_depth_1_loss"),
    "masked/electra_tiny.yaml": ("masked", "ElectraForPreTraining", "generator", "rtd_loss"),
}
LAUNCH = {"cpu.yaml": 1, "multi_process.yaml": 2}


def _overrides(config: str) -> list[str]:
    """QUICK_PRETRAIN (the accelerate-config smoke run) with the auxiliary config in place of causal/demo.yaml."""
    args = list(QUICK_PRETRAIN)
    args[args.index("--config") + 1] = str(REPO / "recipes/configs" / config)
    return args


@pytest.mark.slow
@pytest.mark.parametrize("launch", sorted(LAUNCH))
@pytest.mark.parametrize("config", sorted(AUXILIARY))
def test_accelerate_launch_pretrains_with_the_auxiliary_objective_and_writes_a_card(config, launch, tmp_path):
    from huggingface_hub import ModelCard
    from transformers import AutoModel

    from hf_lmobj.models.electra import ElectraPretrainingModel
    from hf_lmobj.models.mtp import MultiTokenPredictionModel

    objective, stock_class, extra, term = AUXILIARY[config]
    env = launch_env(HF_DATASETS_OFFLINE="1")
    command = [sys.executable, "-m", "accelerate.commands.launch", "--config_file", str(CONFIG_DIR / launch),
               str(REPO / "recipes" / "pretrain.py"), *_overrides(config), "--output_dir", str(tmp_path),
               "--disable_tqdm", "true"]  # fmt: skip
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    assert done.stdout.count(f"== {objective} run written to") == 1  # written and printed by the main process only

    args = torch.load(tmp_path / "training_args.bin", weights_only=False)
    assert (args.world_size, args.max_steps) == (LAUNCH[launch], 2)
    logged = [line for line in done.stdout.splitlines() if line.startswith("{'loss'")]
    assert len(logged) == 2 and all(f"'{term}'" in line for line in logged), done.stdout[-2000:]

    config_json = json.loads((tmp_path / "config.json").read_text())
    assert config_json["architectures"] == [stock_class] and (tmp_path / extra).is_dir()
    stock = AutoModel.from_pretrained(tmp_path)  # the stock checkpoint loads without hf_lmobj
    assert all(torch.isfinite(p).all() for p in stock.parameters())
    wrapper = MultiTokenPredictionModel if extra == "mtp" else ElectraPretrainingModel
    reloaded = wrapper.from_pretrained(tmp_path)
    if extra == "generator":
        assert reloaded.shares_embeddings()
    else:
        assert len(reloaded.mtp) == 1

    card = (tmp_path / "README.md").read_text()
    assert card.startswith("---") and (tmp_path / "loss_curve.png").exists()
    aux = "mtp" if extra == "mtp" else "electra"
    assert re.search(rf"\|\s*`auxiliary_objective`\s*\|\s*{aux}\s*\|", card), card[:3000]
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    results = ModelCard.load(tmp_path / "README.md").data.eval_results
    assert results and all(r.metric_value in metrics.values() for r in results)  # the card shows metrics.json's
    assert metrics["eval_loss"] > 0
    if aux == "electra":
        assert {"eval_mlm_loss", "eval_rtd_loss", "eval_rtd_accuracy"} <= set(metrics)
