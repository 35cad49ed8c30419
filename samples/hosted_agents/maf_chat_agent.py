"""A MAF chat agent on ResponsesHostServer, its sessions and history on Foundry's state store.

What it shows:
- a plain ``Agent`` (not a workflow) hosted on the Responses protocol (``POST /responses``);
- ``FoundryHistoryProvider`` as the agent's history provider: before each run it loads the
  conversation's messages, after it appends the turn's input and reply (one append per turn,
  whatever the length of the conversation; large messages spill);
- ``history_source="agent"``: the host sends the model only the request's input and leaves the
  history to the agent's provider (with its default, ``"agent_server"``, the host would replay
  the Responses transcript itself and refuse a provider that loads messages);
- **one** ``FoundrySessionStoreProvider`` in the host's ``agent_session_store_provider`` slot:
  the host saves the MAF ``AgentSession`` of every stored response (under its response id and
  its conversation id) through it, as the request's end user. The session holds only the
  session id and small state; the messages are in the history provider's stores;
- every user of the agent is served by these two objects: each call runs as the request's end
  user (the platform's ``x-agent-foundry-call-id``), so users with the same conversation id
  each have their own session and their own history, in this process or the next one.

A turn names its conversation (``{"conversation": "conv-1", "input": ..., "store": true}``) or
the response it follows (``{"previous_response_id": ..., ...}``). The stand-in model below
answers from the messages it is sent, so the output shows what history the agent saw.

In a Foundry-hosted agent the platform runs this module (``python maf_chat_agent.py`` serves
on ``$PORT``); ``samples/hosted_agents_offline.py`` runs it unchanged against the emulator.
"""

from __future__ import annotations

import atexit
from collections.abc import AsyncIterator, Awaitable, Mapping, Sequence
from typing import Any

from agent_framework import (
    Agent,
    BaseChatClient,
    ChatResponse,
    ChatResponseUpdate,
    Content,
    Message,
    ResponseStream,
)
from agent_framework_foundry_hosting import ResponsesHostServer

from foundry_checkpoint_maf import FoundryHistoryProvider, FoundrySessionStoreProvider


class NotesClient(BaseChatClient):
    """A deterministic stand-in for a model: it lists what the user said in the conversation."""

    @staticmethod
    def reply(messages: Sequence[Message]) -> str:
        said = [m.text for m in messages if m.role == "user"]
        return f"{len(said)} notes: " + "; ".join(said)

    def _inner_get_response(
        self,
        *,
        messages: Sequence[Message],
        stream: bool,
        options: Mapping[str, Any],
        **kwargs: Any,
    ) -> Awaitable[ChatResponse] | ResponseStream[ChatResponseUpdate, ChatResponse]:
        text = self.reply(messages)
        if stream:

            async def updates() -> AsyncIterator[ChatResponseUpdate]:
                yield ChatResponseUpdate(role="assistant", contents=[Content.from_text(text)])

            return self._build_response_stream(updates())

        async def answer() -> ChatResponse:
            return ChatResponse(messages=[Message("assistant", [text])])

        return answer()


# Once per process: each owns its loop and store clients and serves every user.
history = FoundryHistoryProvider(store_prefix="notes-history")
sessions = FoundrySessionStoreProvider(store_prefix="notes-sessions")
agent = Agent(client=NotesClient(), name="notes", context_providers=[history])
app = ResponsesHostServer(
    agent,
    history_source="agent",
    agent_session_store_provider=sessions,
)


# The host's own shutdown handler stays in place; close both when the process exits.
atexit.register(history.close)
atexit.register(sessions.close)


# azure-ai-agentserver-core 2.3+ may snapshot the process and restore it with a new environment:
# close the clients first; the next request reopens them and reads the environment again.
async def close_stores() -> None:
    await history.aclose()
    await sessions.aclose()


if hasattr(app, "before_snapshot_handler"):
    app.before_snapshot_handler(close_stores)


if __name__ == "__main__":
    app.run()
