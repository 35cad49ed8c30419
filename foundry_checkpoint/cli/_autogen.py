"""``foundry-checkpoint autogen ...``: AutoGen states (agents, runtimes, teams), per scope.

Every command goes through the public API of
:class:`~foundry_checkpoint_autogen.AutoGenStateStore`; listings and counts come from the key
listing (``list_states``, ``versions``), so no state is read just to be counted. ``--prefix``
defaults to ``autogen``, the store's own default. ``show`` reads one version.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any

import typer

from . import _common
from ._common import JsonFlag, Options
from ._format import jsonable, preview

if TYPE_CHECKING:
    from foundry_checkpoint_autogen import AutoGenStateStore

__all__ = ["AUTOGEN_PREFIX", "app"]

AUTOGEN_PREFIX = "autogen"

app = typer.Typer(
    help=(
        "AutoGen states (AutoGenStateStore): scopes, their agents, runtimes and teams, "
        "versions; show, delete, prune. --prefix defaults to 'autogen'."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def _group(ctx: typer.Context, json_out: JsonFlag = False) -> None:
    """AutoGen states: scopes, states, versions, show, delete, prune."""
    _common.options(ctx, json_out)


ScopeArg = Annotated[str, typer.Argument(help="scope (a conversation, a deployment)")]
KindArg = Annotated[str, typer.Argument(help="kind: agent, runtime, team or your own word")]
NameArg = Annotated[str, typer.Argument(help="name: an AgentId string, a team name")]


def _prefix(opts: Options) -> str:
    return opts.prefix or AUTOGEN_PREFIX


@contextlib.contextmanager
def _store(opts: Options) -> Iterator[AutoGenStateStore]:
    with _common.failures("cli,autogen"):
        from foundry_checkpoint_autogen import AutoGenStateStore

        store = AutoGenStateStore(**opts.store_kwargs(_prefix(opts)), keep_versions=None)
        try:
            yield store
        finally:
            store.close()


def _what(scope: str, kind: str, name: str) -> str:
    return f"{kind} {name!r} in scope {scope!r}"


@app.command()
def scopes(ctx: typer.Context, json_out: JsonFlag = False) -> None:
    """List this user's scopes with how many states and versions each holds."""
    opts = _common.options(ctx, json_out)
    rows: list[dict[str, Any]] = []
    with _store(opts) as store:
        for scope in store.list_scopes():
            states = store.list_states(scope)
            if states:
                rows.append(
                    {
                        "scope": scope,
                        "states": len(states),
                        "versions": sum(s.versions for s in states),
                        "kinds": sorted({s.kind for s in states}),
                    }
                )
        backend = _common.backend(store)
    if opts.json:
        _common.emit_json({"backend": backend, "scopes": rows})
        return
    out = _common.console()
    _common.header(out, backend)
    if not rows:
        out.print("no scopes")
        return
    grid = _common.table("scope", "states", "versions", "kinds")
    for row in rows:
        scope = "(default)" if row["scope"] is None else row["scope"]
        _common.row(grid, scope, row["states"], row["versions"], ", ".join(row["kinds"]))
    out.print(grid)
    out.print(f"{len(rows)} scope(s)")


@app.command()
def states(
    ctx: typer.Context,
    scope: ScopeArg,
    kind: Annotated[
        str | None, typer.Option("--kind", help="only this kind (agent, runtime, team...)")
    ] = None,
    json_out: JsonFlag = False,
) -> None:
    """List a scope's states: kind, name, how many versions, the newest."""
    opts = _common.options(ctx, json_out)
    with _store(opts) as store:
        found = [s for s in store.list_states(scope) if kind is None or s.kind == kind]
        backend = _common.backend(store)
    if not found:
        which = "" if kind is None else f" of kind {kind!r}"
        _common.fail(f"scope {scope!r} has no states{which} under prefix {_prefix(opts)!r}")
    rows = [
        {
            "kind": s.kind,
            "name": s.name,
            "versions": s.versions,
            "latest_version": s.latest,
            "latest_created_at": s.created_at,
        }
        for s in found
    ]
    if opts.json:
        _common.emit_json({"backend": backend, "scope": scope, "states": rows})
        return
    out = _common.console()
    _common.header(out, backend)
    grid = _common.table("kind", "name", "versions", "latest version")
    for row in rows:
        _common.row(grid, row["kind"], row["name"], row["versions"], row["latest_version"])
    out.print(grid)
    _common.say(out, f"{len(rows)} state(s) in scope {scope!r}")


@app.command()
def versions(
    ctx: typer.Context,
    scope: ScopeArg,
    kind: KindArg,
    name: NameArg,
    json_out: JsonFlag = False,
) -> None:
    """List the stored versions of one state, oldest first."""
    opts = _common.options(ctx, json_out)
    with _store(opts) as store:
        found = store.versions(scope, kind, name)
        backend = _common.backend(store)
    if not found:
        _common.fail(f"no stored {_what(scope, kind, name)} under prefix {_prefix(opts)!r}")
    rows = [{"version": v.version, "created_at": v.created_at} for v in found]
    if opts.json:
        _common.emit_json(
            {"backend": backend, "scope": scope, "kind": kind, "name": name, "versions": rows}
        )
        return
    out = _common.console()
    _common.header(out, backend)
    grid = _common.table("version", "created at (epoch s)")
    for row in rows:
        _common.row(grid, row["version"], row["created_at"])
    out.print(grid)
    _common.say(out, f"{len(rows)} version(s) of {_what(scope, kind, name)}")


@app.command()
def show(
    ctx: typer.Context,
    scope: ScopeArg,
    kind: KindArg,
    name: NameArg,
    version: Annotated[
        str | None, typer.Option("--version", help="this version (default: the latest)")
    ] = None,
    json_out: JsonFlag = False,
) -> None:
    """Show one stored state (the latest, or --version) as saved by save_state()."""
    opts = _common.options(ctx, json_out)
    with _store(opts) as store:
        chosen = version
        if chosen is None:
            listed = store.versions(scope, kind, name)
            chosen = listed[-1].version if listed else None
        state = None if chosen is None else store.load(scope, kind, name, version=chosen)
        backend = _common.backend(store)
    if state is None:
        which = f"version {version!r} of " if version else ""
        _common.fail(f"no stored {which}{_what(scope, kind, name)} under prefix {_prefix(opts)!r}")
    data = {
        "backend": backend,
        "scope": scope,
        "kind": kind,
        "name": name,
        "version": chosen,
        "state": jsonable(state),
    }
    if opts.json:
        _common.emit_json(data)
        return
    out = _common.console()
    _common.header(out, backend)
    grid = _common.table("key", "value", title=f"{kind} {name} · version {chosen}")
    for key, value in state.items():
        _common.row(grid, key, preview(value, width=100))
    out.print(grid)


@app.command()
def delete(
    ctx: typer.Context,
    scope: ScopeArg,
    kind: KindArg,
    name: NameArg,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")] = False,
    json_out: JsonFlag = False,
) -> None:
    """Delete every version of one state (and its spilled blobs)."""
    opts = _common.options(ctx, json_out)
    with _store(opts) as store:
        count = len(store.versions(scope, kind, name))
        if not count:
            _common.fail(f"no stored {_what(scope, kind, name)} under prefix {_prefix(opts)!r}")
        if not yes and not opts.json:
            typer.confirm(f"delete {_what(scope, kind, name)} ({count} version(s))?", abort=True)
        deleted = store.delete(scope, kind, name)
        backend = _common.backend(store)
    if opts.json:
        _common.emit_json(
            {"backend": backend, "scope": scope, "kind": kind, "name": name, "deleted": deleted}
        )
        return
    out = _common.console()
    _common.header(out, backend)
    _common.say(out, f"deleted {deleted} version(s) of {_what(scope, kind, name)}")


@app.command()
def prune(
    ctx: typer.Context,
    scope: ScopeArg,
    kind: KindArg,
    name: NameArg,
    keep: Annotated[int, typer.Option("--keep", min=1, help="newest versions to keep")] = 1,
    json_out: JsonFlag = False,
) -> None:
    """Delete all but the newest --keep versions (default 1) of one state."""
    opts = _common.options(ctx, json_out)
    with _store(opts) as store:
        before = len(store.versions(scope, kind, name))
        if not before:
            _common.fail(f"no stored {_what(scope, kind, name)} under prefix {_prefix(opts)!r}")
        deleted = store.prune(scope, kind, name, keep=keep)
        backend = _common.backend(store)
    data = {
        "backend": backend,
        "scope": scope,
        "kind": kind,
        "name": name,
        "before": before,
        "after": before - deleted,
        "deleted": deleted,
    }
    if opts.json:
        _common.emit_json(data)
        return
    out = _common.console()
    _common.header(out, backend)
    _common.say(
        out, f"pruned {_what(scope, kind, name)}: {deleted} deleted, {before - deleted} kept"
    )
