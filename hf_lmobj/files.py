"""Files the package writes and reads back: written atomically, read with errors that name the file.

Every file the package writes (token stores' metadata, datasets for evaluation, cards, results, run
state) goes through :func:`atomic_output` or :func:`write_atomic`: the bytes go to a temporary file in
the same folder, which replaces the target by one ``os.replace`` only once it is complete, so a reader
(or a crash) never sees half a file. Files read back (``meta.json``, ``data_state.json``,
``trainer_state.json``) go through :func:`read_json`, which turns a file cut short, a wrong type or a
missing key into a ``ValueError`` that names the file, what it holds and how to fix it.

Example:
    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "meta.json"
    >>> write_atomic(path, '{"vocab_size": 512}')
    >>> read_json(path, "the token store's metadata", required=("vocab_size",))
    {'vocab_size': 512}
    >>> write_atomic(path, '{"vocab_')
    >>> read_json(path, "the token store's metadata")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: .../meta.json (the token store's metadata) is not valid JSON (cut short or corrupt: ...

Why: a run that dies while writing must leave either the old file or the new one, never a prefix that
a later run reads as the whole.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any


@contextlib.contextmanager
def atomic_output(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; on success it replaces ``path``, on error it is removed.

    Example:
        >>> import tempfile
        >>> target = Path(tempfile.mkdtemp()) / "test.jsonl"
        >>> with atomic_output(target) as tmp:
        ...     _ = tmp.write_text('{"text": "a"}\\n')
        >>> target.read_text()
        '{"text": "a"}\\n'
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.{secrets.token_hex(6)}.tmp"
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))  # the umask applies, as for open()
    try:
        yield tmp
        os.replace(tmp, target)
    finally:
        if tmp.exists():
            tmp.unlink()


def write_atomic(path: str | os.PathLike, data: str | bytes, encoding: str = "utf-8") -> None:
    """Write ``data`` (text or bytes) to ``path`` atomically; text that cannot be encoded is refused first.

    Example:
        >>> import tempfile
        >>> write_atomic(Path(tempfile.mkdtemp()) / "a.txt", "\\ud800")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: .../a.txt: the text cannot be written as utf-8 (a lone surrogate ...
    """
    if isinstance(data, str):
        try:
            data = data.encode(encoding)
        except UnicodeEncodeError as error:
            raise ValueError(
                f"{path}: the text cannot be written as {encoding} (a lone surrogate or an unencodable character "
                f"at position {error.start}: {data[error.start : error.end]!r}); clean the text first"
            ) from None
    elif not isinstance(data, bytes):
        raise TypeError(f"data must be str or bytes, got {type(data).__name__}")
    with atomic_output(path) as tmp:
        tmp.write_bytes(data)


def read_json(
    path: str | os.PathLike, what: str, required: Sequence[str] = (), fix: str = "", kind: type = dict
) -> Any:
    """Read a JSON file; a missing, cut-short or wrong-shaped file is a ``ValueError`` naming it and the fix.

    ``what`` says what the file holds; ``required`` are keys a ``dict`` must have; ``kind`` is the
    type of the top-level value.

    Example:
        >>> import tempfile
        >>> path = Path(tempfile.mkdtemp()) / "data_state.json"
        >>> write_atomic(path, '{"ranks": []}')
        >>> read_json(path, "the data position", required=("fingerprint", "ranks"), fix="resume from another checkpoint")
        Traceback (most recent call last):
        ...
        ValueError: ... (the data position) has no 'fingerprint'; resume from another checkpoint
    """
    path = Path(path)
    tail = f"; {fix}" if fix else ""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ValueError(f"{path} ({what}) is missing{tail}") from None
    except UnicodeDecodeError as error:
        raise ValueError(f"{path} ({what}) is not UTF-8 text (byte {error.start}){tail}") from None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise ValueError(f"{path} ({what}) is not valid JSON (cut short or corrupt: {error.msg} at line "
                         f"{error.lineno}, column {error.colno}){tail}") from None  # fmt: skip
    if not isinstance(value, kind):
        raise ValueError(f"{path} ({what}) holds a {type(value).__name__}, expected a JSON "
                         f"{'object' if kind is dict else kind.__name__}{tail}")  # fmt: skip
    missing = [key for key in required if key not in value]
    if missing:
        names = ", ".join(repr(key) for key in missing)
        raise ValueError(f"{path} ({what}) has no {names}{tail}")
    return value


def read_json_line(line: bytes, where: str, fix: str) -> Any:
    """One line of a JSON-lines file (its raw bytes) decoded, or a ``ValueError`` naming ``where`` (the file and
    line) and ``fix``: not UTF-8 (the byte), not valid JSON (cut short or corrupt).

    Example:
        >>> read_json_line(b'{"text": "a"}\\n', "held_out.jsonl:1", "rewrite it")
        {'text': 'a'}
        >>> read_json_line(b'{"text": "a', "held_out.jsonl:2", "rewrite it")
        Traceback (most recent call last):
        ...
        ValueError: held_out.jsonl:2 is not valid JSON (cut short or corrupt: Unterminated string starting at); rewrite it
    """
    try:
        return json.loads(line.decode("utf-8"))
    except UnicodeDecodeError as error:
        raise ValueError(f"{where} is not UTF-8 text (byte {error.start} of the line); {fix}") from None
    except json.JSONDecodeError as error:
        raise ValueError(f"{where} is not valid JSON (cut short or corrupt: {error.msg}); {fix}") from None
