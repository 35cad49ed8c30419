"""A LangGraph graph on langchain-azure-ai's InvocationsHostServer, with resilient background runs.

What it shows:
- langchain-azure-ai's ``InvocationsHostServer`` serving a graph (``langgraph_pipeline.py``:
  three deterministic steps) through the **Invocations** protocol (``POST /invocations``,
  ``{"message": "..."}``), with ``ResponsesServerOptions(resilient_background=True,
  steerable_conversations=True)``: every invocation is a turn of a ``@multi_turn_task`` of the
  platform's resilient task runtime, one task per user and session. A background request
  (``"background": true``) answers ``202`` at once; a process that crashes mid-turn has the
  task reclaimed when a new process starts (the same agent and session), and the turn resumes
  from its checkpoints without a new request;
- **one** ``FoundryCheckpointer`` for the whole process (the graph's checkpointer, which the
  host requires for ``resilient_background``): the host runs the graph with
  ``durability="sync"`` and records each checkpoint id in the invocation's recovery state, so a
  recovered turn runs again only the step that was in flight; the checkpointer keeps the state;
- **nothing configured for the platform**: no ``AGENTSERVER_TASKS_BACKEND``. In a
  Foundry-hosted agent (``FOUNDRY_HOSTING_ENVIRONMENT`` set) the host keeps its tasks in the
  platform's task API and the checkpointer talks to the hosted state store, each request in its
  caller's partition; run locally, both are files under ``AGENTSERVER_STATE_ROOT``.

The app code is what you deploy; nothing in it knows about the emulator. In a Foundry-hosted
agent the platform runs it (``python langgraph_invocations_host.py`` serves on ``$PORT``).

Requests: ``POST /invocations?agent_session_id=S`` with ``{"message": "...", "background":
true}`` answers ``202`` and ``{"id", "status", "agent_session_id"}``; ``GET /invocations/{id}``
reads it until its ``status`` is ``completed`` (then ``response`` is the answer). The next turn
of the conversation uses the same ``agent_session_id``.
"""

from __future__ import annotations

from langchain_azure_ai.agents.hosting import InvocationsHostServer, ResponsesServerOptions
from langgraph_pipeline import build

from foundry_checkpoint import FoundryCheckpointer

# Once per process: the checkpointer caches its store clients and owns one background loop.
checkpointer = FoundryCheckpointer(store_prefix="pipeline-invocations")
host = InvocationsHostServer(
    build(checkpointer),
    options=ResponsesServerOptions(resilient_background=True, steerable_conversations=True),
)
app = host.app
app.shutdown_handler(checkpointer.aclose)

if __name__ == "__main__":
    host.run()
