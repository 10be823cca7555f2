"""The dataset id a card's metadata gives a source: a Hub id as it is, a local path by its name, the embedded corpus.

The model-index's ``datasets``, each model-index result and each ``.eval_results`` entry name a dataset by an
id. A Hub dataset keeps its Hub id; local files and a token store are named by their own folder or file name
(the rest of the path belongs to the machine that ran, not to the data); the embedded corpus (the running
Python's standard library) is ``hf-lmobj/<name>``; an in-memory dataset is named by its name.

Example:
    >>> dataset_id("jsonl", "/home/me/data/jsonl", "local files"), dataset_id("wikitext", "Salesforce/wikitext", "hub")
    ('jsonl', 'Salesforce/wikitext')
    >>> dataset_id("python-stdlib", "the Python standard library (Lib/*.py)", "embedded corpus")
    'hf-lmobj/python-stdlib'
"""

from __future__ import annotations

from pathlib import Path, PurePath

#: What a training source is (``run.provenance["training"][i]["kind"]``).
SOURCE_KINDS = ("local files", "hub", "token store", "embedded corpus", "in-memory")
#: Kinds a source may have without a location (the name says it all).
NO_LOCATION_KINDS = ("embedded corpus", "in-memory")
#: The embedded corpora (``python-stdlib``, ``python-stdlib-functions``, ...) get ids in this namespace.
EMBEDDED_CORPUS_NAMESPACE = "hf-lmobj"


def hub_dataset_id(dataset_name: str) -> str:
    """The dataset id of a bare name: a Hub id as it is, an embedded corpus as ``hf-lmobj/<name>``.

    The embedded corpus is the standard library's source of the running Python, so its id is stable
    (``hf-lmobj/python-stdlib``) and the Python version goes into the ``.eval_results`` entry's ``notes``.

    >>> hub_dataset_id("python-stdlib"), hub_dataset_id("Salesforce/wikitext")
    ('hf-lmobj/python-stdlib', 'Salesforce/wikitext')
    """
    return f"{EMBEDDED_CORPUS_NAMESPACE}/{dataset_name}" if dataset_name.startswith("python-stdlib") else dataset_name


def _exists(location: str) -> bool:
    try:
        return Path(location).exists()
    except (OSError, ValueError):  # a name too long for a path, a NUL byte: no local path
        return False


def infer_kind(location: str) -> str:
    """The kind of a source known only by a name or location: the embedded corpus, local files or a Hub id.

    >>> infer_kind("python-stdlib"), infer_kind("/no/such/folder"), infer_kind("Salesforce/wikitext")
    ('embedded corpus', 'local files', 'hub')
    """
    if location.startswith("python-stdlib"):
        return "embedded corpus"
    return "local files" if PurePath(location).is_absolute() or _exists(location) else "hub"


def dataset_id(name: str, location: str | None, kind: str | None = None) -> str:
    """The id of the source ``name`` at ``location`` (``kind`` None: :func:`infer_kind` of the location).

    >>> dataset_id("store", "data/stdlib_store/", "token store"), dataset_id("rows", None, "in-memory")
    ('stdlib_store', 'rows')
    """
    if location is None:
        return f"{EMBEDDED_CORPUS_NAMESPACE}/{name}" if kind == "embedded corpus" and "/" not in name else name
    kind = kind or infer_kind(location)
    if kind == "hub":
        return location
    if kind == "embedded corpus":
        return name if "/" in name else f"{EMBEDDED_CORPUS_NAMESPACE}/{name}"
    if kind in ("local files", "token store"):
        own = PurePath(location).name or (Path(location).resolve().name if _exists(location) else "")
        return own or name
    return name
