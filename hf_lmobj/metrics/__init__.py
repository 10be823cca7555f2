"""The perplexity and bits-per-byte ``evaluate`` metrics, shipped as Hub Space folders.

Each metric is a folder laid out exactly as a Space on the Hub: ``<name>.py`` (the metric script),
``README.md`` (the card; its front matter pins gradio :data:`GRADIO_SDK_VERSION`), ``app.py``
(evaluate's Gradio widget), ``requirements.txt`` (evaluate, datasets, torch, transformers) and
``scoring.py``. One source of truth: :mod:`hf_lmobj.metrics.scoring` imports only the standard
library, torch, transformers and tqdm; the scripts import it as a sibling (``from .scoring import``,
which ``evaluate`` copies along), and each folder's ``scoring.py`` is that file with a generated
header, written by :func:`export_space` (from the package source, always) and refreshed in this
tree by :func:`sync_space_copies` (a test fails while a copy is stale). So ``evaluate.load(<folder>)``
works on the folder here, on an exported or ``cp -r`` copy and on the pushed Space, without hf_lmobj.

Example:
    >>> from hf_lmobj.metrics import load
    >>> round(load("perplexity").compute(nll=[3.912], num_tokens=[3])["perplexity"], 2)
    3.68
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

METRICS_DIR = Path(__file__).resolve().parent
METRIC_NAMES = ("perplexity", "bits_per_byte")
PERPLEXITY_PATH = METRICS_DIR / "perplexity"
BITS_PER_BYTE_PATH = METRICS_DIR / "bits_per_byte"
_NOT_IN_SPACE = ("__init__.py", "__pycache__", "*.pyc")
SPACE_FILES = ("README.md", "app.py", "requirements.txt")  # besides the metric script <name>.py
CORE_SOURCE = METRICS_DIR / "scoring.py"
CORE_NAME = "scoring.py"  # the core's name in a Space folder (the scripts import ``.scoring``)
_CORE_HEADER = (
    "# Generated from hf_lmobj/metrics/scoring.py by hf_lmobj.metrics.export_space: do not edit here.\n"
    '# Edit the package file, then run `python -c "import hf_lmobj.metrics as m; m.sync_space_copies()"`.\n'
)

GRADIO_SDK_VERSION = "3.19.1"
"""The gradio version the Space cards pin (``sdk_version`` in each folder's README.md).

evaluate's widget (``evaluate.utils.launch_gradio_widget``, evaluate 0.4.x) builds its form with
``gr.inputs.Dataframe`` and ``gr.outputs.Textbox``, namespaces gradio 4 removed, so a Space on
gradio 4 crashes at start; evaluate's own metric Spaces pin this version.
"""


def metric_path(name: str) -> Path:
    """The folder of metric ``name`` ("perplexity" or "bits_per_byte")."""
    if name not in METRIC_NAMES:
        raise ValueError(f"unknown metric {name!r}; choose one of {METRIC_NAMES}")
    return METRICS_DIR / name


def load(name: str, **kwargs):
    """``evaluate.load`` of the local folder of metric ``name``; ``kwargs`` go to ``evaluate.load``."""
    import evaluate

    return evaluate.load(str(metric_path(name)), **kwargs)


def space_core_text() -> str:
    """The text of a Space folder's ``scoring.py``: a generated header, then the package's scoring core."""
    return _CORE_HEADER + CORE_SOURCE.read_text(encoding="utf-8")


def export_space(name: str, destination: str | Path) -> Path:
    """Write metric ``name`` to ``destination/<name>`` as a self-contained Space folder; return it.

    The folder holds the metric script, ``README.md``, ``app.py``, ``requirements.txt`` and
    ``scoring.py`` (written from :mod:`hf_lmobj.metrics.scoring`, not copied from the folder) as real
    files; package files such as ``__init__.py`` and caches are left out. It runs with evaluate,
    datasets, torch and transformers alone, ready to upload.

    Example:
        >>> import tempfile
        >>> sorted(p.name for p in export_space("perplexity", tempfile.mkdtemp()).iterdir())
        ['README.md', 'app.py', 'perplexity.py', 'requirements.txt', 'scoring.py']
    """
    source = metric_path(name)
    missing = [f for f in (*SPACE_FILES, f"{name}.py") if not (source / f).is_file()]
    if missing:
        raise FileNotFoundError(f"metric folder {source} lacks {missing}; reinstall hf_lmobj")
    target = Path(destination) / name
    target.mkdir(parents=True)
    for file in (*SPACE_FILES, f"{name}.py"):
        shutil.copyfile(source / file, target / file)
    (target / CORE_NAME).write_text(space_core_text(), encoding="utf-8")
    return target


def sync_space_copies() -> list[Path]:
    """Rewrite each metric folder's ``scoring.py`` in this tree from the package's; return those changed.

    Run after editing :mod:`hf_lmobj.metrics.scoring` (tests/metrics/test_spaces.py fails until then).
    """
    changed, text = [], space_core_text()
    for name in METRIC_NAMES:
        copy = metric_path(name) / CORE_NAME
        if not copy.is_file() or copy.read_text(encoding="utf-8") != text:
            copy.write_text(text, encoding="utf-8")
            changed.append(copy)
    return changed


def push_to_hub(name: str, repo_id: str, token: str | None = None, private: bool = False) -> str:
    """Create (or update) the Space ``repo_id`` with metric ``name``; return the Space's URL.

    Then anyone can ``evaluate.load(repo_id)``. Needs a write token (``huggingface-cli login`` or
    ``token=``). Example: ``push_to_hub("perplexity", "my-user/perplexity")``.
    """
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    api.create_repo(repo_id, repo_type="space", space_sdk="gradio", private=private, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder = export_space(name, tmp)
        api.upload_folder(
            repo_id=repo_id,
            repo_type="space",
            folder_path=str(folder),
            commit_message=f"Upload the {name} metric from hf_lmobj",
        )
    return f"https://huggingface.co/spaces/{repo_id}"


__all__ = [
    "BITS_PER_BYTE_PATH",
    "CORE_SOURCE",
    "GRADIO_SDK_VERSION",
    "METRIC_NAMES",
    "PERPLEXITY_PATH",
    "SPACE_FILES",
    "export_space",
    "load",
    "metric_path",
    "push_to_hub",
    "space_core_text",
    "sync_space_copies",
]
