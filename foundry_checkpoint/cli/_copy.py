"""Saver and store URIs and the copies behind ``foundry-checkpoint copy``.

A URI names a LangGraph checkpoint saver:

* ``sqlite:PATH``: a ``SqliteSaver`` (langgraph-checkpoint-sqlite) on the file ``PATH``;
* ``postgres:DSN``: a ``PostgresSaver`` (langgraph-checkpoint-postgres) on ``DSN``;
* ``foundry`` or ``foundry:PREFIX``: a :class:`~foundry_checkpoint.FoundryCheckpointer` with
  that ``store_prefix`` (default: the CLI's ``--prefix``), on the backend the environment selects;
* ``foundry-lc`` or ``foundry-lc:PREFIX`` (a source only): the stores of langchain-azure-ai's
  ``FoundryCheckpointSaver`` with that ``store_name_prefix`` (default: its own), read by
  :class:`~foundry_checkpoint.migrate.LangchainAzureSource` on the same backend and
  identity. It keeps no list of threads, so the copy names them (``--thread``).

Every saver decodes with :class:`~foundry_checkpoint.StrictSerializer`, so a source database
written by someone else cannot make the copy run code; a type outside its allow-list stops the
copy with an error naming it.

The copy reads the source's checkpoint ids with ``list()``, then, thread by thread and oldest
first, reads each checkpoint with ``get_tuple()`` and writes it with ``put()`` (parent id,
checkpoint id and every channel value kept) followed by ``put_writes()`` per task (pending
writes kept, in order). Only ids are held in memory, so a large database copies in constant
memory per checkpoint (:func:`foundry_checkpoint.migrate.plan_copy` and
:func:`~foundry_checkpoint.migrate.copy_checkpoint`).

With ``--store`` the URIs name LangGraph long-term memory stores (``BaseStore``) instead, and
the copy is :func:`foundry_checkpoint.migrate.copy_store`:

* ``sqlite:PATH``: a ``SqliteStore`` on the file ``PATH``;
* ``postgres:DSN``: a ``PostgresStore`` on ``DSN``;
* ``foundry-store`` or ``foundry-store:PREFIX``: a :class:`~foundry_checkpoint.FoundryStore`
  with that ``store_prefix`` (default: the CLI's ``--prefix``, else ``langgraph-store``).

Example:
    >>> parse_store_uri("foundry-store")
    SaverUri(scheme='foundry-store', target='')
    >>> parse_uri("sqlite:old.db")
    SaverUri(scheme='sqlite', target='old.db')
    >>> parse_uri("foundry")
    SaverUri(scheme='foundry', target='')
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..errors import InvalidArgumentError

if TYPE_CHECKING:
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.store.base import BaseStore

__all__ = [
    "CopyError",
    "SaverUri",
    "open_saver",
    "open_store",
    "parse_store_uri",
    "parse_uri",
]

_SCHEMES = ("sqlite", "postgres", "foundry", "foundry-lc")
_OPTIONAL_TARGET = ("foundry", "foundry-lc", "foundry-store")
_STORE_SCHEMES = ("sqlite", "postgres", "foundry-store")


class CopyError(InvalidArgumentError):
    """A ``--from`` or ``--to`` saver URI cannot be used: bad form, missing file, missing package.

    An :class:`~foundry_checkpoint.errors.InvalidArgumentError` (and so a ``ValueError``):
    raised before anything is copied.

    Example:
        >>> issubclass(CopyError, ValueError)
        True
    """


@dataclass(frozen=True)
class SaverUri:
    """A parsed saver URI: ``scheme`` is ``sqlite``, ``postgres``, ``foundry`` or ``foundry-lc``."""

    scheme: str
    target: str


def parse_uri(uri: str) -> SaverUri:
    """Split ``scheme:target``.

    Raises:
        CopyError: an unknown scheme, or an empty target (an ``InvalidArgumentError``).

    Example:
        >>> parse_uri("postgres:postgresql://u@db/app").target
        'postgresql://u@db/app'
        >>> parse_uri("foundry-lc")
        SaverUri(scheme='foundry-lc', target='')
    """
    scheme, _, target = uri.partition(":")
    if scheme == "foundry-store":
        raise CopyError(f"{uri!r} names a memory store (FoundryStore): copy stores with --store")
    if scheme not in _SCHEMES:
        raise CopyError(
            f"unknown saver URI {uri!r}: use sqlite:PATH, postgres:DSN, foundry[:PREFIX] or "
            "foundry-lc[:PREFIX]"
        )
    if scheme not in _OPTIONAL_TARGET and not target:
        raise CopyError(f"saver URI {uri!r} needs a target after '{scheme}:'")
    return SaverUri(scheme, target)


def parse_store_uri(uri: str) -> SaverUri:
    """Split a ``--store`` URI: ``sqlite:PATH``, ``postgres:DSN`` or ``foundry-store[:PREFIX]``.

    Raises:
        CopyError: an unknown scheme (``foundry`` names a checkpointer: the hint says
            ``foundry-store``), or an empty target (an ``InvalidArgumentError``).

    Example:
        >>> parse_store_uri("foundry-store:memories").target
        'memories'
        >>> parse_store_uri("foundry")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        foundry_checkpoint.cli._copy.CopyError: unknown store URI 'foundry': with --store, ...
    """
    scheme, _, target = uri.partition(":")
    if scheme not in _STORE_SCHEMES:
        raise CopyError(
            f"unknown store URI {uri!r}: with --store, use sqlite:PATH, postgres:DSN or "
            "foundry-store[:PREFIX] (a FoundryStore)"
        )
    if scheme not in _OPTIONAL_TARGET and not target:
        raise CopyError(f"store URI {uri!r} needs a target after '{scheme}:'")
    return SaverUri(scheme, target)


@contextlib.contextmanager
def open_store(
    uri: SaverUri, *, role: str, foundry: Callable[[str | None], BaseStore]
) -> Iterator[BaseStore]:
    """Open the store ``uri`` names (from :func:`parse_store_uri`); ``role`` is ``"source"``
    or ``"destination"``.

    A SQLite source must exist; a SQLite or Postgres store gets its tables created
    (``setup()``, which a source needs too: it migrates an older schema). ``foundry`` builds
    the ``FoundryStore`` from the prefix (None: the CLI's default).

    Raises:
        CopyError: a SQLite source that does not exist, or the store's package is missing.
    """
    if uri.scheme == "foundry-store":
        store = foundry(uri.target or None)
        try:
            yield store
        finally:
            close = getattr(store, "close", None)
            if callable(close):
                close()
        return
    if uri.scheme == "sqlite":
        try:
            from langgraph.store.sqlite import SqliteStore
        except ImportError as exc:
            raise CopyError(
                "sqlite: URIs need langgraph-checkpoint-sqlite: "
                "pip install langgraph-checkpoint-sqlite"
            ) from exc
        if role == "source" and not os.path.isfile(uri.target):
            raise CopyError(f"source database {uri.target!r} does not exist")
        if role == "destination":
            _create_private(uri.target)
        with SqliteStore.from_conn_string(uri.target) as sqlite_store:
            sqlite_store.setup()
            yield sqlite_store
        return
    try:
        from langgraph.store.postgres import PostgresStore
    except ImportError as exc:
        raise CopyError(
            "postgres: URIs need langgraph-checkpoint-postgres: "
            "pip install 'langgraph-checkpoint-postgres' 'psycopg[binary]'"
        ) from exc
    with PostgresStore.from_conn_string(uri.target) as pg_store:
        pg_store.setup()
        yield pg_store


@contextlib.contextmanager
def open_saver(
    uri: SaverUri,
    *,
    role: str,
    foundry: Callable[[str | None], BaseCheckpointSaver[Any]],
    foundry_lc: Callable[[str | None], BaseCheckpointSaver[Any]] | None = None,
) -> Iterator[BaseCheckpointSaver[Any]]:
    """Open the saver ``uri`` names; ``role`` is ``"source"`` or ``"destination"``.

    A SQLite source must exist (a missing file would silently be an empty database); a SQLite or
    Postgres destination gets its tables created (``setup()``). ``foundry`` builds the
    Foundry saver from the prefix (None: the CLI's default); ``foundry_lc`` the reader of
    langchain-azure-ai's layout (None: its default prefix).

    Raises:
        CopyError: a SQLite source that does not exist, ``foundry-lc`` as a destination, or the
            saver's package is missing.
    """
    if uri.scheme == "foundry-lc":
        if role != "source" or foundry_lc is None:
            raise CopyError(
                "foundry-lc: reads langchain-azure-ai's FoundryCheckpointSaver stores and is a "
                "source only: use it with --from"
            )
        uri = SaverUri("foundry", uri.target)
        foundry = foundry_lc
    if uri.scheme == "foundry":
        saver = foundry(uri.target or None)
        try:
            yield saver
        finally:
            close = getattr(saver, "close", None)
            if callable(close):
                close()
        return
    from .._serde import StrictSerializer  # needs LangGraph, as every non-Foundry saver does

    if uri.scheme == "sqlite":
        try:
            import sqlite3

            from langgraph.checkpoint.sqlite import SqliteSaver
        except ImportError as exc:
            raise CopyError(
                "sqlite: URIs need langgraph-checkpoint-sqlite: "
                "pip install langgraph-checkpoint-sqlite"
            ) from exc
        if role == "source" and not os.path.isfile(uri.target):
            raise CopyError(f"source database {uri.target!r} does not exist")
        if role == "destination":
            _create_private(uri.target)
        conn = sqlite3.connect(uri.target, check_same_thread=False)
        try:
            sqlite_saver = SqliteSaver(conn, serde=StrictSerializer())
            sqlite_saver.setup()
            yield sqlite_saver
        finally:
            conn.close()
        return
    try:
        from langgraph.checkpoint.postgres import PostgresSaver
    except ImportError as exc:
        raise CopyError(
            "postgres: URIs need langgraph-checkpoint-postgres: "
            "pip install 'langgraph-checkpoint-postgres' 'psycopg[binary]'"
        ) from exc
    with PostgresSaver.from_conn_string(uri.target) as pg_saver:
        pg_saver.serde = StrictSerializer()  # a tampered source database never runs code
        pg_saver.setup()
        yield pg_saver


def _create_private(path: str) -> None:
    """Create the SQLite destination ``path`` empty with mode 0600 (whatever the umask) unless
    it exists: the copy holds every checkpoint, so other local users must not read it, and
    SQLite gives its journal files the database file's mode. An existing file keeps its mode."""
    if path == ":memory:":
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0), 0o600)
    except FileExistsError:
        return
    except OSError as exc:
        raise CopyError(f"cannot create destination database {path!r}: {exc.strerror}") from exc
    os.close(fd)
