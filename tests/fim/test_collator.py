"""Fill-in-the-middle: PSM/SPM layouts on hand-worked documents, rates, reconstruction, seeding,
packing isolation and bad input, for the transform, the collator and fim_dataset."""

from __future__ import annotations

import collections

import datasets
import numpy as np
import pytest
import torch

from hf_lmobj.collators.causal import DataCollatorForCausalLM
from hf_lmobj.corpus import build_tokenizer
from hf_lmobj.fim.collator import DataCollatorForFillInTheMiddle, fim_dataset
from hf_lmobj.fim.format import FIM_TOKENS, FimTokens, fim_mode, fim_token_ids, undo_fim
from hf_lmobj.fim.transform import FimDraw, FimTransform
from hf_lmobj.packing.dataset import pack_dataset
from tests.testing_utils import assert_each_document_alone, packed_documents


@pytest.fixture(scope="module")
def ids(tokenizer):
    return fim_token_ids(tokenizer)


def _doc(tokenizer, text: str) -> dict:
    return {"input_ids": [tokenizer.bos_token_id, *tokenizer(text)["input_ids"], tokenizer.eos_token_id], "text": text}


def _without_sentinels(tokens, ids) -> list[int]:
    return [t for t in tokens if t not in ids.sentinels]


# ----------------------------------------------------------------------------- tokenizer
def test_build_tokenizer_has_starcoder_fim_tokens_and_refreshes_old_caches(tmp_path, monkeypatch):
    import hf_lmobj.corpus as data

    monkeypatch.setattr(data, "_TOKENIZER_FORMAT", 1)  # what a cache written before the FIM tokens is keyed by
    stale = tmp_path / "tokenizers" / data._tokenizer_cache_key(400, 0.02, 10)
    monkeypatch.undo()
    stale.mkdir(parents=True)
    (stale / "tokenizer.json").write_text("{}")  # an old cache (unreadable here: reusing it would fail)
    tok = build_tokenizer(vocab_size=400, max_documents=10, cache_dir=tmp_path)
    assert set(FIM_TOKENS) <= set(tok.all_special_tokens)
    assert len(list((tmp_path / "tokenizers").iterdir())) == 2  # a new folder, the old one not reused
    text = "<fim_prefix> is text in a document"
    assert tok.decode(tok(text, split_special_tokens=True)["input_ids"]) == text


# ----------------------------------------------------------------------------- layouts
@pytest.mark.parametrize(
    "start, end, psm, spm",
    [
        # document [BOS, a, b, c, d, EOS]; P/S/M = <fim_prefix>/<fim_suffix>/<fim_middle>
        (1, 3, ["P", "a", "S", "d", "M", "b", "c"], ["P", "S", "d", "M", "a", "b", "c"]),
        (0, 2, ["P", "S", "c", "d", "M", "a", "b"], ["P", "S", "c", "d", "M", "a", "b"]),  # empty prefix
        (2, 2, ["P", "a", "b", "S", "c", "d", "M"], ["P", "S", "c", "d", "M", "a", "b"]),  # empty middle
        (1, 4, ["P", "a", "S", "M", "b", "c", "d"], ["P", "S", "M", "a", "b", "c", "d"]),  # empty suffix
        (0, 4, ["P", "S", "M", "a", "b", "c", "d"], ["P", "S", "M", "a", "b", "c", "d"]),  # all middle
    ],
)
def test_token_level_psm_and_spm_layouts_hand_worked(tokenizer, ids, start, end, psm, spm):
    a, b, c, d = 300, 301, 302, 303
    name = {"P": ids.prefix, "S": ids.suffix, "M": ids.middle, "a": a, "b": b, "c": c, "d": d}
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    fim = FimTransform(tokenizer, fim_level="token")
    document = [bos, a, b, c, d, eos]
    for spm_flag, expected in ((False, psm), (True, spm)):
        out = fim.permute(document, None, FimDraw(True, spm_flag, start, end))
        assert out == [bos, *(name[x] for x in expected), eos]
        # with an empty prefix PSM and SPM are the same sequence (read back as SPM; undone alike)
        assert fim_mode(out, ids) == ("spm" if spm_flag or start == 0 else "psm")
        assert undo_fim(out, ids, eos) == document


def test_document_without_bos_or_eos_gains_the_end_of_middle_eos(tokenizer, ids):
    fim = FimTransform(tokenizer, fim_level="token")
    out = fim.permute([300, 301], None, FimDraw(True, False, 1, 2))
    assert out == [ids.prefix, 300, ids.suffix, ids.middle, 301, tokenizer.eos_token_id]
    assert fim.permute([300, 301], None, FimDraw(apply=False)) == [300, 301]  # untouched when not drawn


def test_character_level_cut_between_multi_byte_characters(tokenizer, ids):
    text = "é中x"  # 2 + 3 + 1 UTF-8 bytes; a byte-level BPE may split 中 over several tokens
    document = _doc(tokenizer, text)
    fim = FimTransform(tokenizer)
    out = fim.permute(document["input_ids"], text, FimDraw(True, False, 1, 2))  # prefix é, middle 中, suffix x
    encode = lambda s: tokenizer(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    assert out == [bos, ids.prefix, *encode("é"), ids.suffix, *encode("x"), ids.middle, *encode("中"), eos]
    middle = out[out.index(ids.middle) + 1 : -1]
    assert tokenizer.decode(middle) == "中"  # whole characters: no replacement character
    spm = fim.permute(document["input_ids"], text, FimDraw(True, True, 0, 3))  # empty prefix and suffix
    assert spm == [bos, ids.prefix, ids.suffix, ids.middle, *encode("é中x"), eos]


@pytest.mark.parametrize(
    "text, start, end, pieces",
    [
        ("é中x", 0, 0, ("", "", "é中x")),  # empty prefix and middle
        ("é中x", 1, 1, ("é", "", "中x")),  # empty middle between two multi-byte characters
        ("é中x", 3, 3, ("é中x", "", "")),  # empty middle and suffix
        ("é中x", 1, 3, ("é", "中x", "")),  # empty suffix, a multi-byte character first in the middle
        ("return self", 3, 6, ("ret", "urn", " self")),  # cuts inside tokens ('re' 'turn' 'Ġself'): re-encoded
    ],
)
def test_character_level_layouts_hand_worked(tokenizer, ids, text, start, end, pieces):
    prefix, middle, suffix = pieces
    assert (text[:start], text[start:end], text[end:]) == pieces
    enc = lambda s: tokenizer(s, add_special_tokens=False)["input_ids"]  # noqa: E731
    bos, eos = tokenizer.bos_token_id, tokenizer.eos_token_id
    fim = FimTransform(tokenizer)
    document = _doc(tokenizer, text)["input_ids"]
    psm = fim.permute(document, text, FimDraw(True, False, start, end))
    spm = fim.permute(document, text, FimDraw(True, True, start, end))
    P, S, M = ids.prefix, ids.suffix, ids.middle  # noqa: N806
    assert psm == [bos, P, *enc(prefix), S, *enc(suffix), M, *enc(middle), eos]
    assert spm == [bos, P, S, *enc(suffix), M, *enc(prefix + middle), eos]  # contiguous in SPM: one text
    for out in (psm, spm):
        assert tokenizer.decode(undo_fim(out, ids, eos), skip_special_tokens=True) == text
        assert "\ufffd" not in tokenizer.decode(out)  # no character split between two pieces


# ----------------------------------------------------------------------------- rates
def test_rates_within_statistical_tolerance(tokenizer, ids):
    rng = np.random.default_rng(0)
    # long documents: an empty prefix (PSM then reads as SPM) has probability ~1% only
    docs = [{"input_ids": rng.integers(200, 900, size=rng.integers(150, 300)).tolist(), "idx": i} for i in range(3000)]
    fim_rate, spm_rate = 0.3, 0.25
    out = FimTransform(tokenizer, fim_rate=fim_rate, spm_rate=spm_rate, fim_level="token")(docs, seed=0)
    modes = [fim_mode(o, ids) for o in out]
    n_fim = sum(m is not None for m in modes)
    n_spm = modes.count("spm")
    assert abs(n_fim - 3000 * fim_rate) < 4 * np.sqrt(3000 * fim_rate * (1 - fim_rate))
    assert abs(n_spm - n_fim * spm_rate) < 4 * np.sqrt(n_fim * spm_rate * (1 - spm_rate))
    # cuts: two sorted uniforms over [0, n]: the middle starts near 1/3 and ends near 2/3 on average
    starts, ends = [], []
    for doc, o, mode in zip(docs, out, modes):
        if mode == "psm":
            n = len(doc["input_ids"])
            starts.append(o.index(ids.suffix) - 1)
            ends.append(n - (o.index(ids.middle) - o.index(ids.suffix) - 1))
            starts[-1], ends[-1] = starts[-1] / n, ends[-1] / n
    assert abs(np.mean(starts) - 1 / 3) < 0.04 and abs(np.mean(ends) - 2 / 3) < 0.04
    none = FimTransform(tokenizer, fim_rate=0.0, fim_level="token")(docs[:50], seed=0)
    every = FimTransform(tokenizer, fim_rate=1.0, spm_rate=1.0, fim_level="token")(docs[:50], seed=0)
    assert none == [d["input_ids"] for d in docs[:50]]
    assert all(fim_mode(o, ids) == "spm" for o in every)


def test_character_level_rate_and_cuts_uniform_over_characters(tokenizer, ids):
    rng = np.random.default_rng(1)
    words = ["self", "return", "x", "é", "中文", "(", ")", " ", "\n", "value_error", "_"]
    texts = ["".join(rng.choice(words, size=rng.integers(40, 80))) for _ in range(1500)]
    docs = [{**_doc(tokenizer, t), "idx": i} for i, t in enumerate(texts)]
    fim_rate, spm_rate = 0.6, 0.3
    out = FimTransform(tokenizer, fim_rate=fim_rate, spm_rate=spm_rate)(docs, seed=0)
    modes = [fim_mode(o, ids) for o in out]
    n_fim = sum(m is not None for m in modes)
    assert abs(n_fim - 1500 * fim_rate) < 4 * np.sqrt(1500 * fim_rate * (1 - fim_rate))
    assert abs(modes.count("spm") - n_fim * spm_rate) < 4 * np.sqrt(n_fim * spm_rate * (1 - spm_rate))
    starts, ends = [], []
    for text, o, mode in zip(texts, out, modes):
        if mode == "psm":  # the cuts in characters: prefix and middle decoded from their tokens
            prefix = tokenizer.decode(o[o.index(ids.prefix) + 1 : o.index(ids.suffix)])
            middle = tokenizer.decode(o[o.index(ids.middle) + 1 : -1])
            assert text.startswith(prefix + middle)
            starts.append(len(prefix) / len(text))
            ends.append((len(prefix) + len(middle)) / len(text))
    # two sorted uniform cuts over the characters (not the fewer tokens): means 1/3 and 2/3
    assert abs(np.mean(starts) - 1 / 3) < 0.03 and abs(np.mean(ends) - 2 / 3) < 0.03


def test_line_level_cuts_fall_at_line_starts_uniformly_over_lines(tokenizer, ids):
    rng = np.random.default_rng(2)
    lines = ["    return x\n", "def f(a):\n", "\n", "    y = é中文\n", "        pass\n"]
    texts = ["".join(rng.choice(lines, size=rng.integers(6, 14))) for _ in range(800)]
    docs = [{**_doc(tokenizer, t), "idx": i} for i, t in enumerate(texts)]
    out = FimTransform(tokenizer, fim_rate=1.0, spm_rate=0.0, fim_level="line")(docs, seed=0)
    starts, ends = [], []
    for text, o in zip(texts, out):
        prefix = tokenizer.decode(o[o.index(ids.prefix) + 1 : o.index(ids.suffix)])
        middle = tokenizer.decode(o[o.index(ids.middle) + 1 : -1])
        suffix = tokenizer.decode(o[o.index(ids.suffix) + 1 : o.index(ids.middle)])
        assert prefix + middle + suffix == text  # the text exactly: pieces encoded on their own
        assert all(piece == "" or piece.endswith("\n") for piece in (prefix, middle))  # whole lines
        count = text.count("\n")
        starts.append(prefix.count("\n") / count)
        ends.append((prefix + middle).count("\n") / count)
    # two sorted uniform cuts over the line starts: means 1/3 and 2/3 of the lines
    assert abs(np.mean(starts) - 1 / 3) < 0.03 and abs(np.mean(ends) - 2 / 3) < 0.03


def test_line_level_hand_worked_and_without_final_newline(tokenizer, ids):
    fim = FimTransform(tokenizer, fim_rate=1.0, spm_rate=0.0, fim_level="line")
    text = "a = 1\nb = 2\nc"  # line starts 0, 6, 12 and the end 13
    generator = torch.Generator().manual_seed(0)
    draw = fim._draw({"text": text}, np.array([]), 0, generator)
    assert draw.apply and {draw.start, draw.end} <= {0, 6, 12, 13}
    out = fim.permute(_doc(tokenizer, text)["input_ids"], text, FimDraw(True, False, 6, 12))
    assert tokenizer.decode(out) == "<s><fim_prefix>a = 1\n<fim_suffix>c<fim_middle>b = 2\n</s>"


# ----------------------------------------------------------------------------- reconstruction
def test_undoing_the_permutation_gives_the_original_document(tokenizer, corpus, ids):
    texts = [t[:400] for t in corpus["validation"]["text"][:6]] + ["", "x", "é中文 ☃\n"]
    docs = [_doc(tokenizer, t) for t in texts]
    eos = tokenizer.eos_token_id
    for spm_rate in (0.0, 1.0):
        char = FimTransform(tokenizer, fim_rate=1.0, spm_rate=spm_rate)
        line = FimTransform(tokenizer, fim_rate=1.0, spm_rate=spm_rate, fim_level="line")
        token = FimTransform(tokenizer, fim_rate=1.0, spm_rate=spm_rate, fim_level="token")
        for epoch in range(3):
            for doc, out, by_line in zip(docs, char(docs, seed=1, epoch=epoch), line(docs, seed=1, epoch=epoch)):
                assert tokenizer.decode(undo_fim(out, ids, eos)) == tokenizer.decode(doc["input_ids"])
                assert tokenizer.decode(undo_fim(by_line, ids, eos)) == tokenizer.decode(doc["input_ids"])
            for doc, out in zip(docs, token(docs, seed=1, epoch=epoch)):
                assert undo_fim(out, ids, eos) == doc["input_ids"]  # token level: the very same ids
                assert collections.Counter(_without_sentinels(out, ids)) == collections.Counter(doc["input_ids"])


# ----------------------------------------------------------------------------- seeding
def test_same_cut_whatever_the_batch_and_new_cuts_each_epoch(tokenizer, corpus):
    docs = [_doc(tokenizer, t[:300]) for t in corpus["train"]["text"][:12]]
    collator = DataCollatorForFillInTheMiddle(tokenizer, fim_rate=0.7, seed=3)
    alone = [collator.fim_input_ids([d])[0] for d in docs]
    assert collator.fim_input_ids(docs) == alone
    assert collator.fim_input_ids(docs[::-1]) == alone[::-1]
    again = DataCollatorForFillInTheMiddle(tokenizer, fim_rate=0.7, seed=3)
    assert again.fim_input_ids(docs[5:9]) == alone[5:9]
    collator.set_epoch(1)
    assert collator.fim_input_ids(docs) != alone
    other_seed = DataCollatorForFillInTheMiddle(tokenizer, fim_rate=0.7, seed=4)
    assert other_seed.fim_input_ids(docs) != alone


def test_fim_dataset_matches_the_collator_keyed_by_index(tokenizer, corpus):
    texts = [t[:200] for t in corpus["train"]["text"][:10]]
    ds = datasets.Dataset.from_dict({"input_ids": [_doc(tokenizer, t)["input_ids"] for t in texts], "text": texts})
    whole = fim_dataset(ds, tokenizer, fim_rate=0.6, seed=7)["input_ids"]
    in_pieces = datasets.concatenate_datasets(
        [fim_dataset(ds.select(range(0, 4)), tokenizer, fim_rate=0.6, seed=7),
         fim_dataset(ds.select(range(4, 10)).add_column("idx", list(range(4, 10))), tokenizer, fim_rate=0.6, seed=7)]
    )["input_ids"]  # fmt: skip
    assert in_pieces == whole
    collator = DataCollatorForFillInTheMiddle(tokenizer, fim_rate=0.6, seed=7)
    features = [{"input_ids": row["input_ids"], "text": row["text"], "idx": i} for i, row in enumerate(ds)]
    assert collator.fim_input_ids(features[::-1]) == whole[::-1]
    streamed = fim_dataset(ds.to_iterable_dataset(), tokenizer, fim_rate=0.6, seed=7)
    assert [row["input_ids"] for row in streamed] == whole


# ----------------------------------------------------------------------------- collator and packing
def test_collator_pads_and_packs_like_the_causal_collator(tokenizer, corpus, ids):
    docs = [_doc(tokenizer, t[:150]) for t in corpus["train"]["text"][:8]]
    for packing in (False, True):
        fim = DataCollatorForFillInTheMiddle(tokenizer, fim_rate=0.5, seed=0, max_length=96, packing=packing)
        transformed = fim.fim_input_ids(docs)
        batch = fim(docs)
        reference = DataCollatorForCausalLM(tokenizer, max_length=96, packing=packing)(
            [{"input_ids": t} for t in transformed]
        )
        assert batch.keys() == reference.keys()
        for key, value in batch.items():
            assert torch.equal(value, reference[key]) if isinstance(value, torch.Tensor) else value == reference[key]
        # no token lost: the batch holds every token of every transformed document, and padding
        tokens = collections.Counter(batch["input_ids"].flatten().tolist())
        padding = batch["input_ids"].numel() - sum(map(len, transformed))
        assert tokens.pop(tokenizer.pad_token_id, 0) == padding
        assert tokens == collections.Counter(sum(transformed, []))


def test_packed_fim_documents_stay_isolated(tokenizer, corpus, ids):
    from hf_lmobj.models.stock import ModelArguments, build_model

    torch.manual_seed(0)
    model = build_model("causal", tokenizer, ModelArguments(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                                         max_position_embeddings=128)).eval()  # fmt: skip
    docs = [_doc(tokenizer, t[:120]) for t in corpus["train"]["text"][:5]]
    collator = DataCollatorForFillInTheMiddle(
        tokenizer, fim_rate=1.0, seed=0, max_length=128, packing=True, model=model
    )
    batch = collator(docs)
    segments = [batch["input_ids"][row, begin:end].tolist() for row, begin, end in packed_documents(batch)]
    fimmed = [s for s in segments if set(s) != {tokenizer.pad_token_id}]  # all but the rows' padding
    assert all(fim_mode(document, ids) in ("psm", "spm") for document in fimmed)  # a whole FIM'd document each
    for row, begin, end, _ in assert_each_document_alone(model, batch, fimmed, tolerance=1e-4):
        shift = batch["shift_labels"][row, begin:end]
        assert shift[-1] == -100 and torch.equal(shift[:-1], batch["input_ids"][row, begin + 1 : end])


def test_pack_dataset_on_fim_documents_keeps_each_one_whole(tokenizer, corpus, ids):
    texts = [t[:200] for t in corpus["train"]["text"][:20]]
    ds = datasets.Dataset.from_dict({"input_ids": [_doc(tokenizer, t)["input_ids"] for t in texts], "text": texts})
    fimmed = fim_dataset(ds, tokenizer, fim_rate=1.0, seed=0)
    packed = pack_dataset(fimmed, max_length=256)
    segments = []
    for row in packed:
        ends = np.cumsum(row["seq_lengths"]).tolist()
        assert ends[-1] == len(row["input_ids"])
        segments += [row["input_ids"][a:b] for a, b in zip([0, *ends[:-1]], ends)]
    assert sorted(map(tuple, segments)) == sorted(map(tuple, fimmed["input_ids"]))
    decoded = sorted(tokenizer.decode(undo_fim(s, ids, tokenizer.eos_token_id)) for s in segments)
    assert decoded == sorted(tokenizer.decode(d) for d in ds["input_ids"])
    batch = DataCollatorForCausalLM(tokenizer, max_length=256, packing=True)(list(packed))
    assert int((batch["input_ids"] == ids.prefix).sum()) == len(texts)


# ----------------------------------------------------------------------------- bad input
def test_missing_sentinel_is_named(tokenizer):
    with pytest.raises(ValueError, match=r"no FIM token '<PRE>' \(FimTokens.prefix\)"):
        DataCollatorForFillInTheMiddle(tokenizer, fim_tokens=FimTokens("<PRE>", "<fim_middle>", "<fim_suffix>"))
    bare = build_tokenizer(vocab_size=400, max_documents=10)
    bare = bare.__class__(tokenizer_object=bare.backend_tokenizer.__class__.from_str(
        bare.backend_tokenizer.to_str().replace("<fim_middle>", "<fim_mid_gone>")), eos_token="</s>")  # fmt: skip
    with pytest.raises(ValueError, match="'<fim_middle>' \\(FimTokens.middle\\)"):
        FimTransform(bare)


@pytest.mark.parametrize("field, value", [("fim_rate", 1.5), ("fim_rate", -0.1), ("spm_rate", 2), ("fim_rate", True),
                                          ("fim_rate", "0.5")])  # fmt: skip
def test_rates_outside_unit_interval_are_refused(tokenizer, field, value):
    with pytest.raises(ValueError, match=f"{field} must be a number in \\[0, 1\\]"):
        DataCollatorForFillInTheMiddle(tokenizer, **{field: value})


def test_bad_features_and_settings_are_refused(tokenizer, ids):
    doc = _doc(tokenizer, "x = 1\n")
    collator = DataCollatorForFillInTheMiddle(tokenizer, fim_rate=1.0, seed=0)
    with pytest.raises(ValueError, match="fim_level must be one of"):
        DataCollatorForFillInTheMiddle(tokenizer, fim_level="word")
    with pytest.raises(ValueError, match="cuts the document's text and needs it in feature\\['text'\\]"):
        collator([{"input_ids": doc["input_ids"]}])
    with pytest.raises(ValueError, match="packed row"):
        collator([{**doc, "position_ids": list(range(len(doc["input_ids"])))}])
    with pytest.raises(ValueError, match="carries labels"):
        collator([{**doc, "labels": doc["input_ids"]}])
    with pytest.raises(ValueError, match="already contains the FIM token"):
        collator([{**doc, "input_ids": [ids.prefix, *doc["input_ids"]]}])
    with pytest.raises(ValueError, match="empty batch"):
        collator([])
    with pytest.raises(ValueError, match="on that DataCollatorForCausalLM"):
        DataCollatorForFillInTheMiddle(tokenizer, max_length=64, causal=DataCollatorForCausalLM(tokenizer))
    with pytest.raises(ValueError, match="seed"):
        DataCollatorForFillInTheMiddle(tokenizer, seed=-1)
    with pytest.raises(ValueError, match="no 'text' column"):
        fim_dataset(datasets.Dataset.from_dict({"input_ids": [doc["input_ids"]]}), tokenizer)
    with pytest.raises(ValueError, match="start <= end"):
        FimDraw(True, False, 3, 1)
