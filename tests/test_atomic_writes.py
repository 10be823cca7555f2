"""House rule (issue 34): every file the package writes is written atomically, never left cut short.

A write goes through :func:`hf_lmobj.files.write_atomic` or inside a ``with atomic_output(path) as tmp:``
block (a temporary file renamed into place). :func:`test_every_write_in_the_package_is_atomic` reads every
``.py`` under ``hf_lmobj/`` and ``recipes/`` with ``ast`` and refuses any other direct write; the few
writers that build a whole temporary folder renamed into place at the end are listed in :data:`ALLOWED`,
each with its reason. Then the writers converted to the rule are shown to leave the old file whole when a
write dies half-way (a full disk, a kill).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import hf_lmobj.corpus as corpus
from hf_lmobj.corpus import build_tokenizer
from hf_lmobj.metrics import CORE_NAMES, export_space, space_core_text, sync_space_copies
from hf_lmobj.models.mtp import MTP_CONFIG_NAME, MTP_FOLDER, MTP_WEIGHTS_NAME, MTPConfig, MultiTokenPredictionModel
from tests.testing_utils import build_model, load_recipe

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted([*(ROOT / "hf_lmobj").rglob("*.py"), *(ROOT / "recipes").rglob("*.py")])
EXEMPT = {"hf_lmobj/files.py"}  # the atomic helpers themselves
ALLOWED = {  # (file, function): why its direct writes are atomic anyway
    ("hf_lmobj/metrics/__init__.py", "export_space"): "fills a temporary folder renamed into place at the end",
    ("hf_lmobj/store/writer.py", "_TokenWriter.__init__"): "writes into _atomic_folder's temporary folder",
    ("hf_lmobj/store/writer.py", "_TokenWriter.finish"): "writes into _atomic_folder's temporary folder",
}
_WRITE_MODE = re.compile(r"^[rwaxbtU+]*[wax+][rwaxbtU+]*$")  # an open() mode that writes
_OS_WRITE_FLAGS = {"O_WRONLY", "O_RDWR", "O_CREAT", "O_APPEND", "O_TRUNC"}


def _dotted(node: ast.AST) -> str:
    """``np.save`` for the call target ``np.save``; ``?.savefig`` when the object is an expression."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{_dotted(node.value)}.{node.attr}"
    return "?"


def _mode_args(call: ast.Call, positions: slice) -> list[ast.expr]:
    return [*call.args[positions], *(k.value for k in call.keywords if k.arg in ("mode", "flags"))]


def _writes_mode(call: ast.Call, positions: slice, unknown_writes: bool) -> bool:
    """True when a mode among ``call``'s args at ``positions`` (or ``mode=``) writes; a computed one counts if asked."""
    modes = _mode_args(call, positions)
    literal = [m.value for m in modes if isinstance(m, ast.Constant) and isinstance(m.value, str)]
    return any(_WRITE_MODE.match(m) for m in literal) or (unknown_writes and len(literal) < len(modes))


def _write_kind(call: ast.Call) -> str | None:
    """What direct write ``call`` is (``.write_text()``, ``open(..., 'w')``, ``np.save()``...), or None."""
    name = _dotted(call.func)
    last = name.rsplit(".", 1)[-1]
    if last in ("write_text", "write_bytes", "savefig", "tofile") and "." in name:
        return f".{last}()"
    if name in ("open", "io.open", "codecs.open"):  # open(file, mode): a computed mode may write
        return "open() for writing" if _writes_mode(call, slice(1, 2), unknown_writes=True) else None
    if name == "os.open":
        flags = {n.attr if isinstance(n, ast.Attribute) else getattr(n, "id", "") for n in ast.walk(call)}
        return "os.open() for writing" if flags & _OS_WRITE_FLAGS else None
    if last == "open" and "." in name:  # Path.open(mode), gzip.open(file, mode): a literal mode that writes
        return f"{name}() for writing" if _writes_mode(call, slice(0, 2), unknown_writes=False) else None
    if name in ("json.dump", "pickle.dump", "torch.save", "shutil.copyfile", "shutil.copy", "shutil.copy2"):
        return f"{name}()"
    if name in ("np.save", "np.savez", "np.savez_compressed", "np.savetxt", "numpy.save", "numpy.savez"):
        return f"{name}()"
    if last == "save_file":  # safetensors' save_file(tensors, path)
        return "save_file()"
    return None


def _is_atomic_with(node: ast.With | ast.AsyncWith) -> bool:
    return any(
        isinstance(item.context_expr, ast.Call) and _dotted(item.context_expr.func).endswith("atomic_output")
        for item in node.items
    )


class _DirectWrites(ast.NodeVisitor):
    """Collects ``(line, scope, kind)`` of each direct write outside a ``with atomic_output(...)`` block."""

    def __init__(self) -> None:
        self.found: list[tuple[int, str, str]] = []
        self._scope: list[str] = []
        self._atomic = 0

    def _enter(self, node: ast.AST, name: str) -> None:
        self._scope.append(name)
        self.generic_visit(node)
        self._scope.pop()

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self._enter(node, node.name)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        self._enter(node, node.name)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_With(self, node: ast.With) -> None:
        atomic = _is_atomic_with(node)
        self._atomic += atomic
        self.generic_visit(node)
        self._atomic -= atomic

    visit_AsyncWith = visit_With

    def visit_Call(self, node: ast.Call) -> None:
        kind = _write_kind(node)
        if kind and not self._atomic:
            self.found.append((node.lineno, ".".join(self._scope) or "<module>", kind))
        self.generic_visit(node)


def direct_writes(source: str) -> list[tuple[int, str, str]]:
    """``(line, scope, kind)`` of each write in ``source`` that is neither ``write_atomic`` nor in ``atomic_output``."""
    visitor = _DirectWrites()
    visitor.visit(ast.parse(source))
    return visitor.found


def test_every_write_in_the_package_is_atomic():
    offenders, used = [], set()
    for path in SOURCES:
        relative = path.relative_to(ROOT).as_posix()
        if relative in EXEMPT:
            continue
        for line, scope, kind in direct_writes(path.read_text(encoding="utf-8")):
            if (relative, scope) in ALLOWED:
                used.add((relative, scope))
            else:
                offenders.append(f"{relative}:{line}: {kind} in {scope}")
    stale = [f"ALLOWED[{file!r}, {scope!r}] covers no write any more; remove it" for file, scope in ALLOWED
             if (file, scope) not in used]  # fmt: skip
    if offenders or stale:
        pytest.fail(
            "direct writes (a crash leaves the file cut short): use hf_lmobj.files.write_atomic(path, data) or write "
            "inside `with atomic_output(path) as tmp:`, or add (file, function) to ALLOWED with its reason:\n"
            + "\n".join(offenders + stale),
            pytrace=False,
        )


def test_the_rule_catches_each_kind_of_direct_write():
    source = """
import json, os, shutil
import numpy as np
from hf_lmobj.files import atomic_output, write_atomic

def save(path, data, fig, array, mode):
    path.write_text("x")
    path.write_bytes(b"x")
    open(path, "w").close()
    open(path, mode="ab").close()
    open(path, mode).close()
    path.open("x")
    json.dump(data, handle)
    np.save(path, array)
    array.tofile(path)
    fig.savefig(path)
    torch.save(data, path)
    shutil.copyfile(path, path)
    os.open(path, os.O_WRONLY | os.O_CREAT)

class Writer:
    def finish(self, path):
        with open(path, "wb") as file:
            file.write(b"x")

def fine(path, data, fig):
    text = path.read_text()
    open(path).read()
    open(path, "rb").read()
    path.open().read()
    json.dumps(data)
    write_atomic(path, text)
    with atomic_output(path) as tmp:
        tmp.write_text(text)
        fig.savefig(tmp, format="png")
        with open(tmp, "w") as handle:
            json.dump(data, handle)
    path.write_text(text)
"""
    assert direct_writes(source) == [
        (7, "save", ".write_text()"),
        (8, "save", ".write_bytes()"),
        (9, "save", "open() for writing"),
        (10, "save", "open() for writing"),
        (11, "save", "open() for writing"),  # a computed mode may write
        (12, "save", "path.open() for writing"),
        (13, "save", "json.dump()"),
        (14, "save", "np.save()"),
        (15, "save", ".tofile()"),
        (16, "save", ".savefig()"),
        (17, "save", "torch.save()"),
        (18, "save", "shutil.copyfile()"),
        (19, "save", "os.open() for writing"),
        (23, "Writer.finish", "open() for writing"),
        (38, "fine", ".write_text()"),  # after the atomic block: caught again
    ]


# ---- the converted writers: a write that dies half-way leaves the old file whole ----------------------------
def _fail_writes_midway(monkeypatch) -> None:
    """Every ``Path.write_text`` / ``write_bytes`` writes the first half of its data, then fails as a full disk."""

    def half_then_fail(self, data, *args, **kwargs):
        with open(self, "wb") as file:
            file.write((data.encode() if isinstance(data, str) else data)[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(Path, "write_text", half_then_fail)
    monkeypatch.setattr(Path, "write_bytes", half_then_fail)


@pytest.fixture
def disk_full_midway(monkeypatch):
    _fail_writes_midway(monkeypatch)


def _entries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_score_metrics_json_survives_a_write_that_dies(tmp_path, monkeypatch):
    old = '{"test_perplexity": 3.5}'
    (tmp_path / "metrics.json").write_text(old)
    score = load_recipe("score")
    _fail_writes_midway(monkeypatch)
    args = SimpleNamespace(output_dir=str(tmp_path), model_name_or_path="m")
    with pytest.raises(OSError, match="No space"):
        score._report(args, {"test_perplexity": 2.25, "texts_scored": 4}, 1)
    assert (tmp_path / "metrics.json").read_text() == old
    assert _entries(tmp_path) == ["metrics.json"]  # no temporary file left behind


def _mtp_model(num_depths: int) -> MultiTokenPredictionModel:
    torch.manual_seed(0)
    return MultiTokenPredictionModel(build_model("causal"), MTPConfig(num_depths=num_depths))


def test_mtp_files_survive_a_save_that_dies(tmp_path, monkeypatch):
    import safetensors.torch

    _mtp_model(1).save_pretrained(tmp_path)
    folder = tmp_path / MTP_FOLDER
    old = {name: (folder / name).read_bytes() for name in (MTP_CONFIG_NAME, MTP_WEIGHTS_NAME)}

    def half_then_fail(tensors, filename, metadata=None):
        data = safetensors.torch.save(tensors, metadata=metadata)
        Path(filename).write_bytes(data[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(safetensors.torch, "save_file", half_then_fail)
    with pytest.raises(OSError, match="No space"):
        _mtp_model(2).save_pretrained(tmp_path)
    assert {name: (folder / name).read_bytes() for name in old} == old  # the weights first: the config untouched
    assert _entries(folder) == sorted(old)
    monkeypatch.undo()
    assert MultiTokenPredictionModel.from_pretrained(tmp_path).mtp_config.num_depths == 1


def test_sync_space_copies_keeps_the_old_copy_when_the_write_dies(tmp_path, monkeypatch):
    for name in ("perplexity", "bits_per_byte"):
        (tmp_path / name).mkdir()
        for core in CORE_NAMES:
            (tmp_path / name / core).write_text("# a stale copy\n")
    monkeypatch.setattr("hf_lmobj.metrics.METRICS_DIR", tmp_path)
    _fail_writes_midway(monkeypatch)
    with pytest.raises(OSError, match="No space"):
        sync_space_copies()
    assert (tmp_path / "perplexity" / "sums.py").read_text() == "# a stale copy\n"
    assert _entries(tmp_path / "perplexity") == sorted(CORE_NAMES)
    monkeypatch.undo()
    monkeypatch.setattr("hf_lmobj.metrics.METRICS_DIR", tmp_path)
    assert len(sync_space_copies()) == 2 * len(CORE_NAMES)
    assert (tmp_path / "bits_per_byte" / "scoring.py").read_text() == space_core_text("scoring.py")


def test_an_export_that_dies_leaves_no_half_space_folder(tmp_path, disk_full_midway):
    with pytest.raises(OSError, match="No space"):
        export_space("perplexity", tmp_path)
    assert _entries(tmp_path) == []  # neither a half folder nor the temporary one


def test_export_never_overwrites_an_existing_folder(tmp_path):
    (tmp_path / "perplexity").mkdir()
    (tmp_path / "perplexity" / "mine.txt").write_text("keep")
    with pytest.raises(FileExistsError, match="never overwrites"):
        export_space("perplexity", tmp_path)
    assert _entries(tmp_path / "perplexity") == ["mine.txt"]


def _race(folder_contents: dict[str, str] | None, monkeypatch, tmp_path) -> Path:
    """Train a 512-token tokenizer into ``tmp_path``'s cache while another process publishes ``folder_contents``."""
    train = corpus._train_byte_level_bpe
    key = corpus._tokenizer_cache_key(512, 0.02, 20)
    folder = tmp_path / "tokenizers" / key

    def train_while_another_process_publishes(texts, vocab_size):
        tokenizer = train(texts, vocab_size)
        if folder_contents is None:
            tokenizer.save_pretrained(folder)  # the winner: the same tokenizer, published first
        else:
            folder.mkdir(parents=True)
            for name, text in folder_contents.items():
                (folder / name).write_text(text)
        return tokenizer

    monkeypatch.setattr(corpus, "_train_byte_level_bpe", train_while_another_process_publishes)
    return folder


def test_tokenizer_cache_race_keeps_the_winner_and_leaves_no_temporary_folder(tmp_path, monkeypatch):
    folder = _race(None, monkeypatch, tmp_path)
    tokenizer = build_tokenizer(512, max_documents=20, cache_dir=tmp_path)
    assert _entries(tmp_path / "tokenizers") == [folder.name]
    assert tokenizer.decode(tokenizer("def f(): pass")["input_ids"]) == "def f(): pass"


def test_tokenizer_cache_folder_without_tokenizer_json_is_refused_by_name(tmp_path, monkeypatch):
    folder = _race({"notes.txt": "someone else's"}, monkeypatch, tmp_path)
    with pytest.raises(ValueError, match=f"{folder.name} is in the tokenizer cache but holds no tokenizer.json"):
        build_tokenizer(512, max_documents=20, cache_dir=tmp_path)
    assert _entries(tmp_path / "tokenizers") == [folder.name]
    assert _entries(folder) == ["notes.txt"]
