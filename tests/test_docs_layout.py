"""The documentation's layout page (docs/layout.md) agrees with the tree: every entry it names exists, every package
and recipe folder is named."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LAYOUT = REPO / "docs" / "layout.md"
ENTRY = re.compile(r"^( *)(\S+?/|\S+\.py)(?:\s|$)")  # "  data/   the pipeline ..." or "  corpus.py  ..."


def layout_entries(readme: str) -> list[str]:
    """The paths the ``## Layout`` section's code block names, nested by two-space indentation."""
    section = readme.split("\n## Layout\n", 1)[1]
    block = section.split("```", 2)[1]
    parents: list[str] = []
    paths = []
    for line in block.splitlines():
        match = ENTRY.match(line)
        if not match or len(match.group(1)) % 2:
            continue  # a description's continuation line
        depth = len(match.group(1)) // 2
        if depth > len(parents):
            continue  # deeper than a child of the last folder: a description's continuation line
        parents[depth:] = []
        path = "".join(parents) + match.group(2)
        paths.append(path)
        if path.endswith("/"):
            parents.append(match.group(2))
    return paths


def folders_to_name() -> set[str]:
    """Every package folder of the library and every folder of the recipes (config folders aside)."""
    found = {f"{p.parent.relative_to(REPO)}/" for p in (REPO / "hf_lmobj").rglob("__init__.py")}
    found |= {f"{p.relative_to(REPO)}/" for p in (REPO / "recipes").iterdir() if p.is_dir() and p.name != "__pycache__"}
    return found


def test_every_entry_of_the_layout_exists():
    entries = layout_entries(LAYOUT.read_text(encoding="utf-8"))
    missing = [e for e in entries if not (REPO / e).exists()]
    assert not missing, f"docs/layout.md names {missing}, which the tree does not hold"


def test_every_package_and_recipe_folder_is_in_the_layout():
    entries = set(layout_entries(LAYOUT.read_text(encoding="utf-8")))
    unnamed = sorted(folders_to_name() - entries)
    assert not unnamed, f"docs/layout.md does not name {unnamed}"


def test_the_parser_nests_entries_and_skips_descriptions():
    readme = (
        "x\n## Layout\n\n```\npkg/        the package\n  sub/       a sub-package, long\n             text: still\n"
        "              other.py and text\n  mod.py     a module\ntop.py       a file\n```\n"
    )
    assert layout_entries(readme) == ["pkg/", "pkg/sub/", "pkg/mod.py", "top.py"]
