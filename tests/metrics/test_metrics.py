"""The perplexity and bits-per-byte evaluate metrics: worked examples, weighting, folders, bad input."""

from __future__ import annotations

import doctest
import importlib
import inspect
import math
import runpy
import shutil
import sys
import types
from pathlib import Path

import evaluate
import pandas
import pytest
import torch

from hf_lmobj.metrics import CORE_NAMES, GRADIO_SDK_VERSION, METRIC_NAMES, export_space, load, metric_path
from tests.testing_utils import tiny_gpt2

REPO_ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def perplexity():
    return load("perplexity")


@pytest.fixture(scope="module")
def bits_per_byte():
    return load("bits_per_byte")


@pytest.fixture(scope="module")
def gpt2(tokenizer):
    return tiny_gpt2(tokenizer, pad_token_id=None, seed=7).eval()


@pytest.fixture(scope="module")
def saved_model(gpt2, tokenizer, tmp_path_factory):
    """The tiny GPT-2 and its tokenizer saved with save_pretrained (a local model_id, no Hub)."""
    folder = tmp_path_factory.mktemp("tiny_gpt2")
    gpt2.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def nll_of(probabilities) -> float:
    return -math.fsum(math.log(p) for p in probabilities)


def test_textbook_example_three_tokens(perplexity):
    result = perplexity.compute(nll=[nll_of((0.1, 0.5, 0.4))], num_tokens=[3])
    assert round(result["perplexity"], 2) == 3.68
    assert result["perplexity"] == pytest.approx((0.1 * 0.5 * 0.4) ** (-1 / 3))


def test_textbook_example_unlikely_tokens(perplexity, bits_per_byte):
    nll = nll_of((0.05, 0.01, 0.20))
    result = perplexity.compute(nll=[nll], num_tokens=[3])
    assert round(result["nll"], 3) == 9.210
    assert round(result["nll"] / result["num_tokens"], 2) == 3.07  # nats per token
    assert round(result["nll"] / result["num_tokens"] / math.log(2), 2) == 4.43  # bits per token
    assert round(result["perplexity"], 1) == 21.5
    # one byte per token: bits per byte is bits per token
    assert bits_per_byte.compute(nll=[nll], num_bytes=[3])["bits_per_byte"] == pytest.approx(4.43, abs=5e-3)


def test_corpus_value_is_token_weighted_not_a_mean_of_texts(perplexity):
    result = perplexity.compute(nll=[2.0, 4.0], num_tokens=[1, 3])
    assert result["perplexity"] == pytest.approx(math.exp(6.0 / 4))
    assert result["perplexities"] == pytest.approx([math.exp(2.0), math.exp(4.0 / 3)])
    assert result["perplexity"] != pytest.approx(sum(result["perplexities"]) / 2, rel=1e-3)


def test_add_batch_and_add_accumulate_like_one_compute(perplexity, bits_per_byte):
    perplexity.add_batch(nll=[2.0], num_tokens=[1])
    perplexity.add(nll=4.0, num_tokens=3)
    assert perplexity.compute()["perplexity"] == pytest.approx(math.exp(1.5))
    bits_per_byte.add_batch(nll=[1.0, 2.0], num_bytes=[2, 4])
    assert bits_per_byte.compute()["bits_per_byte"] == pytest.approx(3.0 / math.log(2) / 6)


def naive_nll(model, ids: list[int], max_length: int, stride: int) -> float:
    """Summed -log p(token) over ids[1:], each token scored once by the textbook strided loop.

    Written out independently of ``hf_lmobj.metrics.scoring``: one forward pass per window, a
    float64 log-softmax over its logits and a Python loop over the targets the window scores.
    """
    total, done, last = 0.0, 0, len(ids) - 1
    while done < last:
        end = min(done + (max_length if done == 0 else stride), last)  # targets done+1 .. end
        begin = max(0, end - max_length)
        with torch.no_grad():
            logp = model(torch.tensor([ids[begin:end]])).logits[0].double().log_softmax(-1)
        for target in range(done + 1, end + 1):
            total -= logp[target - 1 - begin, ids[target]].item()  # logit at t - 1 predicts token t
        done = end
    return total


def with_bos(tokenizer, text: str) -> list[int]:
    return [tokenizer.bos_token_id] + tokenizer(text, add_special_tokens=False)["input_ids"]


def test_bits_per_byte_from_a_model_counts_utf8_bytes_of_chinese_text(bits_per_byte, perplexity, gpt2, tokenizer):
    texts = ["你好，世界！今天天气很好。", "def 函数(x):\n    return x  # 返回\n"]
    ids = [with_bos(tokenizer, t) for t in texts]
    assert all(len(row) <= gpt2.config.n_positions for row in ids)  # one window: the whole text in context
    nll = [naive_nll(gpt2, row, gpt2.config.n_positions, gpt2.config.n_positions) for row in ids]
    num_bytes = [len(t.encode("utf-8")) for t in texts]
    assert num_bytes[0] == 3 * len(texts[0])  # every CJK character and full-width mark is 3 bytes
    result = bits_per_byte.compute(predictions=texts, model=gpt2, tokenizer=tokenizer, progress=False)
    assert result["num_bytes"] == sum(num_bytes)
    assert result["nll"] == pytest.approx(sum(nll), rel=1e-5)
    assert result["bits_per_byte"] == pytest.approx(sum(nll) / math.log(2) / sum(num_bytes), rel=1e-5)
    assert result["bits_per_byte_per_text"] == pytest.approx(
        [n / math.log(2) / b for n, b in zip(nll, num_bytes)], rel=1e-5
    )
    # the same NLL over characters instead of bytes would be 3x larger: the denominator matters
    assert result["bits_per_byte_per_text"][0] * 3 == pytest.approx(nll[0] / math.log(2) / len(texts[0]), rel=1e-5)
    ppl = perplexity.compute(predictions=texts, model=gpt2, tokenizer=tokenizer, progress=False)
    num_tokens = [len(row) - 1 for row in ids]  # every text token, the first one included (after BOS)
    assert ppl["num_tokens"] == sum(num_tokens)
    assert ppl["perplexity"] == pytest.approx(math.exp(sum(nll) / sum(num_tokens)), rel=1e-5)
    assert ppl["perplexities"] == pytest.approx([math.exp(n / k) for n, k in zip(nll, num_tokens)], rel=1e-5)


@pytest.mark.parametrize("symlinks", [False, True], ids=["copytree", "cp -r (links kept as links)"])
@pytest.mark.parametrize("name", METRIC_NAMES)
def test_a_copied_folder_loads_and_scores_from_a_saved_model(name, symlinks, tmp_path, saved_model, gpt2, tokenizer):
    copy = tmp_path / "downloaded" / name
    shutil.copytree(
        metric_path(name), copy, symlinks=symlinks, ignore=shutil.ignore_patterns("__init__.py", "__pycache__")
    )
    assert not any(p.is_symlink() for p in copy.iterdir())
    metric = evaluate.load(str(copy))
    assert not metric.__class__.__module__.startswith("hf_lmobj")
    texts = ["import os\nprint(os.sep)\n", "x = 1"]
    result = metric.compute(predictions=texts, model_id=saved_model, max_length=8, stride=3, progress=False)
    in_package = load(name).compute(predictions=texts, model_id=saved_model, max_length=8, stride=3, progress=False)
    assert result == in_package
    # max_length and stride reach the scorer: the strided loop's NLL, not one whole-text window's
    expected = sum(naive_nll(gpt2, with_bos(tokenizer, t), 8, 3) for t in texts)
    assert result["nll"] == pytest.approx(expected, rel=1e-5)
    assert result["nll"] != pytest.approx(sum(naive_nll(gpt2, with_bos(tokenizer, t), 64, 64) for t in texts), rel=1e-5)
    exported = evaluate.load(str(export_space(name, tmp_path / "space")))
    count = "num_tokens" if name == "perplexity" else "num_bytes"
    assert exported.compute(nll=[1.0], **{count: [2]})[name] == metric.compute(nll=[1.0], **{count: [2]})[name]


def _front_matter(card: str) -> dict[str, str]:
    """The top-level ``key: value`` lines of a card's YAML front matter."""
    assert card.startswith("---\n")
    block = card[4 : card.index("\n---\n", 4)]
    return dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and not line.startswith(" "))


@pytest.mark.parametrize("name", METRIC_NAMES)
def test_export_space_writes_a_gradio_app_and_its_requirements(name, tmp_path):
    folder = export_space(name, tmp_path)
    expected = ["README.md", "app.py", f"{name}.py", "requirements.txt", *CORE_NAMES]
    assert sorted(p.name for p in folder.iterdir()) == sorted(expected)
    assert not any(p.is_symlink() for p in folder.iterdir())
    app = (folder / "app.py").read_text(encoding="utf-8")
    assert "launch_gradio_widget" in app and f'"{name}.py"' in app
    lines = (folder / "requirements.txt").read_text(encoding="utf-8").splitlines()
    requirements = [r for r in (line.split("#")[0].strip() for line in lines) if r]
    assert "hf_lmobj" not in requirements  # the metric script imports the sums.py and scoring.py beside it
    assert not any(r.startswith("gradio") for r in requirements)  # the Space's sdk_version installs it
    card = (folder / "README.md").read_text(encoding="utf-8")
    matter = _front_matter(card)
    assert matter["sdk"] == "gradio" and matter["app_file"] == "app.py"
    for section in (
        "## Metric Description",
        "## How to Use",
        "### Inputs",
        "### Output Values",
        "## Limitations and Bias",
        "## Citation",
    ):
        assert section in card


@pytest.mark.parametrize("name", METRIC_NAMES)
def test_the_card_pins_the_gradio_that_evaluates_widget_runs_with(name):
    matter = _front_matter((metric_path(name) / "README.md").read_text(encoding="utf-8"))
    assert matter["sdk_version"] == GRADIO_SDK_VERSION
    widget = inspect.getsource(evaluate.utils.launch_gradio_widget)
    if "gr.inputs." in widget or "gr.outputs." in widget:  # gradio 4 removed both namespaces
        assert int(GRADIO_SDK_VERSION.split(".")[0]) < 4


class _FakeGradio(types.ModuleType):
    """Just the gradio 3 API that evaluate's widget calls, recording what it is given."""

    def __init__(self):
        super().__init__("gradio")
        self.built = {}
        self.inputs = types.SimpleNamespace(Dataframe=lambda **kw: ("Dataframe", kw))
        self.outputs = types.SimpleNamespace(Textbox=lambda **kw: ("Textbox", kw))
        fake = self

        class Interface:
            def __init__(self, **kwargs):
                fake.built = kwargs

            def launch(self):
                fake.built["launched"] = True

        self.Interface = Interface


@pytest.mark.parametrize("name", METRIC_NAMES)
def test_the_exported_app_starts_the_widget_and_computes(name, tmp_path, monkeypatch):
    folder = export_space(name, tmp_path)
    gradio = _FakeGradio()
    monkeypatch.setitem(sys.modules, "gradio", gradio)
    monkeypatch.chdir(folder)
    monkeypatch.syspath_prepend(str(folder))  # as `python app.py` in the Space: sys.path[0] is its folder
    runpy.run_path(str(folder / "app.py"), run_name="__main__")
    assert gradio.built["launched"] and gradio.built["title"] == f"Metric: {name}"
    assert gradio.built["article"].lstrip().startswith("# Metric Card for")  # the card, front matter off
    count = "num_tokens" if name == "perplexity" else "num_bytes"
    words = ("num_words",) if name == "perplexity" else ()  # num_words 0: not counted
    assert gradio.built["inputs"][1]["headers"] == ("nll", count, *words, "domains")
    # the widget drops a row with an empty cell, so its table names a domain
    row = {"nll": [1.0], count: [2], **({"num_words": [0]} if name == "perplexity" else {}), "domains": ['"x"']}
    out = gradio.built["fn"](pandas.DataFrame(row))  # the widget's one-row table
    assert out[name] == load(name).compute(nll=[1.0], **{count: [2]})[name] == out[f"{name}/x"]


def test_no_symlink_under_the_metrics_package():
    links = [p for p in metric_path("perplexity").parent.rglob("*") if p.is_symlink()]
    assert links == []


@pytest.mark.parametrize("name", METRIC_NAMES)
def test_kwargs_description_examples_run(name, monkeypatch):
    monkeypatch.chdir(REPO_ROOT)  # the examples load the folder by its path from the repository root
    module = importlib.import_module(f"hf_lmobj.metrics.{name}.{name}")
    test = doctest.DocTestParser().get_doctest(module._KWARGS_DESCRIPTION, {}, name, None, 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    assert runner.summarize(verbose=False).failed == 0
    assert runner.summarize(verbose=False).attempted >= 3


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"nll": [1.0, 2.0], "num_tokens": [1, -2]}, r"num_tokens\[1\] is -2.*negative"),
        ({"nll": [1.0], "num_tokens": [0]}, r"num_tokens\[0\] is 0"),
        ({"nll": [1.0, 2.0], "num_tokens": [1]}, r"nll \(2\) and num_tokens \(1\)"),
        ({"nll": [float("nan")], "num_tokens": [1]}, r"nll\[0\] is nan"),
        ({"nll": [-0.5], "num_tokens": [1]}, r"nll\[0\] is -0.5"),
        ({"nll": [1.0], "num_tokens": [1], "model_id": "x"}, "predictions"),
        ({"predictions": ["a"]}, "model_id"),
        ({"predictions": ["a"], "nll": [1.0], "model_id": "x"}, "not both"),
    ],
)
def test_bad_input_raises_a_clear_error(perplexity, kwargs, match):
    with pytest.raises(ValueError, match=match):
        perplexity.compute(**kwargs)


def test_bad_byte_counts_raise(bits_per_byte):
    with pytest.raises(ValueError, match=r"num_bytes\[0\] is -3"):
        bits_per_byte.compute(nll=[1.0], num_bytes=[-3])
    with pytest.raises(ValueError, match=r"num_bytes\[1\] is 0"):
        bits_per_byte.compute(nll=[1.0, 1.0], num_bytes=[3, 0])
    with pytest.raises(ValueError, match="references"):
        bits_per_byte.compute(predictions=["a"], references=["b"], model_id="x")


def test_load_rejects_unknown_names():
    with pytest.raises(ValueError, match="perplexity"):
        load("accuracy")


def test_metric_folders_hold_only_the_space_files_and_the_package_marker():
    for name in METRIC_NAMES:
        scripts = sorted(p.name for p in metric_path(name).iterdir() if p.suffix == ".py")
        assert scripts == sorted(["__init__.py", f"{name}.py", "app.py", *CORE_NAMES])  # the cores: generated
