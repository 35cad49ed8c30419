"""Out-of-process services the benchmarks talk to: the Foundry emulator and Azurite.

The emulator runs in a process of its own (``python -m benchmarks._services``) so that the
client under test does not share its interpreter (and GIL) with the server, as it would not
with the real service. The child answers one JSON line per command on stdin: ``counts``
(requests by call type, item values written and their bytes), ``reset``, ``delay SECONDS``
(a pure delay on every storage request from now on, the emulator's fault; 0 removes it),
``intervals`` (each storage request served since the last ``reset`` or ``intervals``: its
call type and ``CLOCK_MONOTONIC`` start and end, taken around the handler), ``faults JSON``
(replace the fault rules with a list of ``Fault`` keyword arguments, tried in order),
``mint JSON`` (``{"users": [...], "per_user": n}``: n call ids minted for each user) and
``stop``. Item
bytes are the compact JSON text of every value the engine accepted (``create_item`` and
``put_item``), counted by wrapping the engine's value check.

Example:
    >>> with RemoteEmulator() as emu:  # doctest: +SKIP
    ...     emu.reset()
    ...     ...  # run a client against emu.endpoint with EmulatorCredential("alice")
    ...     emu.counts()["requests"]["put_item"]
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Any

__all__ = ["AZURITE_BIN", "RemoteEmulator", "azurite_connection_string", "running_azurite"]

REPO_ROOT = Path(__file__).resolve().parents[1]
AZURITE_BIN = REPO_ROOT / "node_modules" / ".bin" / "azurite-blob"
# Azurite's public, documented development account key (not a secret).
_AZURITE_KEY = (
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
)
_LISTENING = re.compile(r"successfully listens on http://127\.0\.0\.1:(\d+)")


class RemoteEmulator:
    """A :class:`FoundryEmulator` in a child process, with request and byte counts."""

    def __init__(self) -> None:
        self._proc: subprocess.Popen[str] | None = None
        self.endpoint = ""
        self.ca_file = ""
        self.trusted_by_env = False

    def trust(self) -> None:
        """Make this process trust the emulator's CA the way it would trust the service's.

        Sets ``SSL_CERT_FILE`` to the emulator's CA file while aiohttp is not imported yet
        (it builds its default SSL context at import), so the client keeps its default TLS
        settings and reuses connections. Passing ``connection_verify=<CA path>`` instead makes
        azure-core build a new SSL context per request, so every request opens a new TLS
        connection and the old ones stay open until keep-alive expiry. When aiohttp is
        already imported, :meth:`client_kwargs` falls back to ``connection_verify``.
        """
        if "aiohttp" not in sys.modules:
            os.environ["SSL_CERT_FILE"] = self.ca_file
            self.trusted_by_env = True
        os.environ["FOUNDRY_HOSTING_ENVIRONMENT"] = "1"
        os.environ["FOUNDRY_PROJECT_ENDPOINT"] = self.endpoint

    def client_kwargs(self) -> dict[str, Any]:
        """Extra ``FoundryStateStore`` keyword arguments (none when :meth:`trust` worked)."""
        return {} if self.trusted_by_env else {"connection_verify": self.ca_file}

    def __enter__(self) -> RemoteEmulator:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "benchmarks._services"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            cwd=REPO_ROOT,
        )
        hello = self._read()
        self.endpoint = str(hello["endpoint"])
        self.ca_file = str(hello["ca_file"])
        return self

    def _read(self) -> dict[str, Any]:
        assert self._proc is not None and self._proc.stdout is not None
        line = self._proc.stdout.readline()
        if not line:
            raise RuntimeError("the emulator process exited")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def _ask(self, command: str) -> dict[str, Any]:
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.write(command + "\n")
        self._proc.stdin.flush()
        return self._read()

    def counts(self) -> dict[str, Any]:
        """``{"requests": {call type: n}, "items": n, "item_bytes": n}`` since the last reset."""
        return self._ask("counts")

    def reset(self) -> None:
        """Zero the counts (and forget the request intervals)."""
        self._ask("reset")

    def delay(self, seconds: float) -> None:
        """Delay every storage request by ``seconds`` from now on (0: no delay)."""
        self._ask(f"delay {seconds!r}")

    def intervals(self) -> list[tuple[str, float, float]]:
        """``(call type, start, end)`` of each request since the last reset or call, in order."""
        answer = self._ask("intervals")
        return [(str(c), float(s), float(e)) for c, s, e in answer["intervals"]]

    def set_faults(self, rules: list[dict[str, Any]]) -> None:
        """Replace the fault rules with ``rules`` (``Fault`` keyword arguments, in order)."""
        self._ask("faults " + json.dumps(rules))

    def mint_calls(self, users: list[str], per_user: int) -> dict[str, list[str]]:
        """``per_user`` platform call ids minted for each of ``users``, as the platform does."""
        answer = self._ask("mint " + json.dumps({"users": users, "per_user": per_user}))
        return {str(k): [str(c) for c in v] for k, v in answer["calls"].items()}

    @property
    def pid(self) -> int | None:
        """The emulator process's id (for its CPU time), or None when it is not running."""
        return None if self._proc is None else self._proc.pid

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(Exception):
            assert proc.stdin is not None
            proc.stdin.write("stop\n")
            proc.stdin.close()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)


def _serve() -> int:
    """Child side: run the emulator, count value bytes, answer commands on stdin."""
    import foundry_checkpoint._store._engine as engine_module
    from foundry_checkpoint.emulator import FoundryEmulator

    tally = {"items": 0, "item_bytes": 0}
    original = engine_module.validate_value  # type: ignore[attr-defined]

    def counting(value: object) -> str:
        text = original(value)
        tally["items"] += 1
        tally["item_bytes"] += len(text.encode("utf-8"))
        return text

    setattr(engine_module, "validate_value", counting)  # noqa: B010
    intervals = _log_intervals()
    with FoundryEmulator() as emu:
        out = sys.stdout
        out.write(json.dumps({"endpoint": emu.endpoint, "ca_file": emu.ca_file}) + "\n")
        out.flush()
        for line in sys.stdin:
            command = line.strip()
            if command == "counts":
                answer: dict[str, Any] = {"requests": dict(emu.requests), **tally}
            elif command == "reset":
                emu.reset_counts()
                tally.update(items=0, item_bytes=0)
                intervals.clear()
                answer = {"ok": True}
            elif command.startswith("delay "):
                emu.clear_faults()
                seconds = float(command.split()[1])
                if seconds > 0:
                    emu.inject("*", status=None, delay=seconds, times=None)
                answer = {"ok": True}
            elif command == "intervals":
                answer = {"intervals": list(intervals)}
                intervals.clear()
            elif command.startswith("faults "):
                emu.clear_faults()
                for rule in json.loads(command.split(" ", 1)[1]):
                    emu.inject(**rule)
                answer = {"ok": True}
            elif command.startswith("mint "):
                ask = json.loads(command.split(" ", 1)[1])
                answer = {
                    "calls": {
                        user: [emu.mint_call(user) for _ in range(int(ask["per_user"]))]
                        for user in ask["users"]
                    }
                }
            else:
                break
            out.write(json.dumps(answer) + "\n")
            out.flush()
    return 0


def _log_intervals() -> list[tuple[str, float, float]]:
    """Record every storage request's call type, start and end (``time.monotonic``)."""
    from foundry_checkpoint.emulator import _app

    log: list[tuple[str, float, float]] = []
    original = _app.StorageApp._handle

    async def handle(app: Any, request: Any) -> Any:
        match = _app._ROUTE.match(request.path)
        call = _app.StorageApp._call_type(request.method, match) if match else None
        start = time.monotonic()
        try:
            return await original(app, request)
        finally:
            if call is not None:
                log.append((call, start, time.monotonic()))

    setattr(_app.StorageApp, "_handle", handle)  # noqa: B010
    return log


def azurite_connection_string(port: int) -> str:
    """The connection string of Azurite's development account on ``port``."""
    return (
        "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;"
        f"AccountKey={_AZURITE_KEY};"
        f"BlobEndpoint=http://127.0.0.1:{port}/devstoreaccount1;"
    )


@contextlib.contextmanager
def running_azurite() -> Iterator[int | None]:
    """Run Azurite's blob service in memory on a free loopback port; yields the port.

    Yields None when Azurite (``npm ci`` at the repository root) or Node.js is missing.
    """
    if not AZURITE_BIN.exists() or shutil.which("node") is None:
        yield None
        return
    workdir = Path(tempfile.mkdtemp(prefix="foundry-bench-azurite-"))
    log_path = workdir / "azurite.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            [
                str(AZURITE_BIN),
                "--blobHost",
                "127.0.0.1",
                "--blobPort",
                "0",
                "--inMemoryPersistence",
                "--silent",
                "--disableTelemetry",
                "--skipApiVersionCheck",
            ],
            cwd=workdir,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        port: int | None = None
        deadline = time.monotonic() + 60
        while port is None and proc.poll() is None and time.monotonic() < deadline:
            match = _LISTENING.search(log_path.read_text(errors="replace"))
            if match:
                port = int(match.group(1))
            else:
                time.sleep(0.05)
        yield port
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(_serve())
