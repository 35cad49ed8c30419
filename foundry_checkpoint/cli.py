"""``foundry-checkpoint``: inspect, clean up and migrate LangGraph checkpoints from a shell.

Needs the ``cli`` and ``langgraph`` extras (``pip install 'foundry-checkpoint[cli,langgraph]'``).
Every command works on the backend the environment selects, exactly as a
:class:`~foundry_checkpoint.FoundryCheckpointer` in your app would: the embedded local store
under ``AGENTSERVER_STATE_ROOT`` by default, the hosted Foundry state store when
``FOUNDRY_HOSTING_ENVIRONMENT`` is set. Human output starts with one line saying which backend is
active and where its data lives; ``--json`` prints one JSON document for scripts instead.

Exit codes: 0 on success, 1 with a one-line ``error: ...`` on stderr when the operation fails
(a typed :mod:`foundry_checkpoint.errors` error, an unknown thread, a store or network error),
2 for bad usage.

Example::

    $ foundry-checkpoint threads
    $ foundry-checkpoint history support-42 --limit 5
    $ foundry-checkpoint show support-42 --json | jq .values
    $ foundry-checkpoint copy --from sqlite:checkpoints.db --to foundry
"""

from __future__ import annotations

import contextlib
import enum
import logging
import os
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from typer.core import TyperGroup

from . import _cli_copy
from ._cli_format import cell, mask_secrets, preview, strict_json, summary, tuple_json, visible
from ._core import DEFAULT_GC_GRACE_SECONDS
from .errors import FoundryCheckpointError

if TYPE_CHECKING:
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple

    from ._saver import FoundryCheckpointer

__all__ = ["app", "main"]


def _click_error_base() -> type[Exception]:
    """The ``ClickException`` class typer uses (its own copy of click, or click itself)."""
    for klass in typer.BadParameter.__mro__:
        if klass.__name__ == "ClickException" and issubclass(klass, Exception):
            return klass
    return Exception  # pragma: no cover - every typer release has one


_ClickError = _click_error_base()


class _OneLineErrors(TyperGroup):
    """A command group whose usage errors are one ``error: ...`` line (exit 2)."""

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        try:
            result = super().main(
                args,
                prog_name or "foundry-checkpoint",
                complete_var,
                standalone_mode=False,
                windows_expand_args=windows_expand_args,
                **extra,
            )
        except _ClickError as exc:
            message = exc.format_message()  # type: ignore[attr-defined]
            typer.echo(f"error: {visible(mask_secrets(message))}", err=True)
            code = int(getattr(exc, "exit_code", 2))
        except typer.Abort:
            typer.echo("error: aborted", err=True)
            code = 1
        else:
            code = result if isinstance(result, int) else 0
        if standalone_mode:
            sys.exit(code)
        return code


app = typer.Typer(
    cls=_OneLineErrors,
    name="foundry-checkpoint",
    help="Inspect, clean up and migrate LangGraph checkpoints kept by foundry-checkpoint.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


class _LocalBackend(str, enum.Enum):
    sqlite = "sqlite"
    sdk = "sdk"


@dataclass
class _Options:
    prefix: str
    json: bool
    endpoint: str | None
    ca_file: Path | None
    user_id: str | None
    emulator_user: str | None
    local_backend: str


def _options(ctx: typer.Context) -> _Options:
    found = ctx.find_object(_Options)
    if found is None:  # pragma: no cover - the callback always sets it
        raise RuntimeError("internal: global options missing")
    return found


@app.callback()
def _root(
    ctx: typer.Context,
    prefix: Annotated[
        str, typer.Option("--prefix", help="store_prefix of the checkpointer (its store names)")
    ] = "langgraph",
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
    emulator_user: Annotated[
        str | None,
        typer.Option(
            "--emulator-user",
            help="hosted mode against the emulator: authenticate as this emulator user",
        ),
    ] = None,
    local_backend: Annotated[
        _LocalBackend,
        typer.Option(
            "--local-backend",
            help="local mode: 'sqlite' (embedded store, default) or 'sdk' (the SDK's files)",
        ),
    ] = _LocalBackend.sqlite,
) -> None:
    """Inspect, clean up and migrate LangGraph checkpoints kept by foundry-checkpoint.

    The backend is chosen like in your app: FOUNDRY_HOSTING_ENVIRONMENT set selects the hosted
    state store, otherwise the local store under AGENTSERVER_STATE_ROOT (default ~/.agentserver).
    """
    os.environ.setdefault("AZURE_AI_AGENTSERVER_DISABLE_EXPERIMENTAL_WARNING", "true")
    # The SDK logs expected 404/409 answers (a store not created yet) at WARNING: keep the
    # output to what the command has to say. Real failures still raise and are reported.
    logging.getLogger("azure.ai.agentserver.core").setLevel(logging.ERROR)
    ctx.obj = _Options(
        prefix, json_out, endpoint, ca_file, user_id, emulator_user, local_backend.value
    )


# -- shared helpers ---------------------------------------------------------------------------


def _fail(message: str, code: int = 1) -> NoReturn:
    typer.echo(f"error: {visible(mask_secrets(message))}", err=True)
    raise typer.Exit(code)


@contextlib.contextmanager
def _failures() -> Iterator[None]:
    """Turn every failure into one ``error:`` line and exit status 1."""
    try:
        yield
    except (typer.Exit, typer.Abort, _ClickError):
        raise
    except FoundryCheckpointError as exc:
        _fail(str(exc))
    except ImportError as exc:
        _fail(f"{exc} (install 'foundry-checkpoint[cli,langgraph]')")
    except Exception as exc:
        text = " ".join(str(exc).split()) or "(no message)"
        _fail(f"{type(exc).__name__}: {text}")


def _saver(opts: _Options, prefix: str | None = None) -> FoundryCheckpointer:
    from ._saver import FoundryCheckpointer

    kwargs: dict[str, Any] = {"store_prefix": prefix or opts.prefix}
    if opts.endpoint:
        kwargs["endpoint"] = opts.endpoint
    if opts.user_id:
        kwargs["user_id"] = opts.user_id
    if opts.ca_file is not None:
        kwargs["connection_verify"] = str(opts.ca_file)
    if opts.emulator_user:
        from .emulator import EmulatorCredential

        kwargs["credential"] = EmulatorCredential(opts.emulator_user)
    kwargs["local_backend"] = opts.local_backend
    return FoundryCheckpointer(**kwargs)


@contextlib.contextmanager
def _opened(opts: _Options) -> Iterator[FoundryCheckpointer]:
    with _failures():
        saver = _saver(opts)
        try:
            yield saver
        finally:
            saver.close()


def _backend(saver: FoundryCheckpointer) -> dict[str, Any]:
    core = saver._core
    spill = core.spill
    return {
        "kind": core.kind,
        "location": core.location,
        "store_prefix": core.prefix,
        "spill": spill.describe if spill is not None else None,
    }


def _console() -> Console:
    console = Console(highlight=False)
    if not console.is_terminal:
        console.width = max(console.width, 200)  # piped output: never cut ids
    return console


def _header(console: Console, backend: dict[str, Any]) -> None:
    spill = backend["spill"] or "none"
    line = (
        f"backend {backend['kind']} · data {backend['location']} · "
        f"prefix {backend['store_prefix']} · spill {spill}"
    )
    console.print(cell(line), style="dim", soft_wrap=True)


def _say(console: Console, text: str) -> None:
    """Print one line that may hold stored data: escaped, never read as markup."""
    console.print(cell(text), soft_wrap=True)


def _row(table: Table, *values: object) -> None:
    """Add a row whose every cell is escaped text (stored data never drives the terminal)."""
    table.add_row(*(cell(value) for value in values))


def _table(*columns: str, title: str | None = None) -> Table:
    table = Table(title=title)
    for column in columns:
        table.add_column(column, no_wrap=column in _ID_COLUMNS)
    return table


_ID_COLUMNS = frozenset({"thread", "checkpoint", "latest checkpoint", "parent", "task", "ts"})


def _emit_json(data: Any) -> None:
    typer.echo(strict_json(data))


def _thread_config(
    thread: str, ns: str | None = None, checkpoint: str | None = None
) -> RunnableConfig:
    conf: dict[str, Any] = {"thread_id": thread}
    if ns is not None:
        conf["checkpoint_ns"] = ns
    if checkpoint is not None:
        conf["checkpoint_id"] = checkpoint
    return {"configurable": conf}


def _require_thread(saver: FoundryCheckpointer, thread: str) -> None:
    if next(iter(saver.list(_thread_config(thread), limit=1)), None) is None:
        _fail(f"thread {thread!r} has no checkpoints under prefix {saver._core.prefix!r}")


def _thread_ids(saver: FoundryCheckpointer) -> list[str]:
    core = saver._core
    return sorted(t for t in core.run(core.scope_ids()) if t is not None)


# -- commands -----------------------------------------------------------------------------------


@app.command()
def threads(ctx: typer.Context) -> None:
    """List this user's threads with their latest checkpoint."""
    opts = _options(ctx)
    with _opened(opts) as saver:
        rows: list[dict[str, Any]] = []
        for thread in _thread_ids(saver):
            latest = next(iter(saver.list(_thread_config(thread), limit=1)), None)
            if latest is None:
                continue  # registered but emptied (or expired)
            rows.append(
                {k: v for k, v in summary(latest).items() if k not in ("parent_checkpoint_id",)}
            )
        backend = _backend(saver)
    if opts.json:
        _emit_json({"backend": backend, "threads": rows})
        return
    console = _console()
    _header(console, backend)
    if not rows:
        console.print("no threads")
        return
    table = _table("thread", "latest checkpoint", "ns", "step", "source", "ts")
    for row in rows:
        _row(
            table,
            row["thread_id"],
            row["checkpoint_id"],
            row["checkpoint_ns"] or "(root)",
            row["step"],
            row["source"],
            row["ts"],
        )
    console.print(table)
    console.print(f"{len(rows)} thread(s)")


@app.command()
def history(
    ctx: typer.Context,
    thread: Annotated[str, typer.Argument(help="thread id")],
    ns: Annotated[
        str | None,
        typer.Option("--ns", help="checkpoint namespace ('' = root graph); default: every one"),
    ] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="show at most this many")] = None,
) -> None:
    """List a thread's checkpoints, newest first."""
    opts = _options(ctx)
    with _opened(opts) as saver:
        rows = [summary(item) for item in saver.list(_thread_config(thread, ns), limit=limit)]
        if not rows:
            where = "" if ns is None else f" in namespace {ns!r}"
            _fail(f"thread {thread!r} has no checkpoints{where} under prefix {opts.prefix!r}")
        backend = _backend(saver)
    if opts.json:
        _emit_json({"backend": backend, "thread_id": thread, "checkpoints": rows})
        return
    console = _console()
    _header(console, backend)
    table = _table("checkpoint", "parent", "ns", "step", "source", "writes", "ts")
    for row in rows:
        _row(
            table,
            row["checkpoint_id"],
            row["parent_checkpoint_id"] or "-",
            row["checkpoint_ns"] or "(root)",
            row["step"],
            row["source"],
            row["pending_writes"],
            row["ts"],
        )
    console.print(table)
    _say(console, f"{len(rows)} checkpoint(s) in thread {thread!r}")


@app.command()
def show(
    ctx: typer.Context,
    thread: Annotated[str, typer.Argument(help="thread id")],
    checkpoint: Annotated[
        str | None, typer.Argument(help="checkpoint id (default: the latest)")
    ] = None,
    ns: Annotated[str, typer.Option("--ns", help="checkpoint namespace ('' = root)")] = "",
    json_out: Annotated[bool, typer.Option("--json", help="print JSON")] = False,
) -> None:
    """Show one checkpoint: metadata, channel values and pending writes."""
    opts = _options(ctx)
    with _opened(opts) as saver:
        item: CheckpointTuple | None = saver.get_tuple(_thread_config(thread, ns, checkpoint))
        if item is None:
            what = f"checkpoint {checkpoint!r}" if checkpoint else "no checkpoint"
            _fail(
                f"thread {thread!r} has {what}{' (not found)' if checkpoint else ''}"
                f" in namespace {ns!r} under prefix {opts.prefix!r}"
            )
        backend = _backend(saver)
    if opts.json or json_out:
        _emit_json({"backend": backend, **tuple_json(item)})
        return
    console = _console()
    _header(console, backend)
    head = summary(item)
    info = Table.grid(padding=(0, 2))
    for name in ("thread_id", "checkpoint_ns", "checkpoint_id", "parent_checkpoint_id", "ts"):
        _row(info, name, head[name] if head[name] not in (None, "") else "-")
    for name, value in (item.metadata or {}).items():
        _row(info, f"metadata.{name}", preview(value, width=80))
    console.print(info)
    values = _table("channel", "version", "value", title="channel values")
    versions = item.checkpoint.get("channel_versions", {})
    for name, value in item.checkpoint.get("channel_values", {}).items():
        _row(values, name, preview(versions.get(name, ""), width=20), preview(value, width=70))
    console.print(values)
    if item.pending_writes:
        writes = _table("task", "channel", "value", title="pending writes")
        for task, channel, value in item.pending_writes:
            _row(writes, task, channel, preview(value, width=70))
        console.print(writes)


@app.command()
def delete(
    ctx: typer.Context,
    thread: Annotated[str, typer.Argument(help="thread id")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")] = False,
) -> None:
    """Delete a thread: every checkpoint, pending write and spilled blob of it."""
    opts = _options(ctx)
    with _opened(opts) as saver:
        _require_thread(saver, thread)
        if not yes and not opts.json:
            typer.confirm(f"delete thread {thread!r} and all its checkpoints?", abort=True)
        saver.delete_thread(thread)
        backend = _backend(saver)
    if opts.json:
        _emit_json({"backend": backend, "deleted": thread})
        return
    console = _console()
    _header(console, backend)
    _say(console, f"deleted thread {thread!r}")


@app.command()
def prune(
    ctx: typer.Context,
    thread: Annotated[str, typer.Argument(help="thread id")],
    keep: Annotated[
        int,
        typer.Option("--keep", help="newest checkpoints to keep per namespace", min=1),
    ] = 1,
) -> None:
    """Delete all but the newest --keep checkpoints (default 1) of each namespace of a thread."""
    opts = _options(ctx)
    with _opened(opts) as saver:
        config = _thread_config(thread)
        before = sum(1 for _ in saver.list(config))
        if not before:
            _fail(f"thread {thread!r} has no checkpoints under prefix {opts.prefix!r}")
        saver.prune([thread], strategy="keep_latest", keep=keep)
        after = sum(1 for _ in saver.list(config))
        backend = _backend(saver)
    if opts.json:
        _emit_json(
            {
                "backend": backend,
                "thread_id": thread,
                "before": before,
                "after": after,
                "deleted": before - after,
            }
        )
        return
    console = _console()
    _header(console, backend)
    _say(console, f"pruned thread {thread!r}: {before - after} deleted, {after} kept")


@app.command()
def gc(
    ctx: typer.Context,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="report what would be deleted, delete nothing")
    ] = False,
    grace: Annotated[
        float,
        typer.Option(
            "--grace",
            min=0,
            help="seconds: only blobs not modified for this long are taken (default one day)",
        ),
    ] = float(DEFAULT_GC_GRACE_SECONDS),
) -> None:
    """Delete this user's spilled blobs that no checkpoint or pending write references.

    Blobs younger than the grace period are kept (a write in flight stores its blob first).
    Namespaces under the prefix that none of your threads claims are listed, never touched.
    """
    opts = _options(ctx)
    with _opened(opts) as saver:
        report = saver.gc(grace_seconds=grace, dry_run=dry_run)
        backend = _backend(saver)
    data = {
        "backend": backend,
        "dry_run": report.dry_run,
        "scanned_threads": report.scanned_scopes,
        "referenced": report.referenced,
        "kept_recent": report.kept_recent,
        "deleted": [{"namespace": ns, "digest": digest} for ns, digest in report.deleted],
        "unattributed": report.unattributed,
    }
    if opts.json:
        _emit_json(data)
        return
    console = _console()
    _header(console, backend)
    if backend["spill"] is None:
        console.print("no spill store is configured: nothing to collect")
        return
    verb = "would delete" if dry_run else "deleted"
    console.print(
        f"{verb} {len(report.deleted)} orphaned blob(s) in {report.scanned_scopes} thread(s); "
        f"{report.referenced} referenced, {report.kept_recent} kept (younger than {grace:g} s)"
    )
    for ns, digest in report.deleted:
        _say(console, f"  {ns}/{digest}")
    if report.unattributed:
        console.print(
            f"{len(report.unattributed)} namespace(s) under the prefix belong to no thread of "
            "yours (another user's, or a deleted thread's); left alone"
        )


@app.command()
def copy(
    ctx: typer.Context,
    source: Annotated[
        str,
        typer.Option("--from", help="source saver: sqlite:PATH, postgres:DSN, foundry[:PREFIX]"),
    ],
    destination: Annotated[
        str,
        typer.Option("--to", help="destination saver: sqlite:PATH, postgres:DSN, foundry[:PREFIX]"),
    ],
    thread: Annotated[
        list[str] | None, typer.Option("--thread", help="copy only this thread (repeatable)")
    ] = None,
) -> None:
    """Copy threads between two LangGraph savers, keeping ids, order and pending writes."""
    opts = _options(ctx)
    try:
        src_uri = _cli_copy.parse_uri(source)
        dst_uri = _cli_copy.parse_uri(destination)
    except ValueError as exc:
        raise typer.BadParameter(mask_secrets(str(exc))) from exc
    if src_uri == dst_uri or (
        src_uri.scheme == dst_uri.scheme == "foundry"
        and (src_uri.target or opts.prefix) == (dst_uri.target or opts.prefix)
    ):
        raise typer.BadParameter("--from and --to name the same saver")

    def foundry(prefix: str | None) -> BaseCheckpointSaver[Any]:
        return _saver(opts, prefix)

    err = Console(stderr=True, highlight=False)
    with _failures(), contextlib.ExitStack() as stack:
        src = stack.enter_context(_cli_copy.open_saver(src_uri, role="source", foundry=foundry))
        dst = stack.enter_context(
            _cli_copy.open_saver(dst_uri, role="destination", foundry=foundry)
        )
        refs = _cli_copy.plan_copy(src, thread or None)
        writes = 0
        progress = Progress(
            TextColumn("copying"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[thread]}", markup=False),
            TimeElapsedColumn(),
            console=err,
            disable=opts.json,
            transient=False,
        )
        with progress:
            task = progress.add_task("copy", total=len(refs), thread="")
            for ref in refs:
                progress.update(task, thread=visible(ref.thread_id))
                writes += _cli_copy.copy_checkpoint(src, dst, ref)
                progress.advance(task)
        copied_threads = sorted({r.thread_id for r in refs})
        if thread:
            missing = sorted(set(thread) - set(copied_threads))
            if missing:
                _fail(f"no checkpoints found in the source for thread(s) {missing!r}")
    result = {
        "from": mask_secrets(source),
        "to": mask_secrets(destination),
        "threads": copied_threads,
        "checkpoints": len(refs),
        "writes": writes,
    }
    if opts.json:
        _emit_json(result)
        return
    _say(
        _console(),
        f"copied {len(refs)} checkpoint(s) and {writes} pending write(s) of "
        f"{len(copied_threads)} thread(s) from {mask_secrets(source)} to "
        f"{mask_secrets(destination)}",
    )


@app.command()
def emulator(
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
) -> None:
    """Run the loopback HTTPS emulator of the hosted state store until Ctrl+C.

    Same as `python -m foundry_checkpoint.emulator`: prints the endpoint and the CA file to
    use (FOUNDRY_PROJECT_ENDPOINT, --ca-file).
    """
    from .emulator.__main__ import main as emulator_main

    argv = ["--port", str(port), "--seed", str(seed), "--host", host]
    if data is not None:
        argv += ["--data", str(data)]
    for pair in bind or []:
        argv += ["--bind", pair]
    code = emulator_main(argv)
    if code:
        raise typer.Exit(code)


def main() -> None:
    """Console-script entry point of ``foundry-checkpoint``."""
    app(prog_name="foundry-checkpoint")


if __name__ == "__main__":
    main()
