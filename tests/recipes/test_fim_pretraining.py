"""The FIM side of pre-training: pieces that keep every token, FIM'd packed rows, the infilling report,
and the FIM section of the clm model card."""

from __future__ import annotations

import re

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from hf_lmobj.cards.writer import write_model_card
from hf_lmobj.data.prepare import DataArguments
from hf_lmobj.data.prepare_fim import FimArguments
from hf_lmobj.data.prepare_run import prepare_run_data
from hf_lmobj.data.run_sources import open_sources
from hf_lmobj.fim.format import fim_mode, fim_token_ids, undo_fim
from hf_lmobj.fim.prompting import fim_prompt_ids
from hf_lmobj.models.stock import ModelArguments, build_model
from hf_lmobj.packing.pieces import document_pieces
from hf_lmobj.recipes.report.infilling import infilling_metrics


def test_pieces_keep_every_token_and_character(tokenizer, corpus):
    texts = [*corpus["validation"]["text"][:3], "é中文 ☃ " * 40, "x"]
    pieces = document_pieces(texts, tokenizer, max_tokens=30)
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    rebuilt_ids, rebuilt_text, document = [], "", 0
    for ids, text in zip(pieces["input_ids"], pieces["text"]):
        first = not rebuilt_ids  # BOS opens a document's first piece only, as in plain causal rows
        assert (ids[0] == bos) == first and bos not in ids[1:] and len(ids) <= 30 + 2
        body = ids[1:] if first else ids
        assert tokenizer.decode(body).removesuffix("</s>") == text  # a piece's text matches its tokens
        rebuilt_ids += body[:-1] if ids[-1] == eos else body
        rebuilt_text += text
        if ids[-1] == eos:  # the last piece of a document
            assert rebuilt_ids == tokenizer(texts[document], add_special_tokens=False)["input_ids"]
            assert rebuilt_text == texts[document]
            rebuilt_ids, rebuilt_text, document = [], "", document + 1
    assert document == len(texts)


def _fim_run(tokenizer, corpus, fim_args: FimArguments):
    """A causal run's data with ``fim_args``, and its training documents (the FIM'd pieces) in corpus order."""
    data_args = DataArguments(max_length=64, max_eval_rows=None)
    data = prepare_run_data(open_sources(data_args, corpus), "causal", tokenizer, data_args, 4, fim_args=fim_args)
    source = data.train_dataset.sources[0]
    return data, [source.document(i).tolist() for i in range(len(source.lengths))]


def test_fim_runs_train_fimmed_pieces(tokenizer, corpus):
    ids, eos = fim_token_ids(tokenizer), tokenizer.eos_token_id
    data, pieces = _fim_run(tokenizer, corpus, FimArguments(fim_rate=0.5))
    expected = {"fim_rate": 0.5, "fim_spm_rate": 0.5, "fim_level": "char", "fim_piece_max_tokens": 54}
    assert expected.items() <= data.hyperparameters.items()
    assert sum(len(piece) > 64 for piece in pieces) < 0.01 * len(pieces)  # the rare longer one is split into rows
    fimmed = [piece for piece in pieces if fim_mode(piece, ids)]
    assert abs(len(fimmed) / len(pieces) - 0.5) < 0.1
    batch = next(iter(data.train_dataset))["batch"]
    assert batch["input_ids"].shape[1] <= 64 and "position_ids" in batch
    assert any(fim_mode(row, ids) for row in data.eval_dataset["input_ids"])  # the eval rows are FIM'd as well
    # token-level cuts: undoing each FIM'd piece gives back exactly the pieces plain training would see
    _, token = _fim_run(tokenizer, corpus, FimArguments(fim_rate=0.5, fim_level="token"))
    texts = [text for text in corpus["train"]["text"] if text.strip()]
    plain = document_pieces(texts, tokenizer, max_tokens=54)["input_ids"]
    strip = lambda s: s[:-1] if s[-1] == eos else s  # noqa: E731  (a FIM'd piece always ends with EOS)
    assert sorted(strip(undo_fim(s, ids, eos)) for s in token) == sorted(map(strip, plain))
    with pytest.raises(ValueError, match="objective must be 'causal'"):
        masked = DataArguments(objective="masked")
        prepare_run_data(
            open_sources(masked, corpus), "masked", tokenizer, masked, 4, fim_args=FimArguments(fim_rate=0.5)
        )


@pytest.mark.parametrize("kwargs, match", [
    ({"fim_rate": 1.2}, "fim_rate must be a number in \\[0, 1\\]"), ({"fim_spm_rate": -1}, "fim_spm_rate"),
    ({"fim_level": "word"}, "fim_level"), ({"infill_cases": -1}, "infill_cases must be an int >= 0"),
    ({"infill_max_new_tokens": 0}, "infill_max_new_tokens"),
])  # fmt: skip
def test_fim_arguments_are_checked(kwargs, match):
    with pytest.raises(ValueError, match=match):
        FimArguments(**kwargs)


def test_infilling_metrics_modes_follow_the_training(tokenizer, corpus, one_torch_thread):
    torch.manual_seed(0)
    model = build_model("causal", tokenizer, ModelArguments(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                                         max_position_embeddings=96))  # fmt: skip
    texts = corpus["validation"]["text"]
    fim_args = FimArguments(fim_rate=0.5, infill_cases=3, infill_max_new_tokens=8)
    fim = infilling_metrics(model, tokenizer, texts, fim_args, 96)
    plain = infilling_metrics(model, tokenizer, texts, FimArguments(infill_cases=3, infill_max_new_tokens=8), 96)
    pattern = r"validation_infill_(.*)_(exact_match|edit_similarity|middle_bits_per_byte)"
    modes = {re.sub(pattern, r"\1", k) for k in fim if "samples" not in k}
    assert modes == {"psm", "spm", "prefix_only"} and fim["validation_infill_samples"] == 3
    assert set(plain) == {"validation_infill_samples", "validation_infill_prefix_only_exact_match",
                          "validation_infill_prefix_only_edit_similarity",
                          "validation_infill_prefix_only_middle_bits_per_byte"}  # fmt: skip
    assert all(0 <= fim[f"validation_infill_{m}_edit_similarity"] <= 1 for m in modes)
    assert (
        plain["validation_infill_prefix_only_middle_bits_per_byte"]
        == fim["validation_infill_prefix_only_middle_bits_per_byte"]
    )
    assert infilling_metrics(model, tokenizer, texts, FimArguments(infill_cases=0), 96) == {}


def test_fim_card_section_and_its_snippet_run_against_a_saved_model(tmp_path, tokenizer):
    torch.manual_seed(0)
    model = build_model("causal", tokenizer, ModelArguments(hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                                                         max_position_embeddings=128))  # fmt: skip
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    metrics = {"eval_loss": 3.0, "validation_bits_per_byte": 2.5, "validation_infill_psm_exact_match": 0.25,
               "validation_infill_samples": 200}  # fmt: skip
    hyperparameters = {"fim_rate": 0.5, "fim_spm_rate": 0.5, "fim_level": "char", "max_length": 256}
    write_model_card(tmp_path, objective="causal", metrics=metrics, hyperparameters=hyperparameters,
                     model_name="tiny-fim", dataset_name="python-stdlib")  # fmt: skip
    text = (tmp_path / "README.md").read_text()
    assert "## Fill-in-the-middle" in text and "0.5 of the training pieces" in text and "character positions" in text
    assert "| Infill psm exact match | validation | 0.25 |" in text
    snippet = text.split("## Fill-in-the-middle")[1].split("```python\n")[1].split("```")[0]
    loaded = {"tokenizer": AutoTokenizer.from_pretrained(tmp_path),
              "model": AutoModelForCausalLM.from_pretrained(tmp_path)}  # fmt: skip
    prompt_ids = fim_prompt_ids(loaded["tokenizer"], "def area(r):\n    ", "\n    return result\n")
    calls = []
    original = loaded["model"].generate
    loaded["model"].generate = lambda **kw: calls.append(kw["input_ids"][0].tolist()) or original(**kw)
    exec(snippet, loaded)  # the card's own code
    assert calls == [prompt_ids]  # the card's string prompt is exactly the helper's token prompt
    plain = tmp_path / "plain"
    write_model_card(plain, objective="causal", metrics=metrics, hyperparameters={**hyperparameters, "fim_rate": 0.0},
                     model_name="tiny", dataset_name="python-stdlib")  # fmt: skip
    assert "Fill-in-the-middle" not in (plain / "README.md").read_text()
    for level, words in (("line", "line-start positions"), ("token", "token positions")):
        write_model_card(plain, objective="causal", metrics=metrics, hyperparameters={**hyperparameters, "fim_level": level},
                         model_name="tiny", dataset_name="python-stdlib")  # fmt: skip
        assert words in (plain / "README.md").read_text()


def test_report_prints_left_to_right_and_infilling_beside_the_plain_run(tmp_path, capsys):
    from hf_lmobj.recipes.report.infilling import print_fim_comparison

    metrics = {"validation_bits_per_byte": 2.06, "validation_infill_samples": 200,
               "validation_infill_psm_exact_match": 0.3, "validation_infill_spm_exact_match": 0.25,
               "validation_infill_prefix_only_exact_match": 0.05, "validation_infill_spm_edit_similarity": 0.6,
               "validation_infill_prefix_only_edit_similarity": 0.4, "validation_fingerprint": "0123456789abcdef"}  # fmt: skip
    print_fim_comparison({"validation_bits_per_byte": 2.0}, None)  # a plain run without infilling: nothing
    assert capsys.readouterr().out == ""
    print_fim_comparison(metrics, str(tmp_path / "missing.json"))
    out = capsys.readouterr().out
    assert "left-to-right bits per byte 2.060" in out
    assert "single-line infilling (200 cases), by prompt:" in out
    assert re.search(r"exact match +prefix_only 0\.050, psm 0\.300, spm 0\.250\n", out)
    assert re.search(r"edit similarity +prefix_only 0\.400, spm 0\.600\n", out)
    assert "no plain-CLM metrics at" in out and "--infill_cases 200" in out
    plain = tmp_path / "plain.json"
    plain.write_text(
        '{"validation_bits_per_byte": 2.0, "validation_infill_prefix_only_exact_match": 0.1, '
        '"validation_infill_prefix_only_edit_similarity": 0.45, "validation_fingerprint": "0123456789abcdef"}'
    )
    print_fim_comparison(metrics, str(plain))
    rows = capsys.readouterr().out.splitlines()
    assert rows[-3].split() == ["left-to-right", "bits", "per", "byte", "2.060", "2.000", "1.030"]
    assert rows[-2].split()[-4:] == ["0.300", "(psm)", "0.100", "(prefix_only)"]
    assert rows[-1].split()[-5:] == ["similarity", "0.600", "(spm)", "0.450", "(prefix_only)"]
    plain.write_text('{"validation_bits_per_byte": 2.0, "validation_fingerprint": "0123456789abcdef"}')  # no infilling
    print_fim_comparison(metrics, str(plain))
    assert "that run has no infilling metrics" in capsys.readouterr().out
