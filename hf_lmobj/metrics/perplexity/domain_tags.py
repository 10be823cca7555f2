# Generated from hf_lmobj/metrics/domain_tags.py by hf_lmobj.metrics.export_space: do not edit here.
# Edit the package file, then run `python -c "import hf_lmobj.metrics as m; m.sync_space_copies()"`.
"""Domain tag paths: what a domain name may be, how it splits into levels, and a file's domain.

Contract. A domain is a tag path such as ``code/python/email`` whose ``/`` separates levels: non-empty,
unpadded tags, none of them reserved. Reserved names: no tag may be ``micro`` or ``macro``, or end with
``_ci_low`` / ``_ci_high`` (those name figures and interval bounds in the same flat keys of
:func:`.slices.domain_figures`), and a tag that has sub-domains holds no documents of its own (a macro over its
children would leave those out: :func:`_check_tree`). :func:`domain_of_path` names a file's documents by the
file's name.

Standard library only: this file ships in each Space folder beside :mod:`.slices`.

Example:
    >>> _prefixes("code/python/email"), domain_of_path("paloma/wiki.jsonl.gz")
    (['code', 'code/python', 'code/python/email'], 'wiki')
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

#: Tag names that would collide with the flat keys' own words.
RESERVED_TAGS = ("micro", "macro")
#: Key suffixes of interval bounds, which no tag may end with.
INTERVAL_SUFFIXES = ("_ci_low", "_ci_high")
#: Extensions :func:`domain_of_path` strips from a file name (data formats and compressions).
DATA_EXTENSIONS = (".jsonl", ".json", ".txt", ".csv", ".tsv", ".parquet", ".arrow", ".gz", ".bz2", ".xz", ".zst")


def _check_tag_path(domain: Any, where: str) -> str:
    """A domain tag path: a string of ``/``-separated non-empty, unpadded, unreserved tags."""
    if not isinstance(domain, str):
        raise TypeError(f"{where} must be a string (a tag path such as 'code/python'), got {domain!r}")
    if not domain:
        raise ValueError(f"{where} is an empty string; every document needs a domain (e.g. its file name)")
    for tag in domain.split("/"):
        if not tag or tag != tag.strip():
            raise ValueError(
                f"{where} is {domain!r}; its '/'-separated tags must be non-empty, without surrounding spaces"
            )
        if tag in RESERVED_TAGS or tag.endswith(INTERVAL_SUFFIXES):
            raise ValueError(
                f"{where} is {domain!r}; the tag {tag!r} is reserved (micro, macro and *_ci_low / *_ci_high name "
                "figures and intervals in the keys): rename it"
            )
    return domain


def _prefixes(domain: str) -> list[str]:
    """``code/python/email`` -> ``["code", "code/python", "code/python/email"]``."""
    tags = domain.split("/")
    return ["/".join(tags[: i + 1]) for i in range(len(tags))]


def _check_tree(domains: Iterable[str]) -> None:
    """Refuse a tag that holds documents and has sub-domains (the parent's macro would drop its documents)."""
    leaves = set(domains)
    for leaf in sorted(leaves):
        for prefix in _prefixes(leaf)[:-1]:
            if prefix in leaves:
                raise ValueError(
                    f"domain {prefix!r} holds documents and has the sub-domain {leaf!r}; tag its own documents "
                    f"with a sub-domain too (e.g. '{prefix}/other') so its macro figure counts them"
                )


def domain_of_path(path: str | os.PathLike) -> str:
    """A file's domain: its name without its data / compression extensions (``wiki.jsonl.gz`` -> ``wiki``).

    The extensions stripped are :data:`DATA_EXTENSIONS` (as many as end the name); any other dot stays
    (``en.wiki.jsonl`` -> ``en.wiki``). The result must be a valid tag (not empty, not reserved).

    Example:
        >>> domain_of_path("paloma/wiki.jsonl.gz"), domain_of_path("c4_en.json")
        ('wiki', 'c4_en')
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"path must be a file path (str or PathLike), got {path!r}")
    name = os.path.basename(os.fspath(path))
    stem = name
    while stem.lower().endswith(DATA_EXTENSIONS):
        stem = stem[: stem.rindex(".")]
    if not stem:
        raise ValueError(f"the file name of {os.fspath(path)!r} has no name before its extensions to use as a domain")
    return _check_tag_path(stem, f"the domain of {os.fspath(path)!r}")
