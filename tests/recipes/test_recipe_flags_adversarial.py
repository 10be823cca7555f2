"""Every recipe flag at and past its limits: refused by name when the arguments are parsed, before any data.

Each case runs the recipe's ``main(argv)`` in-process with the data phases replaced by a function that
fails the test ("should not be reached"): a refusal must come before the corpus, the tokenizer or the
model exist, and leave no file behind. Values typed on the command line that argparse itself cannot
convert (``--max_steps 2.5``) end in argparse's exit with its message on stderr.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from transformers import GPT2Config, GPT2LMHeadModel

from tests.testing_utils import REPO, load_recipe

CONFIGS = REPO / "recipes" / "configs"
TINY = [
    "--max_documents", "200", "--vocab_size", "512", "--hidden_size", "32", "--num_hidden_layers", "2",
    "--num_attention_heads", "2", "--max_length", "64", "--max_position_embeddings", "128", "--max_steps", "2",
    "--sample_max_new_tokens", "8",
]  # fmt: skip


def _args(config: str, out: Path, *flags: str) -> list[str]:
    return ["--config", str(CONFIGS / config), *TINY, "--output_dir", str(out), *flags]


@pytest.fixture(scope="module")
def pretrain():
    return load_recipe("pretrain")


@pytest.fixture
def no_data(pretrain, monkeypatch):
    """The recipe with every data phase replaced by a failure: a refusal must come before them."""

    def reached(*args, **kwargs):
        raise AssertionError("should not be reached: the data phase ran before the arguments were refused")

    for name in ("open_sources", "run_tokenizer", "build_pretraining_model", "prepare_run_data"):
        monkeypatch.setattr(pretrain, name, reached)
    return pretrain


def _refused(recipe, argv: list[str], out: Path, error: type, words: str) -> str:
    with pytest.raises(error, match=words) as refused:
        recipe.main(argv)
    assert not out.exists() or not any(out.iterdir()), f"{out} holds files: {sorted(out.iterdir())}"
    return str(refused.value)


# --------------------------------------------------------------------------------- pre-training
# (config, flags, error, a word of the message); every value at or past its limit
PRETRAIN_CASES = [
    # the examples: each failed after training (or never) and now fails before any data
    ("causal/fim_demo.yaml", ["--max_length", "32"], ValueError, r"max_length 32 - infill_max_new_tokens 48 leaves -16"),
    ("causal/demo.yaml", ["--score_stride", "-4"], ValueError, r"score_stride must be an int >= 1"),
    ("causal/demo.yaml", ["--score_batch_size", "0"], ValueError, r"score_batch_size must be an int >= 1"),
    ("causal/demo.yaml", ["--sample_top_p", "0"], ValueError, r"sample_top_p must be a finite number in \(0, 1\]"),
    ("causal/demo.yaml", ["--ngram_orders", "0"], ValueError, r"ngram_orders\[0\] must be an int >= 1"),
    ("causal/demo.yaml", ["--model_type", "gpt2", "--max_position_embeddings", "32", "--max_length", "128"],
     ValueError, r"max_length 128 needs 128 positions but the model has 32"),
    ("causal/demo.yaml", ["--model_type", "llama", "--max_position_embeddings", "32", "--max_length", "128"],
     ValueError, r"raise --max_position_embeddings to >= 128 or lower --max_length"),
    # data
    ("causal/demo.yaml", ["--max_length", "1"], ValueError, r"max_length must be an int >= 2"),
    ("causal/demo.yaml", ["--max_length", "0"], ValueError, r"max_length must be an int >= 2"),
    ("causal/demo.yaml", ["--max_length", "-5"], ValueError, r"max_length must be an int >= 2"),
    ("causal/demo.yaml", ["--max_length", "1000000000"], ValueError, r"needs 1000000000 positions"),
    ("causal/demo.yaml", ["--validation_fraction", "0"], ValueError, r"validation_fraction"),
    ("causal/demo.yaml", ["--validation_fraction", "1"], ValueError, r"validation_fraction"),
    ("causal/demo.yaml", ["--validation_fraction", "nan"], ValueError, r"validation_fraction"),
    ("causal/demo.yaml", ["--validation_fraction", "-0.1"], ValueError, r"validation_fraction"),
    ("causal/demo.yaml", ["--max_documents", "0"], ValueError, r"max_documents must be an int >= 1"),
    ("causal/demo.yaml", ["--max_documents", "-3"], ValueError, r"max_documents must be an int >= 1"),
    ("causal/demo.yaml", ["--vocab_size", "100"], ValueError, r"vocab_size must be an int >= \d+"),
    ("causal/demo.yaml", ["--text_column", ""], ValueError, r"text_column must be a non-empty string"),
    ("causal/demo.yaml", ["--dataset_name", " "], ValueError, r"dataset_name must be a non-empty string"),
    ("causal/demo.yaml", ["--tokenizer_name", ""], ValueError, r"tokenizer_name must be a non-empty string"),
    ("causal/demo.yaml", ["--objective", "gan"], ValueError, r"objective must be one of"),
    ("causal/demo.yaml", ["--max_eval_rows", "0"], ValueError, r"max_eval_rows must be an int >= 1"),
    ("causal/demo.yaml", ["--report_sample_tokens", "-1"], ValueError, r"report_sample_tokens must be an int >= 1"),
    ("causal/demo.yaml", ["--block_documents", "0"], ValueError, r"block_documents must be an int >= 1"),
    ("masked/bert_tiny.yaml", ["--mlm_probability", "0"], ValueError, r"mlm_probability"),
    ("masked/bert_tiny.yaml", ["--mlm_probability", "nan"], ValueError, r"mlm_probability"),
    ("masked/bert_tiny.yaml", ["--mlm_probability", "1.5"], ValueError, r"mlm_probability"),
    ("span/t5_tiny.yaml", ["--noise_density", "1"], ValueError, r"noise_density"),
    ("span/t5_tiny.yaml", ["--noise_density", "0"], ValueError, r"noise_density"),
    ("span/t5_tiny.yaml", ["--mean_noise_span_length", "0.5"], ValueError, r"mean_noise_span_length"),
    # model
    ("causal/demo.yaml", ["--hidden_size", "0"], ValueError, r"hidden_size must be an int >= 1"),
    ("causal/demo.yaml", ["--num_hidden_layers", "-1"], ValueError, r"num_hidden_layers must be an int >= 1"),
    ("causal/demo.yaml", ["--num_attention_heads", "3"], ValueError, r"multiple of num_attention_heads"),
    ("causal/demo.yaml", ["--intermediate_size", "0"], ValueError, r"intermediate_size must be an int >= 1"),
    ("causal/demo.yaml", ["--max_position_embeddings", "0"], ValueError, r"max_position_embeddings must be an int"),
    ("causal/demo.yaml", ["--dropout", "1.0"], ValueError, r"dropout must be a finite number in \[0, 1\)"),
    ("causal/demo.yaml", ["--dropout", "nan"], ValueError, r"dropout"),
    ("causal/demo.yaml", ["--dropout", "-0.1"], ValueError, r"dropout"),
    ("causal/demo.yaml", ["--model_type", "bert"], ValueError, r"does not fit objective 'causal'"),
    ("causal/demo.yaml", ["--model_type", "mamba"], ValueError, r"model_type must be one of"),
    ("masked/bert_tiny.yaml", ["--model_type", "gpt2"], ValueError, r"does not fit objective 'masked'"),
    ("masked/bert_tiny.yaml", ["--max_length", "65", "--max_position_embeddings", "66"], ValueError,
     r"masked rows are padded to 72"),
    ("span/t5_tiny.yaml", ["--model_type", "llama"], ValueError, r"does not fit objective 'span'"),
    ("causal/demo.yaml", ["--attn_implementation", ""], ValueError, r"attn_implementation must be a non-empty"),
    # auxiliary objectives
    ("masked/bert_tiny.yaml", ["--auxiliary_objective", "mtp"], ValueError, r"set objective: causal"),
    ("causal/demo.yaml", ["--auxiliary_objective", "electra"], ValueError, r"set objective: masked"),
    ("causal/mtp_demo.yaml", ["--mtp_num_depths", "63"], ValueError, r"mtp_num_depths 63"),
    ("causal/mtp_demo.yaml", ["--mtp_num_depths", "0"], ValueError, r"num_depths"),
    ("causal/mtp_demo.yaml", ["--mtp_loss_weight", "nan"], ValueError, r"loss_weight"),
    ("masked/electra_tiny.yaml", ["--electra_generator_fraction", "0"], ValueError, r"electra_generator_fraction"),
    ("masked/electra_tiny.yaml", ["--electra_generator_fraction", "1.5"], ValueError, r"electra_generator_fraction"),
    ("masked/electra_tiny.yaml", ["--electra_embedding_size", "0"], ValueError, r"electra_embedding_size"),
    ("masked/electra_tiny.yaml", ["--model_type", "bert"], ValueError, r"set model_type: electra"),
    ("masked/electra_tiny.yaml", ["--max_length", "128", "--max_position_embeddings", "64"], ValueError,
     r"max_length 128 needs 128 positions"),
    # fill-in-the-middle and the infilling report
    ("causal/fim_demo.yaml", ["--infill_max_new_tokens", "60"], ValueError, r"leaves 4; lower infill_max_new_tokens"),
    ("causal/fim_demo.yaml", ["--infill_max_new_tokens", "0"], ValueError, r"infill_max_new_tokens must be an int >= 1"),
    ("causal/fim_demo.yaml", ["--infill_cases", "-1"], ValueError, r"infill_cases must be an int >= 0"),
    ("causal/fim_demo.yaml", ["--infill_seed", "-1"], ValueError, r"infill_seed must be an int >= 0"),
    ("causal/fim_demo.yaml", ["--fim_rate", "1.5"], ValueError, r"fim_rate must be a number in \[0, 1\]"),
    ("causal/fim_demo.yaml", ["--fim_rate", "nan"], ValueError, r"fim_rate"),
    ("causal/fim_demo.yaml", ["--fim_spm_rate", "-0.5"], ValueError, r"fim_spm_rate"),
    ("causal/fim_demo.yaml", ["--fim_level", "word"], ValueError, r"fim_level must be one of"),
    ("causal/fim_demo.yaml", ["--max_length", "10", "--infill_cases", "0"], ValueError, r"max_length 10 leaves 0"),
    ("causal/fim_demo.yaml", ["--max_length", "13", "--infill_cases", "0"], ValueError, r"raise max_length to >= 14"),
    ("causal/fim_demo.yaml", ["--token_store", "some/store"], ValueError, r"token store does not hold"),
    ("causal/fim_demo.yaml", ["--sources", '[{"token_store": "s", "weight": 1}]'], ValueError,
     r"token store does not hold"),
    ("masked/bert_tiny.yaml", ["--fim_rate", "0.5"], ValueError, r"objective must be 'causal'"),
    ("masked/bert_tiny.yaml", ["--infill_cases", "5"], ValueError, r"infill_cases 5: fill-in-the-middle"),
    ("causal/fim_demo.yaml", ["--fim_baseline_metrics", ""], ValueError, r"fim_baseline_metrics must be a non-empty"),
    # the report: scoring, n-grams, the sample
    ("causal/demo.yaml", ["--score_stride", "0"], ValueError, r"score_stride must be an int >= 1"),
    ("causal/demo.yaml", ["--score_stride", "100"], ValueError, r"score_stride 100 must be <= the scoring window 64"),
    ("causal/demo.yaml", ["--score_stride", "40", "--score_max_length", "32"], ValueError,
     r"score_stride 40 must be <= score_max_length 32"),
    ("causal/demo.yaml", ["--score_batch_size", "-1"], ValueError, r"score_batch_size"),
    ("causal/demo.yaml", ["--score_max_length", "1"], ValueError, r"score_max_length must be an int >= 2"),
    ("causal/demo.yaml", ["--score_max_length", "0"], ValueError, r"score_max_length must be an int >= 2"),
    ("causal/demo.yaml", ["--score_max_length", "256"], ValueError, r"the scoring window .* 256 needs 256 positions"),
    ("causal/demo.yaml", ["--sample_top_p", "1.5"], ValueError, r"sample_top_p"),
    ("causal/demo.yaml", ["--sample_top_p", "nan"], ValueError, r"sample_top_p"),
    ("causal/demo.yaml", ["--sample_top_p", "inf"], ValueError, r"sample_top_p"),
    ("causal/demo.yaml", ["--sample_top_p", "-0.5"], ValueError, r"sample_top_p"),
    ("causal/demo.yaml", ["--ngram_orders", "3", "3"], ValueError, r"lists an order twice"),
    ("causal/demo.yaml", ["--ngram_orders", "1000000"], ValueError, r"exceed 16"),
    ("causal/demo.yaml", ["--ngram_orders", "-2"], ValueError, r"ngram_orders\[0\]"),
    ("causal/demo.yaml", ["--sample_max_new_tokens", "0"], ValueError, r"sample_max_new_tokens must be an int >= 1"),
    ("causal/demo.yaml", ["--model_type", "gpt2", "--sample_max_new_tokens", "200"], ValueError,
     r"the sample \(1 prompt tokens \+ sample_max_new_tokens 200\) needs 201 positions"),
    ("causal/demo.yaml", ["--sample_seed", "-1"], ValueError, r"sample_seed must be an int in \[0, 2\*\*32\), got -1"),
    ("causal/demo.yaml", ["--sample_seed", "4294967296"], ValueError, r"sample_seed must be an int in \[0, 2\*\*32\)"),
    # runtime: threads and the time budget
    ("causal/demo.yaml", ["--max_train_minutes", "0"], ValueError, r"max_train_minutes must be positive"),
    ("causal/demo.yaml", ["--max_train_minutes", "-1"], ValueError, r"max_train_minutes must be positive"),
    ("causal/demo.yaml", ["--max_train_minutes", "nan"], ValueError, r"max_train_minutes must be positive"),
    ("causal/demo.yaml", ["--max_train_minutes", "inf"], ValueError, r"max_train_minutes must be a finite number"),
    ("causal/demo.yaml", ["--max_train_minutes", "1e308"], ValueError, r"finite number of minutes"),
    ("causal/demo.yaml", ["--max_steps", "-1", "--max_train_minutes", "5"], ValueError,
     r"max_steps must be >= 1: max_train_minutes lowers"),
    ("causal/demo.yaml", ["--torch_threads", "0"], ValueError, r"torch_threads must be an int >= 1"),
    ("causal/demo.yaml", ["--torch_threads", "100000"], ValueError, r"torch_threads 100000 exceeds the \d+ cores"),
    ("causal/demo.yaml", ["--thread_check_steps", "0"], ValueError, r"thread_check_steps must be an int >= 1"),
    # optimizer
    ("causal/demo.yaml", ["--muon_momentum", "1.0"], ValueError, r"muon_momentum must lie in \[0, 1\)"),
    ("causal/demo.yaml", ["--muon_momentum", "nan"], ValueError, r"muon_momentum"),
    ("causal/demo.yaml", ["--optimizer", "sgd"], ValueError, r"optimizer must be one of"),
    # TrainingArguments, which accepts all of these itself
    ("causal/demo.yaml", ["--learning_rate", "nan"], ValueError, r"learning_rate must be a finite number"),
    ("causal/demo.yaml", ["--learning_rate", "-1"], ValueError, r"learning_rate"),
    ("causal/demo.yaml", ["--learning_rate", "inf"], ValueError, r"learning_rate"),
    ("causal/demo.yaml", ["--per_device_train_batch_size", "0"], ValueError, r"per_device_train_batch_size"),
    ("causal/demo.yaml", ["--per_device_eval_batch_size", "0"], ValueError, r"per_device_eval_batch_size"),
    ("causal/demo.yaml", ["--gradient_accumulation_steps", "0"], ValueError, r"gradient_accumulation_steps"),
    ("causal/demo.yaml", ["--max_steps", "0"], ValueError, r"max_steps must be -1 .* or a number of steps >= 1"),
    ("causal/demo.yaml", ["--max_steps", "-5"], ValueError, r"max_steps must be an int >= -1"),
    ("causal/demo.yaml", ["--seed", "-1"], ValueError, r"seed must be an int >= 0"),
    ("causal/demo.yaml", ["--seed", "4294967296"], ValueError, r"seed must be an int in \[0, 2\*\*32\)"),
    ("causal/demo.yaml", ["--weight_decay", "nan"], ValueError, r"weight_decay"),
    ("causal/demo.yaml", ["--adam_beta1", "1.0"], ValueError, r"adam_beta1"),
    ("causal/demo.yaml", ["--adam_beta2", "-0.1"], ValueError, r"adam_beta2"),
    ("causal/demo.yaml", ["--adam_epsilon", "-1"], ValueError, r"adam_epsilon"),
    ("causal/demo.yaml", ["--max_grad_norm", "nan"], ValueError, r"max_grad_norm"),
    ("causal/demo.yaml", ["--label_smoothing_factor", "1.0"], ValueError, r"label_smoothing_factor"),
    ("causal/demo.yaml", ["--dataloader_num_workers", "-1"], ValueError, r"dataloader_num_workers"),
    ("causal/demo.yaml", ["--save_strategy", "steps", "--save_steps", "0"], ValueError, r"save_steps"),
    ("causal/demo.yaml", ["--max_train_minutes", "null", "--max_steps", "-1", "--streaming", "true",
                       "--dataset_name", "some/dataset"], ValueError, r"max_steps must be >= 1: a streamed"),
    # conflicting flags
    ("causal/demo.yaml", ["--token_store", "a", "--sources", '[{"token_store": "b", "weight": 1}]'], ValueError,
     r"not both"),
    ("causal/demo.yaml", ["--sources", '[{"token_store": "b", "weight": "inf"}]'], ValueError, r"weight must be"),
    ("causal/demo.yaml", ["--weights_only_restart", "true"], ValueError, r"needs --resume_from_checkpoint"),
    ("causal/demo.yaml", ["--overwrite_output_dir", "true", "--resume_from_checkpoint", "/no/checkpoint-2"], ValueError,
     r"--overwrite_output_dir true starts over and --resume_from_checkpoint continues: give one"),
    ("causal/demo.yaml", ["--resume_from_checkpoint", "last"], ValueError, r"holds no complete checkpoint"),
]  # fmt: skip


@pytest.mark.parametrize(("config", "flags", "error", "words"), PRETRAIN_CASES,
                         ids=lambda v: " ".join(v) if isinstance(v, list) else None)  # fmt: skip
def test_pretrain_refuses_before_any_data(no_data, tmp_path, config, flags, error, words):
    out = tmp_path / "run"
    _refused(no_data, _args(config, out, *flags), out, error, words)


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--max_steps", "2.5"], "argument --max_steps/--max-steps: invalid int value: '2.5'"),
        (["--max_steps", "True"], "argument --max_steps/--max-steps: invalid int value: 'True'"),
        (["--seed", "1.7"], "argument --seed: invalid int value: '1.7'"),
        (["--learning_rate", "fast"], "argument --learning_rate/--learning-rate: invalid float value: 'fast'"),
        (["--max_length", ""], "argument --max_length/--max-length: invalid int value: ''"),
        (["--use_cpu", "maybe"], "argument --use_cpu"),
        (["--save_strategy", "sometimes"], "argument --save_strategy/--save-strategy: invalid choice: 'sometimes'"),
        (["--ngram_orders", "3", "x"], "argument --ngram_orders/--ngram-orders: invalid int value: 'x'"),
    ],
)
def test_pretrain_command_line_types_are_argparses_errors(no_data, tmp_path, capsys, flags, words):
    out = tmp_path / "run"
    with pytest.raises(SystemExit) as done:
        no_data.main(_args("causal/demo.yaml", out, *flags))
    assert done.value.code == 2
    assert words in capsys.readouterr().err
    assert not out.exists()


def test_output_dir_that_names_no_folder_or_a_file_is_refused(no_data, tmp_path):
    _refused(no_data, _args("causal/demo.yaml", tmp_path / "unused", "--output_dir", "/"), tmp_path / "unused",
             ValueError, "names no folder")  # fmt: skip
    file = tmp_path / "taken"
    file.write_text("not a folder")
    with pytest.raises(ValueError, match="is a file, not a folder"):
        no_data.main(_args("causal/demo.yaml", file))
    assert file.read_text() == "not a folder"


def test_a_baseline_metrics_file_that_is_not_json_is_refused(no_data, tmp_path):
    baseline = tmp_path / "plain.json"
    baseline.write_text("eval_loss = 3\n")
    out = tmp_path / "run"
    _refused(no_data, _args("causal/fim_demo.yaml", out, "--fim_baseline_metrics", str(baseline)), out, ValueError,
             "is not a metrics.json a run wrote")  # fmt: skip
    baseline.write_text("[1, 2]\n")
    _refused(no_data, _args("causal/fim_demo.yaml", out, "--fim_baseline_metrics", str(baseline)), out, ValueError,
             "must hold a JSON mapping")  # fmt: skip


@pytest.fixture(scope="module")
def gpt2_32_positions(tmp_path_factory) -> Path:
    """A saved GPT-2 checkpoint with a 32-row position table (the issue's example, as a user's model)."""
    folder = tmp_path_factory.mktemp("gpt2-32")
    GPT2LMHeadModel(GPT2Config(vocab_size=512, n_embd=16, n_layer=1, n_head=2, n_positions=32)).save_pretrained(folder)
    return folder


def test_a_checkpoints_own_position_table_is_read_at_parse_time(no_data, tmp_path, gpt2_32_positions):
    out = tmp_path / "run"
    message = _refused(no_data, _args("causal/demo.yaml", out, "--model_name_or_path", str(gpt2_32_positions),
                                      "--max_length", "64"), out, ValueError, "max_length 64 needs 64 positions")  # fmt: skip
    assert f"the config of {gpt2_32_positions}" in message and "lower --max_length" in message
    assert "raise --max_position_embeddings" not in message  # a checkpoint's table cannot grow


def test_a_checkpoint_fits_the_sample_and_the_scoring_window_too(no_data, tmp_path, gpt2_32_positions):
    out = tmp_path / "run"
    path = ["--model_name_or_path", str(gpt2_32_positions), "--max_length", "32"]
    _refused(no_data, _args("causal/demo.yaml", out, *path, "--score_max_length", "64"), out, ValueError,
             "scoring window")  # fmt: skip
    _refused(no_data, _args("causal/demo.yaml", out, *path, "--sample_max_new_tokens", "32"), out, ValueError,
             r"the sample \(1 prompt tokens")  # fmt: skip


# ------------------------------------------------------------------------ the built model itself
@pytest.fixture(scope="module")
def tok():
    from hf_lmobj.corpus import build_tokenizer

    return build_tokenizer(vocab_size=512)


def _built(objective: str, tokenizer, aux=None, **sizes):
    from hf_lmobj.models.pretraining import AuxiliaryArguments, build_pretraining_model
    from hf_lmobj.models.stock import ModelArguments

    model_args = ModelArguments(hidden_size=16, num_hidden_layers=1, num_attention_heads=2, **sizes)
    return build_pretraining_model(objective, tokenizer, model_args, AuxiliaryArguments(aux)), model_args


@pytest.mark.parametrize(
    ("objective", "aux", "sizes", "max_length", "words"),
    [
        ("causal", None, {"model_type": "gpt2", "max_position_embeddings": 32}, 64, "max_length 64 needs 64 positions"),
        ("causal", None, {"model_type": "llama", "max_position_embeddings": 32}, 33, "max_length 33 needs 33"),
        ("causal", "mtp", {"max_position_embeddings": 32}, 40, "the built LlamaForCausalLM"),
        ("masked", None, {"model_type": "roberta", "max_position_embeddings": 32}, 33, "masked rows are padded to 40"),
        ("masked", "electra", {"max_position_embeddings": 32}, 48, "max_length 48 needs 48 positions"),
    ],
)
def test_check_built_model_reads_the_models_own_positions(tok, objective, aux, sizes, max_length, words):
    from hf_lmobj.data.prepare import DataArguments
    from hf_lmobj.recipes.report.report_arguments import ReportArguments
    from hf_lmobj.recipes.runtime.pretrain_checks import check_built_model

    model, model_args = _built(objective, tok, aux, **sizes)
    data_args = DataArguments(objective=objective, max_length=max_length)
    with pytest.raises(ValueError, match=re.escape(words)):
        check_built_model(model, tok, data_args, ReportArguments(sample_max_new_tokens=4), model_args)


@pytest.mark.parametrize(("model_type", "rotary"), [("llama", True), ("qwen3", True), ("gpt2", False)])
def test_a_rotary_decoder_built_from_config_may_sample_past_its_positions(model_type, rotary):
    from hf_lmobj.models.stock import ModelArguments
    from hf_lmobj.recipes.runtime.pretrain_checks import configured_positions

    limit, is_rotary, _ = configured_positions(
        "causal", ModelArguments(model_type=model_type, max_position_embeddings=64)
    )
    assert (limit, is_rotary) == (64, rotary)  # a position table (GPT-2) refuses a longer sample; rotary ones do not


def test_check_built_model_counts_the_sample_prompt_and_needs_something_to_continue(tok):
    from hf_lmobj.data.prepare import DataArguments
    from hf_lmobj.recipes.report.report_arguments import ReportArguments
    from hf_lmobj.recipes.runtime.pretrain_checks import check_built_model

    model, model_args = _built("causal", tok, None, model_type="gpt2", max_position_embeddings=32)
    data_args = DataArguments(max_length=32)
    prompt = "def " * 10
    needed = len(tok(prompt, add_special_tokens=False)["input_ids"]) + 1 + 24  # + BOS + the new tokens
    report = ReportArguments(sample_prompt=prompt, sample_max_new_tokens=24)
    with pytest.raises(ValueError, match=rf"needs {needed} positions but the model has 32"):
        check_built_model(model, tok, data_args, report, model_args)
    check_built_model(
        model, tok, data_args, ReportArguments(sample_prompt="def ", sample_max_new_tokens=24), model_args
    )  # fmt: skip  (fits: nothing raised)
    llama, llama_args = _built("causal", tok, None, model_type="llama", max_position_embeddings=32)
    check_built_model(llama, tok, data_args, report, llama_args)  # rotary positions: a long sample runs on
    no_bos = tok.__class__.from_pretrained(tok.name_or_path)
    no_bos.bos_token = None
    with pytest.raises(ValueError, match="leave the sample nothing to continue"):
        check_built_model(llama, no_bos, data_args, ReportArguments(sample_prompt=""), llama_args)


# --------------------------------------------------------------------------- the other recipes
@pytest.fixture
def finetune_no_data(monkeypatch):
    recipes = {name: load_recipe(name) for name in ("finetune_lora", "finetune_classifier")}

    def reached(*args, **kwargs):
        raise AssertionError("should not be reached: the data phase ran before the arguments were refused")

    for recipe in recipes.values():
        monkeypatch.setattr(recipe, "AutoTokenizer", type("NoTokenizer", (), {"from_pretrained": reached}))
    return recipes


LORA = ["--config", str(CONFIGS / "causal/finetune_lora.yaml"), "--model_name_or_path", "some/model"]
CLASSIFIER = ["--config", str(CONFIGS / "masked/finetune_classifier.yaml"), "--model_name_or_path", "some/encoder"]


@pytest.mark.parametrize(
    ("recipe", "base", "flags", "words"),
    [
        ("finetune_lora", LORA, ["--lora_r", "0"], "lora_r must be an int >= 1"),
        ("finetune_lora", LORA, ["--lora_alpha", "-4"], "lora_alpha must be an int >= 1"),
        ("finetune_lora", LORA, ["--lora_dropout", "nan"], "lora_dropout"),
        ("finetune_lora", LORA, ["--max_length", "1"], "max_length must be an int >= 2"),
        ("finetune_lora", LORA, ["--max_examples", "0"], "max_examples must be an int >= 1"),
        ("finetune_lora", LORA, ["--validation_fraction", "0"], "validation_fraction"),
        ("finetune_lora", LORA, ["--prompt_column", ""], "prompt_column must be a non-empty string"),
        ("finetune_lora", LORA, ["--learning_rate", "nan"], "learning_rate must be a finite number"),
        ("finetune_lora", LORA, ["--max_steps", "0"], "max_steps must be -1"),
        ("finetune_classifier", CLASSIFIER, ["--train_per_class", "0"], "train_per_class must be an int >= 1"),
        ("finetune_classifier", CLASSIFIER, ["--replace_prob", "0"], "replace_prob"),
        ("finetune_classifier", CLASSIFIER, ["--replace_prob", "inf"], "replace_prob"),
        ("finetune_classifier", CLASSIFIER, ["--packages", "json,json"], "names a package twice"),
        ("finetune_classifier", CLASSIFIER, ["--max_chars", "0"], "max_chars must be an int >= 1"),
        ("finetune_classifier", CLASSIFIER, ["--per_device_train_batch_size", "0"], "per_device_train_batch_size"),
        ("finetune_classifier", CLASSIFIER, ["--seed", "-3"], "seed must be an int >= 0"),
    ],
)
def test_finetune_recipes_refuse_before_the_tokenizer(finetune_no_data, tmp_path, recipe, base, flags, words):
    out = tmp_path / "run"
    _refused(finetune_no_data[recipe], [*base, "--output_dir", str(out), *flags], out, ValueError, words)


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--stride", "0"], "stride must be an int >= 1"),
        (["--max_length", "16", "--stride", "32"], "stride 32 must be <= max_length 16"),
        (["--batch_size", "0"], "batch_size must be an int >= 1"),
        (["--validation_fraction", "1.5"], "validation_fraction"),
        (["--text_column", " "], "text_column must be a non-empty string"),
    ],
)
def test_score_recipe_refuses_bad_flags_before_loading(monkeypatch, tmp_path, flags, words):
    recipe = load_recipe("score")
    monkeypatch.setattr(recipe, "score_documents", lambda *a: pytest.fail("should not be reached"))
    with pytest.raises(ValueError, match=words):
        recipe.main(["--model_name_or_path", "some/model", "--output_dir", str(tmp_path / "eval"), *flags])
    assert not (tmp_path / "eval").exists()


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--vocab_size", "10"], "vocab_size must be an int >="),
        (["--num_proc", "0"], "num_proc must be an int >= 1"),
        (["--batch_size", "-1"], "batch_size must be an int >= 1"),
        (["--max_documents", "0"], "max_documents must be an int >= 1"),
        (["--text_column", ""], "text_column must be a non-empty string"),
    ],
)
def test_tokenize_recipe_refuses_bad_flags_before_reading(monkeypatch, tmp_path, flags, words):
    recipe = load_recipe("tokenize_corpus")
    monkeypatch.setattr(recipe, "load_texts", lambda *a: pytest.fail("should not be reached"))
    with pytest.raises(ValueError, match=words):
        recipe.main(["--output_dir", str(tmp_path / "store"), *flags])
    assert not (tmp_path / "store").exists()
