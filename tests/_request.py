"""Test code run inside a request context, as the hosts run a handler."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from azure.ai.agentserver.core import (
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
