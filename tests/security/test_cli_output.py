"""Stored data never drives the terminal, ``--json`` is strict, DSN passwords are masked.

Thread ids, metadata keys and ``source``, channel names, task ids and write channels are
planted with escape sequences (clear screen, OSC 0 window title, OSC 8 hyperlink, a bell) and
rich markup. The CLI runs in a child process on a pseudo-terminal, so it renders as it would
for a person; none of the sequences reaches the terminal, each shows as a visible escape.
"""

from __future__ import annotations

import json
import os
import pty
import re
import select
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import typer
from langgraph.checkpoint.base import CheckpointMetadata, empty_checkpoint
from typer.testing import CliRunner

from foundry_checkpoint import FoundryCheckpointer
from foundry_checkpoint.cli._common import configure_output, failures
from foundry_checkpoint.cli._format import mask_secrets
from tests.cli.conftest import Cli
from tests.langgraph._util import cfg

CLEAR = "\x1b[2J"
TITLE = "\x1b]0;owned\x07"
LINK = "\x1b]8;;https://evil.example/\x1b\\click\x1b]8;;\x1b\\"
MARKUP = "[link=https://evil.example/]markup[/link]"
THREAD = f"t{CLEAR}{TITLE}"
ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(os.name != "posix", reason="pseudo-terminals are POSIX")


def _plant(env: Any) -> None:
    with FoundryCheckpointer(**env.kwargs()) as saver:
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {MARKUP: 1, f"c{LINK}": "v", "plain": f"value{TITLE}"}
        checkpoint["channel_versions"] = {MARKUP: 1, f"c{LINK}": 1, "plain": 1}
        metadata: Any = {"source": f"loop{CLEAR}", "step": 1, f"k{TITLE}": MARKUP}
        config = saver.put(cfg(THREAD), checkpoint, metadata, {"plain": 1})
        saver.put_writes(config, [(f"w{CLEAR}", 1), (MARKUP, 2)], f"task{TITLE}")


def _on_a_terminal(args: list[str], *, expect: int = 0) -> bytes:
    """Run the CLI with stdin, stdout and stderr on a pseudo-terminal; all it wrote (its exit
    status must be ``expect``)."""
    master, slave = pty.openpty()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TERM": "xterm-256color", "COLUMNS": "250"}
    env.pop("NO_COLOR", None)
    code = "from foundry_checkpoint.cli import main; main()"
    proc = subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdin=slave, stdout=slave, stderr=slave, env=env, cwd=ROOT, close_fds=True,
    )  # fmt: skip
    os.close(slave)
    out = b""
    try:
        while True:
            ready, _, _ = select.select([master], [], [], 60)
            if not ready:
                break
            try:
                chunk = os.read(master, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            out += chunk
    finally:
        os.close(master)
        proc.wait(timeout=60)
    assert proc.returncode == expect, out.decode("utf-8", "replace")
    return out


@pytest.mark.parametrize(
    "command", [["threads"], ["history", THREAD], ["history", THREAD, "--tree"], ["show", THREAD]]
)
def test_stored_text_never_drives_the_terminal(store_env: Any, command: list[str]) -> None:
    _plant(store_env)
    out = _on_a_terminal([*Cli(store_env, CliRunner()).options(), *command])
    text = out.decode("utf-8", "replace")
    assert "\x1b]" not in text  # no OSC: no window title, no hyperlink
    assert CLEAR not in text and "\x07" not in text
    assert "\\x1b[2J" in text  # shown, visibly escaped
    if command[0] == "show":
        assert "\\x1b]0;owned\\x07" in text
        assert MARKUP in text  # markup shown as text, not rendered as a link
        assert "\\x1b]8;;https://evil.example/" in text
    # the terminal still gets the CLI's own styling: the rendering really went to a terminal
    assert "\x1b[" in text


def test_json_output_is_strict(store_env: Any) -> None:
    with FoundryCheckpointer(**store_env.kwargs()) as saver:
        checkpoint = empty_checkpoint()
        checkpoint["channel_values"] = {"x": float("nan"), "y": [float("inf"), -float("inf")]}
        checkpoint["channel_versions"] = {"x": 1, "y": 1}
        # metadata carries whatever keys a run adds; LangGraph's TypedDict names only its own
        metadata: CheckpointMetadata = {"source": "loop", "step": 1, "score": float("nan")}  # type: ignore[typeddict-unknown-key]
        saver.put(cfg("t1"), checkpoint, metadata, {})
    cli = Cli(store_env, CliRunner())

    def strict(text: str) -> Any:
        def refuse(name: str) -> Any:
            raise ValueError(f"not strict JSON: {name}")

        return json.loads(text, parse_constant=refuse)

    for command in (["show", "t1"], ["history", "t1"], ["threads"]):
        result = cli("--json", *command)
        assert result.exit_code == 0, result.stderr
        strict(result.stdout)
    shown = strict(cli("--json", "show", "t1").stdout)
    assert shown["values"] == {"x": "nan", "y": ["inf", "-inf"]}
    assert shown["metadata"]["score"] == "nan"


def test_json_output_escapes_nothing_away(store_env: Any) -> None:
    _plant(store_env)
    cli = Cli(store_env, CliRunner())
    shown = json.loads(cli("--json", "show", THREAD).stdout)
    assert shown["thread_id"] == THREAD  # JSON carries the exact data, escaped by JSON itself
    assert "\x1b" not in cli("--json", "show", THREAD).stdout  # as \u001b, never raw


@pytest.mark.parametrize(
    "dsn",
    [
        "postgresx://app:s3cret-pw@db.example:5432/app",
        "postgres:postgresql://app:s3cret-pw@127.0.0.1:9/app",
        "postgres:host=127.0.0.1 port=9 user=app password=s3cret-pw dbname=app",
    ],
)
def test_copy_masks_dsn_passwords(store_env: Any, dsn: str) -> None:
    cli = Cli(store_env, CliRunner())
    result = cli("copy", "--from", dsn, "--to", "foundry:other")
    assert result.exit_code != 0
    assert "s3cret-pw" not in result.stdout + result.stderr
    assert "error" in result.stderr


def test_mask_secrets_forms() -> None:
    assert mask_secrets("postgresql://u:p@h/d") == "postgresql://u:***@h/d"
    assert mask_secrets("postgresql://u@h/d") == "postgresql://u@h/d"
    assert mask_secrets("host=h PASSWORD = x user=u") == "host=h PASSWORD = *** user=u"
    assert mask_secrets("sqlite:/tmp/a:b@c") == "sqlite:/tmp/a:b@c"


def test_mask_secrets_misses_no_password_form() -> None:
    assert mask_secrets("host=h sslpassword=k3y user=u") == "host=h sslpassword=*** user=u"
    assert mask_secrets("host=h SSLPassword = k3y") == "host=h SSLPassword = ***"
    assert mask_secrets("PGPASSWORD=k3y psql") == "PGPASSWORD=*** psql"
    assert mask_secrets("host=h password='a b' user=u") == "host=h password=*** user=u"
    assert mask_secrets("host=h password='a\\' b' user=u") == "host=h password=*** user=u"
    assert mask_secrets('host=h password="x" user=u') == "host=h password=*** user=u"
    assert mask_secrets('host=h password="a b" user=u') == "host=h password=*** user=u"
    assert mask_secrets("password='never closed") == "password=***"
    assert mask_secrets("postgres://u:p@ss@host/db") == "postgres://u:***@host/db"
    assert mask_secrets("postgres://u:p@s@s@host:5/db?x=1") == "postgres://u:***@host:5/db?x=1"
    assert mask_secrets("postgres://me@corp:pw@host/db") == "postgres://me@corp:***@host/db"
    assert mask_secrets("postgres://u@h:5432/db?x=a@b") == "postgres://u@h:5432/db?x=a@b"
    assert mask_secrets("{'password': 'a b', 'user': 'u'}") == "{'password': ***, 'user': 'u'}"
    assert mask_secrets('{"sslpassword": "k", "u": 1}') == '{"sslpassword": ***, "u": 1}'
    assert mask_secrets('password authentication failed for user "app"') == (
        'password authentication failed for user "app"'
    )


@pytest.mark.parametrize(
    ("dsn", "secret"),
    [
        ("pg:host=127.0.0.1 port=9 user=app sslpassword=s3cret-k3y dbname=app", "s3cret-k3y"),
        ('pg:host=127.0.0.1 port=9 user=app password="s3cret pw" dbname=app', 'pw"'),
        ("pg:postgresql://app:s3cret@pw@127.0.0.1:9/app", "pw@"),
    ],
)
def test_copy_masks_every_password_form(store_env: Any, dsn: str, secret: str) -> None:
    """The error line quotes the URI it refuses (an unknown scheme): every password masked."""
    cli = Cli(store_env, CliRunner())
    result = cli("copy", "--from", dsn, "--to", "foundry:other")
    assert result.exit_code != 0
    assert "s3cret" not in result.stdout + result.stderr
    assert secret not in result.stdout + result.stderr
    assert "unknown saver URI" in result.stderr and "127.0.0.1" in result.stderr


def test_verbose_traceback_is_escaped_and_masked(capsys: pytest.CaptureFixture[str]) -> None:
    def inner() -> None:
        raise RuntimeError(f"cannot reach postgresql://app:s3cret-pw@db/app {TITLE}{LINK}")

    configure_output(verbose=True)
    try:
        with pytest.raises(typer.Exit), failures():
            try:
                inner()
            except RuntimeError as exc:  # a chained cause is printed too
                raise ValueError(f"while copying password='s3cret pw' {CLEAR}") from exc
    finally:
        configure_output(verbose=False)
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err  # --verbose printed the traceback
    assert "in inner" in err and "RuntimeError: cannot reach" in err
    assert "s3cret" not in err
    assert "\x1b" not in err and "\x07" not in err  # nothing raw reaches the terminal
    assert "\\x1b]0;owned\\x07" in err and "\\x1b[2J" in err  # shown, visibly escaped
    assert err.rstrip().splitlines()[-1].startswith("error: ValueError: while copying")


def _plant_maf(env: Any, name: str) -> None:
    from agent_framework import WorkflowCheckpoint

    from foundry_checkpoint_maf import FoundryCheckpointStorage

    async def plant() -> None:
        async with FoundryCheckpointStorage("ctx", **env.kwargs()) as storage:
            await storage.save(WorkflowCheckpoint(workflow_name=name, graph_signature_hash="h"))

    import asyncio

    asyncio.run(plant())


def _flat(text: str) -> str:
    """The rendered text without line breaks, spaces, box lines and styling: a title or cell
    that wrapped reads as one string again (the planted values hold no spaces)."""
    text = re.sub(r"\x1b\[[0-9;]*m", "", text)
    return re.sub(r"[\s\u2500-\u257f]+", "", text)


WORKFLOW = f"wf{LINK}{TITLE}{CLEAR}{MARKUP}"


@pytest.mark.parametrize(
    "command", [["maf", "checkpoints", "ctx"], ["maf", "contexts"], ["maf", "show", "ctx"]]
)
def test_maf_stored_names_never_drive_the_terminal(store_env: Any, command: list[str]) -> None:
    _plant_maf(store_env, WORKFLOW)
    out = _on_a_terminal([*Cli(store_env, CliRunner()).options(), *command])
    text = out.decode("utf-8", "replace")
    assert "\x1b]" not in text  # no OSC 8 hyperlink, no window title
    assert CLEAR not in text and "\x07" not in text
    flat = _flat(text)  # a long title or cell wraps over lines
    assert "\\x1b]8;;https://evil.example/" in flat  # shown, visibly escaped
    assert MARKUP in flat  # markup shown as text
    assert "\x1b[" in text  # styled: it really rendered for a terminal


def test_autogen_show_title_never_drives_the_terminal(store_env: Any) -> None:
    from foundry_checkpoint_autogen import AutoGenStateStore

    name = f"agent{LINK}{MARKUP}"
    with AutoGenStateStore(**store_env.kwargs(), keep_versions=None) as store:
        store.save("demo", "agent", name, {f"k{TITLE}": f"v{CLEAR}"})
    for command in (["show", "demo", "agent", name], ["states", "demo"]):
        out = _on_a_terminal([*Cli(store_env, CliRunner()).options(), "autogen", *command])
        text = out.decode("utf-8", "replace")
        assert "\x1b]" not in text
        assert CLEAR not in text and "\x07" not in text
        flat = _flat(text)
        assert "\\x1b]8;;https://evil.example/" in flat
        assert MARKUP in flat


def test_log_lines_are_escaped_and_masked() -> None:
    """A warning naming a stored id (as a tampered checkpoint's does), and a logged traceback,
    reach stderr escaped and masked, with or without --verbose, in a process of its own."""
    code = (
        "import logging, sys\n"
        "from foundry_checkpoint.cli._common import configure_output\n"
        "configure_output(verbose=sys.argv[1] == 'v')\n"
        "log = logging.getLogger('foundry_checkpoint_maf')\n"
        f"log.warning('tampered checkpoint %s refused', {THREAD!r})\n"
        "try:\n"
        "    raise OSError('postgresql://app:s3cret-pw@db/app sslpassword=k3y')\n"
        "except OSError:\n"
        f"    log.exception('copy failed %s', {LINK!r})\n"
    )
    for mode in ("v", "q"):
        done = subprocess.run(
            [sys.executable, "-c", code, mode], capture_output=True, text=True, cwd=ROOT,
            env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=60, check=True,
        )  # fmt: skip
        err = done.stderr
        assert "tampered checkpoint t\\x1b[2J\\x1b]0;owned\\x07 refused" in err
        assert "Traceback (most recent call last)" in err and "OSError: postgresql://" in err
        assert "\x1b" not in err and "\x07" not in err
        assert "s3cret" not in err and "k3y" not in err
        assert "\\x1b]8;;https://evil.example/" in err
