"""A LangGraph graph on langchain-azure-ai's ResponsesHostServer, with resilient background runs.

What it shows:
- langchain-azure-ai's ``ResponsesHostServer`` serving a graph (``langgraph_pipeline.py``: three
  deterministic steps) through the **Responses** protocol (``POST /responses``), with
  ``ResponsesServerOptions(resilient_background=True, steerable_conversations=True)``: a
  background request (``"background": true``) is a task of the platform's resilient task
  runtime, so a process that crashes mid-turn has its task reclaimed when a new process starts
  (the same agent and session), and the turn resumes from its checkpoints without a new request;
- **one** ``FoundryCheckpointer`` for the whole process (the graph's checkpointer, which the
  host requires for ``resilient_background``): the host runs the graph with
  ``durability="sync"``, so every finished step is in the store before the next one starts, and
  a recovered turn runs again only the step that was in flight. The host keeps the thread id
  and the checkpoint id of each response in the response's own record, the checkpointer keeps
  the state;
- **nothing configured for the platform**: no ``AGENTSERVER_TASKS_BACKEND``, no response store.
  In a Foundry-hosted agent (``FOUNDRY_HOSTING_ENVIRONMENT`` set) the host keeps its tasks in
  the platform's task API and its responses in Foundry's response store, and the checkpointer
  talks to the hosted state store, each request in its caller's partition; run locally, all
  three are files under ``AGENTSERVER_STATE_ROOT``;
- the host's own conversation-chain records (which checkpoint a response chain continues from)
  in its default ``FoundryConversationChainStore``, under a hashed chain id
  (``langgraph_pipeline.HashedChainStore``): that store names a state store
  ``langchain_azure_ai.agents.hosting/responses/<chain id>``, and once the platform sends a user
  the chain id is ``user-<64 hex digits>:<response id>``, so the name would pass the store's
  128-character limit and every turn would fail after its last step.

The app code is what you deploy; nothing in it knows about the emulator. In a Foundry-hosted
agent the platform runs it (``python langgraph_responses_host.py`` serves on ``$PORT``).

Requests (``POST /responses``, JSON): ``{"input": "...", "background": true, "store": true}``
answers at once with the response's id; ``GET /responses/{id}`` reads it until its ``status``
is ``completed``. Continue a conversation with ``"previous_response_id"``.
"""

from __future__ import annotations

import atexit

from langchain_azure_ai.agents.hosting import ResponsesHostServer, ResponsesServerOptions
from langgraph_pipeline import HashedChainStore, build

from foundry_checkpoint import FoundryCheckpointer

# Once per process: the checkpointer caches its store clients and owns one background loop.
checkpointer = FoundryCheckpointer(store_prefix="pipeline-responses")
host = ResponsesHostServer(
    build(checkpointer),
    options=ResponsesServerOptions(resilient_background=True, steerable_conversations=True),
    conversation_chain_store=HashedChainStore(),
)
app = host.app
# Closed when the process exits: the host's one shutdown handler is its own (it signals the
# running responses); registering another one there would replace it.
atexit.register(checkpointer.close)

if __name__ == "__main__":
    host.run()
