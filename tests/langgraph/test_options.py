"""Construction, options, lifecycle, serde and bad input."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest
from azure.ai.agentserver.core.storage import DEFAULT_ITEM_TTL_SECONDS
from langgraph.checkpoint.base import empty_checkpoint
from langgraph.checkpoint.serde.encrypted import EncryptedSerializer
from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.graph import END, START, StateGraph
from typing_extensions import TypedDict

from foundry_checkpoint import FoundryCheckpointer, InvalidArgumentError, InvalidIdentifierError
from tests.langgraph._util import cfg

SECRET = "top-secret-marker-7f3a"


class Notes(TypedDict):
    text: str


def _graph(saver: FoundryCheckpointer) -> Any:
    builder = StateGraph(Notes)
    builder.add_node("echo", lambda s: {"text": s["text"] + "!"})
    builder.add_edge(START, "echo")
    builder.add_edge("echo", END)
    return builder.compile(checkpointer=saver)


def _raw_payloads(saver: FoundryCheckpointer, thread_id: str) -> bytes:
    """Every decoded item payload of the thread, concatenated (what the store really holds)."""

    async def read() -> bytes:
        scope = await saver._core.scope(thread_id)
        out = b""
        for key in await scope.keys():
            item = await scope.store.get_item(key.key)
            assert item is not None
            if not key.key.startswith("m/"):
                out += await scope.decode(item.value, key=key.key)
            out += repr(key.tags).encode()
        return out

    return saver._core.run(read())


def test_no_argument_construction_and_repr(store_env: Any) -> None:
    if store_env.mode == "local":
        saver = FoundryCheckpointer()  # nothing to configure on a laptop
        assert saver.kind == "local-sqlite"
    else:
        saver = FoundryCheckpointer(**store_env.kwargs())
        assert saver.kind == "hosted"
    text = repr(saver)
    assert text.startswith("FoundryCheckpointer(") and f"backend={saver.kind!r}" in text
    assert "store_prefix=" in text and "location=" in text
    graph = _graph(saver)
    assert graph.invoke({"text": "hi"}, cfg("repr"))["text"] == "hi!"
    saver.close()
    saver.close()  # idempotent


async def test_lifecycle_context_managers(
    store_env: Any, make_saver: Callable[..., FoundryCheckpointer]
) -> None:
    with FoundryCheckpointer(**store_env.kwargs()) as saver:
        assert _graph(saver).invoke({"text": "a"}, cfg("cm"))["text"] == "a!"
    async with FoundryCheckpointer(**store_env.kwargs()) as asaver:
        got = await asaver.aget_tuple(cfg("cm"))
        assert got is not None and got.checkpoint["channel_values"]["text"] == "a!"
    await asaver.aclose()  # closing again is fine
    unused = FoundryCheckpointer(**store_env.kwargs())
    await unused.aclose()
    unused.close()
    # A closed saver starts again on next use.
    assert saver.get_tuple(cfg("cm")) is not None
    saver.close()


def test_store_prefix_and_ttl_options(
    store_env: Any, make_saver: Callable[..., FoundryCheckpointer]
) -> None:
    default = make_saver(fresh_prefix=True)
    never = make_saver(store_prefix="lg-never", item_ttl_seconds=-1)
    for saver in (default, never):
        _graph(saver).invoke({"text": "x"}, cfg("ttl"))

    async def descriptor(saver: FoundryCheckpointer) -> tuple[str, int]:
        scope = await saver._core.scope("ttl")
        store = await scope.store.get()
        assert store.user_isolation is True
        return scope.name, store.item_ttl_seconds

    name, ttl = default._core.run(descriptor(default))
    assert ttl == DEFAULT_ITEM_TTL_SECONDS == 30 * 24 * 3600
    assert name.endswith("/t/ttl")
    name, ttl = never._core.run(descriptor(never))
    assert (name, ttl) == ("lg-never/t/ttl", -1)
    with pytest.raises(InvalidArgumentError, match="item_ttl_seconds"):
        FoundryCheckpointer(**store_env.kwargs(item_ttl_seconds=0))


def test_encrypted_serde(store_env: Any, make_saver: Callable[..., FoundryCheckpointer]) -> None:
    serde = EncryptedSerializer.from_pycryptodome_aes(key=b"0123456789abcdef")
    saver = make_saver(serde=serde)
    graph = _graph(saver)
    assert graph.invoke({"text": SECRET}, cfg("enc"))["text"] == SECRET + "!"
    # A new instance with the key reads it back; the stored bytes never hold the plain text.
    again = _graph(make_saver(serde=serde))
    assert again.get_state(cfg("enc")).values == {"text": SECRET + "!"}
    assert SECRET.encode() not in _raw_payloads(saver, "enc")
    plain = make_saver()
    _graph(plain).invoke({"text": SECRET}, cfg("plain"))
    assert SECRET.encode() in _raw_payloads(plain, "plain")  # the check above can fail
    # Without the key the checkpoint cannot be read.
    with pytest.raises(Exception, match=r"(?i)encrypt|cipher|aes"):
        make_saver().get_tuple(cfg("enc"))


def test_with_allowlist_clone_shares_the_core(
    make_saver: Callable[..., FoundryCheckpointer],
) -> None:
    # A strict msgpack serde (as with LANGGRAPH_STRICT_MSGPACK) makes with_allowlist clone.
    saver = make_saver(serde=JsonPlusSerializer(allowed_msgpack_modules=None))
    assert saver.with_allowlist([]) is saver
    clone = saver.with_allowlist([("tests.langgraph.test_options", "Notes")])
    assert clone is not saver and isinstance(clone, FoundryCheckpointer)
    assert clone._core is saver._core and clone.serde is not saver.serde
    _graph(clone).invoke({"text": "c"}, cfg("clone"))
    got = saver.get_tuple(cfg("clone"))
    assert got is not None and got.checkpoint["channel_values"] == {"text": "c!"}


def test_bad_input(store_env: Any, make_saver: Callable[..., FoundryCheckpointer]) -> None:
    saver = make_saver()
    with pytest.raises(InvalidIdentifierError, match="thread_id"):
        saver.get_tuple(cfg(""))
    with pytest.raises(InvalidIdentifierError, match="thread_id"):
        saver.delete_thread("")
    with pytest.raises(InvalidIdentifierError, match="thread_id"):
        saver.put(cfg(""), empty_checkpoint(), {}, {})
    with pytest.raises(InvalidIdentifierError, match=re.escape("['thread_id'] is missing")):
        saver.get_tuple({"configurable": {}})
    with pytest.raises(InvalidIdentifierError, match="configurable"):
        saver.put({}, empty_checkpoint(), {}, {})
    with pytest.raises(InvalidIdentifierError, match="checkpoint_id"):
        saver.put_writes(cfg("t"), [("a", 1)], "task")
    with pytest.raises(ValueError, match="thread_id"):  # InvalidIdentifierError is a ValueError
        _graph(saver).invoke({"text": "x"}, cfg(""))
    # UUIDs and integers are fine thread ids (stored as their string).
    assert _graph(saver).invoke({"text": "u"}, cfg(7))["text"] == "u!"
    assert saver.get_tuple(cfg("7")) is not None


def test_get_next_version(make_saver: Callable[..., FoundryCheckpointer]) -> None:
    saver = make_saver()
    first = saver.get_next_version(None, None)
    second = saver.get_next_version(first, None)
    assert first.split(".")[0] == f"{1:032}" and second.split(".")[0] == f"{2:032}"
    assert first < second < saver.get_next_version(second, None)
    assert saver.get_next_version(41, None).startswith(f"{42:032}.")  # type: ignore[arg-type]
