"""The sender's request context, carried with a message to the handler that receives it.

In a Foundry-hosted agent the hosts put each inbound request's platform identity in the request
context (``azure.ai.agentserver.core.get_request_context()``: the call id the SDK forwards on
every store call, from which the service resolves the caller's isolation partition, and the
user id). An AutoGen runtime loses it on the way to the handler: it handles every message in a
task of its own, made from the context the runtime was *started* in, not the sender's
(measured on autogen-core 0.7.5: a message sent in user ``cy``'s request to a runtime started in
``bob``'s is handled as ``bob``). So whatever the handler stores (a
:class:`~foundry_checkpoint_autogen.DurableAgent`'s state, a checkpointer it calls) would go to
the partition of whoever started the runtime.

The runtimes of this package carry it: :func:`capture` takes the sender's context when a
message is sent, as a few string fields (the platform's own header names), and
:func:`restored` makes exactly that context current around the handler; a message sent with
no request context is handled with none (never with the starter's).
``DurableSingleThreadedAgentRuntime`` keeps the captured context beside the queued envelope
(keyed by its message id); ``DurableGrpcWorkerAgentRuntime`` puts the fields into the message
itself (the ``RpcRequest``'s ``metadata`` map, the ``CloudEvent``'s attributes), which the gRPC
host forwards unchanged to the worker that hosts the recipient.

Example:
    >>> from azure.ai.agentserver.core import (FoundryAgentRequestContext, get_request_context,
    ...     reset_request_context, set_request_context)
    >>> token = set_request_context(FoundryAgentRequestContext(call_id="c-1", user_id="ann"))
    >>> carried = capture()
    >>> reset_request_context(token)
    >>> carried
    {'x-agent-foundry-call-id': 'c-1', 'x-agent-user-id': 'ann'}
    >>> with restored(carried):
    ...     get_request_context().call_id, get_request_context().user_id
    ('c-1', 'ann')
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Final

from azure.ai.agentserver.core import (
    FoundryAgentRequestContext,
    get_request_context,
    reset_request_context,
    set_request_context,
)

__all__ = ["CALL_ID_KEY", "CARRIED_KEYS", "SESSION_ID_KEY", "USER_ID_KEY", "capture", "restored"]

#: The carried call id (the platform's header name).
CALL_ID_KEY: Final = "x-agent-foundry-call-id"
#: The carried user id (the platform's header name).
USER_ID_KEY: Final = "x-agent-user-id"
#: The carried session id.
SESSION_ID_KEY: Final = "x-agent-session-id"
#: Every key a carrier may hold.
CARRIED_KEYS: Final = (CALL_ID_KEY, USER_ID_KEY, SESSION_ID_KEY)


def capture() -> dict[str, str]:
    """The current request context as a carrier: its non-empty fields by key.

    Returns:
        The carrier (empty outside a request).

    Example:
        >>> capture()
        {}
    """
    context = get_request_context()
    values = (context.call_id, context.user_id, context.session_id)
    return {key: value for key, value in zip(CARRIED_KEYS, values, strict=True) if value}


def context_of(carrier: Mapping[str, str]) -> FoundryAgentRequestContext:
    """The request context a carrier stands for (keys it does not hold are None).

    Args:
        carrier: What :func:`capture` returned, or a mapping holding its keys among others.

    Returns:
        The request context.

    Example:
        >>> context_of({CALL_ID_KEY: "c-2", "traceparent": "00-..."}).call_id
        'c-2'
    """
    return FoundryAgentRequestContext(
        call_id=carrier.get(CALL_ID_KEY) or None,
        user_id=carrier.get(USER_ID_KEY) or None,
        session_id=carrier.get(SESSION_ID_KEY) or None,
    )


@contextmanager
def restored(carrier: Mapping[str, str] | FoundryAgentRequestContext | None) -> Iterator[None]:
    """Make the carried request context current for the block (None: no request context).

    Args:
        carrier: A carrier, a request context, or None for an empty one.

    Yields:
        Nothing; the previous context is back after the block.

    Example:
        >>> with restored(None):
        ...     get_request_context().call_id is None
        True
    """
    if carrier is None:
        context = FoundryAgentRequestContext()
    elif isinstance(carrier, FoundryAgentRequestContext):
        context = carrier
    else:
        context = context_of(carrier)
    token = set_request_context(context)
    try:
        yield
    finally:
        reset_request_context(token)
