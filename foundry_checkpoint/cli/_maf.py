"""``foundry-checkpoint maf ...``: Microsoft Agent Framework checkpoints, per context.

Every command goes through the public API of
:class:`~foundry_checkpoint_maf.FoundryCheckpointStorage`; listings and counts come from the
store's key listing (``list_stored``), so no checkpoint is read just to be counted. ``--prefix``
defaults to ``maf``, the storage's own default. ``show`` reads one checkpoint.

``sessions`` and ``history`` show what an agent's
:class:`~foundry_checkpoint_maf.FoundryHistoryProvider` keeps (``--prefix`` defaults to
``maf-history``, the provider's default), through its read-only ``list_sessions`` and
``inspect``: nothing is written and no TTL renewed.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from .._core import DEFAULT_GC_GRACE_SECONDS
from . import _common
from ._agents import (
    HISTORY_PREFIX,
    SESSIONS_PREFIX,
    history_json,
    session_ids,
    session_rows,
    span,
    state_cell,
)
from ._common import DryRunFlag, GraceOption, JsonFlag, Options
from ._format import jsonable, preview

if TYPE_CHECKING:
    from foundry_checkpoint_maf import (
        FoundryCheckpointStorage,
        FoundryHistoryProvider,
        FoundrySessionStore,
        StoredCheckpoint,
        StoredHistory,
    )

__all__ = ["MAF_PREFIX", "app"]

MAF_PREFIX = "maf"
T = TypeVar("T")

app = typer.Typer(
    help=(
        "Microsoft Agent Framework: workflow checkpoints (FoundryCheckpointStorage): contexts, "
        "their workflows' checkpoints and lineage; delete, prune, gc (--prefix defaults to "
        "'maf'); agent sessions and their histories (FoundryHistoryProvider): sessions, history "
        "(--prefix defaults to 'maf-history')."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def _group(ctx: typer.Context, json_out: JsonFlag = False) -> None:
    """Microsoft Agent Framework: contexts, checkpoints, show, delete, prune, gc; sessions and
    history of agents."""
    _common.options(ctx, json_out)


ContextArg = Annotated[
    str,
    typer.Argument(
        help="context id (the storage's context_id; '' for the default store, context_id=None)"
    ),
]
AllowTypeOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--allow-type",
        metavar="MODULE:QUALNAME",
        help="a type the checkpoint may hold besides MAF's safe set (repeatable)",
    ),
]
WorkflowOpt = Annotated[
    str | None, typer.Option("--workflow", help="only this workflow (default: every one)")
]


def _prefix(opts: Options) -> str:
    return opts.prefix or MAF_PREFIX


def _run(opts: Options, coro: Coroutine[Any, Any, T]) -> T:
    with _common.failures("cli,maf"):
        return asyncio.run(coro)


@asynccontextmanager
async def _storage(
    opts: Options, allowed: list[str] | None = None
) -> AsyncIterator[FoundryCheckpointStorage]:
    from foundry_checkpoint_maf import FoundryCheckpointStorage

    storage = FoundryCheckpointStorage(
        **opts.store_kwargs(_prefix(opts)), allowed_checkpoint_types=allowed or None
    )
    try:
        yield storage
    finally:
        await storage.aclose()


def _record(item: StoredCheckpoint) -> dict[str, Any]:
    return {
        "checkpoint_id": item.checkpoint_id,
        "workflow_name": item.workflow_name,
        "previous_checkpoint_id": item.previous,
        "timestamp": item.timestamp,
    }


def _heads(items: list[StoredCheckpoint]) -> set[str]:
    """The newest checkpoint of each workflow (``items`` oldest first, as listed)."""
    latest: dict[str, str] = {}
    for item in items:
        latest[item.workflow_name] = item.checkpoint_id
    return set(latest.values())


def _context_id(context: str) -> str | None:
    """The storage's ``context_id`` for a context argument: ``''`` names the default store
    (a context id is never empty)."""
    return context or None


def _named(context: str) -> str:
    """A context argument in messages."""
    return f"context {context!r}" if context else "the default context"


def _missing_context(opts: Options, context: str) -> str:
    return f"{_named(context)} has no checkpoints under prefix {_prefix(opts)!r}"


@app.command()
def contexts(ctx: typer.Context, json_out: JsonFlag = False) -> None:
    """List this user's contexts: checkpoints, workflows and the newest checkpoint of each."""
    opts = _common.options(ctx, json_out)

    async def collect() -> tuple[dict[str, Any], list[dict[str, Any]]]:
        rows: list[dict[str, Any]] = []
        async with _storage(opts) as storage:
            for context_id in await storage.list_contexts():
                items = await storage.for_context(context_id).list_stored()
                if not items:
                    continue  # registered but emptied (or expired)
                newest = max(items, key=lambda i: i.timestamp or "")
                rows.append(
                    {
                        "context_id": context_id,
                        "checkpoints": len(items),
                        "workflows": sorted({i.workflow_name for i in items}),
                        "latest": _record(newest),
                    }
                )
            return _common.backend(storage), rows

    backend, rows = _run(opts, collect())
    if opts.json:
        _common.emit_json({"backend": backend, "contexts": rows})
        return
    out = _common.console()
    _common.header(out, backend)
    if not rows:
        out.print("no contexts")
        return
    grid = _common.table("context", "checkpoints", "workflows", "latest checkpoint", "timestamp")
    for item in rows:
        _common.row(
            grid,
            "(default: '')" if item["context_id"] is None else item["context_id"],
            item["checkpoints"],
            ", ".join(item["workflows"]),
            item["latest"]["checkpoint_id"],
            item["latest"]["timestamp"] or "-",
        )
    out.print(grid)
    out.print(f"{len(rows)} context(s)")


@app.command()
def checkpoints(
    ctx: typer.Context,
    context: ContextArg,
    workflow: WorkflowOpt = None,
    json_out: JsonFlag = False,
) -> None:
    """List a context's checkpoints per workflow, oldest first, with their lineage."""
    opts = _common.options(ctx, json_out)

    async def collect() -> tuple[dict[str, Any], list[StoredCheckpoint]]:
        async with _storage(opts) as storage:
            items = await storage.for_context(_context_id(context)).list_stored(
                workflow_name=workflow
            )
            return _common.backend(storage), items

    backend, items = _run(opts, collect())
    if not items:
        where = "" if workflow is None else f" of workflow {workflow!r}"
        _common.fail(_missing_context(opts, context) + where)
    heads = _heads(items)
    rows = [{**_record(i), "latest": i.checkpoint_id in heads} for i in items]
    if opts.json:
        _common.emit_json(
            {"backend": backend, "context_id": _context_id(context), "checkpoints": rows}
        )
        return
    out = _common.console()
    _common.header(out, backend)
    for name in sorted({r["workflow_name"] for r in rows}):
        mine = [r for r in rows if r["workflow_name"] == name]
        grid = _common.table("checkpoint", "previous", "timestamp", title=f"workflow {name}")
        for item in mine:
            mark = " (latest)" if item["latest"] else ""
            _common.row(
                grid,
                item["checkpoint_id"] + mark,
                item["previous_checkpoint_id"] or "-",
                item["timestamp"] or "-",
            )
        out.print(grid)
    _common.say(out, f"{len(rows)} checkpoint(s) in {_named(context)}")


def _event_json(request_id: str, event: Any) -> dict[str, Any]:
    data = getattr(event, "data", None)
    return {
        "request_id": request_id,
        "type": type(event).__name__,
        "source_executor_id": getattr(event, "source_executor_id", None),
        "data_type": None if data is None else type(data).__name__,
        "data": jsonable(data),
    }


@app.command()
def show(
    ctx: typer.Context,
    context: ContextArg,
    checkpoint: Annotated[
        str | None, typer.Argument(help="checkpoint id (default: the context's newest)")
    ] = None,
    workflow: WorkflowOpt = None,
    allow_type: AllowTypeOpt = None,
    json_out: JsonFlag = False,
) -> None:
    """Show one checkpoint: state, pending request-info events, messages, size, spilled.

    A checkpoint holding application types is decoded only when they are named with
    --allow-type (as the storage's allowed_checkpoint_types); otherwise it is refused.
    """
    opts = _common.options(ctx, json_out)

    async def collect() -> tuple[dict[str, Any], dict[str, Any]]:
        async with _storage(opts, allow_type) as root:
            storage = root.for_context(_context_id(context))
            wanted = checkpoint
            if wanted is None:
                items = await storage.list_stored(workflow_name=workflow)
                if not items:
                    _common.fail(_missing_context(opts, context))
                wanted = max(items, key=lambda i: i.timestamp or "").checkpoint_id
            stored = await storage.inspect(wanted)
            try:
                loaded = await storage.load(wanted)
            except Exception as exc:
                text = " ".join(str(exc).split())
                if "allowed_checkpoint_types" in text:
                    text += " Here: name it with --allow-type MODULE:QUALNAME."
                _common.fail(text)
            data = {
                **_record(stored),
                "context_id": _context_id(context),
                "size": stored.size,
                "spilled": stored.spilled,
                "iteration_count": loaded.iteration_count,
                "state": jsonable(loaded.state),
                "messages": {k: len(v) for k, v in loaded.messages.items()},
                "pending_request_info_events": [
                    _event_json(k, v) for k, v in loaded.pending_request_info_events.items()
                ],
                "metadata": jsonable(loaded.metadata),
            }
            return _common.backend(root), data

    backend, data = _run(opts, collect())
    if opts.json:
        _common.emit_json({"backend": backend, **data})
        return
    out = _common.console()
    _common.header(out, backend)
    info = _common.table("field", "value")
    for name in (
        "context_id",
        "workflow_name",
        "checkpoint_id",
        "previous_checkpoint_id",
        "timestamp",
        "iteration_count",
    ):
        _common.row(info, name, "-" if data[name] is None else data[name])
    spilled = "spilled to the spill store" if data["spilled"] else "inline"
    _common.row(info, "size", f"{data['size']:,} bytes stored ({spilled})")
    for name, value in data["metadata"].items():
        _common.row(info, f"metadata.{name}", preview(value, width=80))
    out.print(info)
    state = _common.table("key", "value", title="state")
    for name, value in data["state"].items():
        _common.row(state, name, preview(value, width=90))
    out.print(state)
    if data["messages"]:
        messages = _common.table("executor", "messages", title="messages in flight")
        for name, count in data["messages"].items():
            _common.row(messages, name, count)
        out.print(messages)
    events = data["pending_request_info_events"]
    if events:
        grid = _common.table("request", "type", "data", title="pending request-info events")
        for event in events:
            _common.row(grid, event["request_id"], event["data_type"], preview(event["data"]))
        out.print(grid)
    else:
        out.print("no pending request-info events")


@app.command()
def delete(
    ctx: typer.Context,
    context: ContextArg,
    checkpoint: Annotated[
        str | None, typer.Argument(help="only this checkpoint (default: the whole context)")
    ] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")] = False,
    json_out: JsonFlag = False,
) -> None:
    """Delete a context (every checkpoint and spilled blob of it), or one checkpoint of it."""
    opts = _common.options(ctx, json_out)

    async def count() -> int:
        async with _storage(opts) as root:
            return len(await root.for_context(_context_id(context)).list_stored())

    found = _run(opts, count())
    if not found:
        _common.fail(_missing_context(opts, context))
    what = (
        f"checkpoint {checkpoint!r} of {_named(context)}"
        if checkpoint
        else (f"{_named(context)} and its {found} checkpoint(s)")
    )
    if not yes and not opts.json:
        typer.confirm(f"delete {what}?", abort=True)

    async def remove() -> tuple[dict[str, Any], int]:
        async with _storage(opts) as root:
            storage = root.for_context(_context_id(context))
            if checkpoint is None:
                deleted = await storage.delete_context()
            else:
                deleted = int(await storage.delete(checkpoint))
                if not deleted:
                    _common.fail(f"{_named(context)} has no checkpoint {checkpoint!r}")
            return _common.backend(root), deleted

    backend, deleted = _run(opts, remove())
    if opts.json:
        _common.emit_json(
            {
                "backend": backend,
                "context_id": _context_id(context),
                "checkpoint_id": checkpoint,
                "deleted": deleted,
            }
        )
        return
    out = _common.console()
    _common.header(out, backend)
    _common.say(out, f"deleted {what}" if checkpoint else f"deleted {_named(context)}")


@app.command()
def prune(
    ctx: typer.Context,
    context: ContextArg,
    keep: Annotated[
        int, typer.Option("--keep", min=1, help="newest checkpoints to keep per workflow")
    ] = 1,
    workflow: WorkflowOpt = None,
    json_out: JsonFlag = False,
) -> None:
    """Delete all but the newest --keep checkpoints (default 1) of each workflow of a context."""
    opts = _common.options(ctx, json_out)

    async def work() -> tuple[dict[str, Any], int, int]:
        async with _storage(opts) as root:
            storage = root.for_context(_context_id(context))
            before = len(await storage.list_stored(workflow_name=workflow))
            if not before:
                _common.fail(_missing_context(opts, context))
            await storage.prune(keep=keep, workflow_name=workflow)
            after = len(await storage.list_stored(workflow_name=workflow))
            return _common.backend(root), before, after

    backend, before, after = _run(opts, work())
    if opts.json:
        _common.emit_json(
            {
                "backend": backend,
                "context_id": _context_id(context),
                "before": before,
                "after": after,
                "deleted": before - after,
            }
        )
        return
    out = _common.console()
    _common.header(out, backend)
    _common.say(out, f"pruned {_named(context)}: {before - after} deleted, {after} kept")


@app.command()
def gc(
    ctx: typer.Context,
    dry_run: DryRunFlag = False,
    grace: GraceOption = float(DEFAULT_GC_GRACE_SECONDS),
    json_out: JsonFlag = False,
) -> None:
    """Delete this user's spilled MAF checkpoint blobs that no checkpoint references."""
    opts = _common.options(ctx, json_out)

    async def work() -> tuple[dict[str, Any], Any]:
        async with _storage(opts) as storage:
            report = await storage.gc(grace_seconds=grace, dry_run=dry_run)
            return _common.backend(storage), report

    backend, report = _run(opts, work())
    _common.gc_report(opts, backend, report, scope="context", grace=grace)


# -- agents: FoundryHistoryProvider's sessions and histories ---------------------------------
SessionArg = Annotated[
    str,
    typer.Argument(
        help="session id (the agent session's session_id; '' for the default, session_id=None)"
    ),
]


def _history_prefix(opts: Options) -> str:
    return opts.prefix or HISTORY_PREFIX


@asynccontextmanager
async def _history(opts: Options) -> AsyncIterator[FoundryHistoryProvider]:
    from foundry_checkpoint_maf import FoundryHistoryProvider

    provider = FoundryHistoryProvider(**opts.store_kwargs(_history_prefix(opts)))
    try:
        yield provider
    finally:
        await provider.aclose()


def _session_named(session: str | None) -> str:
    return f"session {session!r}" if session else "the default session"


@asynccontextmanager
async def _session_store(opts: Options, prefix: str | None) -> AsyncIterator[FoundrySessionStore]:
    with warnings.catch_warnings():  # MAF marks SessionStore experimental: not the user's news
        warnings.filterwarnings("ignore", message=r"\[SESSION_STORE\]")
        from foundry_checkpoint_maf import FoundrySessionStore

    store = FoundrySessionStore(**opts.store_kwargs(prefix or opts.prefix or SESSIONS_PREFIX))
    try:
        yield store
    finally:
        await store.aclose()


def _count_cell(row: dict[str, Any]) -> str:
    if row["error"] is not None:
        return f"cannot be read: {row['error']}"
    return "-" if row["message_count"] is None else str(row["message_count"])


SessionsPrefixOpt = Annotated[
    str | None,
    typer.Option(
        "--sessions-prefix",
        metavar="PREFIX",
        help="the FoundrySessionStore's store_prefix (default: --prefix if given, else "
        "'maf-sessions')",
    ),
]


@app.command()
def sessions(
    ctx: typer.Context,
    sessions_prefix: SessionsPrefixOpt = None,
    limit: Annotated[int, typer.Option(min=1, help="at most this many sessions")] = 100,
    offset: Annotated[int, typer.Option(min=0, help="skip this many first")] = 0,
    json_out: JsonFlag = False,
) -> None:
    """List this user's agent sessions: the messages their history keeps
    (FoundryHistoryProvider), the bytes of their stored state (FoundrySessionStore), last writes.

    Sorted by session id; each costs one read of each (the history head, the session item),
    no message is read. --prefix defaults to 'maf-history', the provider's own default.
    """
    opts = _common.options(ctx, json_out)

    async def collect() -> tuple[dict[str, Any], list[dict[str, Any]], bool]:
        async with _history(opts) as provider, _session_store(opts, sessions_prefix) as store:
            ids, kept = await session_ids(provider, store)
            rows = await session_rows(provider, store, ids[offset : offset + limit], kept)
            return _common.backend(provider), rows, len(ids) > offset + limit

    backend, rows, more = _run(opts, collect())
    if opts.json:
        _common.emit_json({"backend": backend, "offset": offset, "sessions": rows})
        return
    out = _common.console()
    _common.header(out, backend)
    if not rows:
        out.print("no sessions" if not offset else f"no sessions past --offset {offset}")
        return
    grid = _common.table("session", "messages", "sequence numbers", "session state", "last write")
    for row in rows:
        _common.row(
            grid,
            "(default: '')" if row["session_id"] is None else row["session_id"],
            _count_cell(row),
            span(row),
            state_cell(row),
            row["updated_at"] or "-",
        )
    out.print(grid)
    hint = f"; more with --offset {offset + limit}" if more else ""
    out.print(f"{len(rows)} session(s){hint}")


#: Messages ``maf history`` shows when neither --limit nor --last says how many.
HISTORY_PAGE = 50


@app.command()
def history(
    ctx: typer.Context,
    session: SessionArg,
    last: Annotated[
        int | None, typer.Option("--last", min=1, help="only the last N messages")
    ] = None,
    limit: Annotated[
        int | None,
        typer.Option(min=1, help=f"at most this many (default {HISTORY_PAGE}, or --last's N)"),
    ] = None,
    offset: Annotated[
        int, typer.Option(min=0, help="skip this many first (of the messages --last selects)")
    ] = 0,
    json_out: JsonFlag = False,
) -> None:
    """Show a session's messages, oldest first: role, author, text and contents, stored size.

    Read-only (nothing written, no TTL renewed); one head read and one read per message shown.
    --prefix defaults to 'maf-history', the provider's own default.
    """
    opts = _common.options(ctx, json_out)
    size = limit if limit is not None else (last if last is not None else HISTORY_PAGE)
    session_id = session or None

    async def collect() -> tuple[dict[str, Any], StoredHistory | None]:
        async with _history(opts) as provider:
            stored = await provider.inspect(session_id, offset=offset, limit=size, last=last)
            return _common.backend(provider), stored

    backend, stored = _run(opts, collect())
    if stored is None:
        _common.fail(
            f"{_session_named(session_id)} has no history under prefix {_history_prefix(opts)!r}"
        )
    data = history_json(stored, offset=offset)
    if opts.json:
        _common.emit_json({"backend": backend, **data})
        return
    out = _common.console()
    _common.header(out, backend)
    window = stored.count if last is None else min(last, stored.count)
    _common.say(
        out,
        f"{_session_named(session_id)}: {stored.count} message(s) kept "
        f"(sequence numbers {stored.first}..{stored.next - 1}), last append {data['updated_at']}",
    )
    if not data["messages"]:
        out.print("no messages in this window")
        return
    grid = _common.table("seq", "role", "author", "contents", "size")
    for item in data["messages"]:
        if item["error"] is not None:
            _common.row(grid, item["seq"], "?", "-", f"cannot be read: {item['error']}", "-")
            continue
        spilled = " (spilled)" if item["spilled"] else ""
        _common.row(
            grid,
            item["seq"],
            item["role"],
            item["author_name"] or "-",
            " · ".join(item["contents"]) or "(no contents)",
            f"{item['size']:,} B{spilled}",
        )
    out.print(grid)
    shown_to = offset + size
    hint = f"; more with --offset {shown_to}" if window > shown_to else ""
    first_shown = data["messages"][0]["seq"]
    last_shown = data["messages"][-1]["seq"]
    out.print(f"seq {first_shown}..{last_shown}: {len(data['messages'])} of {window}{hint}")
