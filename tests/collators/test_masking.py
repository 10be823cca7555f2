"""The pure masking functions: statistics, special tokens, and whole words for three tokenizer families."""

from __future__ import annotations

import functools

import pytest
import torch
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from hf_lmobj.collators import _masking as masking
from hf_lmobj.collators.masked import DataCollatorForMaskedLM
from hf_lmobj.corpus import load_stdlib_corpus


@functools.cache
def _texts(count: int = 12) -> list[str]:
    return load_stdlib_corpus(max_documents=count)["train"]["text"]


def _wordpiece() -> PreTrainedTokenizerFast:
    core = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    core.normalizer = normalizers.BertNormalizer(lowercase=False)
    core.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    core.decoder = decoders.WordPiece()
    specials = {"pad_token": "[PAD]", "unk_token": "[UNK]", "cls_token": "[CLS]", "sep_token": "[SEP]",
                "mask_token": "[MASK]"}  # fmt: skip
    trainer = trainers.WordPieceTrainer(vocab_size=400, special_tokens=list(specials.values()), show_progress=False)
    core.train_from_iterator(_texts(), trainer)
    return PreTrainedTokenizerFast(tokenizer_object=core, **specials)


def _unigram() -> PreTrainedTokenizerFast:
    core = Tokenizer(models.Unigram())
    core.pre_tokenizer = pre_tokenizers.Metaspace()
    core.decoder = decoders.Metaspace()
    specials = {"pad_token": "<pad>", "unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>",
                "mask_token": "<mask>"}  # fmt: skip
    trainer = trainers.UnigramTrainer(vocab_size=400, special_tokens=list(specials.values()), unk_token="<unk>",
                                      show_progress=False)  # fmt: skip
    core.train_from_iterator(_texts(), trainer)
    return PreTrainedTokenizerFast(tokenizer_object=core, **specials)


@pytest.fixture(scope="module")
def families(tokenizer):
    """Locally trained WordPiece and Unigram (SentencePiece) tokenizers plus the byte-level BPE."""
    return {"wordpiece": _wordpiece(), "byte_level": tokenizer, "metaspace": _unigram()}


def _chunks(tok, use_word_ids: bool) -> tuple[list[dict], list[list[int | None]]]:
    """200-token pieces of a few stdlib files, with the fast tokenizer's own word ids as reference."""
    features, references = [], []
    for text in _texts(8)[:6]:
        enc = tok(text[:3000])
        ids, word_ids = enc["input_ids"], enc.word_ids()
        for start in range(0, len(ids), 200):
            feature = {"input_ids": ids[start : start + 200]}
            if use_word_ids:
                feature["word_ids"] = word_ids[start : start + 200]
            features.append(feature)
            references.append(word_ids[start : start + 200])
    return features, references


@pytest.mark.parametrize("family", ["wordpiece", "byte_level", "metaspace"])
@pytest.mark.parametrize("use_word_ids", [False, True])
def test_whole_word_masking_never_selects_part_of_a_word(families, family, use_word_ids):
    tok = families[family]
    assert masking.detect_word_rule(tok) == family
    features, references = _chunks(tok, use_word_ids)
    collator = DataCollatorForMaskedLM(tok, mlm_probability=0.3, whole_word_mask=True, seed=1)
    selected = collator(features)["labels"] != -100
    words = 0
    for row, reference in enumerate(references):
        for word in {w for w in reference if w is not None}:
            in_word = torch.tensor([w == word for w in reference])
            picks = selected[row, : len(reference)][in_word]
            assert picks.all() or not picks.any(), (family, row, word)
            words += 1
    tokens = sum(len(r) for r in references)
    assert words > 500 and 0.2 < selected.sum().item() / tokens < 0.4  # words drawn with p = 0.3


@pytest.mark.parametrize("family", ["wordpiece", "byte_level", "metaspace"])
def test_token_markers_find_most_words(families, family):
    """Grouping by markers may merge glued punctuation but must not lump text into few blobs."""
    tok = families[family]
    tables = masking.vocabulary_tables(tok, family)
    features, references = _chunks(tok, use_word_ids=False)
    groups = words = 0
    for feature, reference in zip(features, references):
        ids = torch.tensor(feature["input_ids"])
        first = torch.zeros(len(ids), dtype=torch.bool)
        first[0] = True
        groups += int(masking.word_starts_from_tokens(ids, first, torch.ones_like(first), tables).sum())
        words += len({w for w in reference if w is not None})
    assert 0.5 * words <= groups <= words + len(features)


def test_byte_level_whitespace_runs_stay_in_one_word(tokenizer):
    tables = masking.vocabulary_tables(tokenizer, "byte_level")
    text = "x = 1   \n\n    y  z\t\tw   \n"
    enc = tokenizer(text)
    ids = torch.tensor(enc["input_ids"])
    first = torch.zeros(len(ids), dtype=torch.bool)
    first[0] = True
    starts = masking.word_starts_from_tokens(ids, first, torch.ones_like(first), tables)
    reference = enc.word_ids()
    # every word the pre-tokenizer made starts a group or continues the group before it
    for t in range(1, len(ids)):
        if reference[t] == reference[t - 1]:
            assert not starts[t], (t, tokenizer.convert_ids_to_tokens(ids.tolist()))


def test_word_ids_groups_and_select_positions_hand_worked():
    word_ids = torch.tensor([float("nan"), 0, 0, 1, 2, 2, 2, float("nan")])
    eligible = torch.tensor([False, True, True, True, True, True, True, False])
    doc = torch.tensor([True] + [False] * 7)
    starts = masking.word_starts_from_word_ids(word_ids, doc, eligible)
    assert starts.tolist() == [True, True, False, True, True, False, False, True]
    u = torch.tensor([0.0, 0.1, 0.9, 0.5, 0.05, 0.99, 0.99, 0.0], dtype=torch.float64)
    picked = masking.select_positions(u, eligible, starts, 0.15)
    # word 0 and word 2 are drawn by their first token's uniform; specials never
    assert picked.tolist() == [False, True, True, False, True, True, True, False]


def test_corrupt_split_bands_and_random_ids_hand_worked():
    ids = torch.tensor([10, 11, 12, 13, 14])
    selected = torch.tensor([True, True, True, True, False])
    u = torch.tensor([0.79, 0.80, 0.85, 0.95, 0.1], dtype=torch.float64)
    replacement = torch.tensor([20, 21, 22, 23, 24])
    inputs, labels = masking.corrupt(ids, selected, u, 99, replacement, 0.8, 0.1)
    # 0.80 -> band [0.8, 0.9) at 0.0 -> id 20; 0.85 -> 0.5 of the band -> id 22
    assert inputs.tolist() == [99, 20, 22, 13, 14]
    assert labels.tolist() == [10, 11, 12, 13, -100]


def test_vocabulary_tables_exclude_every_special_id(tokenizer):
    tables = masking.vocabulary_tables(tokenizer)
    special = set(tokenizer.all_special_ids)
    sentinel = tokenizer.convert_tokens_to_ids("<extra_id_7>")
    assert sentinel in special and tokenizer.convert_tokens_to_ids("[S]") in special
    assert tables.special.nonzero().flatten().tolist() == sorted(special)
    assert set(tables.replacement_ids.tolist()) == set(range(len(tokenizer))) - special


def test_detect_word_rule_rejects_marker_free_vocabulary():
    core = Tokenizer(models.WordLevel({"<pad>": 0, "<mask>": 1, "a": 2, "b": 3}, unk_token="<pad>"))
    core.pre_tokenizer = pre_tokenizers.Whitespace()
    tok = PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", mask_token="<mask>")
    with pytest.raises(ValueError, match="word_ids"):
        masking.detect_word_rule(tok)


def _splitmix64(state: int, count: int) -> list[int]:
    """Reference SplitMix64 (Steele et al.), written from the published algorithm in plain ints."""
    out, mask = [], (1 << 64) - 1
    for _ in range(count):
        state = (state + 0x9E3779B97F4A7C15) & mask
        z = state
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & mask
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & mask
        out.append(z ^ (z >> 31))
    return out


def test_counter_uniforms_match_splitmix64_and_depend_only_on_seed_and_position():
    seeds, lengths = [12345, (1 << 63) - 1], [5, 3]
    u = masking.counter_uniforms(seeds, lengths)
    for b, (seed, n) in enumerate(zip(seeds, lengths)):
        draws = _splitmix64(seed, 2 * n)
        expected = torch.tensor([[d >> 11 for d in draws[j::2]] for j in range(2)], dtype=torch.float64)
        columns = slice(sum(lengths[:b]), sum(lengths[: b + 1]))
        torch.testing.assert_close(u[:, columns], expected * 2.0**-53, rtol=0, atol=0)
    assert torch.equal(masking.counter_uniforms([seeds[1]], [2]), u[:, 5:7])  # prefix-stable
