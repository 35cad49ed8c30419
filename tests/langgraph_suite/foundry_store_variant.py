"""A pytest plugin that runs LangGraph's own store tests on ``FoundryStore`` too.

Loaded with ``-p foundry_store_variant`` into the test trees of the sdists
``tests/langgraph_suite/run.py store`` (``make test-langgraph-store-suite``) downloads:

* ``langgraph-checkpoint``: ``tests/test_store.py`` builds ``InMemoryStore(...)``;
* ``langgraph-checkpoint-sqlite``: ``tests/test_store.py``, ``test_async_store.py``,
  ``test_ttl.py`` build ``SqliteStore``/``AsyncSqliteStore.from_conn_string(...)``;
* ``langgraph-checkpoint-postgres``: ``tests/test_store.py``, ``test_async_store.py`` build
  ``PostgresStore``/``AsyncPostgresStore.from_conn_string(...)`` after creating a database;
* ``langgraph``: the graph tests that take the ``sync_store``/``async_store`` fixtures.

Each test of a store module runs once per variant in ``LG_STORE_VARIANTS`` (default
``original,foundry``): ``original`` is the test as published, ``foundry`` rebinds the module's
store class names (``InMemoryStore``, ``SqliteStore``, ...) to constructors of
``FoundryStore`` with the same ``index=``/``ttl=`` options, local mode, in a fresh state root
per test (SqliteStore's ``text_fields`` index option is LangGraph's ``fields``);
``foundry-hosted`` does the same against an in-process emulator. A store class's
constructor or ``from_conn_string`` gives a new empty store for ``:memory:`` and the same store
again for the same file path (as the databases would). ``setup()`` (migrations) has nothing to do
on ``FoundryStore``: the rebound classes add it; the async classes' TTL sweep methods are awaited
(``await store.sweep_ttl()``), so theirs return awaitable results. The Postgres modules'
database administration (``Connection.connect(...).execute("CREATE DATABASE ...")``, the
conftest's table clean-up, the async fixture's ``DROP TABLE store_migrations``) is skipped
under ``foundry``, and their sync vector-store helper builds a ``FoundryStore`` with the same
embedding, fields and TTL; their ``original`` variant needs a PostgreSQL server at the address
their conftest names and is left out unless ``LG_STORE_POSTGRES=1``. In the
``langgraph`` tree, ``sync_store``/``async_store`` get the ``foundry`` variants beside
``in_memory`` and only the tests that take them are kept.

Every test gets the JUnit properties ``store`` (the variant) and ``case`` (the same test in the
other variants) for the runner's counts.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib
import inspect
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator, Generator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, ClassVar

import pytest

from foundry_checkpoint import FoundryStore

VARIANTS = [
    v for v in os.environ.get("LG_STORE_VARIANTS", "original,foundry").split(",") if v.strip()
]
OURS = [v for v in VARIANTS if v.startswith("foundry")]
#: The table of tests skipped or deviating on ``FoundryStore`` (``store_deviations.py``).
_deviations: Any = importlib.import_module("store_deviations")
#: The distribution whose tests run (set by the runner).
TREE = os.environ.get("LG_STORE_TREE", "")
#: Test modules whose store class names are rebound, by file name.
STORE_MODULES = ("test_store.py", "test_async_store.py", "test_ttl.py")
_made: list[FoundryStore] = []
_emulator: Any = None


def _hosted_kwargs() -> dict[str, Any]:
    """Client options for the in-process emulator (started once, on first use)."""
    global _emulator
    if _emulator is None:
        from foundry_checkpoint.emulator import FoundryEmulator

        _emulator = FoundryEmulator(seed=0)
        _emulator.start()
        atexit.register(_emulator.stop)
    os.environ["FOUNDRY_HOSTING_ENVIRONMENT"] = "emulator"
    os.environ["FOUNDRY_PROJECT_ENDPOINT"] = _emulator.endpoint
    return {
        "credential": _emulator.credential(user="suite"),
        "endpoint": _emulator.endpoint,
        "connection_verify": _emulator.ca_file,
    }


class _Current:
    """The variant and state root of the running test."""

    variant = "original"
    run_id = ""


def _prefix(conn: object) -> str:
    """A new store for ``:memory:``, the same store for the same path (in one test)."""
    if not isinstance(conn, str) or conn == ":memory:" or not conn:
        return f"lgs{uuid.uuid4().hex[:12]}"
    return f"lgs{hashlib.sha256((_Current.run_id + conn).encode()).hexdigest()[:12]}"


def _options(conn: object, kwargs: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"store_prefix": _prefix(conn)}
    for name in ("index", "ttl"):
        if kwargs.get(name) is not None:
            out[name] = dict(kwargs[name])
    index = out.get("index")
    if index is not None and "fields" not in index and index.get("text_fields"):
        index["fields"] = index["text_fields"]  # SqliteIndexConfig's name for LangGraph's fields
    if _Current.variant == "foundry-hosted":
        out.update(_hosted_kwargs())
    return out


class SuiteStore(FoundryStore):
    """``FoundryStore`` under a store class's name: ``setup()`` has nothing to migrate."""

    MIGRATIONS: ClassVar[list[str]] = []

    def __init__(self, conn: object = None, **kwargs: Any) -> None:
        super().__init__(**_options(conn, kwargs))
        _made.append(self)

    def setup(self) -> None:
        """Nothing to set up (the store needs no schema)."""

    @classmethod
    @contextmanager
    def from_conn_string(cls, conn: str, **kwargs: Any) -> Iterator[SuiteStore]:
        """A store for ``conn`` (options other than ``index``/``ttl`` do not apply)."""
        with cls(conn, **kwargs) as store:
            yield store


class AsyncSuiteStore(FoundryStore):
    """``FoundryStore`` under an async store class's name, whose TTL sweep methods are
    awaited (``await store.sweep_ttl()``, ``await store.start_ttl_sweeper()``)."""

    MIGRATIONS: ClassVar[list[str]] = []

    def __init__(self, conn: object = None, **kwargs: Any) -> None:
        super().__init__(**_options(conn, kwargs))
        _made.append(self)

    async def setup(self) -> None:
        """Nothing to set up (the store needs no schema)."""

    @classmethod
    @asynccontextmanager
    async def from_conn_string(cls, conn: str, **kwargs: Any) -> AsyncIterator[AsyncSuiteStore]:
        """A store for ``conn`` (options other than ``index``/``ttl`` do not apply)."""
        store = cls(conn, **kwargs)
        try:
            yield store
        finally:
            await store.aclose()

    def sweep_ttl(self) -> Any:
        """``FoundryStore.sweep_ttl``; its result also awaitable."""
        return _Ready(super().sweep_ttl())

    def start_ttl_sweeper(self, sweep_interval_minutes: int | None = None) -> Any:
        """``FoundryStore.start_ttl_sweeper``; its result also awaitable."""
        return _Ready(super().start_ttl_sweeper(sweep_interval_minutes))

    def stop_ttl_sweeper(self, timeout: float | None = None) -> Any:
        """``FoundryStore.stop_ttl_sweeper``; its result also awaitable."""
        return _Ready(super().stop_ttl_sweeper(timeout))

    @asynccontextmanager
    async def _cursor(self) -> AsyncIterator[_NoAsyncDatabase]:
        """The async Postgres fixture drops PostgresStore's migration table through its
        cursor before a second ``setup()``; FoundryStore has no tables."""
        yield _NoAsyncDatabase()


class _Ready:
    """A result that is also awaitable: the async store classes' TTL sweep methods are
    coroutines, FoundryStore's are plain methods (its own sweeper thread calls them)."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def __await__(self) -> Generator[None, None, Any]:
        if False:
            yield
        return self.value

    def __bool__(self) -> bool:
        return bool(self.value)

    def __int__(self) -> int:
        return int(self.value)

    def __eq__(self, other: object) -> bool:
        return bool(self.value == other)

    def __hash__(self) -> int:
        return hash(self.value)


class _NoDatabase:
    """Stands in for psycopg's ``Connection`` in the Postgres modules' database administration
    (``CREATE/DROP DATABASE``), which ``FoundryStore`` does not need."""

    @classmethod
    def connect(cls, *args: Any, **kwargs: Any) -> _NoDatabase:
        return cls()

    def __enter__(self) -> _NoDatabase:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def execute(self, *args: Any, **kwargs: Any) -> None:
        return None


class _NoAsyncDatabase:
    """The async face of :class:`_NoDatabase`."""

    @classmethod
    async def connect(cls, *args: Any, **kwargs: Any) -> _NoAsyncDatabase:
        return cls()

    async def __aenter__(self) -> _NoAsyncDatabase:
        return self

    async def __aexit__(self, *exc: object) -> None:
        return None

    async def execute(self, *args: Any, **kwargs: Any) -> None:
        return None


@contextmanager
def _create_vector_store(
    vector_type: str,
    distance_type: str,
    fake_embeddings: Any,
    text_fields: list[str] | None = None,
    enable_ttl: bool = True,
) -> Iterator[SuiteStore]:
    """The Postgres module's vector store helper, on ``FoundryStore`` (same embedding, fields
    and TTL; the pgvector options do not apply)."""
    index = {"dims": fake_embeddings.dims, "embed": fake_embeddings, "fields": text_fields}
    ttl = {"default_ttl": 2, "refresh_on_read": True} if enable_ttl else None
    with SuiteStore(index=index, ttl=ttl) as store:
        yield store


_SHIMS: dict[str, Any] = {
    "_create_vector_store": _create_vector_store,
    "InMemoryStore": SuiteStore,
    "SqliteStore": SuiteStore,
    "PostgresStore": SuiteStore,
    "AsyncSqliteStore": AsyncSuiteStore,
    "AsyncPostgresStore": AsyncSuiteStore,
    "Connection": _NoDatabase,
    "AsyncConnection": _NoAsyncDatabase,
}


@contextmanager
def _foundry_env(variant: str) -> Iterator[None]:
    root = tempfile.mkdtemp(prefix="lg-store-suite-")
    saved = {
        k: os.environ.get(k) for k in ("AGENTSERVER_STATE_ROOT", "FOUNDRY_HOSTING_ENVIRONMENT")
    }
    os.environ["AGENTSERVER_STATE_ROOT"] = root
    os.environ.pop("FOUNDRY_HOSTING_ENVIRONMENT", None)
    os.environ["AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING"] = "true"
    _Current.variant, _Current.run_id = variant, uuid.uuid4().hex
    try:
        yield
    finally:
        for store in _made:
            with contextlib.suppress(Exception):  # a test may have closed or broken it
                store.close()
        _made.clear()
        _Current.variant = "original"
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(root, ignore_errors=True)


def _module_variants(path: Path) -> list[str]:
    if "postgres" in path.parts[-3] and os.environ.get("LG_STORE_POSTGRES") != "1":
        return OURS
    return VARIANTS


def _store_variant_fixture(variants: list[str]) -> Any:
    @pytest.fixture(autouse=True, params=variants)
    def store_variant(
        request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
    ) -> Iterator[str]:
        """Rebind the module's store classes for the ``foundry`` variants."""
        variant = str(request.param)
        if variant == "original":
            yield variant
            return
        entry = _deviations.lookup(TREE, request.node.nodeid)
        if entry is not None and entry[0] == "skip":
            pytest.skip(f"not applicable to FoundryStore: {entry[1]}")
        for name, shim in _SHIMS.items():
            original = getattr(request.module, name, None)
            if original is None or inspect.isasyncgenfunction(inspect.unwrap(original)):
                continue  # (the async Postgres module's vector helper needs no substitute)
            monkeypatch.setattr(request.module, name, shim)
        with _foundry_env(variant):
            yield variant

    return store_variant


class _StoreModule(pytest.Module):
    """A store test module with the ``store_variant`` fixture added before its fixtures are
    parsed (an autouse fixture of that module only)."""

    def _getobj(self) -> Any:
        module = super()._getobj()  # type: ignore[no-untyped-call]
        module.store_variant = _store_variant_fixture(_module_variants(self.path))
        return module


def pytest_pycollect_makemodule(module_path: Path, parent: pytest.Collector) -> Any:
    """Store modules get the variant fixture."""
    if module_path.name in STORE_MODULES and module_path.parent.name == "tests":
        return _StoreModule.from_parent(parent, path=module_path)
    return None


# -- the langgraph tree: sync_store / async_store ---------------------------------------------

GRAPH_VARIANTS = ["in_memory", *OURS]


@pytest.fixture(params=GRAPH_VARIANTS)
def sync_store(request: pytest.FixtureRequest) -> Iterator[Any]:
    """LangGraph's ``sync_store`` with the ``foundry`` variants."""
    if request.param == "in_memory":
        from langgraph.store.memory import InMemoryStore

        yield InMemoryStore()
        return
    with _foundry_env(str(request.param)), SuiteStore() as store:
        yield store


@pytest.fixture(params=GRAPH_VARIANTS)
async def async_store(request: pytest.FixtureRequest) -> AsyncIterator[Any]:
    """LangGraph's ``async_store`` with the ``foundry`` variants."""
    if request.param == "in_memory":
        from langgraph.store.memory import InMemoryStore

        yield InMemoryStore()
        return
    with _foundry_env(str(request.param)):
        store = AsyncSuiteStore()
        try:
            yield store
        finally:
            store.close()


@pytest.fixture
def clear_test_db() -> None:
    """The Postgres conftest's table clean-up, skipped: ``FoundryStore`` starts empty."""


@pytest.hookimpl(tryfirst=True)
def pytest_plugin_registered(plugin: object, manager: pytest.PytestPluginManager) -> None:
    """Put this plugin's fixtures in the trees' conftests before pytest parses them."""
    conftest: Any = plugin
    if getattr(conftest, "__name__", "") != "tests.conftest":
        return
    if hasattr(conftest, "sync_store"):
        conftest.sync_store = sync_store
        conftest.async_store = async_store
    if hasattr(conftest, "clear_test_db") and os.environ.get("LG_STORE_POSTGRES") != "1":
        conftest.clear_test_db = clear_test_db


_STORE_FIXTURES = ("store_variant", "sync_store", "async_store")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Keep the tests that use a store (in the langgraph tree, those taking its store
    fixtures), and record each one's variant and case as JUnit properties."""
    kept, dropped = [], []
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        variant = next((params[f] for f in _STORE_FIXTURES if f in params), None)
        if variant is None:
            dropped.append(item)
            continue
        kept.append(item)
        others = sorted((k, repr(v)) for k, v in params.items() if k not in _STORE_FIXTURES)
        base = item.nodeid.split("[", 1)[0]
        item.user_properties.append(("store", {"in_memory": "original"}.get(variant, variant)))
        item.user_properties.append(("case", f"{base}{others}"))
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept
