"""The perplexity and bits-per-byte ``evaluate`` metrics, shipped as Hub Space folders.

Each metric is a folder laid out exactly as a Space on the Hub (``<name>.py``, ``README.md``,
``requirements.txt`` and the shared ``scoring.py`` and ``validation.py``, links to
:mod:`hf_lmobj.metrics.scoring` and :mod:`hf_lmobj.validation`), so ``evaluate.load(<folder>)``
works on the folder here, on a copy of it, and on the pushed Space. (``scoring.py`` imports its
sibling ``validation.py``; here that is ``hf_lmobj/metrics/validation.py``, a link as well.)

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

_APP = """import evaluate
from evaluate.utils import launch_gradio_widget

module = evaluate.load("{repo_id}")
launch_gradio_widget(module)
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


def export_space(name: str, destination: str | Path, repo_id: str | None = None) -> Path:
    """Copy metric ``name`` to ``destination/<name>`` as a self-contained Space folder; return it.

    Links are resolved into real files and package files (``__init__.py``, caches) left out; with
    ``repo_id`` an ``app.py`` launching the Gradio widget for ``repo_id`` is added, as Spaces need.

    Example:
        >>> import tempfile
        >>> sorted(p.name for p in export_space("perplexity", tempfile.mkdtemp()).iterdir())
        ['README.md', 'perplexity.py', 'requirements.txt', 'scoring.py', 'validation.py']
    """
    target = Path(destination) / name
    shutil.copytree(metric_path(name), target, ignore=shutil.ignore_patterns(*_NOT_IN_SPACE))
    if repo_id is not None:
        (target / "app.py").write_text(_APP.format(repo_id=repo_id), encoding="utf-8")
    return target


def push_to_hub(name: str, repo_id: str, token: str | None = None, private: bool = False) -> str:
    """Create (or update) the Space ``repo_id`` with metric ``name``; return the Space's URL.

    Then anyone can ``evaluate.load(repo_id)``. Needs a write token (``huggingface-cli login`` or
    ``token=``). Example: ``push_to_hub("perplexity", "my-user/perplexity")``.
    """
    from huggingface_hub import HfApi

    api = HfApi(token=token)
    api.create_repo(repo_id, repo_type="space", space_sdk="gradio", private=private, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        folder = export_space(name, tmp, repo_id=repo_id)
        api.upload_folder(repo_id=repo_id, repo_type="space", folder_path=str(folder),
                          commit_message=f"Upload the {name} metric from hf_lmobj")
    return f"https://huggingface.co/spaces/{repo_id}"


__all__ = ["BITS_PER_BYTE_PATH", "METRIC_NAMES", "PERPLEXITY_PATH", "export_space", "load", "metric_path",
           "push_to_hub"]
