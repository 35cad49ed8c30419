"""A test host: ``samples/hosted_agents/langgraph_invocations_host.py`` on the journaled graph.

The sample's host (langchain-azure-ai's ``InvocationsHostServer`` with ``resilient_background``
and ``steerable_conversations``, nothing configured for the platform) serving
``recovery_pipeline.graph`` (slow, journaled steps) on one ``JournaledCheckpointer`` (a
``FoundryCheckpointer`` that journals each step's stored writes; see that module).
``RECOVERY_CHECKPOINTER=memory`` gives the graph an ``InMemorySaver`` instead, for contrast.
"""

from __future__ import annotations

import os

from langchain_azure_ai.agents.hosting import InvocationsHostServer, ResponsesServerOptions
from langgraph.checkpoint.memory import InMemorySaver

from tests.hosts.apps.recovery_pipeline import JournaledCheckpointer, graph

checkpointer = JournaledCheckpointer(store_prefix="recovery-invocations")
host = InvocationsHostServer(
    graph(InMemorySaver() if os.environ.get("RECOVERY_CHECKPOINTER") == "memory" else checkpointer),
    options=ResponsesServerOptions(resilient_background=True, steerable_conversations=True),
)
app = host.app
app.shutdown_handler(checkpointer.aclose)
