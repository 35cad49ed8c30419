"""Saver URIs and the thread copy behind ``foundry-checkpoint copy``.

A URI names a LangGraph checkpoint saver:

* ``sqlite:PATH``: a ``SqliteSaver`` (langgraph-checkpoint-sqlite) on the file ``PATH``;
* ``postgres:DSN``: a ``PostgresSaver`` (langgraph-checkpoint-postgres) on ``DSN``;
* ``foundry`` or ``foundry:PREFIX``: a :class:`~foundry_checkpoint.FoundryCheckpointer` with
  that ``store_prefix`` (default: the CLI's ``--prefix``), on the backend the environment selects;
* ``foundry-lc`` or ``foundry-lc:PREFIX`` (a source only): the stores of langchain-azure-ai's
  ``FoundryCheckpointSaver`` with that ``store_name_prefix`` (default: its own), read by
  :class:`~foundry_checkpoint.cli._lc_source.LangchainAzureSource` on the same backend and
  identity. It keeps no list of threads, so the copy names them (``--thread``).

Every saver decodes with :class:`~foundry_checkpoint.StrictSerializer`, so a source database
written by someone else cannot make the copy run code; a type outside its allow-list stops the
copy with an error naming it.

The copy reads the source's checkpoint ids with ``list()``, then, thread by thread and oldest
first, reads each checkpoint with ``get_tuple()`` and writes it with ``put()`` (parent id,
checkpoint id and every channel value kept) followed by ``put_writes()`` per task (pending
writes kept, in order). Only ids are held in memory, so a large database copies in constant
memory per checkpoint.

Example:
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

from ..errors import FoundryCheckpointError, InvalidArgumentError

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import BaseCheckpointSaver

__all__ = [
    "CheckpointRef",
    "CopyError",
    "SaverUri",
    "copy_checkpoint",
    "open_saver",
    "parse_uri",
    "plan_copy",
]

_SCHEMES = ("sqlite", "postgres", "foundry", "foundry-lc")
_OPTIONAL_TARGET = ("foundry", "foundry-lc")


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


@dataclass(frozen=True)
class CheckpointRef:
    """One checkpoint of the source, by id only."""

    thread_id: str
    checkpoint_ns: str
    checkpoint_id: str


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
    if scheme not in _SCHEMES:
        raise CopyError(
            f"unknown saver URI {uri!r}: use sqlite:PATH, postgres:DSN, foundry[:PREFIX] or "
            "foundry-lc[:PREFIX]"
        )
    if scheme not in _OPTIONAL_TARGET and not target:
        raise CopyError(f"saver URI {uri!r} needs a target after '{scheme}:'")
    return SaverUri(scheme, target)


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


def plan_copy(
    source: BaseCheckpointSaver[Any], threads: list[str] | None = None
) -> list[CheckpointRef]:
    """Every checkpoint of ``threads`` (all threads when None), each thread oldest first.

    ``list()`` returns a thread's checkpoints newest first, so each thread's run is reversed;
    threads keep the order in which ``list()`` first named them.
    """
    configs: list[RunnableConfig | None] = [None]
    if threads:
        configs = [{"configurable": {"thread_id": t}} for t in threads]
    per_thread: dict[str, list[CheckpointRef]] = {}
    for config in configs:
        for item in source.list(config):
            conf = item.config["configurable"]
            ref = CheckpointRef(
                str(conf["thread_id"]),
                str(conf.get("checkpoint_ns", "")),
                str(conf["checkpoint_id"]),
            )
            per_thread.setdefault(ref.thread_id, []).append(ref)
    out: list[CheckpointRef] = []
    for refs in per_thread.values():
        out.extend(reversed(refs))
    return out


def copy_checkpoint(
    source: BaseCheckpointSaver[Any], destination: BaseCheckpointSaver[Any], ref: CheckpointRef
) -> int:
    """Copy one checkpoint and its pending writes; returns the number of writes copied.

    Raises:
        FoundryCheckpointError: the source no longer has the checkpoint (it changed during the
            copy).
    """
    wanted: RunnableConfig = {
        "configurable": {
            "thread_id": ref.thread_id,
            "checkpoint_ns": ref.checkpoint_ns,
            "checkpoint_id": ref.checkpoint_id,
        }
    }
    found = source.get_tuple(wanted)
    if found is None:
        raise FoundryCheckpointError(
            f"checkpoint {ref.checkpoint_id!r} of thread {ref.thread_id!r} vanished from the "
            "source during the copy"
        )
    conf: dict[str, Any] = {"thread_id": ref.thread_id, "checkpoint_ns": ref.checkpoint_ns}
    parent = (found.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    if parent:
        conf["checkpoint_id"] = parent
    checkpoint = _versions_for(destination, found.checkpoint)
    new_versions = dict(checkpoint["channel_versions"])
    written = destination.put({"configurable": conf}, checkpoint, found.metadata, new_versions)
    tasks: dict[str, list[tuple[str, Any]]] = {}
    for task_id, channel, value in found.pending_writes or []:
        tasks.setdefault(task_id, []).append((channel, value))
    for task_id, writes in tasks.items():
        destination.put_writes(written, writes, task_id)
    return sum(len(w) for w in tasks.values())


def _string_version(version: Any) -> Any:
    """An integer channel version in the string form the string-versioned savers write
    (``f"{n:032}.{fraction:016}"``, ordered by ``n``); anything else unchanged.

    Example:
        >>> _string_version(3)
        '00000000000000000000000000000003.00000000000000.0'
        >>> _string_version("3.x")
        '3.x'
    """
    if isinstance(version, int) and not isinstance(version, bool):
        return f"{version:032}.{0.0:016}"
    return version


def _versions_for(destination: BaseCheckpointSaver[Any], checkpoint: Any) -> Any:
    """``checkpoint`` with integer channel versions written as strings when ``destination``
    makes string versions (FoundryCheckpointer, SqliteSaver and PostgresSaver do; savers built
    on ``BaseCheckpointSaver``'s default, langchain-azure-ai's among them, count in integers).

    LangGraph compares a checkpoint's versions with the ones the saver makes next, and a string
    never compares with an integer, so a thread copied unchanged would fail at its next step.
    The same number is kept (the next version the destination makes is one more); the form is
    fixed, so a copy run twice writes the same checkpoint.
    """
    versions = checkpoint.get("channel_versions") or {}
    if not any(isinstance(v, int) and not isinstance(v, bool) for v in versions.values()):
        return checkpoint
    if not isinstance(destination.get_next_version(None, None), str):
        return checkpoint
    return {
        **checkpoint,
        "channel_versions": {k: _string_version(v) for k, v in versions.items()},
        "versions_seen": {
            node: {k: _string_version(v) for k, v in seen.items()}
            for node, seen in (checkpoint.get("versions_seen") or {}).items()
        },
    }
