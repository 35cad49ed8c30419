"""The same conversation scripts through ``FoundryHistoryProvider`` (local and hosted),
MAF's ``InMemoryHistoryProvider`` and ``FileHistoryProvider``: identical messages back.

Every script is a list of ``save_messages`` calls (turns, replays of the whole transcript,
repeated inputs with and without ids) over messages holding every content type MAF defines,
with roles, author names, message ids and additional properties; after each call the whole
history and its last few messages are compared as ``Message.to_dict()``.
"""

from __future__ import annotations

import warnings
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from agent_framework import Content, FileHistoryProvider, InMemoryHistoryProvider, Message

from foundry_checkpoint_maf import FoundryHistoryProvider

pytestmark = pytest.mark.asyncio


def _call() -> Content:
    return Content.from_function_call(
        "call-1", "lookup", arguments={"city": "Oslo", "days": [1, 2]}, id="fc-1"
    )


def every_content() -> list[Content]:
    """One content of every kind ``Content`` has a constructor for."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the computer-use contents are experimental
        return _contents()


def _contents() -> list[Content]:
    return [
        Content.from_text("plain", additional_properties={"lang": "en"}),
        Content.from_text_reasoning(id="r1", text="because", protected_data="opaque"),
        Content.from_data(b"\x00\x01binary\xff", "application/octet-stream", name="blob.bin"),
        Content.from_uri("https://example.com/cat.png", media_type="image/png", name="cat"),
        Content.from_error(message="boom", error_code="E42", error_details="stack"),
        _call(),
        Content.from_function_result("call-1", result={"temp": 21.5, "ok": True, "none": None}),
        Content.from_function_result("call-2", exception="ValueError: bad"),
        Content.from_usage(
            {"input_token_count": 10, "output_token_count": 3, "total_token_count": 13}
        ),
        Content.from_hosted_file("file-1", media_type="text/plain", name="notes.txt"),
        Content.from_hosted_vector_store("vs-1"),
        Content.from_function_approval_request("fc-1", _call()),
        Content.from_function_approval_response(True, "fc-1", _call()),
        Content.from_code_interpreter_tool_call(call_id="ci-1", inputs=[Content.from_text("1+1")]),
        Content.from_code_interpreter_tool_result(call_id="ci-1", outputs=[Content.from_text("2")]),
        Content.from_image_generation_tool_call(image_id="img-1"),
        Content.from_image_generation_tool_result(image_id="img-1", outputs={"url": "u"}),
        Content.from_mcp_server_tool_call("mcp-1", "search", server_name="docs", arguments="{}"),
        Content.from_mcp_server_tool_result("mcp-1", output=[{"hit": "x"}]),
        Content.from_oauth_consent_request("https://login.example.com/consent"),
        Content.from_search_tool_call("s-1", tool_name="web", arguments={"q": "maf"}),
        Content.from_search_tool_result("s-1", tool_name="web", result={"n": 1}),
        Content.from_shell_tool_call(call_id="sh-1", commands=["ls", "-l"], timeout_ms=1000),
        Content.from_shell_tool_result(
            call_id="sh-1",
            outputs=[Content.from_shell_command_output(stdout="a\n", stderr="", exit_code=0)],
        ),
        Content.from_computer_tool_call(id="cc-1", call_id="cu-1", actions=[{"type": "click"}]),
        Content.from_computer_tool_result(
            call_id="cu-1",
            screenshot=Content.from_uri("data:image/png;base64,AAAA", media_type="image/png"),
        ),
    ]


def _msg(role: str, *contents: Content | str, **extra: Any) -> Message:
    return Message(role, list(contents), **extra)


def _scripts() -> dict[str, list[list[Message]]]:
    contents = every_content()
    user = _msg("user", "hello", message_id="u1", author_name="Ann")
    reply = _msg("assistant", *contents[:8], message_id="a1", additional_properties={"k": [1, 2]})
    tool = _msg("tool", *contents[8:16], message_id="t1")
    rest = _msg("assistant", *contents[16:], author_name="bot")
    bare = _msg("user", "same again")  # no message id
    unicode = _msg("user", 'ünïcødé ✓ \u2028 "quoted" \\ nul\u0000', message_id="u2")
    system = _msg("system", "be brief", additional_properties={"nested": {"a": {"b": [None]}}})
    return {
        "turns": [[user, reply], [tool], [rest], [unicode]],
        "replayed transcript": [[user, reply], [user, reply, tool], [user, reply, tool, rest]],
        "repeated input without id": [[bare], [bare], [bare, reply], [bare]],
        "repeated input with id": [[user], [user], [user, reply]],
        "overlapping tail": [[system, user], [user, reply], [reply, tool, rest]],
        "one big call": [[system, user, reply, tool, rest, bare, unicode]],
        "empty call": [[], [user], []],
    }


SCRIPTS = _scripts()


@pytest.fixture
async def providers(store_env: Any, tmp_path: Path) -> AsyncIterator[dict[str, Any]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        file_provider = FileHistoryProvider(tmp_path / "files")
    ours = FoundryHistoryProvider(**store_env.kwargs())
    yield {"memory": InMemoryHistoryProvider(), "file": file_provider, "foundry": ours}
    await ours.aclose()


def _dicts(messages: list[Message]) -> list[dict[str, Any]]:
    return [m.to_dict() for m in messages]


@pytest.mark.parametrize("script", sorted(SCRIPTS))
async def test_same_messages_back(providers: dict[str, Any], script: str) -> None:
    session = "diff-" + script.replace(" ", "-")
    state: dict[str, Any] = {}
    ours: FoundryHistoryProvider = providers["foundry"]
    for call in SCRIPTS[script]:
        for name, provider in providers.items():
            await provider.save_messages(session, call, state=state if name == "memory" else None)
        expected = _dicts(await providers["memory"].get_messages(session, state=state))
        assert _dicts(await providers["file"].get_messages(session)) == expected
        assert _dicts(await ours.get_messages(session)) == expected
        for last in (1, 2, 5):
            assert _dicts(await ours.get_messages(session, last=last)) == expected[-last:]
    assert expected, "every script stores something"


async def test_every_content_type_is_covered() -> None:
    # A content type MAF adds later makes this fail until the scripts hold it too.
    covered = {c.type for c in every_content()}
    covered |= {c.type for c in every_content()[-3].outputs or []}  # shell command output
    defined = {n.removeprefix("from_") for n in dir(Content) if n.startswith("from_")}
    defined -= {"dict", "text", "text_reasoning", "data", "uri", "usage"}
    named = {"text", "text_reasoning", "data", "uri", "usage"}
    assert named <= covered
    assert defined <= covered, sorted(defined - covered)


async def test_skip_excluded_as_file_provider(store_env: Any, tmp_path: Path) -> None:
    messages = [
        _msg("user", "keep", message_id="k"),
        _msg("assistant", "drop", message_id="d", additional_properties={"_excluded": True}),
    ]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        file_provider = FileHistoryProvider(tmp_path / "skip", skip_excluded=True)
    async with FoundryHistoryProvider(skip_excluded=True, **store_env.kwargs()) as ours:
        await file_provider.save_messages("skip", messages)
        await ours.save_messages("skip", messages)
        expected = _dicts(await file_provider.get_messages("skip"))
        assert [m["message_id"] for m in expected] == ["k"]
        assert _dicts(await ours.get_messages("skip")) == expected
