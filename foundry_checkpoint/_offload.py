"""When CPU work on a buffer leaves the event loop: one threshold and one helper.

Compression, hashing and base64 of large buffers run in a worker thread (zlib, hashlib and
binascii release the GIL on them), so the event loop keeps serving other store calls meanwhile.
Below :data:`OFFLOAD_BYTES` the thread hop costs more than the work, and it runs inline. The
codec and every spill store use this rule, and nothing else decides it.

Example:
    >>> import asyncio, hashlib
    >>> asyncio.run(offload(5, lambda: hashlib.sha256(b"hello").hexdigest()[:8]))
    '2cf24dba'
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Final, TypeVar

__all__ = ["OFFLOAD_BYTES", "offload"]

OFFLOAD_BYTES: Final = 256 * 1024
"""Work on a buffer of at least this many bytes runs in a worker thread."""

_T = TypeVar("_T")


async def offload(size: int, func: Callable[[], _T]) -> _T:
    """Run ``func`` (CPU work on a buffer of ``size`` bytes) inline or in a worker thread.

    Args:
        size: The size in bytes of the buffer ``func`` works on.
        func: The work, taking no arguments.

    Returns:
        What ``func`` returns.

    Example:
        >>> import asyncio
        >>> asyncio.run(offload(OFFLOAD_BYTES, lambda: "ran in a worker thread"))
        'ran in a worker thread'
    """
    if size >= OFFLOAD_BYTES:
        return await asyncio.to_thread(func)
    return func()
