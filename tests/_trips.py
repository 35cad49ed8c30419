"""Round trips a hosted client waits for, counted from its own requests.

:class:`Trips` is an azure-core policy (pass it in ``per_call_policies=``) that holds every
request of the clients it is given for one simulated round trip and logs what the request was
(the emulator's call type), when it started and when it ended. :func:`chain` is the longest
run of requests that went one after the other: what a caller waits for on the service.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any
from urllib.parse import urlsplit

from azure.core.pipeline import PipelineRequest, PipelineResponse
from azure.core.pipeline.policies import AsyncHTTPPolicy

__all__ = ["TRIP_S", "Log", "Trips", "call_type", "chain"]

TRIP_S = 0.02
Log = list[tuple[str, float, float]]


def call_type(method: str, url: str) -> str:
    """The emulator's name for a storage request (``get_store``, ``put_item``...)."""
    path = urlsplit(url).path.rstrip("/")
    if path.endswith("/state_stores"):
        return "create_store" if method == "POST" else "list_stores"
    if path.endswith("/items:keys"):
        return "list_keys"
    if "/items/" in path:
        return {"GET": "get_item", "PUT": "put_item", "DELETE": "delete_item"}[method]
    if path.endswith("/items"):
        return "create_item"
    return {"GET": "get_store", "DELETE": "delete_store", "PATCH": "update_store"}[method]


class Trips(AsyncHTTPPolicy[Any, Any]):
    """Holds each request for :data:`TRIP_S` before sending it, and logs it (see the module)."""

    def __init__(self) -> None:
        super().__init__()
        self.log: Log = []

    async def send(self, request: PipelineRequest[Any]) -> PipelineResponse[Any, Any]:
        http = request.http_request
        start = time.monotonic()
        await asyncio.sleep(TRIP_S)
        try:
            return await self.next.send(request)
        finally:
            self.log.append((call_type(http.method, http.url), start, time.monotonic()))

    def take(self) -> Log:
        """The requests logged since the last call."""
        out, self.log = self.log, []
        return out


def chain(log: Log) -> int:
    """The longest chain of requests each starting after the previous one ended.

    Example:
        >>> chain([("a", 0.0, 1.0), ("b", 0.5, 1.5), ("c", 1.6, 2.0)])
        2
    """
    ordered = sorted(log, key=lambda call: call[2])
    chains: list[int] = []
    for i, (_, start, _end) in enumerate(ordered):
        chains.append(1 + max((chains[j] for j in range(i) if ordered[j][2] <= start), default=0))
    return max(chains, default=0)


def waves(log: Log) -> list[str]:
    """The requests in start order, grouped into those in flight together."""
    out: list[list[str]] = []
    wave_end = 0.0
    for call, start, end in sorted(log, key=lambda c: c[1]):
        if out and start < wave_end:
            out[-1].append(call)
            wave_end = min(wave_end, end)
        else:
            out.append([call])
            wave_end = end
    return [" | ".join(sorted(w)) for w in out]
