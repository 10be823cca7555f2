"""drop_contaminated: a training document holding an n-gram of the validation text is left out, counted, in the
fingerprint, whatever the source (in memory, streamed, a token store)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hf_lmobj.contamination import ContaminationIndex
from hf_lmobj.data.prepare import DataArguments
from hf_lmobj.data.prepare_run import prepare_run_data
from hf_lmobj.data.run_sources import open_sources
from tests.recipes.test_own_data import generated_texts
from tests.testing_utils import QUICK, REPO, load_recipe

FRACTION = 0.2


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> tuple[Path, list[str]]:
    """A folder whose training side holds a copy of one held-out document inside a longer text."""
    texts = generated_texts(60, seed=3)
    folder = tmp_path_factory.mktemp("planted") / "corpus"
    folder.mkdir()
    probe = open_sources(DataArguments(dataset_name=str(_write(folder, texts)), validation_fraction=FRACTION))
    held = probe.validation_texts[0]
    copy = "Preface words. " + held + " And an ending."
    return _write(folder, [*texts, copy]), [held, copy]


def _write(folder: Path, texts: list[str]) -> Path:
    (folder / "part.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in texts))
    return folder


@pytest.mark.parametrize("streaming", [False, True])
def test_a_planted_copy_is_dropped_and_counted(planted, tokenizer, streaming):
    folder, (held, copy) = planted
    kept = {}
    for drop in (False, True):
        args = DataArguments(dataset_name=str(folder), validation_fraction=FRACTION, streaming=streaming,
                             drop_contaminated=drop, max_length=64)  # fmt: skip
        sources = open_sources(args)
        exclude = ContaminationIndex.build(sources.validation_texts, sources.validation_domains, tokenizer)
        data = prepare_run_data(sources, "causal", tokenizer, args, batch_size=2, exclude=exclude if drop else None)
        stream = data.train_dataset
        if streaming:
            list(stream.reader.rows(0, 1, 0, left_out=(counts := __import__("numpy").zeros(5, dtype=int))))
            dropped = int(counts[-1])
        else:
            dropped = data.provenance.get("contaminated_training_documents", 0)
        kept[drop] = (dropped, stream.fingerprint())
    assert kept[False][0] == 0 and kept[True][0] == 1
    assert kept[False][1] != kept[True][1]  # the drop is part of the data fingerprint


def test_the_filter_and_the_flag_go_together(planted, tokenizer):
    """The data path does not build the filter (contamination/ sits above data/): the caller passes it, and a flag
    without its filter, or a filter without its flag, is refused before anything is read."""
    folder, _ = planted
    args = DataArguments(dataset_name=str(folder), validation_fraction=FRACTION, drop_contaminated=True, max_length=64)
    sources = open_sources(args)
    with pytest.raises(ValueError, match=r"drop_contaminated=True needs exclude=ContaminationIndex.build"):
        prepare_run_data(sources, "causal", tokenizer, args, batch_size=2)
    index = ContaminationIndex.build(sources.validation_texts, sources.validation_domains, tokenizer)
    plain = DataArguments(dataset_name=str(folder), validation_fraction=FRACTION, max_length=64)
    with pytest.raises(ValueError, match="exclude filters a run with drop_contaminated=True"):
        prepare_run_data(open_sources(plain), "causal", tokenizer, plain, batch_size=2, exclude=index)


def test_the_pretrain_recipe_builds_the_filter_and_reports_the_drop(planted, tmp_path):
    """``--drop_contaminated true`` on the recipe: the planted copy is left out of training and counted in
    metrics.json and the card (the recipe builds the filter from its validation text and hands it to the data path)."""
    folder, _ = planted
    out = tmp_path / "run"
    load_recipe("pretrain").main([
        "--config", str(REPO / "recipes/configs/causal/demo.yaml"), *QUICK, "--vocab_size", "512",
        "--dataset_name", str(folder), "--validation_fraction", str(FRACTION), "--drop_contaminated", "true",
        "--max_steps", "2", "--max_train_minutes", "null", "--ngram_orders", "none", "--compressor_baselines", "false",
        "--torch_threads", "1", "--disable_tqdm", "true", "--output_dir", str(out),
    ])  # fmt: skip
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["train_contaminated_documents"] == 1
    assert "drop_contaminated" in (out / "README.md").read_text()
