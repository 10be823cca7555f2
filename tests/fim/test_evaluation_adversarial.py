"""Adversarial inputs to the single-line infilling evaluation and its report: ``single_line_cases``,
``evaluate_infilling``, ``edit_similarity``, ``function_body_lines``, ``best_infill``, ``comparison_lines``.

Input classes: source files that mention special tokens (FIM sentinels, ``</s>``, ``<pad>``), hostile
counts and lengths (0, negative, bools, floats, past the model's positions), cases and texts of the
wrong kind, a tokenizer larger than the model, unknown modes and metrics, a zero baseline.
"""

from __future__ import annotations

import pytest

from hf_lmobj.fim.evaluation import (
    InfillingCase,
    _prompts,
    edit_similarity,
    evaluate_infilling,
    function_body_lines,
    single_line_cases,
)
from hf_lmobj.fim.format import fim_token_ids
from hf_lmobj.fim.report import best_infill, comparison_lines
from hf_lmobj.plain_text import encode_plain, special_ids
from tests.testing_utils import Oracle, tiny_gpt2

SOURCE = """def sentinels():
    a = '<fim_prefix>'
    b = '</s>' + '<pad>'
    return '<fim_middle>' + a + b
"""


@pytest.fixture(scope="module")
def model(tokenizer):
    return tiny_gpt2(tokenizer, width=16, layers=1).eval()


@pytest.fixture(scope="module")
def cases():
    return single_line_cases([SOURCE], num_cases=10, seed=0)


# ----------------------------------------------------------------------------- literal text stays text
@pytest.mark.parametrize("mode", ["psm", "spm", "prefix_only"])
def test_prompts_and_targets_of_a_file_that_mentions_special_tokens(tokenizer, cases, mode):
    assert [c.line for c in cases] == ["    a = '<fim_prefix>'", "    b = '</s>' + '<pad>'",
                                       "    return '<fim_middle>' + a + b"]  # fmt: skip
    fim = fim_token_ids(tokenizer)
    prompts, targets, _ = _prompts(tokenizer, cases, mode, budget=56, add_bos=True)
    sentinels = [1, 1, 1] if mode != "prefix_only" else [0, 0, 0]
    for prompt, target in zip(prompts, targets):
        assert [prompt.count(s) for s in fim.sentinels] == sentinels
        assert [i for i in prompt[1:] if i in special_ids(tokenizer) and i not in fim.sentinels] == []
        assert not set(target) & special_ids(tokenizer)


def test_a_line_that_mentions_sentinels_is_an_exact_match_when_written(tokenizer, model, cases, one_torch_thread):
    prompts, _, _ = _prompts(tokenizer, cases, "psm", budget=64 - 24, add_bos=True)
    answers = {tuple(p): encode_plain(tokenizer, [c.middle])[0] + [tokenizer.eos_token_id]
               for p, c in zip(prompts, cases)}  # fmt: skip
    result = evaluate_infilling(Oracle(model, answers), tokenizer, cases, "psm", max_length=64, max_new_tokens=24)
    assert (result.cases, result.exact_match, result.edit_similarity) == (3, 1.0, 1.0)


@pytest.mark.parametrize("mode", ["spm", "prefix_only"])
def test_healed_modes_run_on_such_a_file(tokenizer, model, cases, mode, one_torch_thread):
    result = evaluate_infilling(model, tokenizer, cases, mode, max_new_tokens=4, batch_size=2)
    assert result.cases == 3 and 0.0 <= result.exact_match <= result.edit_similarity <= 1.0
    assert result.middle_bits_per_byte > 0


# ----------------------------------------------------------------------------- evaluate_infilling refusals
@pytest.mark.parametrize(
    "kwargs, error, word",
    [
        ({"mode": "PSM"}, ValueError, "mode must be one of"),
        ({"cases": []}, ValueError, "cases is empty"),
        ({"cases": "abc"}, ValueError, "cases is empty"),
        ({"cases": [{"prefix": "", "middle": "x", "suffix": ""}]}, TypeError, r"cases\[0\] must be an InfillingCase"),
        ({"max_new_tokens": 0}, ValueError, "max_new_tokens must be an int >= 1"),
        ({"max_new_tokens": -1}, ValueError, "max_new_tokens must be an int >= 1"),
        ({"max_new_tokens": True}, TypeError, "max_new_tokens"),
        ({"batch_size": 0}, ValueError, "batch_size must be an int >= 1"),
        ({"batch_size": 1.5}, TypeError, "batch_size"),
        ({"max_length": 0}, ValueError, "max_length must be an int >= 1"),
        ({"max_length": True}, TypeError, "max_length"),
        ({"max_length": 128}, ValueError, "more than the model's 64 positions"),
        ({"max_length": 16, "max_new_tokens": 12}, ValueError, "raise max_length"),
        ({"add_bos": "yes"}, TypeError, "add_bos must be True or False"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_hostile_evaluation_arguments_are_refused_before_generating(tokenizer, model, cases, kwargs, error, word):
    arguments = {"cases": cases, "mode": "psm", "max_new_tokens": 4, **kwargs}
    with pytest.raises(error, match=word):
        evaluate_infilling(model, tokenizer, **arguments)


def test_a_tokenizer_larger_than_the_model_is_refused(tokenizer, cases):
    with pytest.raises(ValueError, match="resize_token_embeddings"):
        evaluate_infilling(
            tiny_gpt2(tokenizer, vocab_size=600, width=16, layers=1).eval(), tokenizer, cases, "psm", max_new_tokens=4
        )


# ----------------------------------------------------------------------------- cases, similarity, lines
@pytest.mark.parametrize(
    "kwargs, error, word",
    [
        ({"texts": SOURCE}, TypeError, "wrap one text in a list"),
        ({"texts": [SOURCE, None]}, TypeError, r"texts\[1\] must be a string"),
        ({"seed": -1}, ValueError, "seed"),
        ({"seed": 1.5}, ValueError, "seed"),
        ({"prefix_lines": -1}, ValueError, "prefix_lines must be an int >= 0"),
        ({"suffix_lines": True}, TypeError, "suffix_lines"),
        ({"names": "ab"}, TypeError, "one name per text"),
        ({"names": ["a", "b"]}, ValueError, "one name per text"),
        ({"num_cases": 0}, ValueError, "num_cases must be a positive int"),
        ({"max_line_chars": 0}, ValueError, "max_line_chars must be an int >= 1"),
        ({"texts": ["x = 1\n", ""]}, ValueError, "no line inside a function body"),
        ({"texts": []}, ValueError, "no line inside a function body"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_bad_case_arguments_are_refused(kwargs, error, word):
    with pytest.raises(error, match=word):
        single_line_cases(**{"texts": [SOURCE], **kwargs})


def test_cases_of_one_character_bodies_are_whole_windows():
    (case,) = single_line_cases(["def f():\n x\n"], num_cases=3)
    assert case == InfillingCase(prefix="def f():\n", middle=" x\n", suffix="", source="0:2")


@pytest.mark.parametrize("a, b", [(None, "x"), ("x", b"x"), (1, 2)])
def test_edit_similarity_takes_strings(a, b):
    with pytest.raises(TypeError, match="must be a string"):
        edit_similarity(a, b)


def test_function_body_lines_takes_source_text():
    with pytest.raises(TypeError, match="must be a string"):
        function_body_lines(b"def f():\n    pass\n")
    with pytest.raises(ValueError, match="max_line_chars must be an int >= 1"):
        function_body_lines(SOURCE, max_line_chars=-1)
    assert function_body_lines("") == [] and function_body_lines("\x00") == []


# ----------------------------------------------------------------------------- the report
def test_report_refuses_unknown_metrics_and_survives_a_zero_baseline():
    with pytest.raises(ValueError, match="metric must be one of"):
        best_infill({"validation_infill_psm_bleu": 0.3}, "bleu")
    with pytest.raises(TypeError, match="metrics must be a dict"):
        best_infill([("validation_infill_psm_exact_match", 0.3)])
    assert best_infill({}) is None
    lines = comparison_lines({"validation_bits_per_byte": 1.5}, {"validation_bits_per_byte": 0.0})
    assert lines[1].split()[-1] == "n/a"
