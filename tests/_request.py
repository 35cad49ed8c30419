"""Test code run inside a request context, as the hosts run a handler; the host's agent config."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from azure.ai.agentserver.core import (
    AgentConfig,
    FoundryAgentRequestContext,
    reset_request_context,
    set_request_context,
)


@contextmanager
def in_request(context: FoundryAgentRequestContext) -> Iterator[None]:
    """Run the body with ``context`` as the request context (the platform's headers)."""
    token = set_request_context(context)
    try:
        yield
    finally:
        reset_request_context(token)


def agent_config(*, hosted: bool) -> AgentConfig:
    """The config of a host serving agent ``agent`` in session ``session-1`` (hosted or not)."""
    return AgentConfig(
        agent_name="agent",
        agent_version="1",
        agent_id="agent:1",
        is_hosted=hosted,
        project_endpoint="",
        project_id="",
        session_id="session-1",
        port=8088,
        appinsights_connection_string="",
        otlp_endpoint="",
        sse_keepalive_interval=15,
    )
