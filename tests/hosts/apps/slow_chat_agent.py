"""A test host: the MAF chat agent sample, whose model takes its time on a turn that asks for it.

The same stores and host options as ``samples/hosted_agents/maf_chat_agent.py``; the stand-in
model appends ``{"event": "start", "text": ...}`` to the file named by ``KILL_JOURNAL`` when it
is called, and waits a minute before answering a message that contains ``"slowly"``, so a test
can kill the process in the middle of that turn.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from typing import Any

from agent_framework import (
    Agent,
    ChatResponse,
    ChatResponseUpdate,
    Content,
    Message,
    ResponseStream,
)
from agent_framework_foundry_hosting import ResponsesHostServer

from foundry_checkpoint_maf import FoundryHistoryProvider, FoundrySessionStoreProvider
from samples.hosted_agents.maf_chat_agent import NotesClient


class SlowNotesClient(NotesClient):
    def _inner_get_response(
        self,
        *,
        messages: Sequence[Message],
        stream: bool,
        options: Mapping[str, Any],
        **kwargs: Any,
    ) -> Awaitable[ChatResponse] | ResponseStream[ChatResponseUpdate, ChatResponse]:
        last = messages[-1].text if messages else ""
        with open(os.environ["KILL_JOURNAL"], "a", encoding="utf-8") as journal:
            journal.write(json.dumps({"event": "start", "text": last}) + "\n")
        if "slowly" not in last:
            return super()._inner_get_response(
                messages=messages, stream=stream, options=options, **kwargs
            )
        text = self.reply(messages)

        async def updates() -> AsyncIterator[ChatResponseUpdate]:
            await asyncio.sleep(60)
            yield ChatResponseUpdate(role="assistant", contents=[Content.from_text(text)])

        return self._build_response_stream(updates())


history = FoundryHistoryProvider(store_prefix="notes-history")
sessions = FoundrySessionStoreProvider(store_prefix="notes-sessions")
agent = Agent(client=SlowNotesClient(), name="notes", context_providers=[history])
app = ResponsesHostServer(agent, history_source="agent", agent_session_store_provider=sessions)
atexit.register(history.close)
atexit.register(sessions.close)
