"""Run the emulator from a shell until SIGINT or SIGTERM.

Example::

    $ python -m foundry_checkpoint.emulator --port 0 --data state.sqlite
    endpoint: https://127.0.0.1:43817/api/projects/emulator
    ca_file: <temporary directory>/foundry-emulator-tls-x1y2/ca.pem
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from foundry_checkpoint.errors import InvalidArgumentError

from ._server import FoundryEmulator


def _parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m foundry_checkpoint.emulator",
        description="Loopback HTTPS emulator of the Foundry state-store REST API.",
    )
    parser.add_argument(
        "--host", default="127.0.0.1", help="loopback interface to listen on (default 127.0.0.1)"
    )
    parser.add_argument("--port", type=int, default=0, help="TCP port; 0 picks a free one")
    parser.add_argument(
        "--data",
        default=None,
        help="SQLite file keeping the state across restarts (default: memory)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of same-second key order and fault draws"
    )
    parser.add_argument("--project", default="emulator", help="project name in the endpoint")
    parser.add_argument(
        "--bind",
        action="append",
        default=[],
        metavar="CALL_ID=USER",
        help="resolve requests carrying x-agent-foundry-call-id CALL_ID to USER (repeatable)",
    )
    parser.add_argument(
        "--trust-delegation",
        action="append",
        default=[],
        metavar="CALLER",
        help="honour x-ms-user-id from requests whose token names CALLER ('*': every caller); "
        "by default it is ignored, as the service ignores it from untrusted callers (repeatable)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help='print one JSON line {"endpoint": ..., "ca_file": ...} instead of two text lines',
    )
    return parser.parse_args(argv)


def _bindings(pairs: Sequence[str]) -> list[tuple[str, str]]:
    bindings: list[tuple[str, str]] = []
    for pair in pairs:
        call_id, sep, user = pair.partition("=")
        if not sep or not call_id or not user:
            raise InvalidArgumentError(f"--bind takes CALL_ID=USER; got {pair!r}")
        bindings.append((call_id, user))
    return bindings


def main(argv: Sequence[str] | None = None) -> int:
    """Start the emulator, print its endpoint and CA file, serve until SIGINT/SIGTERM.

    Args:
        argv: The command-line arguments; ``sys.argv[1:]`` when None.

    Returns:
        The process exit status: 0 after a signal-requested stop, 2 when the emulator cannot
        start (a non-loopback host, a port in use, an unusable data file, a malformed
        ``--bind CALL_ID=USER``, an empty ``--trust-delegation``).
    """
    args = _parse_args(argv)
    stop = threading.Event()

    def _request_stop(signum: int, frame: FrameType | None) -> None:
        stop.set()

    previous = {
        signum: signal.signal(signum, _request_stop) for signum in (signal.SIGINT, signal.SIGTERM)
    }
    try:
        emulator = FoundryEmulator(
            host=args.host,
            port=args.port,
            data=args.data,
            seed=args.seed,
            project=args.project,
            trusted_callers=args.trust_delegation,
        )
        for call_id, user in _bindings(args.bind):
            emulator.bind_call(call_id, user)
        with emulator as emu:
            if args.json:
                print(json.dumps({"endpoint": emu.endpoint, "ca_file": emu.ca_file}), flush=True)
            else:
                print(f"endpoint: {emu.endpoint}", flush=True)
                print(f"ca_file: {emu.ca_file}", flush=True)
            stop.wait()
    except (ValueError, OSError, RuntimeError) as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    return 0


if __name__ == "__main__":
    sys.exit(main())
