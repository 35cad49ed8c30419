"""Serve an agent app module on an inherited loopback socket, and let nothing leave the machine.

``python tests/hosts/_serve.py FD DIRECTORY MODULE:APP`` imports ``MODULE`` from ``DIRECTORY``
and serves ``APP`` with Hypercorn on the listening socket ``FD`` (opened by the test on
127.0.0.1 with an OS-chosen port), in this process (no worker processes), until SIGTERM.

Before anything else it installs an audit hook that refuses every socket connection and every
name lookup outside loopback, and reports each attempt on stderr as ``EGRESS BLOCKED: ...``; the
tests fail when a server's log has one.
"""

from __future__ import annotations

import ipaddress
import sys
from typing import Any

_LOOPBACK_NAMES = {"localhost", "ip6-localhost", "ip6-loopback"}
MARK = "EGRESS BLOCKED"


def _is_loopback(host: object) -> bool:
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    if not isinstance(host, str):
        return False
    if host.lower() in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def _guard(event: str, args: tuple[Any, ...]) -> None:
    if event == "socket.connect":
        address = args[1]
        if isinstance(address, tuple) and not _is_loopback(address[0]):
            print(f"{MARK}: connect to {address!r}", file=sys.stderr, flush=True)
            raise PermissionError(f"{MARK}: connect to {address!r}")
    elif event == "socket.getaddrinfo":
        host = args[0]
        if host is not None and not _is_loopback(host):
            print(f"{MARK}: name lookup of {host!r}", file=sys.stderr, flush=True)
            raise PermissionError(f"{MARK}: name lookup of {host!r}")


def main() -> None:
    sys.addaudithook(_guard)
    fd, directory, target = sys.argv[1], sys.argv[2], sys.argv[3]
    sys.path.insert(0, directory)
    from hypercorn.__main__ import main as hypercorn

    sys.exit(hypercorn(["--workers", "0", "--bind", f"fd://{fd}", target]))


if __name__ == "__main__":
    main()
