"""The LangGraph commands of ``foundry-checkpoint``: threads, history, show, delete, prune, gc
and copy.

They are the top-level commands (``foundry-checkpoint history THREAD``), each going through the
public API of :class:`~foundry_checkpoint.FoundryCheckpointer` on the backend the global options
select; ``--prefix`` defaults to ``langgraph``, the checkpointer's own default. ``copy`` moves
threads between any two LangGraph savers (see :mod:`foundry_checkpoint.cli._copy`).
"""

from __future__ import annotations

import contextlib
import enum
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from .._core import DEFAULT_GC_GRACE_SECONDS
from . import _common, _copy, _tree
from ._common import DryRunFlag, GraceOption, JsonFlag, Options
from ._format import mask_secrets, preview, summary, tuple_json, visible

if TYPE_CHECKING:
    from collections.abc import Callable

    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import BaseCheckpointSaver, CheckpointTuple

    from .._langgraph._saver import FoundryCheckpointer

__all__ = ["COMMANDS", "LANGGRAPH_PREFIX"]

LANGGRAPH_PREFIX = "langgraph"

_fail = _common.fail
_failures = _common.failures
_backend = _common.backend
_console = _common.console
_header = _common.header
_say = _common.say
_row = _common.row
_table = _common.table
_emit_json = _common.emit_json


class _HistoryFormat(str, enum.Enum):
    table = "table"
    tree = "tree"
    mermaid = "mermaid"
    dot = "dot"


_INTERRUPT = "__interrupt__"


def _prefix(opts: Options) -> str:
    return opts.prefix or LANGGRAPH_PREFIX


def _saver(opts: Options, prefix: str | None = None) -> FoundryCheckpointer:
    from .._langgraph._saver import FoundryCheckpointer

    return FoundryCheckpointer(**opts.store_kwargs(prefix or _prefix(opts)))


@contextlib.contextmanager
def _opened(opts: Options) -> Iterator[FoundryCheckpointer]:
    with _failures():
        saver = _saver(opts)
        try:
            yield saver
        finally:
            saver.close()


def _thread_config(
    thread: str, ns: str | None = None, checkpoint: str | None = None
) -> RunnableConfig:
    conf: dict[str, Any] = {"thread_id": thread}
    if ns is not None:
        conf["checkpoint_ns"] = ns
    if checkpoint is not None:
        conf["checkpoint_id"] = checkpoint
    return {"configurable": conf}


def _require_thread(saver: FoundryCheckpointer, thread: str) -> int:
    count = saver.count_checkpoints(thread)
    if not count:
        _fail(f"thread {thread!r} has no checkpoints under prefix {saver.store_prefix!r}")
    return count


def threads(ctx: typer.Context, json_out: JsonFlag = False) -> None:
    """List this user's threads with their latest checkpoint."""
    opts = _common.options(ctx, json_out)
    with _opened(opts) as saver:
        rows: list[dict[str, Any]] = []
        for thread in saver.list_threads():
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


def history(
    ctx: typer.Context,
    thread: Annotated[str, typer.Argument(help="thread id")],
    ns: Annotated[
        str | None,
        typer.Option("--ns", help="checkpoint namespace ('' = root graph); default: every one"),
    ] = None,
    limit: Annotated[int | None, typer.Option(min=1, help="show at most this many")] = None,
    tree: Annotated[
        bool, typer.Option("--tree", help="draw the checkpoint tree (same as --format tree)")
    ] = False,
    fmt: Annotated[
        _HistoryFormat,
        typer.Option(
            "--format",
            help="table (default), tree (the terminal), mermaid or dot (for docs and issues)",
        ),
    ] = _HistoryFormat.table,
    json_out: JsonFlag = False,
) -> None:
    """List a thread's checkpoints, newest first, or draw them as a tree.

    The tree shows the branches time travel and update_state create, the current head
    (the newest checkpoint of each namespace), pending writes and interrupts. mermaid and dot
    print a diagram for docs and issues (nothing else, so it can be piped). --json prints the
    history document whatever the format.
    """
    opts = _common.options(ctx, json_out)
    if tree:
        fmt = _HistoryFormat.tree
    with _opened(opts) as saver:
        items = list(saver.list(_thread_config(thread, ns), limit=limit))
        rows = [summary(item) for item in items]
        if not rows:
            where = "" if ns is None else f" in namespace {ns!r}"
            _fail(f"thread {thread!r} has no checkpoints{where} under prefix {_prefix(opts)!r}")
        backend = _backend(saver)
    if opts.json:
        _emit_json({"backend": backend, "thread_id": thread, "checkpoints": rows})
        return
    if fmt is not _HistoryFormat.table:
        interrupted = [
            str(item.config["configurable"]["checkpoint_id"])
            for item in items
            if any(channel == _INTERRUPT for _, channel, _ in item.pending_writes or [])
        ]
        forest = _tree.build(rows, interrupted)
        if fmt is _HistoryFormat.mermaid:
            typer.echo(_tree.mermaid(forest), nl=False)
            return
        if fmt is _HistoryFormat.dot:
            typer.echo(_tree.dot(forest), nl=False)
            return
        console = _console()
        _header(console, backend)
        for namespace, roots in forest.items():
            if len(forest) > 1 or namespace:
                _say(console, f"namespace {namespace or '(root)'}:")
            for line in _tree.text_lines(roots):
                _say(console, line)
        _say(console, f"{len(rows)} checkpoint(s) in thread {thread!r}")
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


def show(
    ctx: typer.Context,
    thread: Annotated[str, typer.Argument(help="thread id")],
    checkpoint: Annotated[
        str | None, typer.Argument(help="checkpoint id (default: the latest)")
    ] = None,
    ns: Annotated[str, typer.Option("--ns", help="checkpoint namespace ('' = root)")] = "",
    json_out: JsonFlag = False,
) -> None:
    """Show one checkpoint: metadata, channel values and pending writes."""
    opts = _common.options(ctx, json_out)
    with _opened(opts) as saver:
        item: CheckpointTuple | None = saver.get_tuple(_thread_config(thread, ns, checkpoint))
        if item is None:
            what = f"checkpoint {checkpoint!r}" if checkpoint else "no checkpoint"
            _fail(
                f"thread {thread!r} has {what}{' (not found)' if checkpoint else ''}"
                f" in namespace {ns!r} under prefix {_prefix(opts)!r}"
            )
        backend = _backend(saver)
    if opts.json:
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


def delete(
    ctx: typer.Context,
    thread: Annotated[str, typer.Argument(help="thread id")],
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")] = False,
    json_out: JsonFlag = False,
) -> None:
    """Delete a thread: every checkpoint, pending write and spilled blob of it."""
    opts = _common.options(ctx, json_out)
    with _opened(opts) as saver:
        count = _require_thread(saver, thread)
        if not yes and not opts.json:
            typer.confirm(f"delete thread {thread!r} and all its checkpoints?", abort=True)
        saver.delete_thread(thread)
        backend = _backend(saver)
    if opts.json:
        _emit_json({"backend": backend, "deleted": thread, "checkpoints": count})
        return
    console = _console()
    _header(console, backend)
    _say(console, f"deleted thread {thread!r}")


def prune(
    ctx: typer.Context,
    thread: Annotated[str, typer.Argument(help="thread id")],
    keep: Annotated[
        int,
        typer.Option("--keep", help="newest checkpoints to keep per namespace", min=1),
    ] = 1,
    json_out: JsonFlag = False,
) -> None:
    """Delete all but the newest --keep checkpoints (default 1) of each namespace of a thread."""
    opts = _common.options(ctx, json_out)
    with _opened(opts) as saver:
        before = _require_thread(saver, thread)
        saver.prune([thread], strategy="keep_latest", keep=keep)
        after = saver.count_checkpoints(thread)
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


def gc(
    ctx: typer.Context,
    dry_run: DryRunFlag = False,
    grace: GraceOption = float(DEFAULT_GC_GRACE_SECONDS),
    json_out: JsonFlag = False,
) -> None:
    """Delete this user's spilled blobs that no checkpoint or pending write references.

    Blobs younger than the grace period are kept (a write in flight stores its blob first).
    Namespaces under the prefix that none of your threads claims are listed, never touched.
    """
    opts = _common.options(ctx, json_out)
    with _opened(opts) as saver:
        report = saver.gc(grace_seconds=grace, dry_run=dry_run)
        backend = _backend(saver)
    _common.gc_report(opts, backend, report, scope="thread", grace=grace)


def copy(
    ctx: typer.Context,
    source: Annotated[
        str,
        typer.Option(
            "--from",
            help="source saver: sqlite:PATH, postgres:DSN, foundry[:PREFIX], foundry-lc[:PREFIX]",
        ),
    ],
    destination: Annotated[
        str,
        typer.Option("--to", help="destination saver: sqlite:PATH, postgres:DSN, foundry[:PREFIX]"),
    ],
    thread: Annotated[
        list[str] | None, typer.Option("--thread", help="copy only this thread (repeatable)")
    ] = None,
    store: Annotated[
        bool,
        typer.Option(
            "--store",
            help="copy LangGraph long-term memory (BaseStore items) instead: sqlite:PATH, "
            "postgres:DSN, foundry-store[:PREFIX]",
        ),
    ] = False,
    prefix_ns: Annotated[
        str | None,
        typer.Option(
            "--prefix-ns",
            metavar="NAMESPACE",
            help="with --store: only the items under this namespace",
        ),
    ] = None,
    json_out: JsonFlag = False,
) -> None:
    """Copy threads between two LangGraph savers, keeping ids, order and pending writes.

    ``--from foundry-lc[:PREFIX]`` reads the stores of langchain-azure-ai's
    FoundryCheckpointSaver (a source only; name the threads with ``--thread``). With
    ``--store`` it copies the items of a LangGraph store (SqliteStore, PostgresStore,
    FoundryStore) into another, TTLs kept; keys the destination has are left alone.
    """
    opts = _common.options(ctx, json_out)
    if store:
        if thread:
            raise typer.BadParameter("--thread copies threads: it does not go with --store")
        from ._memory import copy_command

        copy_command(opts, source, destination, prefix_ns)
        return
    if prefix_ns is not None:
        raise typer.BadParameter("--prefix-ns selects store items: use it with --store")
    try:
        src_uri = _copy.parse_uri(source)
        dst_uri = _copy.parse_uri(destination)
    except _copy.CopyError as exc:
        raise typer.BadParameter(mask_secrets(str(exc))) from exc
    if dst_uri.scheme == "foundry-lc":
        raise typer.BadParameter("foundry-lc: is a source only: use it with --from")
    if src_uri.scheme == "foundry-lc" and not thread:
        raise typer.BadParameter(
            "langchain-azure-ai's FoundryCheckpointSaver keeps no list of its threads: "
            "name each thread to copy with --thread ID"
        )
    if src_uri == dst_uri or (
        src_uri.scheme == dst_uri.scheme == "foundry"
        and (src_uri.target or opts.prefix) == (dst_uri.target or opts.prefix)
    ):
        raise typer.BadParameter("--from and --to name the same saver")

    def foundry(prefix: str | None) -> BaseCheckpointSaver[Any]:
        return _saver(opts, prefix)

    def foundry_lc(prefix: str | None) -> BaseCheckpointSaver[Any]:
        from ..migrate import LC_DEFAULT_PREFIX, LangchainAzureSource

        kwargs = opts.store_kwargs(_prefix(opts))
        return LangchainAzureSource(prefix or LC_DEFAULT_PREFIX, **kwargs)

    err = Console(stderr=True, highlight=False)
    with _failures(), contextlib.ExitStack() as stack:
        src = stack.enter_context(
            _copy.open_saver(src_uri, role="source", foundry=foundry, foundry_lc=foundry_lc)
        )
        dst = stack.enter_context(_copy.open_saver(dst_uri, role="destination", foundry=foundry))
        from ..migrate import copy_checkpoint, plan_copy  # needs LangGraph, as copy does

        refs = plan_copy(src, thread or None)
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
                writes += copy_checkpoint(src, dst, ref)
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


COMMANDS: tuple[Callable[..., None], ...] = (threads, history, show, delete, prune, gc, copy)
"""The commands, in the order ``--help`` lists them; the app registers each under its name."""
