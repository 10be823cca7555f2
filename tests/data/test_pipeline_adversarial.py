"""Hostile input to the pipeline (sources, streams, mixtures, rows, the plan, the stream, the loader): refused by
name where it enters, never a wrong run, a bare KeyError / StopIteration or an error from inside numpy / pyarrow."""

from __future__ import annotations

import datasets
import numpy as np
import pytest

from hf_lmobj import DataCollatorForCausalLM
from hf_lmobj.corpus import build_tokenizer
from hf_lmobj.data import DatasetSource, PipelineLoader, PretrainingStream, RowFormat, TextStream, ghost_batch
from hf_lmobj.data.block_rows import block_layout, row_feature, shuffle_rows
from hf_lmobj.data.mixture import TokenMixer, check_mixture_weights, normalized_weights
from hf_lmobj.data.planned import EpochPlan, epoch_rng
from hf_lmobj.data.streamed import UnitReader
from hf_lmobj.data.transforms import FimPieces
from hf_lmobj.fim.transform import FimTransform
from hf_lmobj.plain_text import encode_texts_as_documents

ROW = 16


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer(vocab_size=512, max_documents=20)


@pytest.fixture(scope="module")
def collator(tok):
    return DataCollatorForCausalLM(tok, max_length=ROW, return_use_cache=False)


def _docs(count=12, seed=0):
    rng = np.random.default_rng(seed)
    return datasets.Dataset.from_dict(
        {"input_ids": [rng.integers(5, 400, int(n)).tolist() for n in rng.integers(2, 20, count)]}
    )


def _stream(collator, sources=None, batch_size=2, **kwargs):
    return PretrainingStream(
        [_docs()] if sources is None else sources, RowFormat("packed", ROW), collator, batch_size, **kwargs
    )


def _jsonl(tmp_path, name, content: bytes):
    path = tmp_path / name
    path.write_bytes(content)
    return str(path)


def _load(files, **kwargs):
    return datasets.load_dataset("json", data_files=files, split="train", streaming=True, **kwargs)


def _train(stream):
    """Every batch of one epoch through the loader: how many."""
    return sum(1 for _ in PipelineLoader(stream))


class _EmptyStore:
    """A random-access source (the TokenStore protocol) with no document."""

    lengths = np.zeros(0, dtype=np.int64)

    def document(self, index):
        raise AssertionError("never read")

    def document_slice(self, index, start, stop):
        raise AssertionError("never read")

    def fingerprint(self):
        return "empty"


# ----------------------------------------------------------------------------------------------- mixture weights
def test_huge_weights_do_not_overflow_and_every_source_is_read(collator):
    stream = _stream(collator, [_docs(seed=1), _docs(seed=2)], weights=[1e308, 1e308], names=["a", "b"])
    assert stream.weights.tolist() == [0.5, 0.5]
    loader = PipelineLoader(stream)
    for count, _ in enumerate(loader):
        if count == 6:
            break
    assert (loader.tokens_by_source > 0).all(), loader.tokens_by_source


@pytest.mark.parametrize(
    "weights, error, words",
    [
        ([float("nan"), 1], ValueError, r"weights\[0\] must be a finite number"),
        ([float("inf"), 1], ValueError, r"weights\[0\] must be a finite number"),
        ([-1, 2], ValueError, r"weights\[0\] must be a finite number in \[0, inf\)"),
        ([0, 0], ValueError, "all 0"),
        ([1, 0], ValueError, "weight of source 'b' is 0: it would never be read"),
        ([5e-324, 1e308], ValueError, "weight of source 'a' is .*share is 0"),
        ([1], ValueError, "has 1 entries for 2 source"),
        ([1, 2, 3], ValueError, "has 3 entries for 2 source"),
        (["1", "2"], TypeError, r"weights\[0\] must be a number"),
        ([True, 1], TypeError, r"weights\[0\] must be a number"),
        ("12", TypeError, "weights must be a list"),
    ],
)
def test_bad_mixture_weights_are_refused(collator, weights, error, words):
    with pytest.raises(error, match=words):
        _stream(collator, [_docs(seed=1), _docs(seed=2)], weights=weights, names=["a", "b"])


def test_finite_weights_keep_the_values_earlier_runs_mixed_with():
    assert normalized_weights([0.7, 0.3], ["a", "b"]).tolist() == (np.array([0.7, 0.3]) / 1.0).tolist()
    assert normalized_weights([3, 1], ["a", "b"]).tolist() == [0.75, 0.25]
    assert check_mixture_weights([2, 2], ["a", "b"]) == [0.5, 0.5]


@pytest.mark.parametrize(
    "weights, taken, error, words",
    [
        ([0.5, 0.0], None, ValueError, "source1' is 0"),
        ([1, 1], [1], ValueError, "taken has 1 counts for 2"),
        ([1, 1], [-1, 0], ValueError, "cannot be negative"),
        ([1, 1], [1.5, 0], ValueError, "whole numbers"),
    ],
)
def test_token_mixer_refuses_bad_weights_and_counts(weights, taken, error, words):
    with pytest.raises(error, match=words):
        TokenMixer(weights, taken)


# ------------------------------------------------------------------------------------------------------- names
@pytest.mark.parametrize(
    "names, error, words",
    [
        (["web", "web"], ValueError, "'web' twice"),
        (["web"], ValueError, "1 names for 2 sources"),
        (["web", " "], ValueError, "non-empty string"),
        (["web", 3], TypeError, r"names\[1\] must be a string"),
        ("ab", TypeError, "names must be a list"),
    ],
)
def test_source_names_must_be_distinct_strings_one_per_source(collator, names, error, words):
    with pytest.raises(error, match=words):
        _stream(collator, [_docs(seed=1), _docs(seed=2)], weights=[1, 1], names=names)


# ------------------------------------------------------------------------------------- PretrainingStream arguments
@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        ({"shuffle": "false"}, TypeError, "shuffle must be True or False, got 'false'"),
        ({"shuffle": 1}, TypeError, "shuffle must be True or False"),
        ({"seed": 1.7}, TypeError, r"seed must be an int in \[0, 2\*\*32\), got 1.7"),
        ({"seed": -1}, ValueError, r"seed must be an int in \[0, 2\*\*32\), got -1"),
        ({"seed": 2**32}, ValueError, "seed must be an int"),
        ({"seed": "3"}, TypeError, "seed must be an int"),
        ({"seed": True}, TypeError, "seed must be an int"),
        ({"batch_size": 0}, ValueError, "batch_size must be an int >= 1"),
        ({"batch_size": 2.0}, TypeError, "batch_size must be an int"),
        ({"batch_size": "2"}, TypeError, "batch_size must be an int"),
        ({"block_documents": 0}, ValueError, "block_documents must be an int >= 1"),
    ],
)
def test_stream_arguments_are_checked_at_entry(collator, kwargs, error, words):
    with pytest.raises(error, match=words):
        _stream(collator, **kwargs)


def test_a_numpy_seed_is_accepted_as_an_int(collator):
    stream = _stream(collator, seed=np.int64(3))
    assert stream.seed == 3 and type(stream.seed) is int
    assert stream.fingerprint()["seed"] == 3


@pytest.mark.parametrize(
    "sources, error, words",
    [
        (lambda: _docs(), TypeError, "wrap one in a list"),
        (lambda: [], ValueError, "sources is empty"),
        (lambda: [_docs().to_iterable_dataset()], TypeError, r"wrap it: TextStream\(dataset, tokenizer\)"),
        (lambda: [[[1, 2, 3]]], TypeError, r"sources\[0\] must be a TextStream"),
        (lambda: [_docs().select([])], ValueError, "0 rows"),
        (lambda: [datasets.Dataset.from_dict({"input_ids": []})], ValueError, "0 rows"),
        (lambda: [datasets.Dataset.from_dict({"input_ids": [[], []]})], ValueError, "every document .* is empty"),
        (lambda: [_EmptyStore()], ValueError, "source 'source0' holds no token"),
    ],
)
def test_bad_or_empty_sources_are_refused_by_name(collator, sources, error, words):
    with pytest.raises(error, match=words):
        _stream(collator, sources())


def test_an_empty_source_in_a_mixture_is_refused_by_its_name(collator):
    with pytest.raises(ValueError, match="source 'store' holds no token"):
        _stream(collator, [_docs(), _EmptyStore()], weights=[1, 1], names=["web", "store"])


def test_row_format_and_collator_must_be_what_they_say(collator):
    with pytest.raises(TypeError, match="row_format must be a RowFormat"):
        PretrainingStream([_docs()], "packed", collator, 2)
    with pytest.raises(TypeError, match="collator must be callable"):
        PretrainingStream([_docs()], RowFormat("packed", ROW), None, 2)


@pytest.mark.parametrize(
    "rank, world_size, error, words",
    [(2, 2, ValueError, r"rank must be in \[0, world_size=2\)"), (0, 0, ValueError, "world_size is 0"),
     (-1, 2, ValueError, "rank is -1"), (True, 2, TypeError, "rank must be a whole number"),
     (0.5, 2, ValueError, "rank is 0.5")],
)  # fmt: skip
def test_shard_refuses_inconsistent_rank_and_world_size(collator, rank, world_size, error, words):
    with pytest.raises(error, match=words):
        _stream(collator).shard(rank, world_size)


def test_set_epoch_refuses_a_negative_or_fractional_epoch(collator):
    with pytest.raises(ValueError, match="epoch is -1"):
        _stream(collator).set_epoch(-1)
    with pytest.raises(ValueError, match="epoch is 1.5"):
        _stream(collator).set_epoch(1.5)


def test_a_collator_that_returns_no_dict_is_refused():
    broken = PretrainingStream(
        [_docs()], RowFormat("packed", ROW), lambda features: [f["input_ids"] for f in features], 2
    )
    with pytest.raises(TypeError, match="must return a dict of tensors"):
        next(iter(broken))


def test_ghost_batch_refuses_a_batch_without_targets(collator):
    batch = collator([{"input_ids": list(range(300, 310))}])
    with pytest.raises(ValueError, match="no target tensor .* would still train"):
        ghost_batch({"input_ids": batch["input_ids"]})
    with pytest.raises(TypeError, match="batch must be a dict"):
        ghost_batch([batch])


# ------------------------------------------------------------------------------------------------- DatasetSource
@pytest.mark.parametrize(
    "data, column, error, words",
    [
        ({"input_ids": ["a b", "c"]}, "input_ids", TypeError, "lists of token ids .*got string"),
        ({"input_ids": [[1.5, 2.0], [3.0]]}, "input_ids", TypeError, "lists of token ids .*double"),
        (
            {"input_ids": [[1, 2], None, [3]]},
            "input_ids",
            ValueError,
            "row 1 of the dataset's 'input_ids' column is None",
        ),
        ({"input_ids": [[1, 2], [-4, 3]]}, "input_ids", ValueError, r"negative token id \(-4\)"),
        ({"input_ids": [[1, 2]]}, "ids", ValueError, "no 'ids' column"),
        ({"input_ids": [[1, 2]]}, "", ValueError, "column must be a non-empty string"),
    ],
)
def test_dataset_source_refuses_columns_that_are_not_token_ids(data, column, error, words):
    with pytest.raises(error, match=words):
        DatasetSource(datasets.Dataset.from_dict(data), column)


def test_dataset_source_reads_only_inside_its_documents():
    source = DatasetSource(datasets.Dataset.from_dict({"input_ids": [[1, 2, 3], [4, 5]]}))
    assert source.document_slice(0, 1, 3).tolist() == [2, 3] and source.document(1).tolist() == [4, 5]
    with pytest.raises(ValueError, match=r"document index must be in \[0, 2\), got 2"):
        source.document(2)
    with pytest.raises(ValueError, match=r"got -1"):
        source.document(-1)
    with pytest.raises(TypeError, match="document index must be an int"):
        source.document("0")
    with pytest.raises(ValueError, match=r"document 1 has 2 tokens; \[start, stop\) = \[0, 10\)"):
        source.document_slice(1, 0, 10)  # arrow would cut it to 2 tokens without a word
    with pytest.raises(ValueError, match=r"\[2, 1\)"):
        source.document_slice(0, 2, 1)
    with pytest.raises(TypeError, match="takes a datasets.Dataset"):
        DatasetSource({"input_ids": [[1]]})


# --------------------------------------------------------------------------------------------------- TextStream
@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        ({"batch_size": 0}, ValueError, "batch_size must be an int >= 1"),
        ({"batch_size": -3}, ValueError, "batch_size must be an int >= 1"),
        ({"batch_size": 1.5}, TypeError, "batch_size must be an int"),
        ({"add_bos": "yes"}, TypeError, "add_bos must be True or False"),
        ({"add_eos": None}, TypeError, "add_eos must be True or False"),
        ({"text_column": ""}, ValueError, "text_column must be a non-empty string"),
        ({"name": ""}, ValueError, "name must be a non-empty string"),
        ({"name": None}, TypeError, "name must be a string"),
        ({"encode": 5}, TypeError, "encode must be a callable"),
    ],
)
def test_text_stream_arguments_are_checked_at_entry(tok, kwargs, error, words):
    with pytest.raises(error, match=words):
        TextStream(datasets.Dataset.from_dict({"text": ["a b", "c"]}), tok, **kwargs)


def test_text_stream_refuses_a_non_tokenizer_an_empty_dataset_and_a_column_not_of_text(tok):
    with pytest.raises(TypeError, match="tokenizer must be a transformers tokenizer, got str"):
        TextStream(datasets.Dataset.from_dict({"text": ["a"]}), "gpt2")
    with pytest.raises(ValueError, match="stream 'web': the dataset has 0 rows"):
        TextStream(datasets.Dataset.from_dict({"text": ["a"]}).select([]), tok, name="web")
    with pytest.raises(TypeError, match="column 'text' holds int64, not text"):
        TextStream(datasets.Dataset.from_dict({"text": [1, 2]}), tok)


def test_encode_must_make_one_list_of_int_arrays_per_text(tok):
    texts = datasets.Dataset.from_dict({"text": ["a b", "c"]})
    dropping = TextStream(texts, tok, encode=lambda batch: [[np.array([1, 2])]])
    with pytest.raises(ValueError, match="made 1 entries for 2 texts"):
        list(dropping.iter_documents(dropping.dataset))
    as_lists = TextStream(texts, tok, encode=lambda batch: [[[1, 2]] for _ in batch])
    with pytest.raises(TypeError, match="must make 1-D integer numpy arrays"):
        list(as_lists.iter_documents(as_lists.dataset))


@pytest.mark.parametrize(
    "unit, num_units, epoch, words",
    [(4, 4, 0, r"unit must be in \[0, num_units=4\)"), (0, 0, 0, "num_units is 0"), (0, 2, -1, "epoch is -1")],
)
def test_unit_slice_refuses_inconsistent_units(tok, unit, num_units, epoch, words):
    stream = TextStream(datasets.Dataset.from_dict({"text": ["a", "b"]}), tok)
    with pytest.raises(ValueError, match=words):
        stream.unit_slice(unit, num_units, epoch)


@pytest.mark.parametrize(
    "texts, add_bos, tokenizer, error, words",
    [
        ("abc", True, "tok", TypeError, "wrap one text in a list"),
        (["a", None], True, "tok", TypeError, r"texts\[1\] must be a string"),
        (["a"], "yes", "tok", TypeError, "add_bos must be True or False"),
        (["a"], True, None, TypeError, "tokenizer must be a transformers tokenizer"),
    ],
)
def test_encode_texts_as_documents_checks_its_arguments(tok, texts, add_bos, tokenizer, error, words):
    with pytest.raises(error, match=words):
        encode_texts_as_documents(tok if tokenizer == "tok" else tokenizer, texts, add_bos, True)


# ------------------------------------------------------------------------------------------- streams over files
def test_rows_without_the_text_column_name_the_column_the_columns_and_the_fix(tmp_path, tok, collator):
    path = _jsonl(tmp_path, "a.jsonl", b'{"text": "a b"}\n')
    renamed = _load(path).map(lambda row: {"content": row["text"]}, remove_columns=["text"])  # columns unknown
    stream = TextStream(renamed, tok, name="web")
    with pytest.raises(
        ValueError, match=r"stream 'web': row 0 .*no column 'text' \(its columns: \['content'\]\); set text_column="
    ):
        _train(_stream(collator, [stream]))


def test_invalid_utf8_names_the_file_it_is_in(tmp_path, tok, collator):
    good = _jsonl(tmp_path, "good.jsonl", b'{"text": "fine"}\n')
    bad = _jsonl(tmp_path, "latin1.jsonl", b'{"text": "caf\xe9"}\n')
    stream = TextStream(_load([good, bad]), tok, name="web")
    with pytest.raises(
        ValueError, match=r"stream 'web': reading row 1 \(in .*latin1\.jsonl\) failed: the file is not UTF-8"
    ):
        _train(_stream(collator, [stream]))


def test_invalid_utf8_in_a_text_file_names_the_file(tmp_path, tok):
    path = tmp_path / "notes.txt"
    path.write_bytes(b"hello\nx\xffy\n")
    stream = TextStream(datasets.load_dataset("text", data_files=str(path), split="train", streaming=True), tok)
    with pytest.raises(ValueError, match=r"\(in .*notes\.txt\) failed: the file is not UTF-8"):
        list(stream.iter_documents(stream.dataset))


def test_a_line_that_is_not_json_names_the_file(tmp_path, tok):
    path = _jsonl(tmp_path, "cut.jsonl", b'{"text": "a"}\n{"text": \n')
    stream = TextStream(_load(path), tok)
    with pytest.raises(ValueError, match=r"\(in .*cut\.jsonl\) failed: ArrowInvalid: JSON parse error"):
        list(stream.iter_documents(stream.dataset))


def test_files_with_other_columns_name_the_file(tmp_path, tok):
    first = _jsonl(tmp_path, "a.jsonl", b'{"text": "a"}\n')
    other = _jsonl(tmp_path, "b.jsonl", b'{"content": "x"}\n')
    stream = TextStream(_load([first, other]), tok)
    with pytest.raises(ValueError, match=r"\(in .*b\.jsonl\) failed: its columns differ from the first file's"):
        list(stream.iter_documents(stream.dataset))


@pytest.mark.parametrize(
    "line, error, words",
    [
        (b'{"text": null}', ValueError, r"row 1 \(in .*rows\.jsonl\) has no text \(None in column 'text'\)"),
        (b'{"text": 5}', TypeError, r"row 1 \(in .*rows\.jsonl\): column 'text' must hold strings, got int \(5\)"),
    ],
)
def test_a_row_without_a_string_text_is_named(tmp_path, tok, collator, line, error, words):
    path = _jsonl(tmp_path, "rows.jsonl", b'{"text": "a b"}\n' + line + b"\n")
    with pytest.raises(error, match=words):
        _train(_stream(collator, [TextStream(_load(path), tok)]))


def test_an_empty_jsonl_stream_is_refused_by_name_not_trained_for_zero_steps(tmp_path, tok, collator):
    path = _jsonl(tmp_path, "empty.jsonl", b"")
    features = datasets.Features({"text": datasets.Value("string")})
    stream = _stream(collator, [TextStream(_load(path, features=features), tok)], names=["web"])
    with pytest.raises(ValueError, match=r"the sources \('web'\) gave no row in epoch 0: every one is empty"):
        _train(stream)
    with pytest.raises(ValueError, match="gave no row"):
        stream.template_batch()  # was a bare StopIteration


def test_a_stream_of_empty_texts_is_refused_not_trained_for_zero_steps(tok, collator):
    texts = TextStream(datasets.Dataset.from_dict({"text": ["", ""]}), tok, add_bos=False, add_eos=False)
    with pytest.raises(ValueError, match="gave no row"):
        _train(_stream(collator, [texts]))


def test_a_valid_stream_still_trains_every_text_once(tmp_path, tok, collator):
    path = _jsonl(tmp_path, "ok.jsonl", b"".join(b'{"text": "line %d"}\n' % i for i in range(9)))
    loader = PipelineLoader(_stream(collator, [TextStream(_load(path), tok, batch_size=4)], shuffle=False))
    batches = list(loader)
    expected = sum(len(d) for d in encode_texts_as_documents(tok, [f"line {i}" for i in range(9)], True, True))
    assert loader.tokens_by_source.tolist() == [expected] and len(batches) >= 1


# ------------------------------------------------------------------------------------------------ EpochPlan, rows
@pytest.mark.parametrize(
    "lengths, kwargs, error, words",
    [
        ([], {}, ValueError, r"lengths hold no token \(0 documents\)"),
        ([0, 0], {}, ValueError, r"lengths hold no token \(2 documents\)"),
        ([2.5, 3], {}, TypeError, "lengths must hold ints"),
        ([-1, 3], {}, ValueError, "lengths must be >= 0, got -1"),
        ([[1, 2]], {}, ValueError, "lengths must be 1-D"),
        ([3, 4], {"block_documents": 0}, ValueError, "block_documents must be an int >= 1"),
        ([3, 4], {"seed": -1}, ValueError, "seed must be an int"),
        ([3, 4], {"shuffle": "no"}, TypeError, "shuffle must be True or False"),
        ([3, 4], {"fmt": "packed"}, TypeError, "fmt must be a RowFormat"),
    ],
)
def test_epoch_plan_refuses_bad_lengths_and_settings(lengths, kwargs, error, words):
    fmt = kwargs.pop("fmt", RowFormat("packed", 8))
    with pytest.raises(error, match=words):
        EpochPlan(np.asarray(lengths) if lengths else lengths, fmt, **kwargs)


def test_epoch_plan_queries_are_checked():
    plan = EpochPlan(np.array([3, 5, 2]), RowFormat("packed", 4), block_documents=2, shuffle=False)
    with pytest.raises(ValueError, match="batch_size must be an int >= 1"):
        plan.steps(0, 1)
    with pytest.raises(ValueError, match=r"rank must be in \[0, world_size=2\)"):
        plan.rows_of_step(0, 2, 1, 2, epoch=0)
    with pytest.raises(ValueError, match=rf"row must be in \[0, {plan.num_rows}\)"):
        plan.locate(plan.num_rows)
    with pytest.raises(ValueError, match=r"block must be in \[0, 2\)"):
        plan.block_docs(2)
    with pytest.raises(ValueError, match="epoch is -1"):
        plan.set_epoch(-1)
    with pytest.raises(TypeError, match="seed must be an int"):
        epoch_rng(1.5, 0)


def test_row_format_and_layout_arguments_are_checked():
    assert type(RowFormat("packed", np.int64(8)).max_length) is int
    with pytest.raises(ValueError, match="row kind"):
        RowFormat(3, 8)
    with pytest.raises(TypeError, match="max_length must be an int"):
        RowFormat("packed", 8.0)
    with pytest.raises(TypeError, match="lengths must hold ints"):
        block_layout(np.array([1.5, 2.0]), RowFormat("packed", 8))
    with pytest.raises(TypeError, match="fmt must be a RowFormat"):
        block_layout(np.array([1, 2]), "packed")
    layout = block_layout(np.array([3, 2]), RowFormat("packed", 8))
    with pytest.raises(TypeError, match="rng must be a numpy Generator"):
        shuffle_rows(layout, 0)
    with pytest.raises(ValueError, match=r"row must be in \[0, 1\)"):
        row_feature(layout, 1, [np.arange(3), np.arange(2)], RowFormat("packed", 8))


# -------------------------------------------------------------------------------------------------- UnitReader
def test_unit_reader_checks_sources_weights_and_positions():
    a, b = DatasetSource(_docs(seed=1)), DatasetSource(_docs(seed=2))
    fmt = RowFormat("packed", ROW)
    with pytest.raises(ValueError, match="several sources need weights"):
        UnitReader([a, b], fmt)
    with pytest.raises(ValueError, match=r"weights\[1\] must be a finite number"):
        UnitReader([a, b], fmt, [1.0, float("nan")])
    with pytest.raises(ValueError, match="'x' twice"):
        UnitReader([a, b], fmt, [0.5, 0.5], names=["x", "x"])
    reader = UnitReader([a], fmt, shuffle=False)
    with pytest.raises(ValueError, match=r"unit must be in \[0, num_units=2\)"):
        next(reader.rows(unit=2, num_units=2, epoch=0))
    with pytest.raises(ValueError, match="position must be a dict with 'cursors'"):
        next(reader.rows(unit=0, num_units=1, epoch=0, position={"bad": 1}))
    with pytest.raises(ValueError, match="position of source 'source0' must be a dict with 'pass'"):
        next(reader.rows(0, 1, 0, position={"cursors": [{"taken": 1}], "taken": None, "block": 0, "row": 0}))


# ------------------------------------------------------------------------------------------------ PipelineLoader
@pytest.mark.parametrize(
    "kwargs, error, words",
    [
        ({"num_workers": -1}, ValueError, "num_workers is -1"),
        ({"num_workers": "2"}, TypeError, "num_workers must be a whole number"),
        ({"num_workers": True}, TypeError, "num_workers must be a whole number"),
        ({"pin_memory": "yes"}, TypeError, "pin_memory must be True or False"),
        ({"persistent_workers": "no"}, TypeError, "persistent_workers must be True or False"),
        ({"prefetch_factor": 0}, ValueError, "prefetch_factor must be an int >= 1"),
        ({"multiprocessing_context": "thread"}, ValueError, "multiprocessing_context must be one of"),
    ],
)
def test_loader_arguments_are_checked_at_entry(collator, kwargs, error, words):
    with pytest.raises(error, match=words):
        PipelineLoader(_stream(collator), **kwargs)


def test_loader_refuses_what_is_not_a_stream():
    with pytest.raises(TypeError, match="takes a PretrainingStream"):
        PipelineLoader(_docs())


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda states: [], "must be a non-empty list"),
        (lambda states: [{}], "has no 'regime'"),
        (lambda states: [{**states[0], "tokens_by_source": [1, 2]}], "counts tokens of 2 sources, this run has 1"),
        (lambda states: states * 2, "holds 2 data states for a world size of 1"),
        (lambda states: [{**states[0], "batch_size": 0}], "batch_size is 0"),
        (lambda states: [{**states[0], "regime": "mixed"}], "regime 'mixed'"),
    ],
)
def test_resume_refuses_saved_states_that_are_not_the_loaders(collator, change, words):
    loader = PipelineLoader(_stream(collator))
    next(iter(loader))
    states = [loader.state_dict()]
    with pytest.raises(ValueError, match=words):
        PipelineLoader(_stream(collator)).resume(change(states), 1)
    with pytest.raises(ValueError, match="batches_in_epoch is -1"):
        PipelineLoader(_stream(collator)).resume(states, -1)


# ----------------------------------------------------------------------------------------------------- FimPieces
@pytest.mark.parametrize(
    "seed, error, words",
    [(-1, ValueError, r"seed must be an int in \[0, 2\*\*32\)"), (2**32, ValueError, "seed must be an int"),
     (1.5, TypeError, "seed must be an int")],
)  # fmt: skip
def test_fim_pieces_seed_is_a_seed(tok, seed, error, words):
    with pytest.raises(error, match=words):
        FimPieces(FimTransform(tok, fim_rate=1.0), max_tokens=8, seed=seed)


# ------------------------------------------------------- the run's sources (run_sources)
def test_an_empty_jsonl_folder_is_refused_by_name_not_stop_iteration(tmp_path):
    from hf_lmobj.data.prepare import DataArguments
    from hf_lmobj.data.run_sources import open_sources

    (tmp_path / "a.jsonl").write_text("")
    with pytest.raises(ValueError, match="holds no"):
        open_sources(DataArguments(dataset_name=str(tmp_path), streaming=True))


@pytest.mark.parametrize(
    ("line", "error", "word"),
    [('{"body": "x"}', ValueError, "text_column"), ('{"text": null}', (TypeError, ValueError), "string")],
)
def test_validation_rows_without_text_are_refused_by_row(tmp_path, line, error, word):
    from hf_lmobj.data.prepare import DataArguments
    from hf_lmobj.data.run_sources import open_sources

    (tmp_path / "a.jsonl").write_text(line + "\n")
    with pytest.raises(error, match=word):
        open_sources(DataArguments(dataset_name=str(tmp_path), streaming=True))
