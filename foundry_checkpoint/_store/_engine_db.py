"""The SQLite database under the engine: schema, connection settings and transactions.

One connection per engine, shared by every thread behind a lock; files use WAL, a generous
``busy_timeout`` and ``BEGIN IMMEDIATE`` for writes, so several processes can share one file.
:class:`EngineDatabase` is the base of :class:`~foundry_checkpoint._store._engine.StateEngine`:
it owns the connection, the clock, the deterministic ids and the :class:`CallThread` on which
async callers run its calls (a thread without an event loop, so blocking SQLite work never runs
on a loop). A file database copies its write-ahead log into the database file on a thread of
its own (:class:`WalCheckpointer`), so no write waits for that copy and its ``fsync``.

Example:
    >>> db = EngineDatabase(clock=lambda: 3.5)
    >>> with db._transaction(write=False) as conn:
    ...     conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    True
    >>> db._now(), db.closed
    (3, False)
    >>> db.close(); db.closed
    True
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import hashlib
import json
import os
import queue
import sqlite3
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, TypeVar
from urllib.parse import quote

from foundry_checkpoint.errors import FoundryCheckpointError

from ._limits import STATE_ROOT_ENV
from ._private import private_file

__all__ = [
    "CHECKPOINT_EVERY",
    "FALLBACK_AUTOCHECKPOINT",
    "SCHEMA",
    "SCHEMA_VERSION",
    "CallThread",
    "EngineDatabase",
    "WalCheckpointer",
    "open_database",
]

_T = TypeVar("_T")

_BUSY_TIMEOUT_MS: Final = 30_000
#: Write transactions between two background checkpoints of a file database (~16 WAL pages
#: each for a tagged checkpoint item: about SQLite's own 1,000-page cadence).
CHECKPOINT_EVERY: Final = 64
#: The committing connection's own ``wal_autocheckpoint`` (pages): a fallback that only runs
#: when the background checkpoints fall behind (SQLite's default is 1,000). Under sustained writes
#: the log restarts only there (a background checkpoint always has a write running past it),
#: so it bounds the log file: about 8 MB, plus what is written while a background checkpoint
#: holds the checkpoint lock when the threshold is crossed.
FALLBACK_AUTOCHECKPOINT: Final = 2_000
#: The schema version this package writes and understands (``PRAGMA user_version``).
SCHEMA_VERSION: Final = 2

_ITEM_TAGS: Final = """CREATE TABLE IF NOT EXISTS item_tags (
        store TEXT NOT NULL,
        part TEXT NOT NULL,
        tag_key TEXT NOT NULL,
        tag_value TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        id TEXT NOT NULL,
        key TEXT NOT NULL,
        PRIMARY KEY (store, part, tag_key, tag_value, created_at, id)
    ) WITHOUT ROWID"""

#: The statements that create the schema (every one idempotent).
SCHEMA: Final = (
    """CREATE TABLE IF NOT EXISTS stores (
        name TEXT PRIMARY KEY,
        id TEXT NOT NULL,
        user_isolation INTEGER NOT NULL,
        item_ttl_seconds INTEGER NOT NULL,
        description TEXT,
        tags TEXT,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL
    )""",
    """CREATE TABLE IF NOT EXISTS items (
        store TEXT NOT NULL,
        part TEXT NOT NULL,
        key TEXT NOT NULL,
        id TEXT NOT NULL,
        value TEXT NOT NULL,
        tags TEXT,
        etag TEXT NOT NULL,
        created_at INTEGER NOT NULL,
        updated_at INTEGER NOT NULL,
        expires_at INTEGER,
        PRIMARY KEY (store, part, key)
    )""",
    "CREATE UNIQUE INDEX IF NOT EXISTS items_by_id ON items (store, part, id)",
    "CREATE INDEX IF NOT EXISTS items_by_order ON items (store, part, created_at, id)",
    """CREATE INDEX IF NOT EXISTS items_by_expiry ON items (store, expires_at)
        WHERE expires_at IS NOT NULL""",
    # One row per tag of an item, stored in the order a tag filter lists (tag, value, then
    # the item's created_at and id): the table is its own index, so a write adds each tag to
    # one B-tree. An item's rows are found from its row (tags, created_at, id).
    _ITEM_TAGS,
)

#: Schema 1 kept the tag rows keyed by item and indexed them by value: two B-trees per tag.
_MIGRATIONS: Final = {
    1: (
        _ITEM_TAGS.replace("item_tags", "item_tags_2", 1),
        "INSERT INTO item_tags_2 (store, part, tag_key, tag_value, created_at, id, key)"
        " SELECT store, part, tag_key, tag_value, created_at, id, key FROM item_tags",
        "DROP TABLE item_tags",
        "ALTER TABLE item_tags_2 RENAME TO item_tags",
    ),
}


def open_database(path: Path | None) -> sqlite3.Connection:
    """Open (and create or check the schema of) the engine's database.

    Args:
        path: The database file (created 0600 in a private folder), or None for memory.

    Returns:
        An autocommit connection usable from any thread (callers serialize access). A file
        database is in WAL mode with ``synchronous = NORMAL`` and checkpoints the log itself
        only past :data:`FALLBACK_AUTOCHECKPOINT` pages: :class:`EngineDatabase` checkpoints it
        in the background well before (:class:`WalCheckpointer`).

    Raises:
        FoundryCheckpointError: The file has a newer schema than this package understands.

    Example:
        >>> conn = open_database(None)
        >>> sorted(r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'"))
        ['item_tags', 'items', 'stores']
        >>> conn.close()
    """
    target = ":memory:" if path is None else str(path)
    if path is not None:
        private_file(path)  # 0600 before SQLite opens it; -wal/-shm inherit the mode
    conn = sqlite3.connect(
        target,
        timeout=_BUSY_TIMEOUT_MS / 1000,
        isolation_level=None,
        check_same_thread=False,
    )
    try:
        conn.row_factory = sqlite3.Row
        conn.execute(f"PRAGMA busy_timeout = {_BUSY_TIMEOUT_MS}")
        if path is not None:
            _set_wal(conn)
            conn.execute(f"PRAGMA wal_autocheckpoint = {FALLBACK_AUTOCHECKPOINT}")
        conn.execute("PRAGMA synchronous = NORMAL")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version < SCHEMA_VERSION:
            conn.execute("BEGIN IMMEDIATE")
            try:
                # Another process may have upgraded the file since the version was read.
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                _upgrade(conn, version)
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        if version > SCHEMA_VERSION:
            raise FoundryCheckpointError(
                f"The state database {target} has schema version {version}, newer than "
                f"this foundry-checkpoint understands ({SCHEMA_VERSION}); upgrade the "
                f"package or point {STATE_ROOT_ENV} elsewhere."
            )
    except BaseException:
        conn.close()
        raise
    return conn


def _upgrade(conn: sqlite3.Connection, version: int) -> None:
    """Bring a database of schema ``version`` (0: empty) to :data:`SCHEMA_VERSION`, inside
    the caller's transaction; a newer schema is left alone."""
    if version >= SCHEMA_VERSION:
        return
    for step in range(version, SCHEMA_VERSION) if version else ():
        for statement in _MIGRATIONS[step]:
            conn.execute(statement)
    for statement in SCHEMA:
        conn.execute(statement)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")


def _set_wal(conn: sqlite3.Connection) -> None:
    # Switching to WAL needs a moment of exclusive access; another process opening the
    # same file at the same instant can make it report "locked" despite busy_timeout.
    for attempt in range(100):
        try:
            conn.execute("PRAGMA journal_mode = WAL").fetchone()
            return
        except sqlite3.OperationalError as exc:
            if "locked" not in str(exc) or attempt == 99:
                raise
            time.sleep(0.01)


# A call: the function, the awaiting loop and future, and whether it runs even when its
# future was cancelled before it started (a write handed over with ``submit(..., keep=True)``).
_Job = tuple[Callable[[], Any], asyncio.AbstractEventLoop, "asyncio.Future[Any]", bool]
# What the queue carries: calls, barriers (:meth:`CallThread.drain`) and None (stop).
_Item = _Job | threading.Event | None
#: How long a close, and the exit of the interpreter, wait for the calls handed to the threads.
DRAIN_SECONDS: Final = 10.0
_DRAIN_POLL: Final = 0.05  # how often a drain looks whether the thread stopped meanwhile


class CallThread:
    """One thread without an event loop that runs blocking calls in order, awaited from a loop.

    :meth:`call` hands a function to the thread and awaits its result: the function goes
    through a :class:`queue.SimpleQueue`, and its outcome comes back with one
    ``call_soon_threadsafe`` onto the awaiting loop (no ``concurrent.futures.Future`` in
    between). Calls run one at a time, in the order they were made, so a SQLite connection
    used through one ``CallThread`` is only ever used by one thread. No event loop runs in that
    thread, so its blocking calls are invisible to checkers of blocking calls on event loops
    (``langgraph dev``'s blockbuster) and never hold up a loop.

    The thread starts on the first call and again after :meth:`close` or in a forked child,
    and stops when the ``CallThread`` is closed or garbage-collected. A cancelled caller stops
    waiting at once; its call still runs if it had started (a SQLite statement cannot be
    interrupted half-way), before every later call, and never runs if it had not (as a hosted
    request that was never sent): a run cancelled at shutdown leaves no write of it behind
    that it was still waiting to start. A write handed over with ``submit(func, keep=True)``
    runs even then, as a shielded write does; the exit of the interpreter waits (at most
    :data:`DRAIN_SECONDS`) for what was handed to every thread.

    Args:
        name: The thread's name (it shows in thread dumps).

    Example:
        >>> import asyncio, threading
        >>> worker = CallThread("example")
        >>> async def where() -> tuple[str, bool]:
        ...     def probe() -> tuple[str, bool]:
        ...         try:
        ...             asyncio.get_running_loop()
        ...         except RuntimeError:
        ...             return threading.current_thread().name, False
        ...         return threading.current_thread().name, True
        ...     return await worker.call(probe)
        >>> asyncio.run(where())
        ('example', False)
        >>> worker.close(); worker.close()
    """

    def __init__(self, name: str) -> None:
        self._name = name
        self._guard = threading.Lock()
        self._queue: queue.SimpleQueue[_Item] | None = None
        self._thread: threading.Thread | None = None
        self._pid = 0

    def _jobs(self) -> queue.SimpleQueue[_Item]:
        jobs = self._queue
        if jobs is not None and self._pid == os.getpid():
            return jobs
        with self._guard:
            if self._queue is None or self._pid != os.getpid():
                fresh: queue.SimpleQueue[_Item] = queue.SimpleQueue()
                thread = threading.Thread(
                    target=_serve, args=(fresh,), name=self._name, daemon=True
                )
                thread.start()
                # An engine dropped without close() does not leave its thread behind; at the
                # exit of the interpreter the thread stays until what it holds has run
                # (``_drain_at_exit``, and the loops' flush, may still hand it calls).
                weakref.finalize(self, fresh.put, None).atexit = False
                self._queue, self._thread, self._pid = fresh, thread, os.getpid()
                _LIVE.add(self)
            return self._queue

    async def call(self, func: Callable[[], _T]) -> _T:
        """Run ``func`` on the thread and await what it returns (or raises).

        Args:
            func: The blocking work, taking no arguments.

        Returns:
            What ``func`` returned; what it raised propagates unchanged.
        """
        return await self.submit(func)

    def submit(self, func: Callable[[], _T], *, keep: bool = False) -> asyncio.Future[_T]:
        """Hand ``func`` to the thread now; the future (of the running loop) gets its outcome.

        Args:
            func: The blocking work, taking no arguments.
            keep: Run ``func`` even when the future is cancelled before it starts (a write
                its caller stopped waiting for, as with a shielded one).

        Returns:
            The future of what ``func`` returns (or raises).
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[_T] = loop.create_future()
        self._jobs().put((func, loop, future, keep))
        return future

    def drain(self, timeout: float) -> bool:
        """Wait, blocking, until every call handed to the thread so far has run.

        Args:
            timeout: At most this many seconds.

        Returns:
            False when calls were still waiting after ``timeout``; True otherwise (also when
            the thread is not running, or this is the thread itself).
        """
        with self._guard:
            jobs, thread = self._queue, self._thread
        if jobs is None or thread is None or self._pid != os.getpid():
            return True
        if thread is threading.current_thread():  # waiting for itself would never end
            return True
        done = threading.Event()
        jobs.put(done)
        deadline = time.monotonic() + timeout
        while not done.wait(min(_DRAIN_POLL, max(deadline - time.monotonic(), 0.0))):
            if not thread.is_alive():  # stopped (closed or finalized): what came before ran
                return True
            if time.monotonic() >= deadline:
                return False
        return True

    def close(self) -> None:
        """Stop the thread once the calls already handed to it ran; idempotent.

        Called from the thread itself (a call that closes its own engine), it does not wait.
        """
        with self._guard:
            jobs, thread = self._queue, self._thread
            self._queue = self._thread = None
        if jobs is None or thread is None or self._pid != os.getpid():
            return
        jobs.put(None)
        if thread is not threading.current_thread():
            thread.join()


def _serve(jobs: queue.SimpleQueue[_Item]) -> None:
    """The body of a :class:`CallThread`: run each job, send its outcome to its loop."""
    while True:
        job = jobs.get()
        if job is None:
            return
        if isinstance(job, threading.Event):  # a barrier: everything before it has run
            job.set()
            continue
        func, loop, future, keep = job
        del job
        if future.cancelled() and not keep:  # its caller went away before it started
            del func, loop, future
            continue
        try:
            result = func()
        except BaseException as exc:  # handed to the awaiting caller, whatever it is
            outcome: tuple[bool, Any] = (False, exc)
        else:
            outcome = (True, result)
        del func
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: nobody waits
            loop.call_soon_threadsafe(_settle, future, outcome)
        del future, outcome, loop


_LIVE: weakref.WeakSet[CallThread] = weakref.WeakSet()


@atexit.register
def _drain_at_exit() -> None:
    """At interpreter exit, let the calls handed to every thread run (bounded, shared).

    The threads are daemons, which die with the interpreter: a write whose caller stopped
    waiting for it (``submit(..., keep=True)``) would be lost with a call still queued.
    """
    deadline = time.monotonic() + DRAIN_SECONDS
    for worker in list(_LIVE):
        worker.drain(max(deadline - time.monotonic(), 0.0))


def _settle(future: asyncio.Future[Any], outcome: tuple[bool, Any]) -> None:
    """Pass a call's outcome to the awaiting future (on its loop), unless it was cancelled."""
    if future.cancelled():
        return
    ok, value = outcome
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


class WalCheckpointer:
    """Copies a WAL database's log into the database file on a thread of its own.

    In WAL mode a commit appends pages to the log (with ``synchronous = NORMAL`` it does not
    ``fsync``); a *checkpoint* copies them into the database file and syncs both files. SQLite
    runs that checkpoint inside the commit that crosses its threshold, so one write in ~60
    waited 5-40 ms for it (2,000 checkpoint-sized writes 0.5 ms apart: a mean of 207-241 us
    per write before, 149 us with this). Here a second connection, on its own thread, runs a
    ``PASSIVE`` checkpoint (the kind SQLite's automatic one is: it never waits for readers or
    writers) when poked (:meth:`poke`), while writes go on: what is durable, and when, does
    not change (a commit returns once its pages are in the log, as before); only who waits
    for the copy. Failures are ignored (the next poke, or the committing connection's
    fallback threshold, checkpoints again).

    The thread starts on the first poke (again in a forked child, which never touches its
    parent's connection) and :meth:`close` stops it, after the checkpoint it is running (the
    engine closes it before its own connection, and when it is garbage-collected). It opens the
    file read-write without creating it: a database removed meanwhile is not made again.

    Args:
        path: The database file (already created, in WAL mode).

    Example:
        >>> import tempfile
        >>> with tempfile.TemporaryDirectory() as tmp:
        ...     conn = open_database(Path(tmp) / "db.sqlite3")
        ...     checkpointer = WalCheckpointer(Path(tmp) / "db.sqlite3")
        ...     checkpointer.poke()
        ...     checkpointer.close(); checkpointer.close()
        ...     conn.close()
        >>> checkpointer.checkpoints >= 0
        True
    """

    def __init__(self, path: Path) -> None:
        self._path = path
        self._guard = threading.Lock()
        self._wake = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._pid = 0
        self.checkpoints = 0
        """How many checkpoints this object ran (for tests and diagnostics)."""

    def poke(self) -> None:
        """Ask for a checkpoint soon (returns at once)."""
        if self._thread is None or self._pid != os.getpid():
            with self._guard:
                if self._stop:
                    return
                if self._thread is None or self._pid != os.getpid():
                    self._wake = threading.Event()
                    thread = threading.Thread(
                        target=self._serve,
                        args=(self._wake,),
                        name="foundry-checkpoint-wal",
                        daemon=True,
                    )
                    thread.start()
                    self._thread, self._pid = thread, os.getpid()
        self._wake.set()

    def _serve(self, wake: threading.Event) -> None:
        conn: sqlite3.Connection | None = None
        try:
            while True:
                wake.wait()
                wake.clear()
                if self._stop:
                    return
                try:
                    if conn is None:
                        # mode=rw: a database that was removed is never created again here
                        conn = sqlite3.connect(
                            f"file:{quote(str(self._path))}?mode=rw",
                            timeout=_BUSY_TIMEOUT_MS / 1000,
                            isolation_level=None,
                            uri=True,
                        )
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
                    self.checkpoints += 1
                except sqlite3.Error:
                    continue  # the next poke (or the writer's fallback threshold) tries again
        finally:
            if conn is not None:
                conn.close()

    def close(self) -> None:
        """Stop the thread (after the checkpoint it is running); idempotent."""
        with self._guard:
            self._stop = True
            thread, self._thread = self._thread, None
        if thread is None or self._pid != os.getpid():
            return
        self._wake.set()
        if thread is not threading.current_thread():
            thread.join()


class EngineDatabase:
    """One SQLite connection behind a lock, the engine's clock and its deterministic ids.

    ``path=None`` keeps everything in memory. ``tie_seed`` changes the hash that orders items
    created within the same second. ``clock`` returns epoch seconds.

    Example:
        >>> db = EngineDatabase(tie_seed=1)
        >>> db._item_id("s", "u", "k") != EngineDatabase(tie_seed=2)._item_id("s", "u", "k")
        True
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        tie_seed: int = 0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._path: Path | None = None if path is None else Path(path)
        self._tie_seed = tie_seed
        self._clock = clock
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = open_database(self._path)
        self._purged: tuple[int, set[str]] = (-1, set())
        """The second of the last expiry clean-up and the stores cleaned up in it."""
        self._worker = CallThread("foundry-checkpoint-engine")
        self._checkpointer = None if self._path is None else WalCheckpointer(self._path)
        if self._checkpointer is not None:
            # An engine dropped without close() does not leave its checkpoint thread behind.
            weakref.finalize(self, self._checkpointer.close)
        self._writes = 0
        """Write transactions committed since the last background checkpoint was asked for."""

    @property
    def path(self) -> Path | None:
        """The database file, or None for an in-memory engine."""
        return self._path

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._conn is None

    @property
    def worker(self) -> CallThread:
        """The thread without an event loop on which async callers run this engine's calls
        (:class:`~foundry_checkpoint._store._embedded.EngineStore` does); it starts on first
        use and stops when the engine is closed."""
        return self._worker

    def close(self) -> None:
        """Close the database connection (after the calls handed to :attr:`worker` ran);
        calling it again does nothing."""
        self._worker.close()
        if self._checkpointer is not None:
            self._checkpointer.close()  # first: the last connection to close checkpoints
        with self._lock:
            conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    @contextmanager
    def _transaction(self, *, write: bool) -> Iterator[sqlite3.Connection]:
        with self._lock:
            conn = self._conn
            if conn is None:
                raise FoundryCheckpointError(
                    "This StateEngine is closed; create a new one (or call default_engine())."
                )
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield conn
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            conn.execute("COMMIT")
            if write and self._checkpointer is not None:
                self._writes += 1
                if self._writes >= CHECKPOINT_EVERY:
                    self._writes = 0
                    self._checkpointer.poke()

    def _now(self) -> int:
        return int(self._clock())

    def _hash(self, *parts: str) -> str:
        material = json.dumps([self._tie_seed, *parts], ensure_ascii=False)
        return hashlib.sha256(material.encode("utf-8")).hexdigest()[:24]

    def _store_id(self, name: str) -> str:
        return "ss_" + self._hash("store", name)

    def _item_id(self, store: str, part: str, key: str) -> str:
        return "it_" + self._hash("item", store, part, key)
