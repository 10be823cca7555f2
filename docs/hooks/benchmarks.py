"""An mkdocs hook: the measurements in ``benchmarks/*.md`` become pages of the site, read where they are.

The benchmark notes live beside their scripts (``benchmarks/``), outside ``docs/``; mkdocs, strict, refuses a link
to a file outside ``docs/``. This hook adds each ``benchmarks/<name>.md`` to the site as ``benchmarks/<name>.md``
(nothing is copied into ``docs/``), so ``docs/measurements.md`` links them as ``benchmarks/<name>.md`` and the
strict build checks every such link. A file of ``docs/`` of the same name would win; none exists.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

#: The benchmark notes' folder, beside ``docs/`` in the repository.
BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


def on_files(files: Files, config: Any) -> Files:
    """Add every ``benchmarks/*.md`` (sorted by name) to ``files`` as the page ``benchmarks/<name>.md``."""
    for path in sorted(BENCHMARKS.glob("*.md")):
        uri = f"benchmarks/{path.name}"
        if files.get_file_from_path(uri) is None:
            files.append(File.generated(config, uri, abs_src_path=str(path)))
    return files
