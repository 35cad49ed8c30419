"""``FoundryHistoryProvider``: a conversation of over 5 MB (large tool results) round-trips.

Every test runs in local and hosted mode (``store_env``), each with the spill store the mode
uses when nothing is configured (local: ``LocalSpill`` under the state root; hosted: chunk items
of the session's own store) and with an ``AzureBlobSpill`` on Azurite. A fresh provider reads
the messages back equal, and ``delete_session`` leaves no item, blob, chunk or file behind.
"""

from __future__ import annotations

import base64
import random
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agent_framework import Content, Message
from azure.storage.blob.aio import ContainerClient

from foundry_checkpoint.adapter import spilled_digest
from foundry_checkpoint.spill import AzureBlobSpill, LocalSpill
from foundry_checkpoint_maf import FoundryHistoryProvider

MB = 1024 * 1024
TOOL_CALLS = 5
SESSION = "large-chat"


def _conversation() -> list[Message]:
    """A user question, then five tool calls whose results are ~1.2 MB of random text each."""
    rng = random.Random(29)
    messages = [Message("user", ["summarise the five reports"], message_id="u0")]
    for i in range(TOOL_CALLS):
        call_id = f"call-{i}"
        # incompressible (random) text over the 1 MB item limit, with non-ASCII at the end
        report = base64.b64encode(rng.randbytes(900_000)).decode() + f" report {i} ✓ ünï"
        messages += [
            Message(
                "assistant",
                [Content.from_function_call(call_id, "fetch_report", arguments={"n": i})],
                message_id=f"a{i}",
            ),
            Message(
                "tool",
                [Content.from_function_result(call_id, result=report)],
                message_id=f"t{i}",
                additional_properties={"bytes": len(report)},
            ),
        ]
    messages.append(Message("assistant", ["all five are summarised"], message_id="done"))
    return messages


@pytest.fixture(params=["default", pytest.param("azurite", marks=pytest.mark.azurite)])
async def spill_options(request: pytest.FixtureRequest) -> AsyncIterator[dict[str, Any]]:
    """``{}`` (the mode's default spill) or ``{"spill": AzureBlobSpill(...)}`` on Azurite, with
    ``"container"`` naming the fresh container it writes to."""
    if request.param == "default":
        yield {}
        return
    azurite = request.getfixturevalue("azurite")
    container = f"maf-{uuid.uuid4().hex[:12]}"
    yield {
        "spill": AzureBlobSpill(
            connection_string=azurite.connection_string, container=container, retry_total=0
        ),
        "container": container,
        "connection_string": azurite.connection_string,
    }


async def _container_blobs(options: dict[str, Any]) -> list[str]:
    async with ContainerClient.from_connection_string(
        options["connection_string"], options["container"]
    ) as client:
        return [blob.name async for blob in client.list_blobs()]


def _files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file()) if root.exists() else []


async def test_five_megabyte_conversation_round_trips_and_deletes_clean(
    store_env: Any, spill_options: dict[str, Any]
) -> None:
    spill = spill_options.get("spill")
    kwargs = store_env.kwargs(**({"spill": spill} if spill is not None else {}))
    messages = _conversation()
    expected = [m.to_dict() for m in messages]
    total = sum(len(str(d)) for d in expected)
    assert total > 5 * MB

    async with FoundryHistoryProvider(**kwargs) as writer:
        # a turn at a time, as an agent stores them: the question, each call and its result
        await writer.save_messages(SESSION, messages[:1])
        for i in range(TOOL_CALLS):
            await writer.save_messages(SESSION, messages[1 + 2 * i : 3 + 2 * i])
        await writer.save_messages(SESSION, messages[-1:])

    async with FoundryHistoryProvider(**kwargs) as reader:
        back = await reader.get_messages(SESSION)
        assert [m.to_dict() for m in back] == expected
        last = await reader.get_messages(SESSION, last=2)
        assert [m.to_dict() for m in last] == expected[-2:]

        core = reader._core
        scope = await core.arun(core.scope(SESSION))
        keys = await core.arun(scope.keys())
        values = [(await core.arun(scope.store.get_item(k.key))) for k in keys]
        spilled = [v for k, v in zip(keys, values, strict=True) if k.key.startswith("msg/") and v]
        assert sum(spilled_digest(v.value) is not None for v in spilled) == TOOL_CALLS
        namespace = await core.arun(scope.namespace(create=False))
        assert namespace is not None
        where = scope.spill
        assert where is not None
        blobs = await core.arun(where.list(namespace))
        assert len(blobs) == TOOL_CALLS
        assert sum(b.size for b in blobs) > 4 * MB
        if store_env.mode == "hosted" and spill is None:
            assert scope.chunked  # nothing configured: the chunks are items of the store
            assert len(keys) > len(messages) + 1 + TOOL_CALLS  # head, meta, chunk items
        elif spill is None:
            assert isinstance(where, LocalSpill)
            assert len(_files(where.directory)) == TOOL_CALLS
        else:
            assert len(await _container_blobs(spill_options)) == TOOL_CALLS

        assert await reader.delete_session(SESSION) == len(messages)
        assert await reader.get_messages(SESSION) == []
        assert await core.arun(scope.keys()) == []  # no message, head, meta or chunk item
        if spill is not None:
            assert await _container_blobs(spill_options) == []
        elif isinstance(where, LocalSpill):
            assert _files(where.directory) == []
        else:
            assert await core.arun(where.list(namespace)) == []
