"""Every fenced code block of README.md and docs/**/*.md runs here, so a snippet that stops working fails a test.

The convention a page follows (docs/index.md says it to readers too):

* ```` ```python ```` blocks run, in the order of their file, in one namespace per file (a later block uses what an
  earlier one defined: a page read top to bottom is one script), in a temporary working folder of that file's own
  (the files a block writes stay there). They are small: tiny stock models built from a config, ``max_steps`` of a
  few, tokenizers from ``hf_lmobj.corpus.build_tokenizer``, nothing downloaded (``HF_HUB_OFFLINE=1``: a Hub id
  fails). There is no way to skip one: a fragment that cannot run is not a python block.
* ```` ```bash ```` / ```` ```console ```` / ```` ```shell ```` / ```` ```sh ```` blocks are commands a user pastes.
  One whose fence directly follows the line ``<!-- run -->`` runs with ``bash -euo pipefail`` in the same
  temporary folder, in its place in the file's order, with ``recipes`` linked there to the repository's, the
  venv's scripts (``python``, ``accelerate``, ``hf-lmobj``) first on ``PATH``, one thread per process and no Hub
  access; ``$ `` prompts of a console block are taken off (lines without one are its output). Those blocks carry
  small flags as pasted. The others (eight GPUs, SLURM, the 6-minute demo) are shown, not run.
* Any other language (``text``, ``yaml``, ``pycon`` output, ...) is never run.

Every shell block, run or shown, is also read: each flag given to a recipe (``recipes/<name>.py``,
``-m hf_lmobj.recipes.<name>``, ``hf-lmobj <command>``) must be one that recipe's ``--help_all`` lists.

Each test is one block, named ``<file>:<line>``; it first runs the earlier blocks of its file that have not run
(so ``-k`` on one block works), and fails naming the earlier block when one of them failed.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RUN_MARK = "<!-- run -->"
SHELLS = {"bash", "console", "shell", "sh"}
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")


@dataclass(frozen=True)
class Block:
    """One fenced block: its file (relative to the repository), first code line, language, code and run mark."""

    path: str
    line: int
    lang: str
    code: str
    marked: bool

    @property
    def runs(self) -> bool:
        return self.lang == "python" or (self.lang in SHELLS and self.marked)


def parse_fences(text: str, name: str) -> list[Block]:
    """The fenced blocks of Markdown ``text`` (file ``name``), in order, each dedented by its fence's indentation.

    A fence closes on a line of the same character, at least as long, and nothing else (CommonMark), so a block
    fenced by four backticks may hold three.
    """
    lines, blocks, i = text.split("\n"), [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if opening is None:
            i += 1
            continue
        indent, fence, lang = opening.groups()
        closing = re.compile(rf"\s*{re.escape(fence[0])}{{{len(fence)},}}\s*")
        end = i + 1
        while end < len(lines) and not closing.fullmatch(lines[end]):
            end += 1
        body = [line[len(indent) :] if line.startswith(indent) else line.lstrip() for line in lines[i + 1 : end]]
        marked = i > 0 and lines[i - 1].strip() == RUN_MARK
        blocks.append(Block(name, i + 2, lang.lower(), "\n".join(body) + "\n", marked))
        i = end + 1
    return blocks


def fenced_blocks(path: Path) -> list[Block]:
    """The fenced blocks of the Markdown file ``path`` (named relative to the repository)."""
    return parse_fences(path.read_text(encoding="utf-8"), path.relative_to(REPO).as_posix())


def documentation_files() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md"))]


BLOCKS = [block for path in documentation_files() for block in fenced_blocks(path) if block.runs]


@dataclass
class FileRun:
    """The blocks of one file run so far: their module (one namespace), working folder, count and first failure."""

    folder: Path
    module: types.ModuleType
    done: int = 0
    failed: str | None = None


def shell_commands(block: Block) -> str:
    """The script of a shell block: a console block's ``$ `` lines without their prompt, else the whole block."""
    if block.lang != "console":
        return block.code
    return "\n".join(line[2:] for line in block.code.split("\n") if line.startswith("$ "))


def run_shell(block: Block, folder: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        HF_HUB_OFFLINE="1",
        HF_DATASETS_OFFLINE="1",
        TOKENIZERS_PARALLELISM="false",
        OMP_NUM_THREADS="1",
    )
    result = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", shell_commands(block)],
        cwd=folder,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if result.returncode != 0:
        raise AssertionError(f"exit {result.returncode}\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")


def run_block(block: Block, state: FileRun) -> None:
    """Run ``block`` in its file's namespace and folder; a traceback names the Markdown file and its line."""
    if block.lang in SHELLS:
        run_shell(block, state.folder)
        return
    code = compile("\n" * (block.line - 1) + block.code, str(REPO / block.path), "exec")
    here = os.getcwd()
    os.chdir(state.folder)
    try:
        exec(code, state.module.__dict__)
    finally:
        os.chdir(here)


@pytest.fixture(scope="session")
def file_runs(tmp_path_factory):
    """The :class:`FileRun` of a documentation file, made on first use: a folder with ``recipes`` linked in."""
    runs: dict[str, FileRun] = {}

    def get(path: str) -> FileRun:
        if path not in runs:
            name = re.sub(r"\W", "_", path)
            folder = tmp_path_factory.mktemp(name)
            (folder / "recipes").symlink_to(REPO / "recipes", target_is_directory=True)
            module = types.ModuleType(f"doc_blocks_{name}")  # in sys.modules: pickle and dataclasses find it
            sys.modules[module.__name__] = module
            runs[path] = FileRun(folder, module)
        return runs[path]

    yield get
    for state in runs.values():
        sys.modules.pop(state.module.__name__, None)


@pytest.mark.parametrize("block", BLOCKS, ids=[f"{b.path}:{b.line}" for b in BLOCKS])
def test_block_runs(block: Block, file_runs, monkeypatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    state = file_runs(block.path)
    for previous in [b for b in BLOCKS if b.path == block.path and b.line <= block.line][state.done :]:
        if state.failed is not None:
            break
        state.done += 1
        try:
            run_block(previous, state)
        except BaseException:
            state.failed = f"{previous.path}:{previous.line}"
            if previous is block:
                raise
    if state.failed is not None and state.failed != f"{block.path}:{block.line}":
        pytest.fail(f"an earlier block of this file failed: {state.failed}", pytrace=False)


MARKDOWN = """Text.

```python
x = 1
```

- a list item:

    ```python
    y = x + 1
    ```

<!-- run -->
```console
$ echo one
one
```

```bash
echo shown
```

````text
```python
not a block of its own
```
````

```
no language
```
"""


def test_fences_and_run_marks_are_read() -> None:
    """Fences indented in a list are dedented, a run mark makes a shell block run, a longer fence holds a shorter."""
    blocks = parse_fences(MARKDOWN, "page.md")
    assert [(b.line, b.lang, b.code, b.marked, b.runs) for b in blocks] == [
        (4, "python", "x = 1\n", False, True),
        (10, "python", "y = x + 1\n", False, True),
        (15, "console", "$ echo one\none\n", True, True),
        (20, "bash", "echo shown\n", False, False),
        (24, "text", "```python\nnot a block of its own\n```\n", False, False),
        (30, "", "no language\n", False, False),
    ]
    assert shell_commands(blocks[2]) == "echo one"
    call = Block(
        "page.md",
        1,
        "bash",
        "accelerate launch --num_processes 2 recipes/score.py --split train \\\n  --x 1  # --y\n",
        False,
    )
    assert recipe_calls(call) == [("score", ["--split", "--x"])]


def test_the_docs_hold_blocks_to_run() -> None:
    assert sum(b.path.startswith("docs/") and b.lang == "python" for b in BLOCKS) >= 40
    assert all(b.code.strip() for b in BLOCKS), [f"{b.path}:{b.line}" for b in BLOCKS if not b.code.strip()]


RECIPE_CALL = re.compile(r"(?:recipes/(\w+)\.py|hf_lmobj\.recipes\.(\w+)|(?:hf-lmobj|hf_lmobj\.cli)\s+(\w+))")
FLAG = re.compile(r"(?<![\w-])--[a-z][\w-]*")


def recipe_flags(name: str) -> set[str]:
    """The flags recipe ``name`` accepts: those its ``--help_all`` (else ``--help``) prints, read in this process."""
    import contextlib
    import io

    from tests.testing_utils import load_recipe

    recipe = load_recipe(name)
    for option in ("--help_all", "--help"):
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(io.StringIO()), pytest.raises(SystemExit):
            recipe.main([option])
        if "--output_dir" in printed.getvalue() or option == "--help":
            return set(FLAG.findall(printed.getvalue()))
    raise AssertionError(name)


def recipe_calls(block: Block) -> list[tuple[str, list[str]]]:
    """``(recipe, flags)`` of each recipe a shell block calls: its logical lines, comments off, read after the call."""
    from hf_lmobj.cli import COMMANDS

    calls = []
    for line in shell_commands(block).replace("\\\n", " ").split("\n"):
        line = re.sub(r"(^|\s)#.*", "", line)
        for call in RECIPE_CALL.finditer(line):
            script, module, command = call.groups()
            name = script or module or COMMANDS.get(command, command)
            calls.append((name, FLAG.findall(line[call.end() :].split("&&")[0])))
    return calls


def test_shell_blocks_use_flags_the_recipes_know() -> None:
    """A shown command is not run, but each of its recipe flags exists: a renamed flag fails here."""
    shells = [b for path in documentation_files() for b in fenced_blocks(path) if b.lang in SHELLS]
    used = [(f"{b.path}:{b.line}", name, flags) for b in shells for name, flags in recipe_calls(b)]
    known = {name: recipe_flags(name) for name in {name for _, name, _ in used}}
    unknown = [f"{where} {name} {flag}" for where, name, flags in used for flag in flags if flag not in known[name]]
    assert len(used) >= 20 and unknown == []


def test_reference_lists_every_top_level_name() -> None:
    """docs/reference/index.md names each of ``hf_lmobj.__all__`` (the API reference is generated from them)."""
    import hf_lmobj

    text = (REPO / "docs" / "reference" / "index.md").read_text(encoding="utf-8")
    assert [name for name in hf_lmobj.__all__ if f"`{name}`" not in text] == []


def test_docs_hooks_examples() -> None:
    """The site's griffe extension does what its examples say (needs the ``docs`` extra, as ``make docs`` does)."""
    import doctest
    import importlib.util

    pytest.importorskip("griffe")
    spec = importlib.util.spec_from_file_location("griffe_docstrings", REPO / "docs" / "hooks" / "griffe_docstrings.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert doctest.testmod(module).failed == 0
