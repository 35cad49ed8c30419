"""Test helpers: a loopback AutoGen gRPC host that always stops.

The gRPC host has no ``localhost:0``; two hosts asked for one port may both bind it (with
``SO_REUSEPORT``) and share traffic silently. :func:`loopback_host` probes a free port on
127.0.0.1, starts the host with ``("grpc.so_reuseport", 0)`` so a collision fails loudly (and is
retried on another port), waits until the port accepts connections, and stops the host in a
``finally`` with the given grace (AutoGen's default waits 5 s while a worker is connected).
Create it inside the test's own event loop; a host left running spins a CPU.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

__all__ = ["GRPC_OPTIONS", "loopback_host"]

#: Channel and server options for loopback tests: no port sharing.
GRPC_OPTIONS: Final = [("grpc.so_reuseport", 0)]

_ATTEMPTS: Final = 5


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


async def _accepting(port: int, timeout: float) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        try:
            _, writer = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            if asyncio.get_running_loop().time() > deadline:
                raise
            await asyncio.sleep(0.01)
        else:
            writer.close()
            await writer.wait_closed()
            return


@asynccontextmanager
async def loopback_host(*, grace: int = 0, timeout: float = 10.0) -> AsyncIterator[str]:
    """Run a ``GrpcWorkerAgentRuntimeHost`` on a free 127.0.0.1 port for the block.

    Args:
        grace: Seconds the host's ``stop`` grants running calls at the end.
        timeout: Seconds to wait for the host to accept connections.

    Yields:
        The host's ``127.0.0.1:<port>`` address, once it accepts connections.

    Raises:
        RuntimeError: no free port could be bound after a few attempts.
        OSError: the host did not accept connections within ``timeout``.

    Example:
        >>> async def demo() -> bool:
        ...     async with loopback_host() as address:
        ...         return address.startswith("127.0.0.1:")
        >>> asyncio.run(demo())
        True
    """
    from autogen_ext.runtimes.grpc import GrpcWorkerAgentRuntimeHost

    last: BaseException | None = None
    for _ in range(_ATTEMPTS):
        port = _free_port()
        address = f"127.0.0.1:{port}"
        try:
            host = GrpcWorkerAgentRuntimeHost(address, extra_grpc_config=GRPC_OPTIONS)
        except RuntimeError as exc:  # the port was taken in between: try another
            last = exc
            continue
        host.start()
        try:
            await _accepting(port, timeout)
            yield address
        finally:
            await host.stop(grace=grace)
        return
    raise RuntimeError(f"no free loopback port for a gRPC host after {_ATTEMPTS} attempts: {last}")
