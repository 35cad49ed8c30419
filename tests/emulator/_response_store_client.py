"""Drive azure-ai-agentserver-responses' ``FoundryStorageProvider`` as a hosted agent runs it.

``python _response_store_client.py CALL_ID_A CALL_ID_B`` runs in the environment of a hosted
agent (``FoundryEmulator.agent_environment()``: the project endpoint, the managed identity and
the CA it trusts), makes the response store calls of a Responses host for two callers (their
call ids), and prints what each call answered as one JSON object on stdout.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any, Literal

from azure.ai.agentserver.responses import FoundryStorageProvider, PlatformContext
from azure.ai.agentserver.responses.models import (
    MessageContent,
    OutputItem,
    OutputItemMessage,
    ResponseObject,
)
from azure.ai.agentserver.responses.store._base import ResponseAlreadyExistsError
from azure.ai.agentserver.responses.store._foundry_errors import FoundryResourceNotFoundError
from azure.identity.aio import DefaultAzureCredential


def _message(item_id: str, role: Literal["user", "assistant"], text: str) -> OutputItemMessage:
    content: MessageContent = (
        {"type": "input_text", "text": text}
        if role == "user"
        else {"type": "output_text", "text": text}
    )
    return {
        "id": item_id,
        "type": "message",
        "role": role,
        "status": "completed",
        "content": [content],
    }


def _response(
    response_id: str,
    output: list[OutputItem],
    *,
    conversation: str | None = None,
    previous_response_id: str | None = None,
) -> ResponseObject:
    """A response object with the fields the host always sets (the store reads a few)."""
    response: ResponseObject = {
        "id": response_id,
        "object": "response",
        "status": "completed" if output else "in_progress",
        "created_at": 1_800_000_000,
        "output": output,
        "error": None,
        "incomplete_details": None,
        "instructions": None,
        "parallel_tool_calls": False,
        "agent_reference": None,
    }
    if conversation is not None:
        response["conversation"] = {"id": conversation}
    if previous_response_id is not None:
        response["previous_response_id"] = previous_response_id
    return response


async def _not_found(call: Any) -> str:
    try:
        await call
    except FoundryResourceNotFoundError:
        return "not_found"
    return "found"


async def main(call_a: str, call_b: str) -> dict[str, Any]:
    alice, bob = PlatformContext(call_id=call_a), PlatformContext(call_id=call_b)
    report: dict[str, Any] = {}
    credential = DefaultAzureCredential()
    async with credential, FoundryStorageProvider(credential=credential) as store:
        # turn 1: created in progress, then completed with its output
        await store.create_response(
            _response("resp_1", [], conversation="conv_1"),
            [_message("msg_u1", "user", "hello")],
            None,
            context=alice,
        )
        try:
            await store.create_response(_response("resp_1", []), None, None, context=alice)
            report["duplicate"] = "created"
        except ResponseAlreadyExistsError:
            report["duplicate"] = "already_exists"
        await store.update_response(
            _response("resp_1", [_message("msg_a1", "assistant", "hi")], conversation="conv_1"),
            context=alice,
        )
        report["get"] = await store.get_response("resp_1", context=alice)
        # turn 2 chains on turn 1: the host asks for the history first
        history = await store.get_history_item_ids("resp_1", None, -1, context=alice)
        report["history_previous"] = history
        await store.create_response(
            _response(
                "resp_2",
                [_message("msg_a2", "assistant", "again")],
                conversation="conv_1",
                previous_response_id="resp_1",
            ),
            [_message("msg_u2", "user", "more")],
            history,
            context=alice,
        )
        report["history_conversation"] = await store.get_history_item_ids(
            None, "conv_1", -1, context=alice
        )
        report["history_last_two"] = await store.get_history_item_ids(
            None, "conv_1", 2, context=alice
        )
        pages = [await store.get_input_items("resp_2", limit=2, ascending=True, context=alice)]
        pages.append(
            await store.get_input_items(
                "resp_2", limit=2, ascending=True, after=pages[0][-1]["id"], context=alice
            )
        )
        report["input_pages"] = [[item["id"] for item in page] for page in pages]
        report["input_desc"] = [
            item["id"] for item in await store.get_input_items("resp_2", context=alice)
        ]
        items = await store.get_items(["msg_a1", "msg_missing", "msg_u1"], context=alice)
        report["batch"] = [None if item is None else item["id"] for item in items]
        # bob, another user of the same agent, sees none of it
        report["bob_get"] = await _not_found(store.get_response("resp_1", context=bob))
        report["bob_batch"] = await store.get_items(["msg_a1"], context=bob)
        report["bob_history"] = await store.get_history_item_ids(None, "conv_1", -1, context=bob)
        await store.delete_response("resp_1", context=alice)
        report["after_delete"] = await _not_found(store.get_response("resp_1", context=alice))
        report["delete_again"] = await _not_found(store.delete_response("resp_1", context=alice))
    return report


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], sys.argv[2]))))
