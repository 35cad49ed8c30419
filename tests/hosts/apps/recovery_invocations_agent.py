"""A test host: ``samples/hosted_agents/langgraph_invocations_host.py`` on the journaled graph.

The sample's host (langchain-azure-ai's ``InvocationsHostServer`` with ``resilient_background``
and ``steerable_conversations``, one ``FoundryCheckpointer``, nothing configured for the
platform) serving ``recovery_pipeline.graph``: slow, journaled steps (see that module).
"""

from __future__ import annotations

from langchain_azure_ai.agents.hosting import InvocationsHostServer, ResponsesServerOptions
from recovery_pipeline import graph

from foundry_checkpoint import FoundryCheckpointer

checkpointer = FoundryCheckpointer(store_prefix="recovery-invocations")
host = InvocationsHostServer(
    graph(checkpointer),
    options=ResponsesServerOptions(resilient_background=True, steerable_conversations=True),
)
app = host.app
app.shutdown_handler(checkpointer.aclose)
