"""A run that has trained never loses its work: the model is saved first, a later failure says where it is.

Before, ``recipes/pretrain.py`` evaluated, scored and ran the infilling report before it saved the
model, and wrote ``metrics.json`` only at the very end: a failure in any of them cost the trained
model or everything measured. Now the model, the tokenizer and ``trainer_state.json`` are written
the moment training ends, and a failure after that writes ``metrics.json`` with what was computed
and raises :class:`AfterTrainingError` naming the folder and the failed step.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from hf_lmobj.recipes.report import pretrain_report
from hf_lmobj.recipes.runtime import after_training
from hf_lmobj.recipes.runtime.after_training import AfterTrainingError, nothing_lost, save_trained_model
from hf_lmobj.recipes.runtime.phase_timer import PhaseTimer
from tests.testing_utils import QUICK_PRETRAIN, REPO, load_recipe


# ------------------------------------------------------------------------------ the two pieces
class _Trainer:
    """What save_trained_model touches on a Trainer, recording the calls."""

    def __init__(self, main: bool) -> None:
        self.main, self.calls = main, []
        self.state = SimpleNamespace(save_to_json=lambda path: (self.calls.append(("state", path)),
                                                                 Path(path).write_text("{}")))  # fmt: skip

    def save_model(self, output_dir):
        self.calls.append(("model", output_dir))

    def is_world_process_zero(self):
        return self.main


class _Tokenizer:
    def __init__(self, calls):
        self.calls = calls

    def save_pretrained(self, output_dir):
        self.calls.append(("tokenizer", output_dir))


@pytest.mark.parametrize("main", [True, False])
def test_save_trained_model_saves_on_every_rank_and_writes_files_on_the_main_one(tmp_path, main):
    trainer = _Trainer(main)
    save_trained_model(trainer, _Tokenizer(trainer.calls), tmp_path)
    expected = [("model", str(tmp_path))]
    if main:
        expected += [("tokenizer", str(tmp_path)), ("state", str(tmp_path / "trainer_state.json"))]
    assert trainer.calls == expected
    assert (tmp_path / "trainer_state.json").exists() is main


def test_a_failure_writes_what_was_computed_and_names_the_folder_and_the_phase(tmp_path):
    timer, metrics = PhaseTimer(), {"eval_loss": 2.5}
    with pytest.raises(AfterTrainingError) as failed:
        with nothing_lost(tmp_path, metrics, main_process=True, timer=timer, saved=" with its tokenizer"):
            with timer.phase("scoring"):
                metrics["validation_tokens"] = 10
                raise IndexError("index out of range in self")
    error = failed.value
    assert str(error) == (
        f"training finished and the model was saved at {tmp_path} with its tokenizer; the scoring step failed: "
        "IndexError: index out of range in self. metrics.json holds what was computed before the failure: "
        "['eval_loss', 'validation_tokens']"
    )
    assert isinstance(error.__cause__, IndexError) and error.phase == "scoring" and error.output_dir == tmp_path
    assert json.loads((tmp_path / "metrics.json").read_text()) == {"eval_loss": 2.5, "validation_tokens": 10}


def test_the_innermost_phase_is_the_one_named_and_no_phase_says_a_step_after_training(tmp_path):
    timer = PhaseTimer()
    with pytest.raises(AfterTrainingError, match="the n-gram step failed: ValueError: order"):
        with nothing_lost(tmp_path, {}, True, timer), timer.phase("report"), timer.phase("n-gram"):
            raise ValueError("order must be at least 1")
    with pytest.raises(AfterTrainingError, match="; a step after it failed: KeyError"):
        with nothing_lost(tmp_path, {}, True, PhaseTimer()):
            raise KeyError("eval_loss")


def test_only_the_main_process_writes_metrics_and_success_writes_nothing(tmp_path):
    with pytest.raises(AfterTrainingError):
        with nothing_lost(tmp_path / "rank1", {"eval_loss": 1.0}, main_process=False):
            raise RuntimeError("collective failed")
    assert not (tmp_path / "rank1").exists()
    metrics = {"eval_loss": 1.0}
    with nothing_lost(tmp_path / "ok", metrics, main_process=True) as same:
        same["eval_perplexity"] = 2.7
    assert metrics == {"eval_loss": 1.0, "eval_perplexity": 2.7} and not (tmp_path / "ok").exists()


def test_keyboard_interrupt_is_not_turned_into_a_report(tmp_path):
    with pytest.raises(KeyboardInterrupt):
        with nothing_lost(tmp_path, {}, True):
            raise KeyboardInterrupt
    assert not (tmp_path / "metrics.json").exists()


def test_write_metrics_is_the_one_writer_of_metrics_json(tmp_path):
    path = after_training.write_metrics(tmp_path / "new", {"a": 1.5})
    assert path == tmp_path / "new" / "metrics.json" and path.read_text() == '{\n  "a": 1.5\n}\n'


# ------------------------------------------------------------------ the recipes, end to end
QUICK = [*QUICK_PRETRAIN, "--max_documents", "60", "--validation_fraction", "0.1", "--max_train_minutes", "null",
         "--ngram_orders", "3", "--disable_tqdm", "true", "--torch_threads", "1"]  # fmt: skip
FIM = [str(REPO / "recipes/configs/causal/fim_demo.yaml") if a.endswith("causal/demo.yaml") else a for a in QUICK]


def _fail(*args, **kwargs):
    raise ValueError("injected failure after training")


def _assert_saved(out: Path, error: AfterTrainingError, phase: str | None, keys: set[str]) -> dict:
    assert f"the model was saved at {out}" in str(error) and "injected failure after training" in str(error)
    assert error.phase == phase
    for name in ("model.safetensors", "config.json", "tokenizer.json", "trainer_state.json"):
        assert (out / name).is_file(), f"{name} missing after a failure past training"
    assert json.loads((out / "trainer_state.json").read_text())["global_step"] == 2
    saved = json.loads((out / "metrics.json").read_text())
    assert keys <= set(saved) and saved == error.metrics
    assert not (out / "README.md").exists()
    return saved


def test_a_failure_in_scoring_keeps_the_model_and_the_evaluation(tmp_path, monkeypatch):
    recipe = load_recipe()
    monkeypatch.setattr(recipe, "score_validation_texts", _fail)
    out = tmp_path / "run"
    with pytest.raises(AfterTrainingError) as failed:
        recipe.main([*QUICK, "--output_dir", str(out)])
    saved = _assert_saved(out, failed.value, "scoring", {"eval_loss", "train_runtime", "train_unigram_entropy"})
    assert not {"validation_bits_per_byte", "validation_perplexity", "validation_bytes"} & set(saved)  # not scored


@pytest.mark.slow
@pytest.mark.parametrize(
    ("target", "name", "phase", "keys"),
    [
        ("recipe", "sample_continuation", "sampling", {"eval_loss", "validation_bits_per_byte"}),
        ("recipe", "baseline_bits_per_byte", None, {"validation_bits_per_byte"}),
        ("report", "write_model_card", None, {"validation_bits_per_byte", "baseline_kneser_ney_3_gram_bits_per_byte"}),
    ],
)
def test_a_failure_in_each_later_step_keeps_what_came_before(tmp_path, monkeypatch, target, name, phase, keys):
    recipe = load_recipe()
    monkeypatch.setattr(recipe if target == "recipe" else pretrain_report, name, _fail)
    out = tmp_path / "run"
    with pytest.raises(AfterTrainingError) as failed:
        recipe.main([*QUICK, "--output_dir", str(out)])
    _assert_saved(out, failed.value, phase, keys)


@pytest.mark.slow
def test_a_failure_in_the_infilling_report_keeps_the_fim_model_and_its_left_to_right_figures(tmp_path, monkeypatch):
    recipe = load_recipe()
    monkeypatch.setattr(recipe, "validation_infilling", _fail)
    out = tmp_path / "fim"
    with pytest.raises(AfterTrainingError) as failed:
        recipe.main([*FIM, "--infill_cases", "2", "--infill_max_new_tokens", "8", "--output_dir", str(out)])
    _assert_saved(out, failed.value, "infilling", {"eval_loss", "validation_bits_per_byte", "validation_perplexity"})


def test_infilling_cases_are_drawn_before_training(tmp_path, monkeypatch):
    """A validation split with no function body to hide fails before the trainer exists, not after the run."""
    recipe = load_recipe()

    def trained(*args, **kwargs):
        raise AssertionError("should not be reached: training started before the infilling cases were drawn")

    monkeypatch.setattr(recipe, "ObjectiveTrainer", trained)
    monkeypatch.setattr(recipe, "infilling_cases", lambda *a: _fail())
    out = tmp_path / "fim"
    with pytest.raises(ValueError, match="injected failure"):
        recipe.main([*FIM, "--infill_cases", "2", "--infill_max_new_tokens", "8", "--output_dir", str(out)])
    assert not (out / "model.safetensors").exists()


@pytest.fixture(scope="module")
def tiny_llama_dir(tmp_path_factory) -> Path:
    import torch

    from hf_lmobj.corpus import build_tokenizer
    from hf_lmobj.models.stock import ModelArguments, build_model

    folder = tmp_path_factory.mktemp("llama")
    tokenizer = build_tokenizer(vocab_size=512)
    torch.manual_seed(0)
    build_model("causal", tokenizer, ModelArguments(hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                                                 max_position_embeddings=256)).save_pretrained(folder)  # fmt: skip
    tokenizer.save_pretrained(folder)
    return folder


@pytest.mark.slow
def test_the_lora_recipe_saves_its_adapter_before_the_final_evaluation_and_card(tiny_llama_dir, tmp_path, monkeypatch):
    recipe = load_recipe("finetune_lora")
    monkeypatch.setattr(recipe, "write_model_card", _fail)
    out = tmp_path / "lora"
    with pytest.raises(AfterTrainingError, match=f"the model was saved at {out} \\(the LoRA adapter"):
        recipe.main(["--config", str(REPO / "recipes/configs/causal/finetune_lora.yaml"),
                     "--model_name_or_path", str(tiny_llama_dir), "--packages", "json,html,http", "--max_chars", "600",
                     "--max_eval_examples", "4", "--max_steps", "2", "--max_length", "128", "--eval_strategy", "no",
                     "--disable_tqdm", "true", "--output_dir", str(out)])  # fmt: skip
    assert (out / "adapter_model.safetensors").is_file() and (out / "tokenizer.json").is_file()
    assert {"base_eval_loss", "eval_loss", "train_loss"} <= set(json.loads((out / "metrics.json").read_text()))


def test_the_lora_recipe_refuses_a_max_length_past_the_base_models_positions(tiny_llama_dir, tmp_path, monkeypatch):
    recipe = load_recipe("finetune_lora")
    monkeypatch.setattr(recipe, "build_lora_model", lambda *a: pytest.fail("should not be reached"))
    with pytest.raises(ValueError, match="max_length 512 needs 512 positions but the model has 256"):
        recipe.main(["--config", str(REPO / "recipes/configs/causal/finetune_lora.yaml"),
                     "--model_name_or_path", str(tiny_llama_dir), "--max_length", "512",
                     "--output_dir", str(tmp_path / "lora")])  # fmt: skip


@pytest.mark.slow
def test_the_classifier_recipe_keeps_its_model_when_the_scratch_comparison_fails(tmp_path, monkeypatch):
    import torch

    from hf_lmobj.corpus import build_tokenizer
    from hf_lmobj.models.stock import ModelArguments, build_model

    encoder = tmp_path / "bert"
    tokenizer = build_tokenizer(vocab_size=512)
    torch.manual_seed(0)
    build_model("masked", tokenizer, ModelArguments(model_type="bert", hidden_size=16, num_hidden_layers=1,
                                                 num_attention_heads=2, max_position_embeddings=512)
                ).save_pretrained(encoder)  # fmt: skip
    tokenizer.save_pretrained(encoder)
    recipe = load_recipe("finetune_classifier")
    monkeypatch.setattr(recipe, "train_and_evaluate", _fail)  # the from-scratch run only
    out = tmp_path / "cls"
    with pytest.raises(AfterTrainingError, match=f"the model was saved at {out}"):
        recipe.main(["--config", str(REPO / "recipes/configs/masked/finetune_classifier.yaml"),
                     "--model_name_or_path", str(encoder), "--packages", "asyncio,email", "--train_per_class", "4",
                     "--eval_per_class", "4", "--max_steps", "2", "--max_chars", "400", "--disable_tqdm", "true",
                     "--output_dir", str(out)])  # fmt: skip
    assert (out / "model.safetensors").is_file() and (out / "tokenizer.json").is_file()
    assert {"eval_loss", "eval_accuracy"} <= set(json.loads((out / "metrics.json").read_text()))
