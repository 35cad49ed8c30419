"""``foundry-checkpoint ui``: a local explorer page of what is stored, served on loopback.

One aiohttp application, server-rendered HTML with inline CSS and SVG: no JavaScript, no build
step, nothing fetched from elsewhere. It lists LangGraph threads, LangGraph memory (a
``FoundryStore``'s namespaces and items, values shown), Agent Framework contexts and agent
sessions (a ``FoundryHistoryProvider``'s conversations, message by message), draws a
thread's checkpoint tree (and a workflow's lineage) as SVG, shows a checkpoint's values,
metadata and pending writes (long values cut, with "see more"), and diffs two checkpoints.
It goes through the same public API as the commands, on the backend the global options
select (hosted mode and the emulator included).

Safety: it binds to 127.0.0.1 unless told otherwise (and refuses a non-loopback host without
``--allow-remote``), answers only requests whose ``Host`` names that address (DNS rebinding),
escapes every stored value, and forbids scripts through its Content-Security-Policy.

Access needs a secret, as Jupyter's does: loopback is shared by every local process, and the
state root's file modes (0700) mean nothing if any local uid can ask the page. The URL the
command prints carries a random access token (``secrets.token_urlsafe(32)``, or the deployer's
own from ``FOUNDRY_CHECKPOINT_UI_TOKEN``); the first visit exchanges it for an HttpOnly,
SameSite=Strict cookie and redirects to the same URL without it, so it does not linger in the
address bar or the history. Every request without that cookie (or the token) gets 403, before
any route, store or page is looked at: every path, known or not (``/favicon.ico`` too), and
the write forms alike.
The token never appears in the process's command line, which other local users can read.

It is read-only unless started with ``--allow-writes``; then delete and prune ask on a
confirmation page whose form carries a per-process token, so another site cannot post to it.
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import re
import secrets
import signal
import socket
from collections.abc import Awaitable, Callable

from aiohttp import web

from ..errors import CorruptPayloadError, InvalidArgumentError
from . import _html, _ui_maf_agents, _ui_memory, _ui_pages, _ui_threads
from ._common import Options
from ._html import esc, seg
from ._ui_stores import Page, Refused, Stores

__all__ = ["TOKEN_ENV", "Explorer", "check_host", "check_token", "serve"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

TOKEN_ENV = "FOUNDRY_CHECKPOINT_UI_TOKEN"
"""The environment variable a deployer sets to choose the access token (else a random one)."""

_TOKEN = re.compile(r"[A-Za-z0-9._~-]{32,256}")
_FORBIDDEN = (
    "forbidden: open the URL that 'foundry-checkpoint ui' printed (it carries the access "
    "token); a token from another run of the explorer is not this one's\n"
)


def check_host(host: str, *, allow_remote: bool) -> None:
    """Refuse a host that is not a loopback address unless ``allow_remote``.

    Args:
        host: the address (or ``localhost``) the explorer is to listen on.
        allow_remote: serve on an address that is not loopback anyway.

    Raises:
        InvalidArgumentError: ``host`` is not loopback and ``allow_remote`` is false (also a
            ``ValueError``).

    Example:
        >>> check_host("127.0.0.1", allow_remote=False)
        >>> check_host("0.0.0.0", allow_remote=False)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        foundry_checkpoint.errors.InvalidArgumentError: refusing to serve on '0.0.0.0': ...
    """
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = host == "localhost"
    if not loopback and not allow_remote:
        raise InvalidArgumentError(
            f"refusing to serve on {host!r}: not a loopback address (state is user data); "
            "pass --allow-remote to serve it there anyway"
        )


def check_token(token: str) -> str:
    """``token`` if it can serve as the explorer's access token.

    Args:
        token: the deployer's token (from :data:`TOKEN_ENV`).

    Returns:
        ``token`` unchanged.

    Raises:
        InvalidArgumentError: shorter than 32 characters, longer than 256, or with a character
            other than letters, digits and ``._~-`` (also a ``ValueError``).

    Example:
        >>> check_token("0123456789abcdef" * 4)[:8]
        '01234567'
        >>> check_token("secret")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        foundry_checkpoint.errors.InvalidArgumentError: FOUNDRY_CHECKPOINT_UI_TOKEN is not ...
    """
    if not _TOKEN.fullmatch(token):
        raise InvalidArgumentError(
            f"{TOKEN_ENV} is not a usable access token: use 32 to 256 letters, digits or '._~-' "
            "(python -c 'import secrets; print(secrets.token_urlsafe(32))' makes one), or unset "
            "it for a random token"
        )
    return token


def _same(given: str, expected: str) -> bool:
    """Constant-time comparison of two strings (any characters: bytes are compared)."""
    return hmac.compare_digest(given.encode("utf-8", "surrogatepass"), expected.encode())


class Explorer:
    """The explorer application: its stores, what it allows and how it answers.

    Args:
        opts: the global options (prefix, backend, identity) every store is opened with.
        allow_writes: offer delete and prune (each behind a confirmation form).
        secret: the access token (checked by :func:`check_token`); None: a random one.

    Example:
        >>> explorer = Explorer(Options(None, False, None, None, None, None, "sqlite"),
        ...                     allow_writes=False)
        >>> app = explorer.app()
        >>> sorted(r.canonical for r in app.router.resources())[:3]
        ['/', '/a/{scope}', '/a/{scope}/state']
        >>> explorer.allow_writes
        False
        >>> len(explorer.secret) >= 32
        True
    """

    def __init__(self, opts: Options, *, allow_writes: bool, secret: str | None = None) -> None:
        self.stores = Stores(opts, allow_writes=allow_writes)
        self.allow_writes = allow_writes
        self.secret = secrets.token_urlsafe(32) if secret is None else check_token(secret)
        """The access token: in the printed URL, then in the cookie."""
        self.token = secrets.token_urlsafe(24)
        """The confirmation forms' token (a write needs it as well as the access token)."""
        self.cookie = "foundry-explorer"
        """The cookie's name (:func:`serve` adds the port: cookies do not tell ports apart)."""
        self.hosts: set[str] = set()

    async def aclose(self) -> None:
        """Close the stores (idempotent)."""
        await self.stores.aclose()

    # -- application -------------------------------------------------------------------------
    def app(self) -> web.Application:
        """The aiohttp application (routes, host check, headers, error pages)."""
        app = web.Application(middlewares=[self._guard])
        view = self._view
        app.router.add_get("/", view(_ui_pages.index))
        app.router.add_get("/t/{thread}", view(_ui_threads.thread))
        app.router.add_get("/t/{thread}/c/{checkpoint}", view(_ui_threads.checkpoint))
        app.router.add_get("/t/{thread}/diff", view(_ui_threads.diff))
        app.router.add_route("*", "/t/{thread}/delete", self.thread_delete)
        app.router.add_route("*", "/t/{thread}/prune", self.thread_prune)
        app.router.add_get("/m/{context}", view(_ui_pages.context))
        app.router.add_get("/m/{context}/c/{checkpoint}", view(_ui_pages.maf_checkpoint))
        app.router.add_route("*", "/m/{context}/delete", self.context_delete)
        app.router.add_route("*", "/m/{context}/prune", self.context_prune)
        app.router.add_get("/a/{scope}", view(_ui_pages.scope))
        app.router.add_get("/a/{scope}/state", view(_ui_pages.autogen_state))
        app.router.add_get("/memory", view(_ui_memory.namespaces))
        app.router.add_get("/memory/items", view(_ui_memory.items))
        app.router.add_get("/memory/item", view(_ui_memory.item))
        app.router.add_get("/agents", view(_ui_maf_agents.sessions))
        app.router.add_get("/agents/history", view(_ui_maf_agents.history))
        app.router.add_get("/agents/message", view(_ui_maf_agents.message))
        return app

    def _view(self, render: Callable[[Stores, web.Request], Awaitable[Page]]) -> Handler:
        async def handler(request: web.Request) -> web.StreamResponse:
            shown = await render(self.stores, request)
            return self._page(shown.title, shown.body)

        return handler

    def _admit(self, request: web.Request) -> web.StreamResponse | None:
        """None when the request carries the access token; else the answer: 403, or the
        token link's redirect that sets the cookie."""
        given = request.query.getall("token", [])
        if given:
            if request.method not in ("GET", "HEAD") or not all(
                _same(value, self.secret) for value in given
            ):
                return web.Response(status=403, text=_FORBIDDEN)
            rest = request.rel_url.query.copy()
            rest.popall("token")
            answer = web.Response(
                status=303, headers={"Location": str(request.rel_url.with_query(rest))}
            )
            answer.set_cookie(self.cookie, self.secret, path="/", httponly=True, samesite="Strict")
            return answer
        cookie = request.cookies.get(self.cookie)
        if cookie is None or not _same(cookie, self.secret):
            return web.Response(status=403, text=_FORBIDDEN)
        return None

    @web.middleware
    async def _guard(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        if self.hosts and request.host not in self.hosts:
            response: web.StreamResponse = web.Response(
                status=421, text="misdirected request: unknown Host\n"
            )
        elif (refused := self._admit(request)) is not None:
            response = refused
        else:
            try:
                response = await handler(request)
            except web.HTTPException as exc:
                if exc.status >= 400:
                    response = self._error(exc.status, exc.reason)
                else:
                    raise
            except Refused as exc:
                response = self._error(exc.status, str(exc))
            except CorruptPayloadError as exc:  # stored data refused: not a fault of the page
                response = self._error(422, f"{type(exc).__name__}: {' '.join(str(exc).split())}")
            except Exception as exc:
                text = " ".join(str(exc).split()) or "(no message)"
                response = self._error(500, f"{type(exc).__name__}: {text}")
        response.headers["Content-Security-Policy"] = _html.CSP
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "same-origin"
        response.headers["Cache-Control"] = "no-store"
        return response

    def _page(self, title: str, body: str, status: int = 200) -> web.Response:
        text = _html.page(
            title, body, backend=self.stores.backend_line(), allow_writes=self.allow_writes
        )
        return web.Response(text=text, content_type="text/html", status=status)

    def _error(self, status: int, message: str) -> web.Response:
        body = (
            f'<h1>error {status}</h1><p class="warn">{esc(message)}</p><p><a href="/">home</a></p>'
        )
        return self._page(f"error {status}", body, status)

    # -- writes (only with --allow-writes, always confirmed) ---------------------------------
    async def _confirmed(self, request: web.Request, action: str) -> dict[str, str] | None:
        """The posted form when the write may happen; None for the confirmation page (GET)."""
        if not self.allow_writes:
            raise Refused(403, f"read-only explorer: {action} refused (start with --allow-writes)")
        if request.method == "GET":
            return None
        if request.method != "POST":
            raise Refused(405, "use the confirmation form")
        origin = request.headers.get("Origin")
        if origin is not None and origin.split("://", 1)[-1] not in self.hosts:
            raise Refused(403, "cross-origin form refused")
        form = await request.post()
        token = form.get("token")
        if not isinstance(token, str) or not _same(token, self.token):
            raise Refused(403, "missing or wrong form token")
        return {k: v for k, v in form.items() if isinstance(v, str)}

    def _confirm_page(self, title: str, question: str, extra: str = "") -> web.Response:
        body = (
            f"<h1>{esc(title)}</h1><p>{esc(question)}</p>"
            f'<form class="confirm" method="post"><input type="hidden" name="token" '
            f'value="{esc(self.token)}">{extra}'
            '<button class="danger" type="submit">yes, do it</button></form>'
            '<p><a href="/">no, go back</a></p>'
        )
        return self._page(title, body)

    async def thread_delete(self, request: web.Request) -> web.StreamResponse:
        """Delete a thread, after confirmation."""
        thread = request.match_info["thread"]
        form = await self._confirmed(request, "delete")
        saver = self.stores.need_saver()
        count = await saver.acount_checkpoints(thread)
        if not count:
            raise Refused(404, f"thread {thread!r} has no checkpoints")
        if form is None:
            return self._confirm_page(
                f"Delete thread {thread}?",
                f"Every checkpoint ({count}), pending write and spilled blob of thread "
                f"{thread!r} will be deleted.",
            )
        await saver.adelete_thread(thread)
        raise web.HTTPSeeOther("/")

    async def thread_prune(self, request: web.Request) -> web.StreamResponse:
        """Keep only the newest N checkpoints per namespace, after confirmation."""
        thread = request.match_info["thread"]
        form = await self._confirmed(request, "prune")
        saver = self.stores.need_saver()
        if form is None:
            return self._confirm_page(
                f"Prune thread {thread}?",
                "All but the newest checkpoints of each namespace will be deleted.",
                '<label>keep <input name="keep" type="number" min="1" value="1"></label> ',
            )
        await saver.aprune([thread], keep=_keep(form))
        raise web.HTTPSeeOther(f"/t/{seg(thread)}")

    async def context_delete(self, request: web.Request) -> web.StreamResponse:
        """Delete a MAF context, after confirmation."""
        context_id = request.match_info["context"]
        form = await self._confirmed(request, "delete")
        storage = self.stores.need_maf().for_context(context_id)
        count = len(await storage.list_stored())
        if not count:
            raise Refused(404, f"context {context_id!r} has no checkpoints")
        if form is None:
            return self._confirm_page(
                f"Delete context {context_id}?",
                f"Every checkpoint ({count}) and spilled blob of context {context_id!r} will be "
                "deleted.",
            )
        await storage.delete_context()
        raise web.HTTPSeeOther("/")

    async def context_prune(self, request: web.Request) -> web.StreamResponse:
        """Keep only the newest N checkpoints per workflow, after confirmation."""
        context_id = request.match_info["context"]
        form = await self._confirmed(request, "prune")
        storage = self.stores.need_maf().for_context(context_id)
        if form is None:
            return self._confirm_page(
                f"Prune context {context_id}?",
                "All but the newest checkpoints of each workflow will be deleted.",
                '<label>keep <input name="keep" type="number" min="1" value="1"></label> ',
            )
        await storage.prune(keep=_keep(form))
        raise web.HTTPSeeOther(f"/m/{seg(context_id)}")


def _keep(form: dict[str, str]) -> int:
    try:
        keep = int(form.get("keep", "1"))
    except ValueError:
        raise Refused(400, "keep must be a whole number") from None
    if keep < 1:
        raise Refused(400, "keep must be at least 1")
    return keep


async def serve(explorer: Explorer, host: str, port: int, announce: Callable[[str], None]) -> None:
    """Serve ``explorer`` on ``host:port`` (0: a free port) until SIGINT or SIGTERM; calls
    ``announce(url)`` once listening, with the URL that carries the access token."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.setblocking(False)
    bound = sock.getsockname()[1]
    shown = f"[{host}]" if family == socket.AF_INET6 else host
    explorer.hosts = {f"{shown}:{bound}"}
    explorer.cookie = f"foundry-explorer-{bound}"
    if host in ("127.0.0.1", "::1"):
        explorer.hosts.add(f"localhost:{bound}")
    runner = web.AppRunner(explorer.app(), access_log=None)
    await runner.setup()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    try:
        site = web.SockSite(runner, sock)
        await site.start()
        announce(f"http://{shown}:{bound}/?token={explorer.secret}")
        await stop.wait()
    finally:
        await runner.cleanup()
        await explorer.aclose()
        sock.close()
