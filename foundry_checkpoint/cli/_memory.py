"""``foundry-checkpoint memory ...``: LangGraph long-term memory kept by ``FoundryStore``.

Every command goes through the public ``BaseStore`` API of
:class:`~foundry_checkpoint.FoundryStore` (``list_namespaces``, ``search``, ``get``,
``delete``), on the backend and identity the global options select; ``--prefix`` defaults to
``langgraph-store``, the store's own default. Nothing here refreshes an item's TTL: reading a
memory to look at it is not the agent using it.

A namespace is written on the command line as its labels joined by ``/``. A label may hold
``/`` (LangGraph allows it), so inside a label ``/`` is written ``%2F`` and ``%`` is written
``%25``, as in a URL path (any ``%XX`` UTF-8 escape is read). A JSON array of strings is
accepted too, and ``''`` is the empty namespace (every item, every namespace). Tables show
namespaces in the same form, so a cell can be pasted back; JSON output gives them as lists.

Example:
    >>> parse_namespace("users/ann%2Fbob")
    ('users', 'ann/bob')
    >>> parse_namespace('["users", "ann/bob"]')
    ('users', 'ann/bob')
    >>> format_namespace(("users", "ann/bob", "50%"))
    'users/ann%2Fbob/50%25'
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Iterator
from typing import TYPE_CHECKING, Annotated, Any, Final

import typer
from rich.table import Table

from ..errors import InvalidArgumentError
from . import _common
from ._common import JsonFlag, Options
from ._format import jsonable

if TYPE_CHECKING:
    from langgraph.store.base import Item

    from .._memory import FoundryStore

__all__ = ["MEMORY_PREFIX", "app", "format_namespace", "parse_namespace"]

MEMORY_PREFIX: Final = "langgraph-store"
"""``FoundryStore``'s default ``store_prefix``: the ``memory`` commands' default ``--prefix``."""

_ESCAPE: Final = re.compile(r"%(?![0-9A-Fa-f]{2})")

app = typer.Typer(
    help=(
        "LangGraph long-term memory (FoundryStore): namespaces, items, get, delete. "
        "--prefix defaults to 'langgraph-store'. A namespace is its labels joined by '/' "
        "('/' inside a label as %2F, '%' as %25), or a JSON array of strings."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def _group(ctx: typer.Context, json_out: JsonFlag = False) -> None:
    """LangGraph long-term memory: namespaces, items, get, delete."""
    _common.options(ctx, json_out)


def parse_namespace(text: str) -> tuple[str, ...]:
    """The namespace a command-line argument names.

    Args:
        text: labels joined by ``/`` (``%2F`` for a ``/`` inside a label, ``%25`` for ``%``;
            any ``%XX`` UTF-8 escape is read), a JSON array of strings, or ``''`` for the empty
            namespace.

    Returns:
        The labels.

    Raises:
        InvalidArgumentError: an empty label (``a//b``, a trailing ``/``), a ``%`` not followed
            by two hex digits, bad UTF-8 in the escapes, or a JSON array holding anything but
            non-empty strings.

    Example:
        >>> parse_namespace("")
        ()
        >>> parse_namespace("a/b%25c")
        ('a', 'b%c')
        >>> parse_namespace("a//b")  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        foundry_checkpoint.errors.InvalidArgumentError: namespace 'a//b' has an empty label: ...
    """
    if text.lstrip().startswith("["):
        try:
            labels = json.loads(text)
        except ValueError as exc:
            raise InvalidArgumentError(f"namespace {text!r} is not a JSON array: {exc}") from None
        if not isinstance(labels, list) or not all(isinstance(x, str) and x for x in labels):
            raise InvalidArgumentError(
                f"namespace {text!r}: a JSON namespace is an array of non-empty strings"
            )
        return tuple(labels)
    if text == "":
        return ()
    out: list[str] = []
    for part in text.split("/"):
        if not part:
            raise InvalidArgumentError(
                f"namespace {text!r} has an empty label: labels are joined by single '/' "
                "(write a '/' inside a label as %2F)"
            )
        if _ESCAPE.search(part):
            raise InvalidArgumentError(
                f"namespace {text!r}: a '%' in a label is written %25 ('/' is written %2F)"
            )
        try:
            out.append(_unquote(part))
        except UnicodeDecodeError:
            raise InvalidArgumentError(
                f"namespace {text!r}: its %XX escapes are not UTF-8"
            ) from None
    return tuple(out)


def _unquote(part: str) -> str:
    if "%" not in part:
        return part
    data = bytearray()
    index = 0
    while index < len(part):
        if part[index] == "%":
            data.append(int(part[index + 1 : index + 3], 16))
            index += 3
        else:
            data.extend(part[index].encode("utf-8"))
            index += 1
    return data.decode("utf-8")


def format_namespace(labels: tuple[str, ...] | list[str]) -> str:
    """A namespace as the commands take it: labels joined by ``/``, ``%`` and ``/`` escaped.

    Example:
        >>> format_namespace(["a/b", "c"])
        'a%2Fb/c'
        >>> parse_namespace(format_namespace(("x%2F", "y")))
        ('x%2F', 'y')
    """
    return "/".join(label.replace("%", "%25").replace("/", "%2F") for label in labels)


def _namespace(text: str, hint: str = "NAMESPACE") -> tuple[str, ...]:
    try:
        return parse_namespace(text)
    except InvalidArgumentError as exc:
        raise typer.BadParameter(str(exc), param_hint=hint) from exc


NamespaceArg = Annotated[
    str,
    typer.Argument(
        help="namespace: labels joined by '/' (%2F for a '/' in a label, %25 for '%'), or a "
        "JSON array of strings; '' for every namespace"
    ),
]
KeyArg = Annotated[str, typer.Argument(help="the item's key")]


def _prefix(opts: Options) -> str:
    return opts.prefix or MEMORY_PREFIX


def open_store(opts: Options, prefix: str | None = None) -> FoundryStore:
    """The ``FoundryStore`` the global options select (``prefix`` None: ``--prefix``, else
    ``langgraph-store``)."""
    from .._memory import FoundryStore

    return FoundryStore(**opts.store_kwargs(prefix or _prefix(opts)))


@contextlib.contextmanager
def _opened(opts: Options) -> Iterator[FoundryStore]:
    with _common.failures():
        store = open_store(opts)
        try:
            yield store
        finally:
            store.close()


def item_json(item: Item) -> dict[str, Any]:
    """An item as the ``memory`` commands print it: namespace (a list), key, value, times.

    Example:
        >>> from datetime import datetime, timezone
        >>> from langgraph.store.base import Item
        >>> at = datetime(2026, 1, 2, tzinfo=timezone.utc)
        >>> item_json(Item(value={"a": 1}, key="k", namespace=("n",), created_at=at,
        ...                updated_at=at))["updated_at"]
        '2026-01-02T00:00:00+00:00'
    """
    return {
        "namespace": list(item.namespace),
        "key": item.key,
        "value": jsonable(item.value),
        "created_at": jsonable(item.created_at),
        "updated_at": jsonable(item.updated_at),
    }


def value_preview(value: Any, width: int = 70) -> str:
    """A stored value on one line: compact JSON, cut to ``width`` characters.

    Example:
        >>> value_preview({"text": "x" * 100}, width=16)
        '{"text": "xxxxx…'
    """
    text = json.dumps(jsonable(value), ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"


def _missing(opts: Options, namespace: tuple[str, ...], key: str) -> str:
    return (
        f"namespace {format_namespace(namespace)!r} has no item {key!r} under prefix "
        f"{_prefix(opts)!r}"
    )


@app.command()
def namespaces(
    ctx: typer.Context,
    prefix_ns: Annotated[
        str | None,
        typer.Option("--prefix-ns", metavar="NAMESPACE", help="only namespaces starting so"),
    ] = None,
    suffix_ns: Annotated[
        str | None,
        typer.Option("--suffix-ns", metavar="NAMESPACE", help="only namespaces ending so"),
    ] = None,
    max_depth: Annotated[
        int | None,
        typer.Option("--max-depth", min=1, help="cut namespaces to this many labels"),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="at most this many")] = 100,
    offset: Annotated[int, typer.Option(min=0, help="skip this many first")] = 0,
    json_out: JsonFlag = False,
) -> None:
    """List this user's memory namespaces, sorted (list_namespaces)."""
    opts = _common.options(ctx, json_out)
    prefix = _namespace(prefix_ns, "--prefix-ns") if prefix_ns else None
    suffix = _namespace(suffix_ns, "--suffix-ns") if suffix_ns else None
    with _opened(opts) as store:
        found = store.list_namespaces(
            prefix=prefix, suffix=suffix, max_depth=max_depth, limit=limit, offset=offset
        )
        backend = _common.backend(store)
    if opts.json:
        _common.emit_json({"backend": backend, "namespaces": [list(ns) for ns in found]})
        return
    out = _common.console()
    _common.header(out, backend)
    if not found:
        out.print("no namespaces")
        return
    grid = _common.table("namespace", "labels")
    for ns in found:
        _common.row(grid, format_namespace(ns), len(ns))
    out.print(grid)
    more = f"; more with --offset {offset + limit}" if len(found) == limit else ""
    out.print(f"{len(found)} namespace(s){more}")


@app.command()
def items(
    ctx: typer.Context,
    namespace: NamespaceArg,
    filter_json: Annotated[
        str | None,
        typer.Option(
            "--filter",
            metavar="JSON",
            help='only items whose value matches, as search(filter=...): {"kind": "note"}, '
            '{"score": {"$gte": 3}}',
        ),
    ] = None,
    limit: Annotated[int, typer.Option(min=1, help="at most this many")] = 20,
    offset: Annotated[int, typer.Option(min=0, help="skip this many first")] = 0,
    json_out: JsonFlag = False,
) -> None:
    """List the items in a namespace and the namespaces under it (search), newest first."""
    opts = _common.options(ctx, json_out)
    ns = _namespace(namespace)
    wanted: dict[str, Any] | None = None
    if filter_json is not None:
        try:
            wanted = json.loads(filter_json)
        except ValueError as exc:
            raise typer.BadParameter(f"not JSON: {exc}", param_hint="--filter") from None
        if not isinstance(wanted, dict):
            raise typer.BadParameter("a filter is a JSON object", param_hint="--filter")
    with _opened(opts) as store:
        found = store.search(ns, filter=wanted, limit=limit, offset=offset, refresh_ttl=False)
        rows = [item_json(item) for item in found]
        backend = _common.backend(store)
    if opts.json:
        _common.emit_json({"backend": backend, "namespace": list(ns), "items": rows})
        return
    out = _common.console()
    _common.header(out, backend)
    if not rows:
        _common.say(out, f"no items under namespace {format_namespace(ns) or '(all)'!r}")
        return
    grid = _common.table("namespace", "key", "updated", "value")
    for row in rows:
        _common.row(
            grid,
            format_namespace(row["namespace"]),
            row["key"],
            row["updated_at"],
            value_preview(row["value"]),
        )
    out.print(grid)
    more = f"; more with --offset {offset + limit}" if len(rows) == limit else ""
    out.print(f"{len(rows)} item(s){more}")


@app.command()
def get(
    ctx: typer.Context, namespace: NamespaceArg, key: KeyArg, json_out: JsonFlag = False
) -> None:
    """Show one item: its namespace, key, times and whole value (as JSON)."""
    opts = _common.options(ctx, json_out)
    ns = _namespace(namespace)
    with _opened(opts) as store:
        item = store.get(ns, key, refresh_ttl=False)
        if item is None:
            _common.fail(_missing(opts, ns, key))
        data = item_json(item)
        backend = _common.backend(store)
    if opts.json:
        _common.emit_json({"backend": backend, **data})
        return
    out = _common.console()
    _common.header(out, backend)
    info = Table.grid(padding=(0, 2))
    _common.row(info, "namespace", format_namespace(data["namespace"]))
    _common.row(info, "key", data["key"])
    _common.row(info, "created_at", data["created_at"])
    _common.row(info, "updated_at", data["updated_at"])
    out.print(info)
    for line in json.dumps(data["value"], indent=2, ensure_ascii=False).splitlines():
        _common.say(out, line)


@app.command()
def delete(
    ctx: typer.Context,
    namespace: NamespaceArg,
    key: KeyArg,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask for confirmation")] = False,
    json_out: JsonFlag = False,
) -> None:
    """Delete one item (asks first unless --yes or --json)."""
    opts = _common.options(ctx, json_out)
    ns = _namespace(namespace)
    with _opened(opts) as store:
        if store.get(ns, key, refresh_ttl=False) is None:
            _common.fail(_missing(opts, ns, key))
        if not yes and not opts.json:
            typer.confirm(f"delete item {key!r} of namespace {format_namespace(ns)!r}?", abort=True)
        store.delete(ns, key)
        backend = _common.backend(store)
    if opts.json:
        _common.emit_json({"backend": backend, "namespace": list(ns), "key": key, "deleted": True})
        return
    out = _common.console()
    _common.header(out, backend)
    _common.say(out, f"deleted item {key!r} of namespace {format_namespace(ns)!r}")


def copy_command(
    opts: Options, source: str, destination: str, prefix_ns: str | None = None
) -> None:
    """``copy --store``: every item of the ``source`` store into ``destination``, with a
    running count on stderr, then the counts (JSON with ``--json``)."""
    from rich.console import Console
    from rich.progress import Progress, TextColumn, TimeElapsedColumn

    from . import _copy
    from ._format import mask_secrets

    try:
        src_uri = _copy.parse_store_uri(source)
        dst_uri = _copy.parse_store_uri(destination)
    except _copy.CopyError as exc:
        raise typer.BadParameter(mask_secrets(str(exc))) from exc
    prefix = _namespace(prefix_ns, "--prefix-ns") if prefix_ns else ()
    if src_uri == dst_uri or (
        src_uri.scheme == dst_uri.scheme == "foundry-store"
        and (src_uri.target or _prefix(opts)) == (dst_uri.target or _prefix(opts))
    ):
        raise typer.BadParameter("--from and --to name the same store")

    def foundry(prefix: str | None) -> Any:
        return open_store(opts, prefix)

    err = Console(stderr=True, highlight=False)
    counts = {"examined": 0, "copied": 0}
    with _common.failures(), contextlib.ExitStack() as stack:
        src = stack.enter_context(_copy.open_store(src_uri, role="source", foundry=foundry))
        dst = stack.enter_context(_copy.open_store(dst_uri, role="destination", foundry=foundry))
        from ..migrate import copy_store

        progress = Progress(
            TextColumn("copying items: {task.fields[examined]} read, {task.fields[copied]} new"),
            TimeElapsedColumn(),
            console=err,
            disable=opts.json,
            transient=False,
        )
        with progress:
            task = progress.add_task("copy", total=None, examined=0, copied=0)

            def advance(examined: int, copied: int) -> None:
                counts.update(examined=examined, copied=copied)
                progress.update(task, examined=examined, copied=copied)

            copy_store(src, dst, namespace_prefix=prefix, progress=advance)
    result = {
        "from": mask_secrets(source),
        "to": mask_secrets(destination),
        "namespace_prefix": list(prefix),
        "items": counts["examined"],
        "copied": counts["copied"],
        "already_there": counts["examined"] - counts["copied"],
    }
    if opts.json:
        _common.emit_json(result)
        return
    _common.say(
        _common.console(),
        f"copied {result['copied']} item(s) of {result['items']} from {result['from']} to "
        f"{result['to']}; {result['already_there']} already there (left alone)",
    )
