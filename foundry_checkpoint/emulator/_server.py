"""``FoundryEmulator``: the HTTPS server, on a thread and event loop of its own."""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable
from pathlib import Path
from types import TracebackType
from typing import Final

from aiohttp import web

from foundry_checkpoint._store._engine import StateEngine
from foundry_checkpoint.errors import InvalidArgumentError

from ._app import StorageApp
from ._credential import EmulatorCredential
from ._faults import Fault, FaultPlan
from ._identity import CallTable
from ._platform import IDENTITY_PATH, ManagedIdentityEndpoint, agent_environment
from ._tasks import open_platform_database
from ._tls import TlsMaterial, make_tls_material

__all__ = ["FoundryEmulator"]

_START_TIMEOUT_SECONDS: Final = 30.0
_STOP_TIMEOUT_SECONDS: Final = 30.0
#: How long stop() lets an in-flight request (say, one held by a ``delay`` fault) finish.
_SHUTDOWN_GRACE_SECONDS: Final = 1.0


class _ServerThread:
    """The socket, certificate, thread and event loop that exist only between start() and stop().

    The thread runs its own loop and its own engine (whose calls the app runs on a worker
    thread), so a caller that blocks its own loop while waiting for store I/O cannot stall it.
    """

    def __init__(self, tls: TlsMaterial, sock: socket.socket) -> None:
        self.tls = tls
        self.sock = sock
        self.port: int = sock.getsockname()[1]
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.runner: web.AppRunner | None = None
        self.thread: threading.Thread | None = None

    @classmethod
    def bind(cls, host: str, port: int) -> _ServerThread:
        """Create the certificate and a listening socket (both removed again on failure)."""
        tls = make_tls_material()
        try:
            family = socket.AF_INET6 if ":" in host else socket.AF_INET
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                sock.bind((host, port))
                sock.listen(128)
                sock.setblocking(False)
            except BaseException:
                sock.close()
                raise
        except BaseException:
            tls.remove()
            raise
        return cls(tls, sock)

    def start(
        self,
        app: StorageApp,
        web_app: Callable[[], web.Application],
        engine: Callable[[], StateEngine],
    ) -> None:
        """Serve the app on a new thread, both made there; RuntimeError if it does not come up."""
        thread = threading.Thread(
            target=self._serve,
            args=(app, web_app, engine),
            name=f"foundry-emulator:{self.port}",
            daemon=True,
        )
        self.thread = thread
        thread.start()
        if not self.ready.wait(_START_TIMEOUT_SECONDS) or self.error is not None:
            self.teardown()
            reason = "timed out" if self.error is None else repr(self.error)
            raise RuntimeError(f"the Foundry emulator failed to start: {reason}") from self.error

    def _serve(
        self,
        app: StorageApp,
        web_app: Callable[[], web.Application],
        open_engine: Callable[[], StateEngine],
    ) -> None:
        loop = asyncio.new_event_loop()
        self.loop = loop
        asyncio.set_event_loop(loop)
        engine: StateEngine | None = None
        try:
            try:
                engine = open_engine()
                app.bind(engine)
                loop.run_until_complete(self._start_site(web_app()))
            except BaseException as exc:
                self.error = exc
                return
            finally:
                self.ready.set()
            loop.run_forever()
        finally:
            if self.runner is not None:
                loop.run_until_complete(self.runner.cleanup())
            app.unbind()
            if engine is not None:
                engine.close()
            try:
                loop.run_until_complete(loop.shutdown_asyncgens())
            finally:
                asyncio.set_event_loop(None)
                loop.close()

    async def _start_site(self, web_app: web.Application) -> None:
        runner = web.AppRunner(
            web_app, access_log=None, handle_signals=False, shutdown_timeout=_SHUTDOWN_GRACE_SECONDS
        )
        await runner.setup()
        self.runner = runner
        site = web.SockSite(runner, self.sock, ssl_context=self.tls.server_context())
        await site.start()

    def teardown(self) -> None:
        """Stop the loop, join the thread, close the socket and remove the certificate."""
        loop, thread = self.loop, self.thread
        if loop is not None and thread is not None and thread.is_alive():
            # RuntimeError: the loop already closed itself after a failed start
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(loop.stop)
        if thread is not None:
            thread.join(_STOP_TIMEOUT_SECONDS)
        self.sock.close()
        self.tls.remove()


class FoundryEmulator:
    """A loopback HTTPS emulator of the Foundry state-store REST API.

    It serves the nine calls of the wire contract (stores and items, ``list_keys`` with tags,
    limits, cursors and order) over the same SQLite engine as the embedded local store, so the
    real ``FoundryStateStore`` client can run in hosted mode without a Foundry project. The
    server runs on its own thread and event loop whichever way it is started, so synchronous
    code that blocks its own loop while waiting for store I/O cannot deadlock it. Beside the
    state store it serves the platform's task API (``…/tasks``) and the Responses hosts'
    response store (``…/storage/responses``, ``…/storage/history/item_ids``...), partitioned by
    caller and kept in the same database, so a host runs on :meth:`agent_environment` alone.

    Args:
        host: Interface to listen on; loopback only (``127.0.0.1``, ``::1`` or ``localhost``).
        port: TCP port; 0 picks a free one.
        data: SQLite file that keeps the state across restarts; None keeps it in memory.
        seed: Seeds the engine's order among keys created in the same second (deliberately
            not insertion order) and the draws of probabilistic faults.
        clock: Time source of the engine (TTL, ``created_at``); defaults to ``time.time``.
        project: Project name in :attr:`endpoint`.
        trusted_callers: Callers (the users their bearer tokens name, such as
            ``credential(user="frontdoor")``'s) whose delegated ``x-ms-user-id`` is honoured;
            ``["*"]`` honours it from every caller. By default nobody is trusted and the header
            is ignored, as the service ignores it from ordinary callers. See
            :meth:`trust_caller`.

    Raises:
        InvalidArgumentError: (a ``ValueError``) a host that is not a loopback address.

    Example:
        >>> import asyncio, os
        >>> from azure.ai.agentserver.core.storage import FoundryStateStore
        >>> os.environ["FOUNDRY_HOSTING_ENVIRONMENT"] = "1"  # hosted mode, as on the platform
        >>> async def demo() -> int:
        ...     async with FoundryEmulator() as emu:
        ...         store = await FoundryStateStore.get_or_create(
        ...             "demo", emu.credential(user="alice"), emu.endpoint,
        ...             connection_verify=emu.ca_file,
        ...         )
        ...         await store.set_item("k", {"v": 1})
        ...         await store.aclose()
        ...         return emu.requests["put_item"]
        >>> asyncio.run(demo())
        1

        From synchronous code: ``with FoundryEmulator() as emu: ...``, or ``start()``/``stop()``.
    """

    def __init__(
        self,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        data: str | os.PathLike[str] | None = None,
        seed: int = 0,
        clock: Callable[[], float] | None = None,
        project: str = "emulator",
        trusted_callers: Iterable[str] = (),
    ) -> None:
        if host not in ("127.0.0.1", "::1", "localhost"):
            raise InvalidArgumentError(f"the emulator listens on loopback only; got host={host!r}")
        self._host = host
        self._requested_port = port
        self._data = Path(data) if data is not None else None
        self._seed = seed
        self._clock: Callable[[], float] = clock if clock is not None else time.time
        self._project = project
        self._faults = FaultPlan(seed=seed)
        self._running: _ServerThread | None = None
        self._lifecycle = threading.Lock()
        # One handler per instance: counts survive a stop()/start() cycle.
        self._app = StorageApp(self._faults, CallTable(trusted_callers))
        self._identity = ManagedIdentityEndpoint()

    # --- lifecycle ----------------------------------------------------------------------

    def start(self) -> FoundryEmulator:
        """Start serving (a no-op when already running).

        Returns:
            This emulator, so that ``emu = FoundryEmulator().start()`` reads naturally.

        Raises:
            OSError: the port cannot be bound.
            RuntimeError: the server thread failed to come up.
        """
        with self._lifecycle:
            if self._running is not None:
                return self
            running = _ServerThread.bind(self._host, self._requested_port)
            running.start(self._app, self._web_app, self._open_engine)
            self._running = running
            return self

    def stop(self) -> None:
        """Stop serving and remove the certificate files; calling it again does nothing."""
        with self._lifecycle:
            running, self._running = self._running, None
            if running is not None:
                running.teardown()

    def __enter__(self) -> FoundryEmulator:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()

    async def __aenter__(self) -> FoundryEmulator:
        return await asyncio.to_thread(self.start)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_value: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await asyncio.to_thread(self.stop)

    # --- where and how to connect ------------------------------------------------------

    @property
    def running(self) -> bool:
        """Whether the server is up."""
        return self._running is not None

    @property
    def port(self) -> int:
        """The TCP port in use."""
        return self._require_running().port

    @property
    def endpoint(self) -> str:
        """Project endpoint to pass as ``endpoint=`` (the client appends ``/storage/``)."""
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"https://{host}:{self.port}/api/projects/{self._project}"

    @property
    def ca_file(self) -> str:
        """PEM file of this instance's CA, to pass as ``connection_verify=``."""
        return str(self._require_running().tls.ca_file)

    @property
    def data(self) -> Path | None:
        """The SQLite file holding the state, or None when it is kept in memory."""
        return self._data

    @property
    def seed(self) -> int:
        """The seed of tie order and fault draws."""
        return self._seed

    def bind_call(self, call_id: str, user: str) -> None:
        """Make requests carrying ``x-agent-foundry-call-id: call_id`` resolve to ``user``.

        This is how the platform identifies the end user of a hosted agent's request: the SDK
        forwards the call id from ``get_request_context()`` on every store call, and the service
        resolves the caller from it. A request with a call id nobody bound gets 403. Bindings
        survive ``stop()``/``start()``. See ``docs/emulator.md`` for the full resolution order.

        Args:
            call_id: The value of the ``x-agent-foundry-call-id`` header.
            user: The user whose isolation partition such requests read and write.

        Raises:
            InvalidArgumentError: (a ``ValueError``) an empty ``call_id`` or ``user``, or
                ``call_id`` already bound to another user.

        Example:
            >>> emu = FoundryEmulator()
            >>> emu.bind_call("call-from-the-platform", "alice")
            >>> emu.user_for_call("call-from-the-platform")
            'alice'
        """
        self._app.calls.bind(call_id, user)

    def mint_call(self, user: str) -> str:
        """Mint a new call id bound to ``user``, as the platform mints one per request.

        Args:
            user: The user the call id resolves to.

        Returns:
            The new call id (to send as ``x-agent-foundry-call-id``).

        Example:
            >>> emu = FoundryEmulator()
            >>> call_id = emu.mint_call("bob")
            >>> emu.user_for_call(call_id)
            'bob'
        """
        return self._app.calls.mint(user)

    def trust_caller(self, caller: str) -> None:
        """Honour the delegated ``x-ms-user-id`` of requests whose token names ``caller``.

        The SDK's TypeSpec says the service honours ``x-ms-user-id`` "only for trusted
        (S2S/managed-identity) callers; ignored otherwise (falls back to hash(oid, tid))"; by
        default the emulator trusts nobody and partitions such requests by their token. A call
        id, when present, still decides first. ``"*"`` trusts every caller. Trust survives
        ``stop()``/``start()``; :meth:`distrust_caller` takes it back.

        Args:
            caller: The user the caller's bearer token names (``credential(user=...)``), or
                ``"*"``.

        Raises:
            InvalidArgumentError: (a ``ValueError``) an empty ``caller``.

        Example:
            >>> emu = FoundryEmulator()
            >>> emu.trust_caller("frontdoor")
            >>> sorted(emu.trusted_callers)
            ['frontdoor']
            >>> emu.distrust_caller("frontdoor")
        """
        self._app.calls.trust(caller)

    def distrust_caller(self, caller: str) -> None:
        """Ignore ``caller``'s ``x-ms-user-id`` again (nothing when it was not trusted).

        Args:
            caller: A name passed to :meth:`trust_caller` or ``trusted_callers=``.
        """
        self._app.calls.distrust(caller)

    @property
    def trusted_callers(self) -> frozenset[str]:
        """The callers whose ``x-ms-user-id`` is honoured (empty: strict, the default)."""
        return self._app.calls.trusted

    def user_for_call(self, call_id: str) -> str | None:
        """Look up the user a call id is bound to.

        Args:
            call_id: A call id bound with :meth:`bind_call` or minted by :meth:`mint_call`.

        Returns:
            The user, or None when the call id is unknown.
        """
        return self._app.calls.user_for(call_id)

    def credential(self, user: str = "alice") -> EmulatorCredential:
        """Make an async credential whose tokens this emulator maps to ``user``'s partition.

        Args:
            user: The user the credential's bearer tokens stand for.

        Returns:
            An :class:`~foundry_checkpoint.emulator.EmulatorCredential` for ``user``.

        Example:
            >>> FoundryEmulator().credential(user="bob").user
            'bob'
        """
        return EmulatorCredential(user)

    @property
    def identity_endpoint(self) -> str:
        """URL of the managed-identity token endpoint this emulator serves (``IDENTITY_ENDPOINT``).

        Its tokens resolve to the container's own identity; a request's call id, when bound,
        still decides whose partition it reads and writes.
        """
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"https://{host}:{self.port}{IDENTITY_PATH}"

    def agent_environment(self, *, session_id: str = "emulator-session") -> dict[str, str]:
        """Environment variables that run a hosted agent's process, unchanged, on this emulator.

        What the platform sets on a hosted agent's container (``FOUNDRY_HOSTING_ENVIRONMENT``,
        ``FOUNDRY_PROJECT_ENDPOINT``, ``FOUNDRY_AGENT_SESSION_ID``), a managed identity served
        by the emulator (``IDENTITY_ENDPOINT``, ``IDENTITY_HEADER``, and
        ``AZURE_TOKEN_CREDENTIALS=ManagedIdentityCredential`` so ``DefaultAzureCredential`` tries
        nothing else), ``SSL_CERT_FILE`` to trust the emulator's certificate, and the hosts' usage
        telemetry turned off. Pass them to a new process: ``SSL_CERT_FILE`` is read at start-up,
        and it replaces the system CA bundle of that process.

        Start the agent with ``subprocess.Popen(cmd, env={**os.environ, **env})``.

        Args:
            session_id: The platform session id to set as ``FOUNDRY_AGENT_SESSION_ID``.

        Returns:
            The variables, by name.

        Example:
            >>> with FoundryEmulator() as emu:
            ...     env = emu.agent_environment(session_id="s-1")
            ...     env["FOUNDRY_PROJECT_ENDPOINT"] == emu.endpoint, env["IDENTITY_HEADER"] != ""
            (True, True)
        """
        return agent_environment(
            endpoint=self.endpoint,
            identity_endpoint=self.identity_endpoint,
            identity_secret=self._identity.secret,
            ca_file=self.ca_file,
            session_id=session_id,
        )

    # --- observability and faults --------------------------------------------------------

    @property
    def requests(self) -> Counter[str]:
        """Snapshot of call type -> requests routed, faulted ones included.

        Example:
            >>> FoundryEmulator().requests["put_item"]
            0
        """
        return self._app.requests

    @property
    def platform_requests(self) -> Counter[str]:
        """Snapshot of task and response-store call -> requests routed (not in :attr:`requests`).

        The calls: ``create_task``, ``get_task``, ``update_task``, ``delete_task``,
        ``list_tasks``, ``create_response``, ``get_response``, ``update_response``,
        ``delete_response``, ``list_input_items``, ``get_response_items``,
        ``get_history_item_ids``.

        Example:
            >>> FoundryEmulator().platform_requests["create_task"]
            0
        """
        return self._app.platform_requests

    @property
    def faults_served(self) -> Counter[str]:
        """Snapshot of call type -> requests an injected fault was applied to."""
        return self._app.faults_served

    def reset_counts(self) -> None:
        """Set :attr:`requests` and :attr:`faults_served` back to zero."""
        self._app.reset_counts()

    def inject(
        self,
        route: str = "*",
        *,
        status: int | None = 503,
        retry_after: float | None = None,
        drop: bool = False,
        delay: float = 0.0,
        times: int | None = 1,
        probability: float = 1.0,
        user: str | None = None,
        store: str | None = None,
    ) -> Fault:
        """Arm a fault for the next ``times`` requests of call type ``route`` (``"*"``: any).

        A faulted request is answered before the engine is touched, so it changes nothing:
        after ``delay`` seconds it is dropped without a response (``drop=True``) or answered
        with ``status`` (``Retry-After`` only when ``retry_after`` is given); ``status=None``
        without ``drop`` only delays it. ``probability`` below 1 draws from the emulator's
        seeded generator. See :class:`~foundry_checkpoint.emulator.Fault`.

        Args:
            route: The call type to fault (one of ``CALL_TYPES``), or ``"*"`` for any.
            status: The status code to answer; None with ``drop=False`` only delays.
            retry_after: Seconds for a ``Retry-After`` header; None sends none.
            drop: Close the connection without answering.
            delay: Seconds to wait before the fault is served.
            times: How many requests the fault applies to; None for every one.
            probability: The chance that a matching request is faulted (seeded draws).
            user: Only requests that resolve to this user (their call id's, else their
                token's); None for any. Arm it before a catch-all rule: the first match wins.
            store: Only requests on the store of this name; None for any.

        Returns:
            The armed :class:`~foundry_checkpoint.emulator.Fault`.

        Raises:
            InvalidArgumentError: (a ``ValueError``) an unknown route or an out-of-range value.

        Example:
            >>> emu = FoundryEmulator()
            >>> emu.inject("put_item", status=429, retry_after=0).status
            429
            >>> emu.clear_faults()
        """
        return self._faults.add(
            Fault(
                route,
                status=status,
                retry_after=retry_after,
                drop=drop,
                delay=delay,
                times=times,
                probability=probability,
                user=user,
                store=store,
            )
        )

    def clear_faults(self) -> None:
        """Disarm every injected fault."""
        self._faults.clear()

    def pending_faults(self) -> list[tuple[Fault, int | None]]:
        """List the armed faults.

        Returns:
            Each armed fault with its remaining uses (None: unlimited).
        """
        return self._faults.pending()

    # --- internals ---------------------------------------------------------------------

    def _require_running(self) -> _ServerThread:
        running = self._running
        if running is None:
            raise RuntimeError("the Foundry emulator is not running; call start() first")
        return running

    def _web_app(self) -> web.Application:
        return self._app.web_app(self._identity)

    def _open_engine(self) -> StateEngine:
        engine = StateEngine(self._data, tie_seed=self._seed, clock=self._clock)
        try:
            # the task API and the response store: tables of their own in the same database
            path = str(self._data) if self._data is not None else None
            self._app.bind_platform(open_platform_database(path), self._clock)
        except BaseException:
            engine.close()
            raise
        return engine

    def __repr__(self) -> str:
        where = self.endpoint if self._running is not None else "stopped"
        return f"FoundryEmulator({where}, data={self._data}, seed={self._seed})"
