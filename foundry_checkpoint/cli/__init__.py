"""``foundry-checkpoint``: inspect, clean up and migrate stored checkpoints from a shell.

The top-level commands work on LangGraph threads (the ``cli`` and ``langgraph`` extras); the
``memory`` group on LangGraph long-term memory kept by ``FoundryStore`` (``cli`` and
``langgraph``); the ``maf`` group on Microsoft Agent Framework contexts and agent sessions
(``cli`` and ``maf``);
the ``autogen`` group on AutoGen states (``cli`` and ``autogen``). Every command works
on the backend the environment selects, exactly as a checkpointer in your app would: the
embedded local store under ``AGENTSERVER_STATE_ROOT`` by default, the hosted Foundry state
store when ``FOUNDRY_HOSTING_ENVIRONMENT`` is set. Human output starts with one line saying
which backend is active and where its data lives; ``--json`` (before or after the command)
prints one JSON document for scripts instead, of the shape ``docs/cli.md`` documents for that
command.

Exit codes: 0 on success, 1 with a one-line ``error: ...`` on stderr when the operation fails
(a typed :mod:`foundry_checkpoint.errors` error, an unknown thread or context, a store or
network error, a declined confirmation), 2 for bad usage (one ``error: ...`` line too).

Example::

    $ foundry-checkpoint threads
    $ foundry-checkpoint history support-42 --limit 5
    $ foundry-checkpoint show support-42 --json | jq .values
    $ foundry-checkpoint copy --from sqlite:checkpoints.db --to foundry
    $ foundry-checkpoint memory namespaces --prefix-ns users
    $ foundry-checkpoint maf contexts --json
    $ foundry-checkpoint maf history support-7 --last 20
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Annotated

import typer

from ..errors import InvalidArgumentError
from . import _autogen, _common, _langgraph, _maf, _memory
from ._common import JsonFlag, LocalBackendOption, OneLineErrors, Options, configure_output

__all__ = ["app", "main"]


app = typer.Typer(
    cls=OneLineErrors,
    name="foundry-checkpoint",
    help=(
        "Inspect, clean up and migrate the checkpoints foundry-checkpoint keeps: LangGraph "
        "threads (the commands below), LangGraph long-term memory ('memory'), Microsoft "
        "Agent Framework contexts and agent sessions ('maf') and AutoGen states ('autogen')."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def _root(
    ctx: typer.Context,
    prefix: Annotated[
        str | None,
        typer.Option(
            "--prefix",
            help="store_prefix (default: 'langgraph'; 'langgraph-store' for the memory "
            "commands, 'maf' and 'autogen' for theirs)",
        ),
    ] = None,
    json_out: Annotated[
        bool, typer.Option("--json", help="print JSON instead of tables (every command)")
    ] = False,
    endpoint: Annotated[
        str | None,
        typer.Option(help="hosted mode: project endpoint (default: FOUNDRY_PROJECT_ENDPOINT)"),
    ] = None,
    ca_file: Annotated[
        Path | None,
        typer.Option(
            "--ca-file",
            help="hosted mode: CA bundle to trust (the emulator prints its ca_file)",
            exists=True,
            dir_okay=False,
        ),
    ] = None,
    user_id: Annotated[
        str | None, typer.Option("--user-id", help="the end user whose checkpoints to read")
    ] = None,
    trusted_delegation: Annotated[
        bool,
        typer.Option(
            "--trusted-delegation",
            help="hosted mode: send --user-id as the delegated user (the service honours it "
            "only for trusted callers)",
        ),
    ] = False,
    emulator_user: Annotated[
        str | None,
        typer.Option(
            "--emulator-user",
            help="hosted mode against the emulator: authenticate as this emulator user",
        ),
    ] = None,
    local_backend: LocalBackendOption = "sqlite",
    verbose: Annotated[
        bool,
        typer.Option(
            "--verbose", help="show the libraries' log lines and the traceback of a failure"
        ),
    ] = False,
) -> None:
    """Inspect, clean up and migrate LangGraph checkpoints kept by foundry-checkpoint.

    The backend is chosen like in your app: FOUNDRY_HOSTING_ENVIRONMENT set selects the hosted
    state store, otherwise the local store under AGENTSERVER_STATE_ROOT (default ~/.agentserver).
    """
    os.environ.setdefault("AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING", "true")
    configure_output(verbose)
    ctx.obj = Options(
        prefix,
        json_out,
        endpoint,
        ca_file,
        user_id,
        emulator_user,
        local_backend,
        trusted_delegation,
    )


for _command in _langgraph.COMMANDS:
    app.command()(_command)


@app.command()
def emulator(
    ctx: typer.Context,
    port: Annotated[int, typer.Option(help="TCP port; 0 picks a free one")] = 0,
    data: Annotated[
        Path | None, typer.Option(help="SQLite file keeping the state across restarts")
    ] = None,
    seed: Annotated[int, typer.Option(help="seed of same-second key order and faults")] = 0,
    host: Annotated[str, typer.Option(help="loopback interface to listen on")] = "127.0.0.1",
    bind: Annotated[
        list[str] | None,
        typer.Option(
            metavar="CALL_ID=USER",
            help="resolve requests carrying x-agent-foundry-call-id CALL_ID to USER (repeatable)",
        ),
    ] = None,
    trust_delegation: Annotated[
        list[str] | None,
        typer.Option(
            metavar="CALLER",
            help="honour x-ms-user-id from requests whose token names CALLER ('*': every "
            "caller); ignored by default, as the service ignores it from untrusted callers "
            "(repeatable)",
        ),
    ] = None,
    json_out: Annotated[
        bool,
        typer.Option("--json", help='print {"endpoint": ..., "ca_file": ...} as one JSON line'),
    ] = False,
) -> None:
    """Run the loopback HTTPS emulator of the hosted state store until Ctrl+C.

    Same as `python -m foundry_checkpoint.emulator`: prints the endpoint and the CA file to
    use (FOUNDRY_PROJECT_ENDPOINT, --ca-file).
    """
    with _common.failures("emulator"):
        from ..emulator.__main__ import main as emulator_main

    argv = ["--port", str(port), "--seed", str(seed), "--host", host]
    if _common.options(ctx, json_out).json:
        argv.append("--json")
    if data is not None:
        argv += ["--data", str(data)]
    for pair in bind or []:
        argv += ["--bind", pair]
    for caller in trust_delegation or []:
        argv += ["--trust-delegation", caller]
    code = emulator_main(argv)
    if code:
        raise typer.Exit(code)


@app.command()
def ui(
    ctx: typer.Context,
    port: Annotated[int, typer.Option(help="TCP port; 0 picks a free one")] = 0,
    host: Annotated[str, typer.Option(help="interface to listen on (loopback)")] = "127.0.0.1",
    allow_writes: Annotated[
        bool,
        typer.Option("--allow-writes", help="offer delete and prune (each asks to confirm)"),
    ] = False,
    allow_remote: Annotated[
        bool,
        typer.Option("--allow-remote", help="let --host be an address that is not loopback"),
    ] = False,
    json_out: JsonFlag = False,
) -> None:
    """Serve the explorer page on loopback until Ctrl+C, printing its URL.

    It lists threads, memory namespaces, contexts and agent sessions, draws checkpoint trees
    and workflow lineage as SVG, shows values, metadata, pending writes, memory items and agent
    histories, and diffs two checkpoints. Read-only unless started
    with --allow-writes. With --json the URL is printed as {"url": ...}.

    The URL carries a random access token (FOUNDRY_CHECKPOINT_UI_TOKEN sets your own); the page
    answers 403 to whoever does not have it.
    """
    from . import _ui

    opts = _common.options(ctx, json_out)
    try:
        _ui.check_host(host, allow_remote=allow_remote)
    except InvalidArgumentError as exc:
        raise typer.BadParameter(str(exc), param_hint="--host") from exc
    secret = os.environ.get(_ui.TOKEN_ENV) or None
    try:
        explorer = _ui.Explorer(opts, allow_writes=allow_writes, secret=secret)
    except InvalidArgumentError as exc:
        raise typer.BadParameter(str(exc), param_hint=_ui.TOKEN_ENV) from exc

    def announce(url: str) -> None:
        typer.echo(json.dumps({"url": url}) if opts.json else f"explorer: {url}")

    with _common.failures():
        asyncio.run(_ui.serve(explorer, host, port, announce))


app.add_typer(_memory.app, name="memory")
app.add_typer(_maf.app, name="maf")
app.add_typer(_autogen.app, name="autogen")


def main() -> None:
    """Console-script entry point of ``foundry-checkpoint``."""
    app(prog_name="foundry-checkpoint")


if __name__ == "__main__":
    main()
