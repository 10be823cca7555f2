"""The perplexity and bits-per-byte ``evaluate`` metrics, shipped as Hub Space folders.

Each metric is a folder laid out exactly as a Space on the Hub: ``<name>.py`` (the metric script),
``README.md`` (the card; its front matter pins gradio :data:`GRADIO_SDK_VERSION`), ``app.py``
(evaluate's Gradio widget), ``requirements.txt`` (evaluate, datasets, torch, transformers) and
the core files :data:`CORE_NAMES`: ``sums.py`` (standard library alone: checks and figures), ``sums_metric.py``
(the metrics' inputs; its mixin is handed ``score_texts`` by ``.scoring``), ``scoring.py`` (torch, transformers,
tqdm: a model scores texts), ``slices.py`` (per-domain figures), ``domain_tags.py`` (what a domain tag path may be),
``uncertainty.py`` (numpy: bootstrap intervals) and ``domain_metric.py`` (``domains=`` and the bootstrap options of
``compute``). One source of truth: the cores import one another by
relative imports and nothing else of hf_lmobj; each script imports every one as a sibling (``from .sums import``
...: ``evaluate`` copies along only the files that the script itself imports), and each folder's core file is the package's with a generated header, written by :func:`export_space`
(from the package source, always) and refreshed in this tree by :func:`sync_space_copies` (a test
fails while a copy is stale). So ``evaluate.load(<folder>)`` works on the folder here, on an exported
or ``cp -r`` copy and on the pushed Space, without hf_lmobj. The face also gives ``LanguageModelingMetrics``
(:mod:`.trainer_metrics`: perplexity and bits per byte in a stock ``Trainer``'s evaluation), imported on first use.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from pathlib import Path
from typing import TYPE_CHECKING

from hf_lmobj.files import write_atomic
from hf_lmobj.lazy_faces import lazy_face

if TYPE_CHECKING:
    from hf_lmobj.metrics.trainer_metrics import LanguageModelingMetrics

METRICS_DIR = Path(__file__).resolve().parent
METRIC_NAMES = ("perplexity", "bits_per_byte")
PERPLEXITY_PATH = METRICS_DIR / "perplexity"
BITS_PER_BYTE_PATH = METRICS_DIR / "bits_per_byte"
_NOT_IN_SPACE = ("__init__.py", "__pycache__", "*.pyc")
SPACE_FILES = ("README.md", "app.py", "requirements.txt")  # besides the metric script <name>.py
#: The core files, named alike in a Space folder (each script imports every one: evaluate copies along only those).
#: Not positions.py nor byte_alignment.py: no metric script uses them, so evaluate would never fetch them.
CORE_NAMES = (
    "sums.py",
    "sums_metric.py",
    "scoring.py",
    "slices.py",
    "domain_tags.py",
    "uncertainty.py",
    "domain_metric.py",
)
CORE_SOURCES = tuple(METRICS_DIR / name for name in CORE_NAMES)  # the package's, whatever METRICS_DIR becomes

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
    """``evaluate.load`` of the local folder of metric ``name``; ``kwargs`` go to ``evaluate.load``.

    Example:
        >>> from hf_lmobj import load_metric  # this function, at the top level
        >>> round(load_metric("perplexity").compute(nll=[3.912], num_tokens=[3])["perplexity"], 2)  # exp(3.912 / 3)
        3.68
        >>> metric_path("perplexity").name  # the folder evaluate.load reads
        'perplexity'
    """
    import evaluate

    return evaluate.load(str(metric_path(name)), **kwargs)


def space_core_text(core: str) -> str:
    """The text of a Space folder's core file ``core`` (in :data:`CORE_NAMES`): a generated header, then the package's.

    Example:
        >>> space_core_text("sums.py").splitlines()[0]
        '# Generated from hf_lmobj/metrics/sums.py by hf_lmobj.metrics.export_space: do not edit here.'
    """
    if core not in CORE_NAMES:
        raise ValueError(f"unknown core file {core!r}; choose one of {CORE_NAMES}")
    header = (
        f"# Generated from hf_lmobj/metrics/{core} by hf_lmobj.metrics.export_space: do not edit here.\n"
        '# Edit the package file, then run `python -c "import hf_lmobj.metrics as m; m.sync_space_copies()"`.\n'
    )
    return header + CORE_SOURCES[CORE_NAMES.index(core)].read_text(encoding="utf-8")


def export_space(name: str, destination: str | Path) -> Path:
    """Write metric ``name`` to ``destination/<name>`` as a self-contained Space folder; return it.

    The folder holds the metric script, ``README.md``, ``app.py``, ``requirements.txt`` and the core
    files :data:`CORE_NAMES` (written from the package's, not copied from the folder) as real
    files; package files such as ``__init__.py`` and caches are left out. It runs with evaluate,
    datasets, torch and transformers alone, ready to upload. The folder is built beside its place and
    renamed into it once complete: a failed export leaves nothing at ``destination/<name>``. An existing
    ``destination/<name>`` is never overwritten (``FileExistsError``).

    Example:
        >>> import tempfile
        >>> sorted(p.name for p in export_space("perplexity", tempfile.mkdtemp()).iterdir())  # doctest: +NORMALIZE_WHITESPACE
        ['README.md', 'app.py', 'domain_metric.py', 'domain_tags.py', 'perplexity.py', 'requirements.txt', 'scoring.py',
         'slices.py', 'sums.py', 'sums_metric.py', 'uncertainty.py']
    """
    source = metric_path(name)
    missing = [f for f in (*SPACE_FILES, f"{name}.py") if not (source / f).is_file()]
    if missing:
        raise FileNotFoundError(f"metric folder {source} lacks {missing}; reinstall hf_lmobj")
    target = Path(destination) / name
    if target.exists() or target.is_symlink():
        raise FileExistsError(f"{target} exists; export_space never overwrites: pass another destination or remove it")
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{name}.{uuid.uuid4().hex[:12]}.tmp")
    tmp.mkdir()  # mode 0o777 less the umask, as target.mkdir would give
    try:
        for file in (*SPACE_FILES, f"{name}.py"):
            shutil.copyfile(source / file, tmp / file)
        for core in CORE_NAMES:
            (tmp / core).write_text(space_core_text(core), encoding="utf-8")
        tmp.rename(target)  # one rename: the folder appears complete or not at all
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)
    return target


def sync_space_copies() -> list[Path]:
    """Rewrite each metric folder's core files in this tree from the package's; return those changed.

    Run after editing a core file (:data:`CORE_NAMES`: :mod:`.sums`, :mod:`.scoring`, :mod:`.slices`, ...)
    (tests/metrics/test_spaces.py fails until then).
    """
    changed = []
    for core in CORE_NAMES:
        text = space_core_text(core)
        for name in METRIC_NAMES:
            copy = metric_path(name) / core
            if not copy.is_file() or copy.read_text(encoding="utf-8") != text:
                write_atomic(copy, text)
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
    "LanguageModelingMetrics",
    "BITS_PER_BYTE_PATH",
    "CORE_NAMES",
    "CORE_SOURCES",
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

__getattr__, __dir__ = lazy_face(__name__, __all__)
