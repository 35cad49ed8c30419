"""The state types of the graph that is calling the saver: its share of the msgpack allow-list.

LangGraph's ``StateGraph.compile`` (and ``entrypoint``, and ``Pregel`` on every run) hands the
saver the types of the graph's schemas through ``with_allowlist`` only when
``LANGGRAPH_STRICT_MSGPACK=true``. With the default setting a strict saver would then write a
graph's own pydantic models, dataclasses and enums and refuse them in the next process. So the
saver finds the graph itself, on every call:

* **Which graph.** The Python stack of the call holds the ``Pregel`` whose method called the
  saver (``stream``/``astream`` through their loop, ``get_state``, ``get_state_history``,
  ``update_state``, their async forms: coroutine frames link to the frame that awaits them).
  Every ``Pregel`` on the stack counts: a subgraph's ``get_state`` runs inside its parent's, and
  LangGraph's own strict mode gives a subgraph the parent's allow-list and its own.
* **Runs.** A run's checkpoints and writes are stored from background threads and tasks whose
  stack holds no graph. The first read of a run (in the loop's ``__enter__``/``__aenter__``, on
  the caller's stack) therefore opens a :class:`RunScope` in a context variable: LangGraph
  copies the context into every thread and task it starts, so each later call of that run sees
  it. The loop's exit stack closes it, so nothing after the run inherits it.
* **What.** Per graph (cached, weakly keyed), exactly what LangGraph's strict mode collects:
  ``langgraph._internal._serde.build_serde_allowlist`` over the same schemas ``compile`` passes
  (state, input, output and context schemas, every node's and branch's input schema) and the
  builder's channels, or for any other ``Pregel`` (``entrypoint``) its context schema and
  channels; for each subgraph (``get_subgraphs(recurse=True)``) too. To that, the collector adds
  what LangGraph's misses while its encoder writes it: named tuples, and the element types of
  ``Sequence[...]``, ``Mapping[...]`` and other generic containers.
* **What not.** A pydantic model whose validation can import a module (an ``ImportString``
  field, here or in a nested model) or read the environment and files (pydantic-settings'
  ``BaseSettings``) is left out even when the graph declares it: decoding validates the stored
  arguments, which are the writer's. Allow such a type explicitly with ``with_allowlist``.

A value of a class outside the result is refused when read (``UnsafeValueError``) and when
saved (``UnreadableValueError``, which names the fix).

Example:
    >>> from pydantic import BaseModel
    >>> from typing_extensions import TypedDict
    >>> from langgraph.graph import StateGraph, START
    >>> class Item(BaseModel):
    ...     name: str
    >>> State = TypedDict("State", {"items": list[Item]})
    >>> builder = StateGraph(State)
    >>> _ = builder.add_node("noop", lambda state: {})
    >>> _ = builder.add_edge(START, "noop")
    >>> (Item.__module__, "Item") in graph_types(builder.compile())
    True
"""

from __future__ import annotations

import contextlib
import dataclasses
import re
import sys
import threading
import typing
import weakref
from collections.abc import Iterable
from contextvars import ContextVar
from dataclasses import dataclass
from enum import Enum
from types import FrameType
from typing import Any, Final

from langgraph._internal._constants import CONFIG_KEY_RUNTIME
from langgraph._internal._serde import build_serde_allowlist
from langgraph.graph.state import StateGraph
from langgraph.pregel import Pregel
from langgraph.pregel._loop import PregelLoop
from pydantic import BaseModel

__all__ = ["RunScope", "caller_types", "graph_types"]

Names = frozenset[tuple[str, ...]]

_EMPTY: Final[Names] = frozenset()
_LOOP_ENTRIES: Final = frozenset({"__enter__", "__aenter__"})
_IMPORTS: Final = re.compile(r"import_string")


@dataclass(eq=False)
class RunScope:
    """The allow-list of one graph run, seen by every call the run makes (a context variable).

    Example:
        >>> scope = RunScope(frozenset({("my_app.models", "Item")}))
        >>> scope.close(); scope.closed
        True
    """

    allowed: Names
    closed: bool = False

    def close(self) -> None:
        """End the run: calls that still see this scope (after the run) ignore it."""
        self.closed = True


_RUN: ContextVar[RunScope | None] = ContextVar("foundry_checkpoint_graph_run", default=None)
_graphs: weakref.WeakKeyDictionary[Any, Names] = weakref.WeakKeyDictionary()
"""Per builder (``StateGraph``) or graph (any other ``Pregel``)."""
_scopes: weakref.WeakKeyDictionary[PregelLoop, RunScope] = weakref.WeakKeyDictionary()
_runs: dict[int, tuple[Any, RunScope]] = {}
"""Open runs by ``id`` of their ``Runtime``, which is held here until the run ends."""
_acting: weakref.WeakKeyDictionary[type, bool] = weakref.WeakKeyDictionary()
_lock = threading.RLock()


def caller_types(
    frame: FrameType | None,
    config: Any = None,
    seen: weakref.WeakSet[Any] | None = None,
    *,
    read: bool = False,
) -> Names:
    """The types admitted for a saver call made from ``frame``: the graphs on the stack and
    the run the call belongs to.

    Called by every face of the saver with its caller's frame and the config it was given.
    The first call of a run (from the loop's ``__enter__``/``__aenter__``) opens the run's
    :class:`RunScope`; later calls of the run find it in the context, or (from a thread
    LangGraph did not start in the run's context, such as a future's done callback) by the
    run's ``Runtime`` object in ``config``.

    A call that no graph makes (``saver.list(...)`` from application code, as LangGraph's own
    tests do with ``graph.checkpointer``) reads with the types of every graph that has called
    this saver in this process (``seen``), and writes with none: what it writes must be
    readable by the next process's direct reads, which have seen no graph yet.

    Args:
        frame: the frame that called the saver.
        config: the ``RunnableConfig`` the saver was called with, if any.
        seen: the graphs that have called this saver (graphs found on the stack are added).
        read: whether the call only reads.

    Returns:
        The ``(module, name)`` pairs; empty when no graph is calling.

    Example:
        >>> import sys
        >>> caller_types(sys._getframe())
        frozenset()
    """
    graphs: list[Pregel[Any, Any, Any, Any]] = []
    loop: PregelLoop | None = None
    while frame is not None:
        if str(frame.f_globals.get("__name__", "")).startswith("langgraph."):
            owner = frame.f_locals.get("self")
            if isinstance(owner, Pregel):
                graphs.append(owner)
            elif (
                loop is None
                and isinstance(owner, PregelLoop)
                and frame.f_code.co_name in _LOOP_ENTRIES
            ):
                loop = owner
        frame = frame.f_back
    if loop is not None:
        own = _scopes.get(loop)
        if own is not None:
            return own.allowed
    scope = _run_of(config)
    if not graphs and scope is not None and scope.allowed:
        return scope.allowed  # a run's background save: the types its first read found
    allowed = set(scope.allowed) if scope is not None else set()
    for graph in graphs:
        allowed |= graph_types(graph)
    if seen is not None and graphs:
        with _lock:  # a WeakSet is not safe to change while another thread iterates it
            seen.update(graphs)
    if read and not allowed and seen:
        with _lock:
            known = list(seen)
        for graph in known:
            allowed |= graph_types(graph)
    result = frozenset(allowed) if allowed else _EMPTY
    if loop is not None and graphs:
        _open_run(loop, result, _runtime(config))
    return result


def _runtime(config: Any) -> Any:
    """The run's ``Runtime`` (one object per run, in every config the run passes)."""
    conf = config.get("configurable") if isinstance(config, dict) else None
    return conf.get(CONFIG_KEY_RUNTIME) if isinstance(conf, dict) else None


def _run_of(config: Any) -> RunScope | None:
    """The open scope of the run ``config`` belongs to, else the context's open scope."""
    runtime = _runtime(config)
    if runtime is not None:
        entry = _runs.get(id(runtime))
        if entry is not None and entry[0] is runtime and not entry[1].closed:
            return entry[1]
    scope = _RUN.get()
    return scope if scope is not None and not scope.closed else None


def _open_run(loop: PregelLoop, allowed: Names, runtime: Any) -> None:
    """Start ``loop``'s run scope; its exit stack closes it when the run ends."""
    stack = getattr(loop, "stack", None)
    callback = getattr(stack, "callback", None)
    if callback is None:  # pragma: no cover - LangGraph's loops have had an exit stack
        return  # without a way to close it, a scope would outlive the run: the saves refuse
    scope = RunScope(allowed)
    key = id(runtime)

    def close() -> None:
        scope.close()
        with _lock:
            entry = _runs.get(key)
            if entry is not None and entry[1] is scope:
                del _runs[key]

    with _lock:
        _scopes[loop] = scope
        if runtime is not None:
            _runs[key] = (runtime, scope)  # held until the run ends: its id stays unique
    callback(close)
    weakref.finalize(loop, close)  # a loop whose __enter__ failed never unwinds its stack
    _RUN.set(scope)


def graph_types(graph: Pregel[Any, Any, Any, Any]) -> Names:
    """What LangGraph's strict mode admits for ``graph`` and its subgraphs (cached per graph).

    Args:
        graph: a compiled graph (``StateGraph.compile``), an ``entrypoint`` or any ``Pregel``.

    Returns:
        The ``(module, name)`` pairs.
    """
    builder = getattr(graph, "builder", None)
    key = builder if isinstance(builder, StateGraph) else graph  # with_config copies share it
    cached = _graphs.get(key)
    if cached is None:
        cached = _collect(graph)
        with _lock:
            _graphs[key] = cached
    return cached


def _collect(graph: Pregel[Any, Any, Any, Any]) -> Names:
    pregels: list[Any] = [graph]
    with contextlib.suppress(Exception):  # a graph that cannot list subgraphs has its own types
        pregels.extend(sub for _, sub in graph.get_subgraphs(recurse=True))
    allowed: set[tuple[str, ...]] = set()
    acting: set[tuple[str, ...]] = set()
    for pregel in pregels:
        schemas, channels = _inputs(pregel)
        allowed |= build_serde_allowlist(schemas=schemas, channels=channels)
        extra = _Extra(schemas, channels)
        allowed |= extra.found
        acting |= extra.acting
    return frozenset(key for key in allowed if key not in acting and not _validation_acts(key))


def _inputs(pregel: Any) -> tuple[list[Any], dict[str, Any]]:
    """The schemas and channels LangGraph's strict mode passes for ``pregel``."""
    builder = getattr(pregel, "builder", None)
    if isinstance(builder, StateGraph):
        schemas: list[Any] = [builder.state_schema, builder.input_schema, builder.output_schema]
        if builder.context_schema is not None:
            schemas.append(builder.context_schema)
        schemas.extend(node.input_schema for node in builder.nodes.values())
        for branches in builder.branches.values():
            schemas.extend(
                branch.input_schema
                for branch in branches.values()
                if branch.input_schema is not None
            )
        return schemas, dict(builder.channels)
    context = getattr(pregel, "context_schema", None)
    return ([context] if context is not None else []), dict(getattr(pregel, "channels", {}))


class _Extra:
    """The types LangGraph's collector skips that its encoder writes as extensions: named
    tuples (with their fields' types), and the arguments of generic containers other than
    ``list``/``dict``/``set``/``tuple``/``deque``/``frozenset``."""

    def __init__(self, schemas: Iterable[Any], channels: dict[str, Any]) -> None:
        self.found: set[tuple[str, ...]] = set()
        self.acting: set[tuple[str, ...]] = set()
        """Pydantic models met whose validation can import or read files."""
        self._seen: set[int] = set()
        self._held: list[Any] = []
        for schema in schemas:
            self._walk(schema, 0)
        for channel in channels.values():
            for attr in ("ValueType", "UpdateType"):
                try:
                    self._walk(getattr(channel, attr, None), 0)
                except Exception:  # a channel without a type adds none
                    continue

    def _walk(self, typ: Any, depth: int) -> None:
        if typ is None or depth > 32 or id(typ) in self._seen:
            return
        self._seen.add(id(typ))
        self._held.append(typ)  # an id stays unique while the walk holds its object
        for arg in typing.get_args(typ):
            self._walk(arg, depth + 1)
        if not isinstance(typ, type) or issubclass(typ, Enum):
            return
        if issubclass(typ, tuple) and hasattr(typ, "_fields"):
            self.found.add((typ.__module__, typ.__name__))
        elif issubclass(typ, BaseModel):
            if _acts(typ):
                self.acting.add((typ.__module__, typ.__name__))
        elif not (typing.is_typeddict(typ) or dataclasses.is_dataclass(typ)):
            return
        for hint in _hints(typ).values():
            self._walk(hint, depth + 1)


def _hints(typ: type) -> dict[str, Any]:
    try:
        module = sys.modules.get(typ.__module__)
        return typing.get_type_hints(
            typ, globalns=module.__dict__ if module else None, include_extras=True
        )
    except Exception:  # unresolvable annotations: LangGraph skips them too
        return {}


def _validation_acts(key: tuple[str, ...]) -> bool:
    """Whether constructing the class ``key`` names (as decoding does) can import modules or
    read the environment: a pydantic model with an ``ImportString`` field anywhere in its
    schema, or a pydantic-settings model."""
    if len(key) != 2:
        return False
    module = sys.modules.get(key[0])
    cls = getattr(module, key[1], None) if module is not None else None
    return isinstance(cls, type) and issubclass(cls, BaseModel) and _acts(cls)


def _acts(cls: type[BaseModel]) -> bool:
    known = _acting.get(cls)
    if known is None:
        known = any(base.__module__.startswith("pydantic_settings") for base in cls.__mro__)
        if not known:
            known = bool(_IMPORTS.search(repr(getattr(cls, "__pydantic_core_schema__", None))))
        with _lock:
            _acting[cls] = known
    return known
