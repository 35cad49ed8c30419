"""Blockbuster armed the way ``langgraph dev`` arms it, for tests of blocking calls on loops.

``langgraph dev`` (langgraph-cli with the in-memory runtime) arms blockbuster when its queue
starts unless ``--allow-blocking`` is given (``langgraph_runtime_inmem.queue._enable_blockbuster``):
every blocking call it knows of (``os.mkdir``, ``os.replace``, ``os.unlink``, ``os.scandir``,
``sqlite3`` statements, ``time.sleep``, blocking sockets...) raises ``BlockingError`` when made
in **any** thread where an event loop is running, except a few it lets through: ``os.stat``,
``os.listdir``, ``os.remove``, every ``os.path`` function, buffered file reads and writes and
``threading.Lock.acquire``. :func:`langgraph_dev_blockbuster` does exactly that (the same
``BlockBuster(excluded_modules=[])``, the same exceptions and the same functions switched off),
so a saver that passes under it passes under ``langgraph dev``.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from blockbuster import BlockBuster, BlockingError
from langsmith import env as ls_env

__all__ = [
    "BlockingError",
    "awaited_on_a_loop_thread",
    "langgraph_dev_blockbuster",
    "on_a_loop_thread",
]

T = TypeVar("T")

#: What langgraph-runtime-inmem switches off after building its BlockBuster (plus every
#: ``os.path.*`` function).
_LANGGRAPH_DISABLED = (
    "os.stat",
    "os.listdir",
    "os.remove",
    "io.BufferedReader.read",
    "io.BufferedWriter.write",
    "io.TextIOWrapper.read",
    "io.TextIOWrapper.write",
    "threading.Lock.acquire",
)


@contextmanager
def langgraph_dev_blockbuster() -> Iterator[BlockBuster]:
    """Arm blockbuster as ``langgraph dev`` does; disarmed on exit (also on failure).

    Like ``langgraph dev``, it first has langsmith cache its runtime environment, which runs
    ``platform.uname()`` (a subprocess, once per process) before anything is checked.
    """
    ls_env.get_runtime_environment()
    bb = BlockBuster(excluded_modules=[])
    bb.functions["os.path.abspath"].can_block_in("inspect.py", "getmodule")
    for fn in ("os.access", "os.getcwd", "os.unlink", "os.write"):
        bb.functions[fn].can_block_in("langgraph_api/api/profile.py", "_profile_with_pyspy")
    for module, func in (
        ("memory/__init__.py", "sync"),
        ("memory/__init__.py", "load"),
        ("memory/__init__.py", "dump"),
        ("pydantic/main.py", "__init__"),
    ):
        bb.functions["os.remove"].can_block_in(module, func)
        bb.functions["os.rename"].can_block_in(module, func)
    for module, func in (
        ("uvicorn/lifespan/on.py", "startup"),
        ("uvicorn/lifespan/on.py", "shutdown"),
        ("ansitowin32.py", "write_plain_text"),
        ("logging/__init__.py", "flush"),
        ("logging/__init__.py", "emit"),
    ):
        bb.functions["io.TextIOWrapper.write"].can_block_in(module, func)
        bb.functions["io.BufferedWriter.write"].can_block_in(module, func)
    bb.functions["builtins.input"].can_block_in("bdb.py", "trace_dispatch")
    bb.functions["builtins.input"].can_block_in("pdb.py", "user_line")
    disabled = [*_LANGGRAPH_DISABLED, *(f for f in bb.functions if f.startswith("os.path."))]
    for name in disabled:
        function = bb.functions.pop(name, None)
        if function is not None:
            function.deactivate()
    bb.activate()
    try:
        yield bb
    finally:
        bb.deactivate()


def on_a_loop_thread(func: Callable[[], T]) -> T:
    """Run ``func`` in a new thread while an event loop runs there (as on a private loop);
    what it raises propagates."""

    async def inside() -> T:
        return func()

    return awaited_on_a_loop_thread(inside)


def awaited_on_a_loop_thread(func: Callable[[], Coroutine[Any, Any, T]]) -> T:
    """Await ``func()`` on a loop of its own in a new thread; what it raises propagates."""
    outcome: dict[str, Any] = {}

    def main() -> None:
        try:
            outcome["value"] = asyncio.run(func())
        except BaseException as exc:
            outcome["error"] = exc

    thread = threading.Thread(target=main)
    thread.start()
    thread.join()
    if "error" in outcome:
        raise outcome["error"]
    result: T = outcome["value"]
    return result
