"""A griffe extension for the API reference: the package's docstrings read as mkdocstrings renders them.

The docstrings are Google style with four habits that griffe reads otherwise: an ``Example:`` section (griffe's
Google parser knows ``Examples:``, and would render the doctest as Markdown text), a doctest in the docstring's
body outside any section (fenced here as ``pycon``), Sphinx roles (``:func:`name```, ``:mod:`.sibling```), which
become plain code spans, and one ``Args:`` entry for several parameters (``add_bos / add_eos: ...``), which becomes
one entry per parameter with the shared text, so that griffe's check of each name against the signature stays on.
A module attribute documented by a Sphinx ``#:`` comment (the line above it, or after it on its line) gets that
comment as its docstring.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_EXAMPLE = re.compile(r"^(\s*)Example:\s*$", re.MULTILINE)
_ROLE = re.compile(r":(?:func|class|meth|mod|data|attr|obj|exc):`~?([^`]+)`")
_ARGS = re.compile(r"^(\s*)(?:Args|Arguments|Parameters):\s*$")
_SHARED_ENTRY = re.compile(r"^(\s+)(\w+(?:\s*[/,]\s*\w+)+):(.*)$")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def split_shared_args(text: str) -> str:
    """``text`` with each ``Args:`` entry that names several parameters (``a / b: ...``, ``a, b: ...``) split.

    Example:
        >>> print(split_shared_args("Args:\\n    a / b: both\\n        sides.\\n    c: one."))
        Args:
            a: both
                sides.
            b: both
                sides.
            c: one.
    """
    lines, out, i, section = text.split("\n"), [], 0, None
    while i < len(lines):
        line = lines[i]
        if line.strip() and section is not None and _indent(line) <= section:
            section = None
        if (args := _ARGS.match(line)) is not None:
            section = len(args.group(1))
        entry = _SHARED_ENTRY.match(line) if section is not None else None
        if entry is None:
            out.append(line)
            i += 1
            continue
        end = i + 1
        while end < len(lines) and (not lines[end].strip() or _indent(lines[end]) > len(entry.group(1))):
            end += 1
        while end > i + 1 and not lines[end - 1].strip():
            end -= 1
        for name in re.split(r"\s*[/,]\s*", entry.group(2)):
            out.extend([f"{entry.group(1)}{name}:{entry.group(3)}", *lines[i + 1 : end]])
        i = end
    return "\n".join(out)


def fence_doctests(text: str) -> str:
    """``text`` with each unindented doctest (``>>>`` lines and their output, up to a blank line) fenced as pycon.

    Example:
        >>> fence_doctests("Adds.\\n\\n>>> 1 + 1\\n2\\n\\nDone.")
        'Adds.\\n\\n```pycon\\n>>> 1 + 1\\n2\\n```\\n\\nDone.'
    """
    out: list[str] = []
    fenced = False
    for line in text.split("\n"):
        if not fenced and line.startswith(">>>"):
            out.append("```pycon")
            fenced = True
        elif fenced and not line.strip():
            out.append("```")
            fenced = False
        out.append(line)
    return "\n".join([*out, "```"] if fenced else out)


def rewrite(text: str) -> str:
    """``text`` with ``Example:`` headings named ``Examples:``, body doctests fenced, Sphinx roles as code spans and
    shared ``Args:`` entries split.

    Example:
        >>> rewrite("Uses :func:`~hf_lmobj.packing.pack_dataset`.\\n\\nExample:\\n    >>> 1\\n    1")
        'Uses `hf_lmobj.packing.pack_dataset`.\\n\\nExamples:\\n    >>> 1\\n    1'
    """
    return split_shared_args(fence_doctests(_ROLE.sub(r"`\1`", _EXAMPLE.sub(r"\1Examples:", text))))


def comment_docstring(lines: list[str], lineno: int) -> str | None:
    """The Sphinx ``#:`` comment of the statement at 1-based ``lineno`` of ``lines``: the lines above, else its own.

    Example:
        >>> comment_docstring(["#: The seeds' bound.", "SEED_LIMIT = 2**32", "X = 1  #: one"], 2)
        "The seeds' bound."
        >>> comment_docstring(["#: The seeds' bound.", "SEED_LIMIT = 2**32", "X = 1  #: one"], 3)
        'one'
    """
    above: list[str] = []
    row = lineno - 2
    while row >= 0 and lines[row].strip().startswith("#:"):
        above.insert(0, lines[row].strip()[2:].strip())
        row -= 1
    if above:
        return "\n".join(above)
    _, marker, own = lines[lineno - 1].partition("  #:")
    return own.strip() if marker else None


class DocstringHabits(griffe.Extension):
    """Rewrite every docstring griffe loads (modules, classes, functions, attributes) with :func:`rewrite`; give an
    attribute without one its ``#:`` comment."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is None and obj.is_attribute and obj.lineno is not None:
            try:
                text = comment_docstring(obj.lines_collection[obj.filepath], obj.lineno)
            except (KeyError, IndexError, TypeError):  # no source (a compiled module): no comment to read
                text = None
            if text:
                obj.docstring = griffe.Docstring(text, lineno=obj.lineno, parent=obj)
        if obj.docstring is not None:
            obj.docstring.value = rewrite(obj.docstring.value)
