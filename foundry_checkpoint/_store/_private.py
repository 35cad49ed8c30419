"""Owner-only files and folders for local state (the database, its journals, spilled blobs).

Checkpoints hold whatever an agent keeps in state, so other local users must not read them.
Folders this package creates are made ``0700`` (every missing ancestor too, not only the last)
and database files ``0600``, created with that mode *before* SQLite opens them (SQLite gives its
``-wal`` and ``-shm`` files the mode of the database file). A folder or file that already
exists with group or other permissions is left as it is, since it may be shared on purpose,
but a warning names it and the ``chmod`` that fixes it.

Example:
    >>> import tempfile, stat
    >>> from pathlib import Path
    >>> with tempfile.TemporaryDirectory() as tmp:
    ...     db = Path(tmp) / "a" / "b" / "state.sqlite3"
    ...     private_file(db)
    ...     modes = [stat.S_IMODE(p.stat().st_mode) for p in (db.parent.parent, db.parent, db)]
    >>> [oct(m) for m in modes]
    ['0o700', '0o700', '0o600']
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
from pathlib import Path
from typing import Final

__all__ = ["private_dir", "private_file"]

logger = logging.getLogger("foundry_checkpoint")

_OPEN_BITS: Final = stat.S_IRWXG | stat.S_IRWXO
_warned: set[Path] = set()  # once per path and process: blob writes check their folder often


def _warn_if_open(path: Path, fix: str) -> None:
    if path in _warned:
        return
    try:
        mode = stat.S_IMODE(path.stat().st_mode)
    except OSError:
        return
    if os.name == "posix" and mode & _OPEN_BITS:
        _warned.add(path)
        logger.warning(
            "%s is readable or writable by other local users (mode %s); checkpoints there may "
            "hold secrets. Fix: chmod %s %s",
            path,
            oct(mode),
            fix,
            path,
        )


def private_dir(path: Path) -> None:
    """Create ``path`` and its missing ancestors with mode 0700; warn if ``path`` is open.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     private_dir(Path(tmp) / "x" / "y")
        ...     print(oct((Path(tmp) / "x").stat().st_mode & 0o777))
        0o700
    """
    missing: list[Path] = []
    current = path
    while not current.exists():
        missing.append(current)
        if current.parent == current:
            break
        current = current.parent
    for folder in reversed(missing):
        with contextlib.suppress(FileExistsError):  # another process was quicker
            folder.mkdir(mode=0o700)
    if not missing:  # it existed: leave its mode, but say so when it is open
        _warn_if_open(path, "700")


def private_file(path: Path) -> None:
    """Create ``path`` (empty, mode 0600) in a private folder unless it exists; warn if open.

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     private_file(Path(tmp) / "f")
        ...     print(oct((Path(tmp) / "f").stat().st_mode & 0o777))
        0o600
    """
    private_dir(path.parent)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o600)
    except FileExistsError:
        _warn_if_open(path, "600")
        return
    os.close(fd)
