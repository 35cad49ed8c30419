"""The explorer answers only whoever holds its access token: 403 to everyone else, on every path.

``foundry-checkpoint ui`` runs in its own process, on a store holding a LangGraph thread, an
Agent Framework context and an AutoGen scope (locally and through the emulator). A client that
did not open the URL the command printed gets 403 from every route of the explorer's own route
table (so a route added later is probed without editing this file), every method, paths that
are no route (``/favicon.ico``, static-looking files) and the write forms, even with a valid
confirmation token. So does a client running as another local user, a wrong token, and the
cookie of another explorer. The printed URL sets an HttpOnly, SameSite=Strict cookie.
"""

from __future__ import annotations

import asyncio
import functools
import http.client
import json
import os
import pwd
import re
import subprocess
import sys
from collections.abc import Iterator
from http.cookies import SimpleCookie
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from typer.testing import CliRunner

from foundry_checkpoint.cli import app
from foundry_checkpoint.cli._common import Options
from foundry_checkpoint.cli._ui import Explorer
from foundry_checkpoint_autogen import AutoGenStateStore
from foundry_checkpoint_maf import FoundryCheckpointStorage
from tests.cli.conftest import Cli, build, config
from tests.cli.test_ui_browser import Served, explorer
from tests.maf import _workflows as wf

METHODS = ("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS")
#: Paths that are no route: what a browser or a scanner asks for first.
NOT_ROUTES = (
    "/favicon.ico",
    "/robots.txt",
    "/static/style.css",
    "/static/app.js",
    "/images/logo.png",
    "/no/such/page",
)
WRITES = ("/t/t1/delete", "/t/t1/prune", "/m/conv/delete", "/m/conv/prune")


Answer = tuple[int, http.client.HTTPMessage, str]


def ask(
    served: Served,
    method: str,
    path: str,
    *,
    cookie: str | None = None,
    form: dict[str, str] | None = None,
) -> Answer:
    """One request with no cookie jar and no redirects: status, headers, body."""
    connection = http.client.HTTPConnection("127.0.0.1", served.port, timeout=60)
    headers = {"Host": f"127.0.0.1:{served.port}"}
    if cookie is not None:
        headers["Cookie"] = cookie
    body = None
    if form is not None:
        body = urlencode(form)
        headers["Content-Type"] = "application/x-www-form-urlencoded"
        headers["Origin"] = f"http://127.0.0.1:{served.port}"  # same-origin: only the secret lacks
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        return response.status, response.headers, response.read().decode("utf-8", "replace")
    finally:
        connection.close()


def sign_in(served: Served) -> str:
    """What a browser does with the printed URL: the ``Cookie`` header it then sends."""
    status, headers, _ = ask(served, "GET", f"/?token={served.token}")
    assert status == 303, status
    jar = SimpleCookie(headers["Set-Cookie"])
    return "; ".join(f"{name}={morsel.value}" for name, morsel in jar.items())


def _fill(values: dict[str, str], match: re.Match[str]) -> str:
    return values[match.group(1)]


def probes(ids: dict[str, str]) -> list[str]:
    """Every path of the explorer's route table, its placeholders filled with stored names."""
    table = Explorer(Options(None, False, None, None, None, None, "sqlite"), allow_writes=True)
    paths = []
    for resource in table.app().router.resources():
        template = resource.canonical
        names = set(re.findall(r"{(\w+)}", template))
        assert names <= {"thread", "context", "scope", "checkpoint"}, (
            f"route {template}: give its placeholders a stored value here"
        )
        checkpoint = ids["maf"] if template.startswith("/m/") else ids["langgraph"]
        values = {"thread": "t1", "context": "conv", "scope": "demo", "checkpoint": checkpoint}
        paths.append(re.sub(r"{(\w+)}", functools.partial(_fill, values), template))
    assert len(paths) >= 12 and "/" in paths
    return paths


async def _seed_maf(env: Any) -> str:
    async with FoundryCheckpointStorage("conv", **env.kwargs()) as storage:
        await wf.pipeline(storage).run("one")
        return (await storage.list_stored())[-1].checkpoint_id


@pytest.fixture
def cli(store_env: Any) -> Cli:
    return Cli(store_env, CliRunner())


@pytest.fixture
def stored(cli: Cli) -> Iterator[dict[str, str]]:
    """Thread ``t1``, context ``conv`` and AutoGen scope ``demo``; their checkpoint ids."""
    with cli.saver() as saver:
        build(saver).invoke({"steps": []}, config("t1"))
        langgraph = saver.get_tuple(config("t1"))
        assert langgraph is not None
    maf = asyncio.run(_seed_maf(cli.env))
    with AutoGenStateStore(**cli.env.kwargs()) as store:
        store.save("demo", "agent", "counter", {"count": 1})
    yield {"langgraph": str(langgraph.config["configurable"]["checkpoint_id"]), "maf": maf}


def _has_t1(cli: Cli) -> bool:
    with cli.saver() as saver:
        return saver.get_tuple(config("t1")) is not None


def test_without_the_secret_every_route_and_method_is_403(cli: Cli, stored: dict[str, str]) -> None:
    paths = [*probes(stored), *NOT_ROUTES]
    with explorer(cli, "--allow-writes") as served:
        cookie = sign_in(served)
        forbidden = ask(served, "GET", "/")[2]
        refused = 0
        for path in paths:
            for method in METHODS:
                status, headers, body = ask(served, method, path)
                assert status == 403, (method, path, status, body[:300])
                assert body == ("" if method == "HEAD" else forbidden), (method, path)
                assert "Set-Cookie" not in headers
                assert headers["Content-Security-Policy"] and headers["Cache-Control"] == "no-store"
                refused += 1
                # the same request with the secret reaches the page (nothing here writes:
                # a write also needs the confirmation token)
                status, _, body = ask(served, method, path, cookie=cookie)
                assert status != 403 or "form token" in body, (method, path, status, body[:300])
                if method != "HEAD":
                    assert body != forbidden and "foundry-checkpoint explorer" in body
        for name in ("t1", "conv", "demo", stored["langgraph"], stored["maf"]):
            assert name not in forbidden
        assert str(cli.env.root) not in forbidden

        # the write forms: a confirmation token read with the secret does not stand for it
        for path in WRITES:
            status, _, page = ask(served, "GET", path, cookie=cookie)
            assert status == 200 and "yes, do it" in page, (path, status)
            match = re.search(r'name="token" value="([^"]+)"', page)
            assert match is not None
            form = {"token": match.group(1), "keep": "1"}
            assert ask(served, "POST", path, form=form)[0:3:2] == (403, forbidden)
            in_query = f"{path}?{urlencode({'token': served.token})}"  # a link's token, posted
            assert ask(served, "POST", in_query, form=form)[0:3:2] == (403, forbidden)
            refused += 2
        assert _has_t1(cli)
        with cli.saver() as saver:
            assert len(list(saver.list(config("t1")))) > 1  # nothing pruned either
        # both together do write
        status, headers, _ = ask(served, "POST", "/t/t1/delete", cookie=cookie, form=form)
        assert (status, headers["Location"]) == (303, "/"), status
    assert not _has_t1(cli)
    print(f"\n{refused} requests without the secret, {len(paths)} paths x {len(METHODS)} methods")


def test_a_wrong_token_or_another_explorers_cookie_is_403(cli: Cli, stored: dict[str, str]) -> None:
    with explorer(cli) as one, explorer(cli) as two:
        assert one.token != two.token and one.port != two.port
        cookie_one = sign_in(one)
        assert ask(one, "GET", "/", cookie=cookie_one)[0] == 200  # it works where it was set
        wrong = [
            one.token,  # the other explorer's token
            two.token[:-1],
            two.token + "x",
            two.token.swapcase(),
            "",
            "é" * len(two.token),
        ]
        for token in wrong:
            status, headers, _ = ask(two, "GET", f"/?{urlencode({'token': token})}")
            assert status == 403 and "Set-Cookie" not in headers, token
        for cookie in (
            cookie_one,  # as the browser holds it (named after the other port)
            cookie_one.replace(f"-{one.port}=", f"-{two.port}="),  # renamed for this one
            f"foundry-explorer-{two.port}={one.token}",
            f"foundry-explorer={two.token}",  # the right value under another name
        ):
            assert ask(two, "GET", "/", cookie=cookie)[0] == 403, cookie
        # both tokens: a valid cookie does not make a wrong link token right
        right = sign_in(two)
        assert ask(two, "GET", "/", cookie=right)[0] == 200
        assert ask(two, "GET", f"/?token={one.token}", cookie=right)[0] == 403


def test_the_token_link_sets_an_httponly_samesite_strict_cookie_and_leaves_the_url(
    cli: Cli, stored: dict[str, str]
) -> None:
    with explorer(cli) as served:
        for method in ("GET", "HEAD"):
            query = urlencode({"ns": "", "token": served.token})
            status, headers, _ = ask(served, method, f"/t/t1?{query}")
            assert status == 303
            assert headers["Location"] == "/t/t1?ns="  # the rest of the link is kept
            cookies = headers.get_all("Set-Cookie")
            assert cookies is not None
            (header,) = cookies
            jar = SimpleCookie(header)
            morsel = jar[f"foundry-explorer-{served.port}"]
            assert morsel["httponly"] is True
            assert morsel["samesite"] == "Strict"
            assert morsel["path"] == "/"
            assert not morsel["expires"] and not morsel["max-age"]  # gone with the browser
            assert not morsel["domain"]  # this host only
        cookie = f"{morsel.key}={morsel.value}"
        status, _, body = ask(served, "GET", "/t/t1?ns=", cookie=cookie)
        assert status == 200 and "Thread t1" in body


def test_the_deployer_chooses_the_token_and_a_weak_one_is_refused(
    cli: Cli, stored: dict[str, str]
) -> None:
    chosen = "deployer-chosen-token-0123456789abcdef"
    with explorer(cli, env={"FOUNDRY_CHECKPOINT_UI_TOKEN": chosen}) as served:
        assert served.token == chosen
        assert ask(served, "GET", "/")[0] == 403
        status, _, body = ask(served, "GET", "/", cookie=sign_in(served))
        assert status == 200 and "t1" in body
        cmdline = Path(f"/proc/{served.pid}/cmdline").read_bytes()
        assert chosen.encode() not in cmdline  # ps shows other users nothing of it
    for weak in ("short", "has spaces in it, which are not allowed at all", "é" * 40):
        result = CliRunner().invoke(
            app, [*cli.options(), "ui"], env={"FOUNDRY_CHECKPOINT_UI_TOKEN": weak}
        )
        assert result.exit_code == 2, result.output
        assert "FOUNDRY_CHECKPOINT_UI_TOKEN" in result.stderr
        assert "secrets.token_urlsafe(32)" in result.stderr


#: Run as the other user with nothing but the standard library: what it can learn of the page.
_OTHER_USER = r"""
import http.client, json, os, sys
job = json.load(sys.stdin)
seen = {"uid": os.getuid(), "answers": [], "proc": {}}
try:
    os.listdir(job["state_root"])
    seen["listing"] = "listed"
except OSError as exc:
    seen["listing"] = type(exc).__name__
for name in ("cmdline", "environ"):
    try:
        with open(f"/proc/{job['pid']}/{name}", "rb") as handle:
            seen["proc"][name] = handle.read().decode("latin-1")
    except OSError as exc:
        seen["proc"][name] = type(exc).__name__
for method, path in job["probes"]:
    connection = http.client.HTTPConnection("127.0.0.1", job["port"], timeout=60)
    connection.request(method, path, headers={"Host": "127.0.0.1:%d" % job["port"]})
    response = connection.getresponse()
    body = response.read().decode("utf-8", "replace")
    seen["answers"].append([method, path, response.status, body])
    connection.close()
json.dump(seen, sys.stdout)
"""


def _other_user() -> tuple[pwd.struct_passwd, str]:
    """``nobody`` and a Python it may run; skips when this process cannot switch users."""
    if os.geteuid() != 0:
        pytest.skip("running a client as a second uid needs root (setuid); CI runs as root")
    try:
        user = pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no 'nobody' user on this machine to run the second client as")
    for python in (sys.executable, os.path.realpath(sys.executable), "/usr/bin/python3"):
        try:
            runs = subprocess.run(
                [python, "-c", "pass"],
                user=user.pw_uid,
                group=user.pw_gid,
                extra_groups=[],
                cwd="/",
                env={"PATH": "/usr/bin:/bin"},
                capture_output=True,
                check=False,
            )
        except OSError:  # not executable by that user (a home directory closed to it)
            continue
        if runs.returncode == 0:
            return user, python
    pytest.skip("no Python interpreter here that the 'nobody' user may run")


def test_another_local_user_cannot_read_any_page(cli: Cli, stored: dict[str, str]) -> None:
    user, python = _other_user()
    paths = [*probes(stored), *NOT_ROUTES]
    guesses = [f"/?token={'A' * 43}", "/?token=", "/t/t1?token=guess"]
    job_probes = [["GET", p] for p in [*paths, *guesses]] + [["POST", p] for p in WRITES]
    state_root = Path(os.environ["AGENTSERVER_STATE_ROOT"])
    with explorer(cli, "--allow-writes") as served:
        job = {"port": served.port, "pid": served.pid, "probes": job_probes}
        job["state_root"] = str(state_root)
        done = subprocess.run(
            [python, "-c", _OTHER_USER],
            input=json.dumps(job),
            user=user.pw_uid,
            group=user.pw_gid,
            extra_groups=[],
            cwd="/",
            env={"PATH": "/usr/bin:/bin"},
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        seen = json.loads(done.stdout)
        # what the same requests give the user who opened the printed URL
        index = ask(served, "GET", "/", cookie=sign_in(served))[2]
        assert "t1" in index and "conv" in index and "demo" in index

    assert seen["uid"] == user.pw_uid != os.getuid()
    if cli.env.mode == "local":
        assert state_root.is_dir()
        assert seen["listing"] == "PermissionError"  # the store's files are closed to it...
    assert seen["proc"]["environ"] == "PermissionError"
    assert served.token not in seen["proc"]["cmdline"]  # ...the token is in no place it can read
    assert len(seen["answers"]) == len(job_probes)
    for method, path, status, body in seen["answers"]:
        assert status == 403, (method, path, status, body[:300])  # ...and the page refuses it
        assert "t1" not in body and "conv" not in body and served.token not in body
    assert _has_t1(cli)
    print(f"\nuid {user.pw_uid}: {len(seen['answers'])} requests, all 403")
