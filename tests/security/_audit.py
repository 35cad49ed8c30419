"""An audit hook that records what a decoder must never do: import, execute, spawn, write.

Audit hooks cannot be removed, so one hook is installed per process, and it records only while
a :func:`watching` block is open (in the thread that opened it).
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

_state = threading.local()
_installed = False

# events that mean code ran or the file system changed (``open`` counts only for writing)
_EXACT = frozenset({"exec", "compile", "import", "ctypes.dlopen", "pickle.find_class"})
_PREFIXES = ("os.", "subprocess.", "shutil.", "posix.", "_posixsubprocess.")
# os.* events that only read
_READ_ONLY = frozenset({"os.listdir", "os.scandir", "os.walk", "os.getxattr", "os.listxattr"})


def _hook(event: str, args: tuple[Any, ...]) -> None:
    seen: list[tuple[str, str]] | None = getattr(_state, "seen", None)
    if seen is None:
        return
    if event == "open":
        mode = args[1] if len(args) > 1 else "r"
        flags = args[2] if len(args) > 2 else 0
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & 0o3
        )
        if writes:
            seen.append((event, repr(args[:2])))
    elif event in _EXACT or (event.startswith(_PREFIXES) and event not in _READ_ONLY):
        seen.append((event, repr(args)[:200]))


@contextmanager
def watching() -> Iterator[list[tuple[str, str]]]:
    """Record the forbidden events of this thread while the block runs (the list it yields).

    Example::

        with watching() as seen:
            decode(...)
        assert not seen
    """
    global _installed
    if not _installed:
        sys.addaudithook(_hook)
        _installed = True
    seen: list[tuple[str, str]] = []
    _state.seen = seen
    try:
        yield seen
    finally:
        _state.seen = None
