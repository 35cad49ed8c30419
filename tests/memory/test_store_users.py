"""One ``FoundryStore`` serving 20 users per request, with identical namespaces and keys.

A hosted agent builds one store and serves every user with it; the host sets each request's
context (``azure.ai.agentserver.core.set_request_context``). Hosted mode: the request carries
only a platform call id, minted by the emulator for that user, which the store forwards and the
service resolves to the user's partition. Local mode: the context's user id picks the user's
partition (a call id alone names no user locally, docs/concepts/isolation.md).

Every user writes the same namespaces and keys, from OS threads (the sync face) and asyncio tasks
(the async face) at once; then each one reads, searches and lists exactly their own, a delete by
one leaves the others' items alone, and the agent's own identity (no request) sees none of them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from azure.ai.agentserver.core import FoundryAgentRequestContext

from foundry_checkpoint import FoundryStore
from tests._request import in_request
from tests.conftest import StoreEnv

USERS = [f"user-{i:02d}" for i in range(20)]
#: The same namespaces and keys for every user.
SHARED = (("memories", "profile"), ("memories", "facts", "deep"), ("prefs",))
KEYS = ("a", "b", "c")


def _request(env: StoreEnv, user: str) -> Any:
    """A request of ``user``: a fresh call id; locally also the user id."""
    context = FoundryAgentRequestContext(
        call_id=env.call_id(user), user_id=None if env.mode == "hosted" else user
    )
    return in_request(context)


def _value(user: str, ns: tuple[str, ...], key: str) -> dict[str, Any]:
    return {"owner": user, "where": "/".join(ns), "key": key}


def _write(store: FoundryStore, env: StoreEnv, user: str) -> None:
    with _request(env, user):
        for ns in SHARED:
            for key in KEYS:
                store.put(ns, key, _value(user, ns, key))
        store.put(("own", user), "only", {"owner": user})


async def _awrite(store: FoundryStore, env: StoreEnv, user: str) -> None:
    with _request(env, user):
        await store.abatch([])  # an empty batch touches nothing
        for ns in SHARED:
            await asyncio.gather(*(store.aput(ns, key, _value(user, ns, key)) for key in KEYS))
        await store.aput(("own", user), "only", {"owner": user})


def _check(store: FoundryStore, env: StoreEnv, user: str, deleted: bool) -> None:
    with _request(env, user):
        for ns in SHARED:
            for key in KEYS:
                item = store.get(ns, key)
                if deleted and ns == SHARED[0] and key == "a":
                    assert item is None, user
                    continue
                assert item is not None and item.value == _value(user, ns, key), (user, ns, key)
        found = store.search(("memories",), limit=100)
        assert {i.value["owner"] for i in found} == {user}
        assert len(found) == 2 * len(KEYS) - (1 if deleted else 0)
        tagged = store.search((), filter={"owner": user}, limit=100)
        assert len(tagged) == len(SHARED) * len(KEYS) + 1 - (1 if deleted else 0)
        assert store.search((), filter={"owner": {"$ne": user}}, limit=100) == []
        assert store.list_namespaces(limit=100) == sorted([*SHARED, ("own", user)])
        assert store.list_namespaces(prefix=("own",)) == [("own", user)]
        assert store.get(("own", USERS[0] if user != USERS[0] else USERS[1]), "only") is None


async def _acheck(store: FoundryStore, env: StoreEnv, user: str) -> None:
    with _request(env, user):
        got = await asyncio.gather(*(store.aget(ns, key) for ns in SHARED for key in KEYS))
        assert [i.value if i else None for i in got] == [
            _value(user, ns, key) for ns in SHARED for key in KEYS
        ]
        found = await store.asearch(("memories",), filter={"key": {"$ne": "a"}}, limit=100)
        assert sorted((i.namespace, i.key) for i in found) == sorted(
            (ns, key) for ns in SHARED[:2] for key in KEYS[1:]
        )
        assert {i.value["owner"] for i in found} == {user}
        listed = await store.alist_namespaces(suffix=(user,))
        assert listed == [("own", user)]


def _serve(each: Callable[[str], None], aeach: Callable[[str], Any]) -> None:
    """Even users from OS threads (sync face), odd users as asyncio tasks (async face)."""

    async def tasks() -> None:
        await asyncio.gather(*(aeach(user) for user in USERS[1::2]))

    with ThreadPoolExecutor(max_workers=len(USERS) // 2 + 1) as pool:
        futures = [pool.submit(each, user) for user in USERS[0::2]]
        futures.append(pool.submit(asyncio.run, tasks()))
        for future in futures:
            future.result()


def test_one_store_twenty_users(
    store_env: StoreEnv, make_memory_store: Callable[..., FoundryStore]
) -> None:
    """Each of 20 users reads, searches and lists only their own items."""
    # The agent's own identity (hosted) or the local default user; users come per request.
    agent = {"user": "agent"} if store_env.mode == "hosted" else {}
    store = make_memory_store(**agent, tag_fields=("owner",))
    _serve(lambda u: _write(store, store_env, u), lambda u: _awrite(store, store_env, u))
    _serve(
        lambda u: _check(store, store_env, u, deleted=False), lambda u: _acheck(store, store_env, u)
    )

    victim = USERS[3]
    with _request(store_env, victim):
        store.delete(SHARED[0], "a")
    _check(store, store_env, victim, deleted=True)
    for user in USERS:
        if user != victim:
            _check(store, store_env, user, deleted=False)

    # The store's own identity, outside any request: none of the users' memories.
    assert store.list_namespaces() == []
    assert store.search((), limit=100) == []
    assert store.get(SHARED[0], "b") is None
