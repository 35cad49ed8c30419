"""Factories for the LangGraph server: ``langgraph.json`` names our saver and our store.

``langgraph dev`` (and the images ``langgraph build`` makes) read ``langgraph.json``, whose
``"checkpointer"`` and ``"store"`` sections name a saver or a store, or a function or an async
context manager yielding one. :func:`checkpointer` and :func:`store` are such context managers:
they yield a :class:`~foundry_checkpoint.FoundryCheckpointer` and a
:class:`~foundry_checkpoint.FoundryStore` configured as their defaults are (the environment
decides: the embedded local store under ``AGENTSERVER_STATE_ROOT``, or the hosted service when
``FOUNDRY_HOSTING_ENVIRONMENT`` is set) and close them when the server stops::

    {
      "dependencies": ["."],
      "graphs": {"agent": "./agent.py:graph"},
      "checkpointer": {"path": "foundry_checkpoint.langgraph_server.checkpointer"},
      "store": {"path": "foundry_checkpoint.langgraph_server.store"}
    }

**The path form.** The server (langgraph-api 0.16) loads a path with a ``/`` or ``.py:`` in it
as a file (``"./agent.py:checkpointer"``) and any other path as a module and a name split at the
last dot: ``"foundry_checkpoint.langgraph_server.checkpointer"``. The form with a colon after a
module (``"foundry_checkpoint.langgraph_server:checkpointer"``) does not load (the server looks
up ``"langgraph_server:checkpointer"`` in ``foundry_checkpoint``). A project's own file may
re-export them instead (``from foundry_checkpoint.langgraph_server import checkpointer, store``
and ``"./agent.py:checkpointer"``).

**The store section's options.** The server passes a custom store nothing, but it puts the
``"store"`` section of ``langgraph.json`` into the ``LANGGRAPH_STORE`` environment variable (as
JSON), so :func:`store` honours what LangGraph's own store would: ``"ttl"`` (a ``TTLConfig``:
``default_ttl``, ``refresh_on_read``, ``sweep_interval_minutes``; the server runs no sweeper
for a custom store, so :func:`store` starts ours when an interval is set and stops it on exit)
and ``"index"`` (an ``IndexConfig``: ``dims``, ``embed``, ``fields``; an ``embed`` of the form
``"./file.py:name"`` is loaded from that file, relative to the server's working directory, and
any other string is a LangChain provider string such as ``"openai:text-embedding-3-small"``).
Other options (``store_prefix``, ``spill``...): write a factory of your own that passes them,
as the last example shows.

Both factories never block the server's loop: all store I/O runs on the objects' private loop,
and local mode's SQLite and file work in threads where no loop runs, so ``langgraph dev`` serves
them without ``--allow-blocking``.

Example:
    >>> import asyncio
    >>> async def main():
    ...     async with checkpointer() as saver, store() as memory:
    ...         await memory.aput(("users", "alice"), "diet", {"likes": "tea"})
    ...         item = await memory.aget(("users", "alice"), "diet")
    ...         return type(saver).__name__, type(memory).__name__, item.value
    >>> asyncio.run(main())
    ('FoundryCheckpointer', 'FoundryStore', {'likes': 'tea'})

    A factory of your own, for options the environment does not give (name it in
    ``langgraph.json`` as ``"./memory.py:team_store"``):

    >>> from contextlib import asynccontextmanager
    >>> @asynccontextmanager
    ... async def team_store():
    ...     async with store(store_prefix="team-memory") as memory:
    ...         yield memory
    >>> async def team():
    ...     async with team_store() as memory:
    ...         return repr(memory).startswith("FoundryStore(")
    >>> asyncio.run(team())
    True
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib.util
import json
import os
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from ._langgraph._saver import FoundryCheckpointer
from ._memory import FoundryStore
from .errors import InvalidArgumentError

__all__ = ["STORE_CONFIG_ENV", "checkpointer", "store", "store_options"]

#: The environment variable the LangGraph server fills with ``langgraph.json``'s ``"store"``
#: section (JSON), read by :func:`store_options`.
STORE_CONFIG_ENV = "LANGGRAPH_STORE"


@asynccontextmanager
async def checkpointer(**options: Any) -> AsyncIterator[FoundryCheckpointer]:
    """A :class:`~foundry_checkpoint.FoundryCheckpointer` for the server, closed on exit.

    Name it in ``langgraph.json`` as
    ``"checkpointer": {"path": "foundry_checkpoint.langgraph_server.checkpointer"}``. The server
    calls it without arguments (the saver's defaults: the environment picks local or hosted
    mode); a factory of your own may pass ``options``, the saver's keyword arguments.

    Args:
        **options: keyword arguments of ``FoundryCheckpointer`` (none: its defaults).

    Yields:
        The saver; ``aclose()`` runs when the server stops (or the block exits).

    Example:
        >>> import asyncio
        >>> async def main():
        ...     async with checkpointer(store_prefix="server") as saver:
        ...         return repr(saver).endswith("store_prefix='server')")
        >>> asyncio.run(main())
        True
    """
    saver = FoundryCheckpointer(**options)
    try:
        yield saver
    finally:
        await saver.aclose()


@asynccontextmanager
async def store(**options: Any) -> AsyncIterator[FoundryStore]:
    """A :class:`~foundry_checkpoint.FoundryStore` for the server, closed on exit.

    Name it in ``langgraph.json`` as
    ``"store": {"path": "foundry_checkpoint.langgraph_server.store"}``. The store takes its
    ``ttl`` and ``index`` from that section (see :func:`store_options`); ``options`` (a factory
    of your own) win over them. When the TTL config sets ``sweep_interval_minutes``, the sweeper
    runs while the block does (the server runs none for a custom store).

    Args:
        **options: keyword arguments of ``FoundryStore``, over those of :func:`store_options`.

    Yields:
        The store; ``aclose()`` (which stops the sweeper) runs when the server stops.

    Example:
        >>> import asyncio, json, os
        >>> os.environ["LANGGRAPH_STORE"] = json.dumps({"ttl": {"default_ttl": 60}})
        >>> async def main():
        ...     async with store() as memory:
        ...         await memory.aput(("notes",), "n-1", {"text": "hi"})
        ...         return memory.ttl_config, (await memory.aget(("notes",), "n-1")).value
        >>> asyncio.run(main())
        ({'default_ttl': 60}, {'text': 'hi'})
        >>> del os.environ["LANGGRAPH_STORE"]
    """
    found = await asyncio.to_thread(store_options)  # an embed file is imported: no loop
    memory = FoundryStore(**{**found, **options})
    try:
        if (memory.ttl_config or {}).get("sweep_interval_minutes"):
            await asyncio.to_thread(memory.start_ttl_sweeper)
        yield memory
    finally:
        await memory.aclose()  # stops the sweeper too


def store_options(environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The ``FoundryStore`` options that ``langgraph.json``'s ``"store"`` section gives.

    The server passes that section to the process as JSON in ``LANGGRAPH_STORE``
    (:data:`STORE_CONFIG_ENV`). Its ``"ttl"`` becomes ``ttl=`` and its ``"index"``
    ``index=``; ``"path"`` is the factory itself and anything else is not an option of ours.
    An ``embed`` naming a file (``"./embeddings.py:embed"``, relative to the working directory)
    is loaded from it; a provider string is left to LangGraph's ``ensure_embeddings``.

    Args:
        environ: the environment to read (default ``os.environ``).

    Returns:
        ``{"ttl": ..., "index": ...}``, each only when the section has it; ``{}`` without one.

    Raises:
        InvalidArgumentError: the variable is not a JSON object, ``ttl`` or ``index`` not an
            object, or an ``embed`` file or name cannot be found.

    Example:
        >>> section = {"path": "foundry_checkpoint.langgraph_server.store",
        ...            "ttl": {"default_ttl": 10, "refresh_on_read": True}}
        >>> store_options({"LANGGRAPH_STORE": json.dumps(section)})
        {'ttl': {'default_ttl': 10, 'refresh_on_read': True}}
        >>> store_options({})
        {}
    """
    raw = (os.environ if environ is None else environ).get(STORE_CONFIG_ENV, "").strip()
    if not raw:
        return {}
    try:
        section = json.loads(raw)
    except ValueError:
        section = None
    if not isinstance(section, dict):
        raise InvalidArgumentError(
            f'{STORE_CONFIG_ENV} must hold langgraph.json\'s "store" section as a JSON '
            f"object, got {raw[:80]!r}: fix the section (or unset the variable)."
        )
    options: dict[str, Any] = {}
    for name in ("ttl", "index"):
        value = section.get(name)
        if value is None:
            continue
        if not isinstance(value, dict):
            raise InvalidArgumentError(
                f'langgraph.json\'s "store" section: "{name}" must be an object, got {value!r}.'
            )
        options[name] = dict(value)
    if "index" in options:
        embed = options["index"].get("embed")
        if isinstance(embed, str) and ".py:" in embed:
            options["index"]["embed"] = _load_from_file(embed)
    return options


def _load_from_file(spec: str) -> Any:
    """The object ``"./file.py:name"`` names (the file relative to the working directory)."""
    file_name, _, attribute = spec.rpartition(":")
    path = Path(file_name)
    if not path.is_file():
        raise InvalidArgumentError(
            f'langgraph.json\'s "store" section: the embed file {file_name!r} does not exist '
            f'(relative to {Path.cwd()}): fix the path in "index"."embed".'
        )
    digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    name = f"_foundry_checkpoint_embed_{digest}"
    module = sys.modules.get(name)
    if module is None:
        loader_spec = importlib.util.spec_from_file_location(name, path)
        if loader_spec is None or loader_spec.loader is None:
            raise InvalidArgumentError(f"cannot load {file_name!r} as a Python file.")
        module = importlib.util.module_from_spec(loader_spec)
        sys.modules[name] = module
        loader_spec.loader.exec_module(module)
    try:
        return getattr(module, attribute)
    except AttributeError:
        raise InvalidArgumentError(
            f'langgraph.json\'s "store" section: {file_name!r} has no {attribute!r}: fix '
            f'"index"."embed".'
        ) from None
