"""Single-line infilling: which lines are hidden, a fixed seeded sample, token-healed prefix-only prompts,
exact match read from the generated text, and the middle's NLL against a direct computation."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from hf_lmobj.fim.evaluation import (
    InfillingCase,
    _prefix_only_prompt,
    _prompts,
    edit_similarity,
    evaluate_infilling,
    function_body_lines,
    single_line_cases,
)
from hf_lmobj.fim.format import fim_token_ids
from hf_lmobj.fim.prompting import fim_prompts
from hf_lmobj.models.stock import ModelArguments, build_model
from tests.testing_utils import Oracle

SOURCE = '''import os

def outer(a):
    """Docstring
    over two lines."""
    # a comment

    b = a + 1
    def inner():
        return b
    return inner


async def fetch(x):
    await x
x = outer(1)
class C:
    def method(self):
        return "é中"
'''


def test_function_body_lines_skip_docstrings_comments_blanks_and_module_code():
    lines = SOURCE.split("\n")
    chosen = [lines[i] for i in function_body_lines(SOURCE)]
    assert chosen == ["    b = a + 1", "    def inner():", "        return b", "    return inner", "    await x",
                      '        return "é中"']  # fmt: skip
    assert function_body_lines(SOURCE, max_line_chars=13) == [7, 14]  # "    b = a + 1", "    await x"
    assert function_body_lines("def broken(:\n    pass\n") == []


def test_cases_are_a_fixed_seeded_sample_of_whole_windows():
    texts = [SOURCE, SOURCE.replace("a + 1", "a - 1")]
    cases = single_line_cases(texts, num_cases=5, seed=0, names=["one.py", "two.py"])
    assert cases == single_line_cases(texts, num_cases=5, seed=0, names=["one.py", "two.py"])
    assert cases != single_line_cases(texts, num_cases=5, seed=1, names=["one.py", "two.py"])
    assert len(single_line_cases(texts, num_cases=100, seed=0)) == 12  # every candidate, no repeats
    for case in cases:
        name, number = case.source.split(":")
        text = texts[["one.py", "two.py"].index(name)]
        assert case.line == text.split("\n")[int(number) - 1] and case.middle == case.line + "\n"
        assert case.prefix.endswith("\n") and case.middle.endswith("\n")  # whole lines on each side
        assert case.prefix + case.middle + case.suffix in text
    short = single_line_cases([SOURCE], num_cases=1, seed=0, prefix_lines=1, suffix_lines=0)[0]
    assert short.prefix.count("\n") == 1 and short.suffix == ""
    # whole lines at both ends of the file; its last line has no newline to hide
    last = single_line_cases(["def f():\n    return 1"], num_cases=1, prefix_lines=5, suffix_lines=5)[0]
    assert (last.prefix, last.middle, last.line, last.suffix) == ("def f():\n", "    return 1", "    return 1", "")
    windows = single_line_cases([SOURCE], num_cases=100, prefix_lines=2, suffix_lines=3)
    assert all(c.prefix.count("\n") == 2 and c.suffix.count("\n") == 3 for c in windows if c.source != "0:19")
    with pytest.raises(ValueError, match="num_cases"):
        single_line_cases(texts, num_cases=0)
    with pytest.raises(ValueError, match="no line inside a function body"):
        single_line_cases(["x = 1\n"])


def test_prefix_only_prompt_is_the_running_text_tokenization(tokenizer):
    case = InfillingCase(prefix="def f(x):\n", middle="    return x\n", suffix="", source="t:2")
    context, target, lead = _prefix_only_prompt(tokenizer, case)
    joint = tokenizer(case.prefix + case.line, add_special_tokens=False)["input_ids"]
    assert context + target == joint
    assert tokenizer.decode(context) + lead == case.prefix
    assert tokenizer.decode(target) == lead + case.line  # the newline is not scored: it merges with what follows


@pytest.fixture(scope="module")
def tiny_llama(tokenizer):
    with torch.random.fork_rng():
        torch.manual_seed(0)
        arguments = ModelArguments(
            hidden_size=32, num_hidden_layers=1, num_attention_heads=2, max_position_embeddings=128
        )
        return build_model("causal", tokenizer, arguments).eval()


def test_exact_match_reads_the_first_generated_line(tokenizer, tiny_llama, one_torch_thread):
    cases = single_line_cases([SOURCE], num_cases=4, seed=0)
    eos = tokenizer.eos_token_id
    encode = lambda s: tokenizer(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    # room for the prompt: 128 - 48 new tokens - BOS - 3 sentinels = 76 = 51 prefix + 25 suffix tokens
    prompts = fim_prompts(tokenizer, [c.prefix for c in cases], [c.suffix for c in cases],
                          max_prefix_tokens=51, max_suffix_tokens=25)  # fmt: skip
    # right, right then more lines (the first line counts), wrong, right but without its indentation
    outputs = [cases[0].line, cases[1].middle + "    extra", "pass", cases[3].line.strip()]
    oracle = Oracle(tiny_llama, {tuple(p): encode(o) + [eos] for p, o in zip(prompts, outputs)})
    result = evaluate_infilling(oracle, tokenizer, cases, "psm", max_length=128, max_new_tokens=48)
    assert result.exact_match == 0.5 and result.cases == 4
    expected = [1.0, 1.0, edit_similarity("pass", cases[2].line), edit_similarity(cases[3].line.strip(), cases[3].line)]
    assert result.edit_similarity == pytest.approx(sum(expected) / 4)
    assert 0 < expected[3] < 1 and expected[2] < expected[3]  # a missing indentation costs less than a wrong line
    healed = {}
    for case in cases:
        context, target, lead = _prefix_only_prompt(tokenizer, case)
        healed[(tokenizer.bos_token_id, *context)] = target + encode("\n    more = 1\n")
    healing = Oracle(tiny_llama, healed)
    prefix_only = evaluate_infilling(healing, tokenizer, cases, "prefix_only", max_length=128)
    assert prefix_only.exact_match == 1.0 and prefix_only.edit_similarity == 1.0
    assert healing.leads == [_prefix_only_prompt(tokenizer, case)[2] for case in cases] and all(healing.leads)
    assert oracle.leads == [""] * 4  # PSM: nothing to heal


def test_middle_nll_matches_a_direct_computation(tokenizer, tiny_llama, one_torch_thread):
    cases = single_line_cases([SOURCE], num_cases=3, seed=1)
    result = evaluate_infilling(tiny_llama, tokenizer, cases, "psm", max_length=128, max_new_tokens=8)
    total, num_bytes = 0.0, 0
    for case in cases:
        # room for the prompt: 128 - 8 new tokens - BOS - 3 sentinels = 116 = 78 prefix + 38 suffix tokens
        prompt = fim_prompts(tokenizer, [case.prefix], [case.suffix], max_prefix_tokens=78,
                             max_suffix_tokens=38)[0]  # fmt: skip
        middle = tokenizer(case.middle, add_special_tokens=False)["input_ids"][:8]
        with torch.no_grad():
            logits = tiny_llama(input_ids=torch.tensor([prompt + middle])).logits[0]  # (L, V)
        log_probs = logits.double().log_softmax(-1)
        total -= sum(float(log_probs[len(prompt) - 1 + i, t]) for i, t in enumerate(middle))
        num_bytes += len(tokenizer.decode(middle).encode("utf-8"))
    assert result.middle_nll == pytest.approx(total / len(cases), rel=1e-4)
    assert result.middle_bits_per_byte == pytest.approx(total / math.log(2) / num_bytes, rel=1e-4)
    assert 0.0 <= result.exact_match <= result.edit_similarity <= 1.0
    with pytest.raises(ValueError, match="mode must be one of"):
        evaluate_infilling(tiny_llama, tokenizer, cases, "middle")
    with pytest.raises(ValueError, match="lower max_new_tokens"):
        evaluate_infilling(tiny_llama, tokenizer, cases, "psm", max_length=16, max_new_tokens=12)


def test_spm_prompt_is_the_healed_prefix_only_prompt_after_the_suffix(tokenizer):
    cases = single_line_cases([SOURCE], num_cases=4, seed=0)
    ids = fim_token_ids(tokenizer)
    bos = [tokenizer.bos_token_id]
    plain = _prompts(tokenizer, cases, "prefix_only", budget=200, add_bos=True)
    spm = _prompts(tokenizer, cases, "spm", budget=200, add_bos=True)
    assert spm[1] == plain[1] and spm[2] == plain[2]  # the same targets and leads
    for case, fim, prefix_only in zip(cases, spm[0], plain[0]):
        suffix = tokenizer(case.suffix, add_special_tokens=False)["input_ids"][:65]  # (200 - 4) // 3 tokens
        assert fim == bos + [ids.prefix, ids.suffix, *suffix, ids.middle] + prefix_only[1:]
    # the prefix as encoded in running text, less the straddled line start: what SPM training saw
    # (indented lines: the newline merges with the indentation, so each lead holds the prefix's last "\n")
    assert all(not tokenizer.decode(p[-1:]).endswith("\n") and lead.endswith("\n") for p, lead in zip(*spm[::2]))


def _lcs(a: str, b: str) -> int:
    """Longest common subsequence by the textbook table (rows of a, columns of b)."""
    table = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i, x in enumerate(a):
        for j, y in enumerate(b):
            table[i + 1][j + 1] = table[i][j] + 1 if x == y else max(table[i][j + 1], table[i + 1][j])
    return table[-1][-1]


def test_edit_similarity_is_the_indel_ratio_of_line_completion_benchmarks():
    assert edit_similarity("", "") == 1.0 and edit_similarity("abc", "") == 0.0
    assert edit_similarity("    return y", "    return x") == pytest.approx(22 / 24)
    assert edit_similarity("kitten", "sitting") == pytest.approx(2 * 4 / 13)  # rapidfuzz.fuzz.ratio: 61.538...
    rng = np.random.default_rng(0)
    for _ in range(300):
        a, b = ("".join(rng.choice(list("ab c\n"), size=rng.integers(0, 12))) for _ in range(2))
        want = 2 * _lcs(a, b) / (len(a) + len(b)) if a or b else 1.0
        assert edit_similarity(a, b) == pytest.approx(want) == pytest.approx(edit_similarity(b, a))
