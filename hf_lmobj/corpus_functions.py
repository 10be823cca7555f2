"""The documented functions of the embedded corpus (the standard library's source), read with :mod:`ast`.

Each :class:`FunctionSource` is one module-level function or class method that has a docstring
and code after it, split at the end of the docstring (``header`` / ``body``), with its path and
qualified name: the raw material of the labelled sets the fine-tuning recipes build (instruction
pairs, package classification). Functions nested in another are skipped (their text would leak
into their parent's). Reading is deterministic: files in path order, functions in line order.

Example:
    >>> f = extract_functions("json/x.py", 'def f(x):\\n    "Doc."\\n    return x\\n')[0]
    >>> f.package, f.qualname, f.body.strip()
    ('json', 'f', 'return x')
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from hf_lmobj.corpus import iter_stdlib_sources


@dataclass(frozen=True)
class FunctionSource:
    """One documented function: where it is and its text cut at the end of the docstring."""

    path: str  # relative POSIX path in the standard library, e.g. "json/decoder.py"
    qualname: str  # "func" or "Class.method"
    header: str  # the ``def`` line(s) and the docstring, dedented
    body: str  # everything after the docstring, dedented (never empty)

    @property
    def package(self) -> str:
        """The top-level package (``json`` for ``json/decoder.py``; ``""`` for a top-level module)."""
        return self.path.split("/")[0] if "/" in self.path else ""

    @property
    def source(self) -> str:
        return self.header + self.body


def _functions(tree: ast.Module) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Module-level functions and methods of module-level classes, in source order."""
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            yield node.name, node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    yield f"{node.name}.{item.name}", item


def _dedent(lines: list[str], indent: int) -> str:
    return "".join(line[indent:] if line[:indent].strip() == "" else line.lstrip() for line in lines)


def extract_functions(path: str, text: str) -> list[FunctionSource]:
    """The documented functions of one source file that have code after their docstring.

    >>> [f.qualname for f in extract_functions("m.py", 'def f(x):\\n    "Doc."\\n    return x\\n')]
    ['f']
    """
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    lines = text.splitlines(keepends=True)
    found = []
    for qualname, node in _functions(tree):
        if ast.get_docstring(node) is None or len(node.body) < 2:
            continue
        doc_end, end = node.body[0].end_lineno, node.end_lineno
        indent = len(lines[node.lineno - 1]) - len(lines[node.lineno - 1].lstrip())
        header = _dedent(lines[node.lineno - 1 : doc_end], indent)
        body = _dedent(lines[doc_end:end], indent)
        if body.strip():
            found.append(FunctionSource(path, qualname, header, body))
    return found


def iter_functions(
    packages: Sequence[str] | None = None, max_chars: int | None = None, root: Path | None = None
) -> Iterator[FunctionSource]:
    """Documented functions of the standard library (``packages``: top-level names; None = all).

    ``max_chars`` keeps only functions whose whole source is at most that long (a selection, never
    a cut: a kept function is always whole).
    """
    if max_chars is not None and max_chars <= 0:
        raise ValueError(f"max_chars must be positive or None, got {max_chars}")
    wanted = set(packages) if packages is not None else None
    for path, text in iter_stdlib_sources(root):
        top = path.split("/")[0] if "/" in path else ""
        if wanted is not None and top not in wanted:
            continue
        for function in extract_functions(path, text):
            if max_chars is None or len(function.source) <= max_chars:
                yield function
