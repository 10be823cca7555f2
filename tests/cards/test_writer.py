"""Model cards: rendered per objective, parsed back by huggingface_hub, numbers equal to the run's
metrics file, a real PNG loss curve, and a "How to use" snippet that runs against a saved model."""

from __future__ import annotations

import contextlib
import io
import json
import math
import re
import struct
import zlib

import pytest
import torch
import transformers
from huggingface_hub import ModelCard
from PIL import Image

from hf_lmobj.cards.data import split_metrics
from hf_lmobj.cards.writer import plot_loss_curve, write_model_card
from hf_lmobj.objectives import OBJECTIVES

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
LOG_HISTORY = [{"step": s, "loss": 6.0 - s / 10, "learning_rate": 1e-3} for s in range(1, 21)] + [
    {"step": 10, "eval_loss": 5.2},
    {"step": 20, "eval_loss": 4.9},
]
HYPERPARAMETERS = {"mlm_probability": 0.15, "noise_density": 0.15, "mean_noise_span_length": 3.0,
                   "packing_efficiency": 0.9873, "learning_rate": 0.001, "max_steps": 20}  # fmt: skip
# metric key -> model-index metric type, written out independently of hf_lmobj.cards.writer
EXPECTED_TYPES = {"eval_loss": "loss", "eval_perplexity": "perplexity", "eval_bits_per_byte": "bits_per_byte",
                  "eval_masked_accuracy": "accuracy", "test_perplexity": "perplexity"}  # fmt: skip
STATISTICS = {"train_loss": 5.1, "tokens_seen": 81920, "bytes_seen": 301234, "eval_runtime": 0.8, "epoch": 1.0}


def _run_metrics() -> dict:
    eval_loss = 4.9
    return {
        "eval_loss": eval_loss,
        "eval_perplexity": math.exp(eval_loss),
        "eval_bits_per_byte": eval_loss * 81920 / 301234 / math.log(2),
        "eval_masked_accuracy": 0.3125,
        "test_perplexity": 140.25,
        **STATISTICS,
    }


def _write(tmp_path, objective, metrics, **kwargs):
    return write_model_card(tmp_path, objective=objective, metrics=metrics, hyperparameters=HYPERPARAMETERS,
                            model_name=f"tiny-{objective}", dataset_name="python-stdlib", **kwargs)  # fmt: skip


@pytest.mark.parametrize("objective", sorted(OBJECTIVES))
def test_card_round_trips_with_metrics_file_numbers(tmp_path, objective):
    # What a recipe does: write metrics.json, then render the card from the file's contents.
    (tmp_path / "metrics.json").write_text(json.dumps(_run_metrics()))
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    _write(tmp_path, objective, metrics, base_model="org/base", log_history=LOG_HISTORY, extra={"seed": 7})

    card = ModelCard.load(tmp_path / "README.md")
    data = card.data
    assert data.library_name == "transformers"
    assert data.license == "apache-2.0"
    assert data.datasets == ["hf-lmobj/python-stdlib"]  # the embedded corpus: its id, as in .eval_results
    assert data.base_model == "org/base"
    assert {"hf_lmobj", objective} <= set(data.tags)
    assert data.model_name == f"tiny-{objective}"
    got = {(r.metric_type, r.dataset_split): r.metric_value for r in data.eval_results}
    want = {(t, "test" if k.startswith("test_") else "validation"): metrics[k] for k, t in EXPECTED_TYPES.items()}
    assert got == want  # exact equality: the YAML carries the file's floats unchanged
    assert len(data.eval_results) == len(EXPECTED_TYPES)  # run statistics stay out of the model-index


@pytest.mark.parametrize("objective", sorted(OBJECTIVES))
def test_card_body_has_every_section(tmp_path, objective):
    card = _write(tmp_path, objective, _run_metrics(), log_history=LOG_HISTORY, extra={"seed": 7})
    text = (tmp_path / "README.md").read_text()
    assert text == str(card)
    first = "## Task" if objective == "sequence_classification" else "## Objective"
    for heading in (first, "## Evaluation", "## Training curve", "## How to use", "## Framework versions"):
        assert f"\n{heading}\n" in text
    for key in HYPERPARAMETERS:
        assert f"| `{key}` |" in text
    assert "| `packing_efficiency` | 0.9873 |" in text
    assert "| `tokens_seen` | 81,920 |" in text and "| `bytes_seen` | 301,234 |" in text
    assert f"| Perplexity | validation | {math.exp(4.9):.6g} |" in text
    assert "![Training and evaluation loss against the optimizer step](loss_curve.png)" in text
    assert f"- torch {torch.__version__}\n" in text and f"- transformers {transformers.__version__}\n" in text
    assert "- **seed:** 7" in text
    assert "from scratch" in text
    assert "{{" not in text and "{%" not in text


def _png_size(data: bytes) -> tuple[int, int]:
    """Width and height from the IHDR chunk, checking its CRC (PNG spec, section 5.3)."""
    assert data[:8] == PNG_SIGNATURE
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13
    body = data[16 : 16 + length]
    (crc,) = struct.unpack(">I", data[16 + length : 20 + length])
    assert crc == zlib.crc32(kind + body)
    width, height = struct.unpack(">II", body[:8])
    return width, height


def test_loss_curve_png_is_valid(tmp_path):
    _write(tmp_path, "causal", _run_metrics(), log_history=LOG_HISTORY)
    data = (tmp_path / "loss_curve.png").read_bytes()
    assert _png_size(data) == (640, 400)  # figsize 6.4 x 4.0 inches at 100 dpi
    with Image.open(tmp_path / "loss_curve.png") as image:
        image.verify()  # full decode check of every chunk
    assert data[-12:] == b"\x00\x00\x00\x00IEND\xaeB`\x82"


FIRST_SERIES, SECOND_SERIES = (0x1F, 0x77, 0xB4), (0xFF, 0x7F, 0x0E)  # matplotlib's default C0, C1


def _pixels_of(path, rgb) -> tuple[list[int], list[int]]:
    """Columns and rows of the pixels drawn in ``rgb`` (anti-aliased edges left out)."""
    with Image.open(path) as image:
        image = image.convert("RGB")
        width, height = image.size
        data = image.load()
        hits = [(x, y) for y in range(height) for x in range(width)
                if sum(abs(a - b) for a, b in zip(data[x, y], rgb)) <= 30]  # fmt: skip
    return [x for x, _ in hits], [y for _, y in hits]


def test_loss_curve_draws_each_series_at_its_steps_and_values(tmp_path):
    """Read back from the pixels: the train loss falls left to right over steps 1..20, and the eval
    points sit at steps 10 and 20 in a second colour that is absent when there is no eval loss."""
    train_only = [e for e in LOG_HISTORY if "loss" in e]
    a = plot_loss_curve(train_only, tmp_path / "a.png", title="t")
    b = plot_loss_curve(LOG_HISTORY, tmp_path / "b.png", title="t")
    assert not _pixels_of(a, SECOND_SERIES)[0]  # one series only: no eval colour anywhere
    xs, ys = _pixels_of(b, FIRST_SERIES)
    left, right = min(xs), max(xs)  # the train line's ends: steps 1 and 20 (the legend sits inside)
    assert right - left > 300
    rows_at = {x: [y for x2, y in zip(xs, ys) if x2 == x] for x in (left, right)}
    assert max(rows_at[left]) < min(rows_at[right])  # loss 5.9 at step 1 is drawn above loss 4.0 at step 20
    eval_xs, eval_ys = _pixels_of(b, SECOND_SERIES)
    step_10 = left + (10 - 1) / (20 - 1) * (right - left)
    assert abs(min(eval_xs) - step_10) < 8  # the first eval point's marker is centred at step 10
    assert abs(max(eval_xs) - right) < 8  # the last one at step 20
    at_step_20 = [y for x, y in zip(eval_xs, eval_ys) if abs(x - right) < 3]
    assert max(at_step_20) < min(rows_at[right])  # eval 4.9 above train 4.0 at step 20


def test_no_loss_history_means_no_png_and_says_so(tmp_path):
    _write(tmp_path, "masked", {"eval_loss": 3.0}, log_history=[{"step": 1, "learning_rate": 1e-3}])
    assert not (tmp_path / "loss_curve.png").exists()
    assert "No loss history was recorded." in (tmp_path / "README.md").read_text()


def test_no_eval_results_gives_a_card_without_model_index(tmp_path):
    _write(tmp_path, "span", {"train_loss": 2.0})
    card = ModelCard.load(tmp_path / "README.md")
    assert "model-index" not in card.content.split("---")[1]
    assert not card.data.eval_results


def test_split_metrics_hand_worked():
    results, stats = split_metrics({"eval_loss": 1.5, "loss": 9.0, "perplexity": 4.5, "eval_f1": 0.5,
                                    "eval_samples_per_second": 3.0, "eval_num_tokens": 9, "test_accuracy": 1,
                                    "train_loss": 2.0, "validation_bits_per_byte": 1.75, "validation_bytes": 80})  # fmt: skip
    assert results == {
        "eval_loss": ("loss", "Loss (nats per target token)", "validation", 1.5),
        "perplexity": ("perplexity", "Perplexity", "validation", 4.5),
        "eval_f1": ("f1", "F1", "validation", 0.5),
        "test_accuracy": ("accuracy", "Accuracy", "test", 1),
        "validation_bits_per_byte": ("bits_per_byte", "Bits per byte", "validation", 1.75),
    }
    assert stats == {"loss": 9.0, "eval_samples_per_second": 3.0, "eval_num_tokens": 9, "train_loss": 2.0,
                     "validation_bytes": 80}  # fmt: skip


def test_bad_objective_is_a_clear_value_error(tmp_path):
    with pytest.raises(ValueError, match=r"objective must be one of \[.*'causal'.*'masked'.*'span'.*\], got 'gpt'"):
        _write(tmp_path, "gpt", {})
    assert not (tmp_path / "README.md").exists()


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"metrics": {"eval_loss": "2.0"}}, TypeError, r"metrics\['eval_loss'\] must be a real number"),
        ({"metrics": {"eval_loss": True}}, TypeError, r"metrics\['eval_loss'\]"),
        ({"metrics": [("eval_loss", 2.0)]}, TypeError, "metrics must be a dict"),
        ({"log_history": [{"loss": 2.0}]}, ValueError, r"log_history\[0\] has 'loss' but no 'step'"),
        ({"log_history": [3.0]}, TypeError, r"log_history\[0\] must be a dict"),
        ({"model_name": " "}, ValueError, "model_name must be a non-empty string"),
    ],
)
def test_bad_inputs_name_the_field(tmp_path, kwargs, error, match):
    arguments = {"objective": "causal", "metrics": {}, "hyperparameters": {}, "model_name": "m", "dataset_name": "d"}
    with pytest.raises(error, match=match):
        write_model_card(tmp_path, **{**arguments, **kwargs})


def test_plot_without_losses_is_a_value_error(tmp_path):
    with pytest.raises(ValueError, match="no 'loss' or 'eval_loss'"):
        plot_loss_curve([{"step": 1, "learning_rate": 0.1}], tmp_path / "x.png")


def test_template_dir_override(tmp_path):
    templates = tmp_path / "templates"
    templates.mkdir()
    template = "---\n{{ card_data }}\n---\n\nCustom card for {{ model_name }} ({{ objective }}).\n"
    (templates / "span.md").write_text(template)
    _write(tmp_path / "out", "ul2", {"eval_loss": 1.25}, template_dir=templates)
    card = ModelCard.load(tmp_path / "out" / "README.md")
    assert card.text.strip() == "Custom card for tiny-ul2 (ul2)."
    assert [r.metric_value for r in card.data.eval_results] == [1.25]
    with pytest.raises(FileNotFoundError, match=r"causal\.md not found; pass template_dir"):
        _write(tmp_path / "out", "causal", {}, template_dir=templates)


@pytest.mark.parametrize("objective", sorted(OBJECTIVES))
def test_pipeline_tag_names_a_transformers_pipeline_or_is_absent(tmp_path, objective):
    _write(tmp_path, objective, {"eval_loss": 1.0})
    tag = ModelCard.load(tmp_path / "README.md").data.pipeline_tag
    if OBJECTIVES[objective].auto_class == "AutoModelForSeq2SeqLM":  # transformers 5 has no text2text pipeline
        assert tag is None
    else:
        assert tag in transformers.pipelines.SUPPORTED_TASKS


def test_a_local_starting_model_is_named_in_the_text_never_as_base_model(tmp_path):
    local = tmp_path / "out" / "clm-demo"
    local.mkdir(parents=True)
    _write(tmp_path / "card", "causal", {"eval_loss": 1.0}, base_model=str(local))
    card = ModelCard.load(tmp_path / "card" / "README.md")
    assert card.data.base_model is None
    assert f"starting from the local model `{local}`" in card.text and "from scratch" not in card.text
    _write(tmp_path / "hub", "causal", {"eval_loss": 1.0}, base_model="org/base")
    assert "[`org/base`](https://huggingface.co/org/base)" in (tmp_path / "hub" / "README.md").read_text()


PEFT_CARD = "---\nbase_model: {base}\nlibrary_name: peft\npipeline_tag: text-generation\ntags:\n- base_model:adapter:{base}\n- lora\n- transformers\n---\n\n# Model Card for Model ID\n"


@pytest.mark.parametrize("base", ["org/base", "LOCAL"])
def test_an_adapter_card_keeps_what_peft_wrote(tmp_path, base):
    base = str(tmp_path) if base == "LOCAL" else base
    (tmp_path / "README.md").write_text(PEFT_CARD.format(base=base))
    _write(tmp_path, "causal", {"eval_loss": 1.0}, base_model=base)
    data = ModelCard.load(tmp_path / "README.md").data
    assert data.library_name == "peft"
    assert {"lora", "transformers", "hf_lmobj", "causal"} <= set(data.tags)
    hub = base == "org/base"
    assert data.base_model == ("org/base" if hub else None)
    assert (f"base_model:adapter:{base}" in data.tags) is hub  # a local folder is no Hub reference
    _write(tmp_path, "masked", {"eval_loss": 1.0})  # a rerun replaces our own card instead of merging it
    assert "causal" not in ModelCard.load(tmp_path / "README.md").data.tags


def _tiny_model(objective, tokenizer):
    """A stock architecture at hidden size 32, 2 layers, sized to the local tokenizer."""
    ids = {"vocab_size": len(tokenizer), "pad_token_id": tokenizer.pad_token_id,
           "bos_token_id": tokenizer.bos_token_id, "eos_token_id": tokenizer.eos_token_id}  # fmt: skip
    if objective == "causal":
        config = transformers.GPT2Config(n_embd=32, n_layer=2, n_head=2, n_positions=128, **ids)
        return transformers.GPT2LMHeadModel(config)
    if objective in ("masked", "sequence_classification"):
        config = transformers.BertConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                         intermediate_size=64, max_position_embeddings=128, **ids)  # fmt: skip
        if objective == "masked":
            return transformers.BertForMaskedLM(config)
        return transformers.BertForSequenceClassification(config)
    if objective == "span":
        config = transformers.T5Config(d_model=32, d_ff=64, d_kv=16, num_layers=2, num_heads=2,
                                       decoder_start_token_id=tokenizer.pad_token_id, **ids)  # fmt: skip
        return transformers.T5ForConditionalGeneration(config)
    config = transformers.BartConfig(d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=2,
                                     decoder_attention_heads=2, encoder_ffn_dim=64, decoder_ffn_dim=64,
                                     max_position_embeddings=128, decoder_start_token_id=tokenizer.eos_token_id,
                                     **ids)  # fmt: skip
    return transformers.BartForConditionalGeneration(config)


@pytest.mark.parametrize("objective", ["causal", "masked", "span", "text_infilling", "sequence_classification"])
def test_how_to_use_snippet_runs_on_a_saved_model(tmp_path, tokenizer, objective):
    model = _tiny_model(objective, tokenizer)
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    _write(tmp_path, objective, {"eval_loss": 2.0})
    text = (tmp_path / "README.md").read_text()
    (snippet,) = re.findall(r"```python\n(.*?)```", text, flags=re.S)
    assert f'model_id = "tiny-{objective}"' in snippet
    snippet = snippet.replace(f'model_id = "tiny-{objective}"', f"model_id = {str(tmp_path)!r}")
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(snippet, "card-snippet", "exec"), {})
    assert out.getvalue().strip(), "the snippet prints its result"


# The Hub's results-file format (https://huggingface.co/docs/hub/eval-results), written out from its
# docs: a YAML list of entries; field -> (required, type). ``source.url`` is required when ``source`` is given.
EVAL_RESULTS_SCHEMA = {
    "dataset": (True, dict),
    "value": (True, (int, float)),
    "verifyToken": (False, str),
    "date": (False, str),
    "source": (False, dict),
    "notes": (False, str),
}
EVAL_RESULTS_DATASET = {"id": (True, str), "task_id": (True, str), "revision": (False, str)}
EVAL_RESULTS_SOURCE = {"url": (True, str), "name": (False, str), "user": (False, str), "org": (False, str)}


def _check_fields(mapping: dict, schema: dict, where: str) -> None:
    assert isinstance(mapping, dict), where
    assert set(mapping) <= set(schema), f"{where}: unknown fields {set(mapping) - set(schema)}"
    for field, (required, kind) in schema.items():
        if required:
            assert field in mapping, f"{where}: {field} is required"
        if field in mapping:
            assert isinstance(mapping[field], kind) and not isinstance(mapping[field], bool), f"{where}.{field}"


def check_eval_results_file(path) -> list[dict]:
    """Parse ``path`` and check it against the Hub's schema; return its entries."""
    import yaml

    entries = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(entries, list) and entries, path
    for i, entry in enumerate(entries):
        _check_fields(entry, EVAL_RESULTS_SCHEMA, f"{path.name}[{i}]")
        _check_fields(entry["dataset"], EVAL_RESULTS_DATASET, f"{path.name}[{i}].dataset")
        assert re.fullmatch(r"[\w.-]+/[\w.-]+", entry["dataset"]["id"]), entry["dataset"]["id"]  # a Hub dataset id
        if "source" in entry:
            _check_fields(entry["source"], EVAL_RESULTS_SOURCE, f"{path.name}[{i}].source")
            assert entry["source"]["url"].startswith("https://")
        if "date" in entry:
            assert re.fullmatch(r"\d{4}-\d{2}-\d{2}(T[\d:.]+(Z|[+-]\d{2}:\d{2})?)?", entry["date"]), entry["date"]
    return entries


@pytest.mark.parametrize("dataset_name,dataset_id", [("python-stdlib", "hf-lmobj/python-stdlib"),
                                                     ("Salesforce/wikitext", "Salesforce/wikitext")])  # fmt: skip
def test_eval_results_files_follow_the_hub_schema_and_carry_metrics_json_values(tmp_path, dataset_name, dataset_id):
    (tmp_path / "metrics.json").write_text(json.dumps(_run_metrics()))
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    write_model_card(tmp_path, objective="causal", metrics=metrics, hyperparameters=HYPERPARAMETERS,
                     model_name="tiny-clm", dataset_name=dataset_name)  # fmt: skip
    files = sorted((tmp_path / ".eval_results").glob("*.yaml"))
    assert [f.name for f in files] == ["bits_per_byte.yaml", "perplexity.yaml", "perplexity_test.yaml"]
    want = {"perplexity": metrics["eval_perplexity"], "bits_per_byte": metrics["eval_bits_per_byte"],
            "perplexity_test": metrics["test_perplexity"]}  # fmt: skip
    card_index = {
        (r.metric_type, r.dataset_split): r.metric_value
        for r in ModelCard.load(tmp_path / "README.md").data.eval_results
    }
    for path in files:
        (entry,) = check_eval_results_file(path)
        assert entry["dataset"] == {"id": dataset_id, "task_id": path.stem}
        assert entry["value"] == want[path.stem]  # exact: the metrics.json float, unchanged
        metric, split = path.stem.rsplit("_", 1) if path.stem.endswith("_test") else (path.stem, "validation")
        assert card_index[(metric, split)] == entry["value"]  # the model-index says the same
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", entry["date"])
    # a rerun in the same folder replaces its own entry of the same identity (never appends), keeps anyone
    # else's file, and removes its own entries of the metrics and splits it did not measure this time (stale:
    # they describe the model this run replaced)
    (tmp_path / ".eval_results" / "hle.yaml").write_text("- dataset: {id: cais/hle, task_id: hle}\n  value: 1.0\n")
    write_model_card(tmp_path, objective="causal", metrics={"eval_perplexity": 3.5}, hyperparameters={},
                     model_name="tiny-clm", dataset_name=dataset_name)  # fmt: skip
    assert [e["value"] for e in check_eval_results_file(tmp_path / ".eval_results" / "perplexity.yaml")] == [3.5]
    assert sorted(f.name for f in (tmp_path / ".eval_results").iterdir()) == ["hle.yaml", "perplexity.yaml"]


def test_no_eval_results_without_perplexity_or_bits_per_byte(tmp_path):
    write_model_card(tmp_path, objective="masked", metrics={"eval_loss": 2.0, "eval_masked_accuracy": 0.5},
                     hyperparameters={}, model_name="tiny-mlm", dataset_name="python-stdlib")  # fmt: skip
    assert not (tmp_path / ".eval_results").exists()
