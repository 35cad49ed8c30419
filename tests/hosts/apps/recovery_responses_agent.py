"""A test host: ``samples/hosted_agents/langgraph_responses_host.py`` on the journaled graph.

The sample's host (langchain-azure-ai's ``ResponsesHostServer`` with ``resilient_background``
and ``steerable_conversations``, nothing configured for the platform) serving
``recovery_pipeline.graph`` (slow, journaled steps) on one ``JournaledCheckpointer`` (a
``FoundryCheckpointer`` that journals each step's stored writes; see that module).
``RECOVERY_CHECKPOINTER=memory`` gives the graph an ``InMemorySaver`` instead, for contrast.
"""

from __future__ import annotations

import atexit
import os

from langchain_azure_ai.agents.hosting import ResponsesHostServer, ResponsesServerOptions
from langgraph.checkpoint.memory import InMemorySaver

from samples.hosted_agents.langgraph_pipeline import HashedChainStore
from tests.hosts.apps.recovery_pipeline import JournaledCheckpointer, graph

checkpointer = JournaledCheckpointer(store_prefix="recovery-responses")
host = ResponsesHostServer(
    graph(InMemorySaver() if os.environ.get("RECOVERY_CHECKPOINTER") == "memory" else checkpointer),
    options=ResponsesServerOptions(resilient_background=True, steerable_conversations=True),
    conversation_chain_store=HashedChainStore(),
)
app = host.app
atexit.register(checkpointer.close)
