"""Where LangGraph's own store tests and ``FoundryStore`` part, each with its reason.

Keys are ``<distribution>:<test node id without parameters>``. Two kinds:

* ``"skip"``: the test inspects the backend it was written for (its SQL, its migrations, its
  connection pool), so it says nothing about ``FoundryStore``; skipped under the ``foundry``
  variants (``foundry_store_variant.py``) and counted as skipped.
* ``"deviation"``: the test runs and fails on ``FoundryStore`` by design; the runner
  (``run.py store``) prints it with its reason instead of failing.

Anything else that fails on ``FoundryStore`` and passes on the original store fails the run.
"""

from __future__ import annotations

_SQLITE = "langgraph-checkpoint-sqlite:tests/"
_POSTGRES = "langgraph-checkpoint-postgres:tests/"
_CURSOR = (
    "reads or rewrites PostgresStore's rows through its SQL cursor (store._cursor(): backdating "
    "expires_at, checking a row is still there unswept); FoundryStore never returns an expired "
    "item, swept or not (tests/memory/test_differential.py checks it on a test clock)"
)

_SYNC_ON_LOOP = (
    "the async store classes refuse their sync methods on the thread of a running event loop "
    "(asyncio.InvalidStateError); FoundryStore is one class with both faces and serves its "
    "sync methods from any thread, that one included (they run on its own loop thread)"
)

STORE_DEVIATIONS: dict[str, tuple[str, str]] = {
    f"{_SQLITE}test_store.py::test_nonnull_migrations": (
        "skip",
        "checks SqliteStore's SQL migration statements; FoundryStore has no schema",
    ),
    f"{_SQLITE}test_store.py::test_vector_store_initialization": (
        "skip",
        "reads SqliteStore's tables through store.conn",
    ),
    f"{_POSTGRES}test_store.py::test_nonnull_migrations": (
        "skip",
        "checks PostgresStore's SQL migration statements; FoundryStore has no schema",
    ),
    f"{_POSTGRES}test_store.py::test_omit_expired_": ("skip", _CURSOR),
    f"{_POSTGRES}test_async_store.py::test_omit_expired_": ("skip", _CURSOR),
    f"{_POSTGRES}test_async_store.py::test_abatch_uses_single_pool_checkout": (
        "skip",
        "counts psycopg pool checkouts of AsyncPostgresStore (_ainternal.get_connection)",
    ),
    f"{_SQLITE}test_store.py::test_sql_injection_vulnerability": (
        "deviation",
        "SqliteStore refuses a filter key that is not a plain JSON path (ValueError 'Invalid "
        "filter key'), since it builds SQL from it; FoundryStore builds no SQL and reads every "
        "filter key as one top-level field, as InMemoryStore does: the search answers [] "
        "instead of raising",
    ),
    f"{_SQLITE}test_store.py::test_filter_keys_with_hyphens_and_digits": (
        "deviation",
        "SqliteStore reads a dotted filter key ('user.access-level') as a path into nested "
        "objects; FoundryStore reads it as one top-level field, as InMemoryStore does (nested "
        "fields are filtered with a nested filter: {'user': {'access-level': ...}})",
    ),
    f"{_SQLITE}test_async_store.py::test_no_running_loop": ("deviation", _SYNC_ON_LOOP),
    f"{_POSTGRES}test_async_store.py::test_no_running_loop": ("deviation", _SYNC_ON_LOOP),
    f"{_SQLITE}test_ttl.py::test_ttl_override_default": (
        "deviation",
        "the test reads the default-TTL item at 2 s and expects it gone at 6 s (5 s TTL): "
        "SqliteStore 3.1.2 does not refresh a TTL on get although refresh_on_read defaults to "
        "True; FoundryStore refreshes it on that read (as PostgresStore does), so it lives "
        "until 7 s",
    ),
    f"{_SQLITE}test_ttl.py::test_async_asearch_refresh_ttl": (
        "deviation",
        "expects an item refreshed at 3 s with a 4 s TTL gone at 7.5 s: FoundryStore keeps an "
        "expiry in whole seconds, rounded up (the expiry tag the listings skip expired items "
        "by), so an item outlives its TTL by up to a second and the test's 0.5 s margin fails "
        "when the clock's fraction is under .5",
    ),
    f"{_POSTGRES}test_store.py::test_scores": (
        "deviation",
        "its l2 and inner_product cases expect pgvector's distance_type scores; distance_type "
        "is a PostgresStore option and FoundryStore scores by cosine similarity, as "
        "InMemoryStore (the cosine cases pass)",
    ),
}


def lookup(dist: str, nodeid: str) -> tuple[str, str] | None:
    """The entry for a test of ``dist`` (its node id, parameters ignored), if any."""
    bare = f"{dist}:{nodeid.split('[', 1)[0]}"
    return next((v for k, v in STORE_DEVIATIONS.items() if bare.startswith(k)), None)
