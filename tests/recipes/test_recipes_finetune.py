"""The score, LoRA and classifier recipes: configs parse, runs write what they promise, numbers hold.

References are independent of the recipes: a stock model's own loss (score), PEFT's own reload
(LoRA), and the same architecture trained from scratch (classifier).
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard
from transformers import AutoModelForCausalLM, TrainingArguments

from hf_lmobj.config import parse_args_with_config
from hf_lmobj.corpus import build_tokenizer
from hf_lmobj.models.stock import ModelArguments, build_model

REPO = Path(__file__).resolve().parents[2]
RECIPES = REPO / "recipes"
ENV = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
TEXTS = ["def add(a, b):\n    return a + b\n", "import os\nprint(os.sep)\n", "x = [i * i for i in range(10)]\n"]


def _recipe(name: str):
    """Import ``recipes/<name>.py`` as a module (registered, so its dataclasses resolve their hints; named
    inside ``hf_lmobj.recipes``, so its relative imports resolve)."""
    if f"hf_lmobj.recipes.recipe_{name}" in sys.modules:
        return sys.modules[f"hf_lmobj.recipes.recipe_{name}"]
    spec = importlib.util.spec_from_file_location(f"hf_lmobj.recipes.recipe_{name}", RECIPES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _card_matches_metrics(output: Path) -> None:
    """README.md parses and every model-index value is the metrics.json value of that metric."""
    metrics = json.loads((output / "metrics.json").read_text())
    card = ModelCard.load(output / "README.md")
    results = card.data.eval_results
    assert results, "the card has no model-index results"
    by_type = {}
    for key, value in metrics.items():
        by_type.setdefault(key.split("_", 1)[-1], []).append(value)
    for result in results:
        assert result.metric_value in by_type[result.metric_type], (result.metric_type, by_type)


@pytest.fixture(scope="module")
def causal_dir(tmp_path_factory, tokenizer) -> Path:
    """A tiny Llama (hidden 32, 2 layers) and its tokenizer, saved as a checkpoint folder."""
    folder = tmp_path_factory.mktemp("tiny-llama")
    torch.manual_seed(0)
    model = build_model("causal", tokenizer, ModelArguments(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                                         max_position_embeddings=512))  # fmt: skip
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


# ------------------------------------------------------------------------------------------ configs
CONFIGS = {
    "eval/default.yaml": ("score", ("EvalArguments",)),
    "causal/finetune_lora.yaml": ("finetune_lora", ("ModelArguments", "LoraArguments", "TrainingArguments")),
    "masked/finetune_classifier.yaml": ("finetune_classifier", ("ModelArguments", "ClassifierArguments", "TrainingArguments")),
}  # fmt: skip


@pytest.mark.parametrize("config", sorted(CONFIGS))
def test_shipped_config_parses_against_its_recipe(config):
    recipe, names = CONFIGS[config]
    module = _recipe(recipe)
    types = [getattr(module, name) if hasattr(module, name) else {"TrainingArguments": TrainingArguments}[name]
             for name in names]  # fmt: skip
    path = RECIPES / "configs" / config
    parsed = parse_args_with_config(types, ["--config", str(path), "--use_cpu", "true"] if len(types) > 1
                                    else ["--config", str(path)])  # fmt: skip
    text = path.read_text()
    assert text.startswith("#") and "accelerate launch" in text.split("\n\n")[0]
    for line in text.splitlines():  # a comment on every key
        if line and not line.startswith("#"):
            assert "#" in line, f"{config}: key without a comment: {line!r}"
    assert len(parsed) == len(types)


def test_configs_reject_unknown_keys(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text((RECIPES / "configs/causal/finetune_lora.yaml").read_text() + "lora_rank: 4  # typo\n")
    module = _recipe("finetune_lora")
    with pytest.raises(ValueError, match="lora_rank"):
        parse_args_with_config((ModelArguments, module.LoraArguments, TrainingArguments), ["--config", str(bad)])


# ------------------------------------------------------------------------------------------ score
def _reference_sums(model_dir: Path, texts: list[str]) -> tuple[float, int, int]:
    """Summed NLL from the stock model's own loss, text by text (BOS prepended, one window each)."""
    from transformers import AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    tok = AutoTokenizer.from_pretrained(model_dir)
    nll = tokens = 0
    for text in texts:
        ids = torch.tensor([[tok.bos_token_id, *tok(text, add_special_tokens=False)["input_ids"]]])  # (1, T)
        with torch.no_grad():
            loss = model(input_ids=ids, labels=ids).loss
        nll += loss.item() * (ids.shape[1] - 1)
        tokens += ids.shape[1] - 1
    return nll, tokens, sum(len(t.encode("utf-8")) for t in texts)


@pytest.fixture(scope="module")
def text_dataset(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("texts")
    for split, rows in (("train", TEXTS[:1]), ("validation", TEXTS)):
        (folder / f"{split}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in rows))
    return folder


@pytest.mark.slow
@pytest.mark.parametrize("accelerate_config", ["cpu.yaml", "multi_process.yaml"])
def test_score_recipe_under_accelerate_matches_the_stock_models_loss(accelerate_config, causal_dir, text_dataset,
                                                                        tmp_path):  # fmt: skip
    out = tmp_path / "eval"
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--config_file",
        str(RECIPES / "accelerate_configs" / accelerate_config), str(RECIPES / "score.py"),
        "--config", str(RECIPES / "configs/eval/default.yaml"), "--model_name_or_path", str(causal_dir),
        "--dataset_name", str(text_dataset), "--output_dir", str(out), "--use_cpu", "true",
    ]  # fmt: skip
    done = subprocess.run(command, cwd=REPO, env=ENV, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    metrics = json.loads((out / "metrics.json").read_text())
    nll, tokens, num_bytes = _reference_sums(causal_dir, TEXTS)
    assert metrics["texts_scored"] == len(TEXTS)
    assert metrics["validation_tokens"] == tokens and metrics["validation_bytes"] == num_bytes
    assert metrics["validation_perplexity"] == pytest.approx(math.exp(nll / tokens), rel=1e-4)
    assert metrics["validation_bits_per_byte"] == pytest.approx(nll / math.log(2) / num_bytes, rel=1e-4)
    _card_matches_metrics(out)


def test_score_requires_a_model():
    with pytest.raises(ValueError, match="model_name_or_path is required"):
        _recipe("score").EvalArguments()


# ------------------------------------------------------------------------------------------ LoRA
@pytest.mark.slow
def test_lora_recipe_saves_only_an_adapter_that_peft_reloads_exactly(causal_dir, tmp_path):
    from peft import PeftModel

    out = tmp_path / "lora"
    trainer, metrics = _recipe("finetune_lora").finetune([
        "--config", str(RECIPES / "configs/causal/finetune_lora.yaml"), "--model_name_or_path", str(causal_dir),
        "--packages", "json,html,http", "--max_chars", "600", "--max_eval_examples", "16", "--max_steps", "30",
        "--learning_rate", "1e-2", "--warmup_steps", "0", "--logging_steps", "5", "--eval_strategy", "no",
        "--output_dir", str(out), "--disable_tqdm", "true",
    ])  # fmt: skip
    files = {p.name for p in out.iterdir()}
    assert {"adapter_model.safetensors", "adapter_config.json", "metrics.json", "README.md", "loss_curve.png"} <= files
    assert not files & {"model.safetensors", "pytorch_model.bin"}
    assert metrics["eval_loss"] < metrics["base_eval_loss"] - 0.03  # 6.93 -> 6.84 when written
    assert metrics["trainable_parameters"] < metrics["total_parameters"] / 2

    base = AutoModelForCausalLM.from_pretrained(causal_dir).eval()
    ids = torch.tensor([[1, 40, 41, 42, 43, 44, 45, 46]])  # (1, T)
    with torch.no_grad():
        base_logits = base(input_ids=ids).logits  # (1, T, V)
        reloaded = PeftModel.from_pretrained(base, out).eval()
        trained = trainer.model.eval()
        torch.testing.assert_close(reloaded(input_ids=ids).logits, trained(input_ids=ids).logits)
        assert not torch.allclose(reloaded(input_ids=ids).logits, base_logits)
    _card_matches_metrics(out)
    card = ModelCard.load(out / "README.md").data
    assert card.library_name == "peft" and {"lora", "hf_lmobj", "causal"} <= set(card.tags)  # PEFT's metadata kept
    assert card.base_model is None  # a local folder: named in the text, not as a Hub base_model
    assert metrics["eval_perplexity"] == pytest.approx(math.exp(_token_mean_nll(trainer)), rel=1e-5)


def _token_mean_nll(trainer) -> float:
    """Summed NLL over every target token of the eval set / their number, one example at a time."""
    model, nll, count = trainer.model.eval(), 0.0, 0
    for example in trainer.eval_dataset:
        batch = trainer.data_collator([example])
        targets = batch["shift_labels"]  # (1, T)
        with torch.no_grad():
            logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits  # (1, T, V)
        nll += torch.nn.functional.cross_entropy(logits[0].float(), targets[0], reduction="sum").item()
        count += int((targets != -100).sum())
    return nll / count


def test_lora_arguments_are_validated():
    module = _recipe("finetune_lora")
    with pytest.raises(ValueError, match="mode must be one of"):
        module.LoraArguments(mode="chat")
    with pytest.raises(ValueError, match="lora_dropout"):
        module.LoraArguments(lora_dropout=1.0)


# ------------------------------------------------------------------------------------------ classifier
PACKAGES = "asyncio,email,logging,unittest"


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory) -> Path:
    """A tiny BERT (hidden 64, 2 layers) pre-trained for 600 steps by the mlm recipe on 300 stdlib files."""
    out = tmp_path_factory.mktemp("masked")
    tokenizer = tmp_path_factory.mktemp("tokenizer")  # the whole corpus's: the classified packages reach past 300 files
    build_tokenizer(1024).save_pretrained(tokenizer)
    _recipe("pretrain").main([
        "--config", str(RECIPES / "configs/masked/bert_tiny.yaml"), "--tokenizer_name", str(tokenizer),
        "--max_documents", "300", "--max_length", "64",
        "--hidden_size", "64", "--num_hidden_layers", "2", "--max_position_embeddings", "512",
        "--max_steps", "600", "--learning_rate", "3e-3", "--warmup_steps", "20",  # pinned: the test owns its encoder
        "--torch_threads", "1",  # not load-adaptive: the same encoder whatever else runs on the machine
        "--eval_strategy", "no", "--output_dir", str(out), "--disable_tqdm", "true",
    ])  # fmt: skip
    return out


@pytest.mark.slow
def test_classifier_recipe_beats_the_same_model_trained_from_scratch(encoder_dir, tmp_path):
    out = tmp_path / "cls"
    metrics = _recipe("finetune_classifier").main([
        "--config", str(RECIPES / "configs/masked/finetune_classifier.yaml"), "--model_name_or_path", str(encoder_dir),
        "--packages", PACKAGES, "--output_dir", str(out), "--disable_tqdm", "true",
    ])  # fmt: skip
    assert metrics["eval_accuracy"] > metrics["scratch_eval_accuracy"] + 0.05, metrics
    assert metrics["eval_accuracy"] > metrics["chance_accuracy"] + 0.15, metrics
    assert (out / "model.safetensors").exists() and (out / "loss_curve.png").exists()
    assert ModelCard.load(out / "README.md").data.pipeline_tag == "text-classification"  # its own card, not fill-mask
    _card_matches_metrics(out)


# ------------------------------------------------------------------------------------------ ELECTRA discriminator
@pytest.mark.slow
def test_classifier_recipe_takes_the_electra_discriminator_the_pretrain_recipe_saved(tmp_path):
    """The electra recipe's output folder (a stock ElectraForPreTraining, generator/ beside it) as the encoder."""
    from transformers import AutoModelForSequenceClassification, ElectraForPreTraining, ElectraForSequenceClassification

    electra = tmp_path / "electra"
    _recipe("pretrain").main([
        "--config", str(RECIPES / "configs/masked/electra_tiny.yaml"), "--vocab_size", "1024", "--max_documents", "300",
        "--max_length", "64", "--hidden_size", "32", "--num_hidden_layers", "1", "--num_attention_heads", "2",
        "--max_steps", "2", "--per_device_train_batch_size", "4", "--eval_strategy", "no", "--max_eval_rows", "8",
        "--output_dir", str(electra), "--disable_tqdm", "true", "--report_to", "none",
    ])  # fmt: skip
    assert (electra / "generator").is_dir() and json.loads((electra / "config.json").read_text())["architectures"] == [
        "ElectraForPreTraining"
    ]
    discriminator = ElectraForPreTraining.from_pretrained(electra)
    out = tmp_path / "cls"
    metrics = _recipe("finetune_classifier").main([
        "--config", str(RECIPES / "configs/masked/finetune_classifier.yaml"), "--model_name_or_path", str(electra),
        "--packages", "asyncio,email", "--train_per_class", "4", "--eval_per_class", "4", "--max_steps", "2",
        "--warmup_steps", "0", "--learning_rate", "0", "--compare_with_scratch", "false",
        "--output_dir", str(out), "--disable_tqdm", "true",
    ])  # fmt: skip
    classifier = AutoModelForSequenceClassification.from_pretrained(out)
    assert type(classifier) is ElectraForSequenceClassification
    mine, theirs = classifier.electra.state_dict(), discriminator.electra.state_dict()
    assert mine.keys() == theirs.keys()
    for name, value in theirs.items():  # learning rate 0: the encoder is the discriminator, not a fresh init
        assert torch.equal(mine[name], value), name
    assert metrics["num_train_examples"] == 8 and 0.0 <= metrics["eval_accuracy"] <= 1.0
    assert json.loads((out / "metrics.json").read_text())["eval_accuracy"] == metrics["eval_accuracy"]
    _card_matches_metrics(out)
