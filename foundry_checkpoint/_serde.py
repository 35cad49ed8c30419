"""The saver's default serializer: LangGraph's ``JsonPlusSerializer``, strict and loud.

LangGraph's default serializer imports and calls any ``module.name`` a msgpack extension
names (``allowed_msgpack_modules=True``), so whoever can write to the store can run code in
every reader. :class:`StrictSerializer` is a ``JsonPlusSerializer`` with an explicit msgpack
allow-list: LangGraph's own safe set (dates, ids, collections, LangChain messages, LangGraph
types) plus the extra ``(module, name)`` pairs it is given. The saver gives it, per call, the
state types of the graph that is calling (what LangGraph's ``compile`` collects from the graph's
schemas under ``LANGGRAPH_STRICT_MSGPACK=true``, whatever the setting: see
``foundry_checkpoint._langgraph._graphs``) and what ``with_allowlist`` added.

Reading: every extension is checked, nested ones first, before any constructor is looked up;
then it is built here, as ``JsonPlusSerializer`` builds it except that a pydantic model is only
ever built by validation (LangGraph falls back to the unvalidated ``model_construct``; here, as
for any class that refuses its stored arguments, the arguments come back). The modules of
LangGraph's safe set are imported once beforehand (in a thread of their own), so a decode
imports nothing: the graph's own types are in modules already loaded. Anything else is refused with :class:`UnsafeValueError` (where LangGraph's strict mode logs
and hands back the constructor's raw arguments): a class outside the allow-list, a method other
than ``datetime.fromisoformat``, an extension code LangGraph never writes, a numpy array while
numpy is not loaded (decoding one would import it), a ``ZoneInfo`` key that names no time zone
of the machine (looking it up imports ``tzdata`` subpackages), an allowed name that is not a
class here, nesting deeper than :data:`MAX_EXTENSION_DEPTH`, a malformed extension.

Writing (the save-time rule): every value is encoded exactly as ``JsonPlusSerializer`` encodes
it, through a ``default`` hook that checks each extension it makes against the same rule the
reader applies. A value no reader with this allow-list could decode raises
:class:`UnreadableValueError` naming the one-line fix, before anything is stored. The check is
cached per class; an extension's payload is parsed again only the first time its class is met
or when its bytes could hold a nested extension (one of msgpack's eight extension markers
occurs in them).

Example:
    >>> serde = StrictSerializer()
    >>> serde.loads_typed(serde.dumps_typed({"n": 1}))
    {'n': 1}
    >>> import ormsgpack
    >>> evil = ormsgpack.packb(ormsgpack.Ext(1, ormsgpack.packb(["os", "system", ["true"]])))
    >>> serde.loads_typed(("msgpack", evil))
    Traceback (most recent call last):
    ...
    foundry_checkpoint.errors.UnsafeValueError: a stored value names os.system, which is not in the msgpack allow-list; ...
"""  # noqa: E501

from __future__ import annotations

import contextlib
import importlib
import re
import sys
import threading
import zoneinfo
from collections.abc import Iterable
from typing import Any, Final, cast

import ormsgpack
from langgraph.checkpoint.serde._msgpack import SAFE_MSGPACK_METHODS, SAFE_MSGPACK_TYPES
from langgraph.checkpoint.serde.jsonplus import (
    EXT_CONSTRUCTOR_KW_ARGS,
    EXT_CONSTRUCTOR_POS_ARGS,
    EXT_CONSTRUCTOR_SINGLE_ARG,
    EXT_DELTA_SNAPSHOT,
    EXT_METHOD_SINGLE_ARG,
    EXT_NUMPY_ARRAY,
    EXT_PYDANTIC_V1,
    EXT_PYDANTIC_V2,
    JsonPlusSerializer,
    _create_msgpack_ext_hook,
    _msgpack_default,
    _option,
    _reconstruction_fallback,
    _send_from_args,
)
from langgraph.checkpoint.serde.types import _DeltaSnapshot

from foundry_checkpoint.errors import UnreadableValueError, UnsafeValueError

__all__ = ["MAX_EXTENSION_DEPTH", "StrictSerializer", "UnreadableValueError", "UnsafeValueError"]

_CONSTRUCTORS: Final = frozenset(
    {
        EXT_CONSTRUCTOR_SINGLE_ARG,
        EXT_CONSTRUCTOR_POS_ARGS,
        EXT_CONSTRUCTOR_KW_ARGS,
        EXT_PYDANTIC_V1,
        EXT_PYDANTIC_V2,
    }
)
_KNOWN: Final = _CONSTRUCTORS | {EXT_METHOD_SINGLE_ARG, EXT_DELTA_SNAPSHOT, EXT_NUMPY_ARRAY}

MAX_EXTENSION_DEPTH: Final = 64
"""Extensions nested deeper than this are refused (LangGraph's encoder nests one level per
nested object: a dataclass in a list in a pydantic model is two)."""

_MARKERS: Final = re.compile(b"[\xc7-\xc9\xd4-\xd8]")
"""The first bytes of msgpack's extension formats (ext 8/16/32, fixext 1/2/4/8/16): bytes
without any of them hold no extension."""

_HEADER: Final = {0xD4: 2, 0xD5: 2, 0xD6: 2, 0xD7: 2, 0xD8: 2, 0xC7: 3, 0xC8: 4, 0xC9: 6}
"""Where an extension's data starts, by its first byte (the code is the byte before)."""

_CLONES: Final = 64
_CLASSES: Final = 4096


class StrictSerializer(JsonPlusSerializer):
    """``JsonPlusSerializer`` with an explicit msgpack allow-list, on reads and on writes.

    The bytes written are ``JsonPlusSerializer``'s, so checkpoints stay readable by any
    LangGraph saver; a value that this allow-list could not read back raises
    :class:`UnreadableValueError` instead of being written.

    Args:
        allowed: ``(module, name)`` pairs or classes admitted beyond LangGraph's safe set.

    Example:
        >>> from datetime import date
        >>> serde = StrictSerializer()
        >>> serde.loads_typed(serde.dumps_typed(date(2025, 1, 2)))
        datetime.date(2025, 1, 2)
        >>> serde.with_msgpack_allowlist([("my_app.models", "MyState")]).allowed
        frozenset({('my_app.models', 'MyState')})
    """

    def __init__(self, allowed: Iterable[tuple[str, ...] | type] = ()) -> None:
        super().__init__(allowed_msgpack_modules=tuple(allowed))
        self._reset()

    def _reset(self) -> None:
        self._written: dict[type, bool] = {}
        self._clones: dict[frozenset[tuple[str, ...]], StrictSerializer] = {}
        self._lock = threading.Lock()

    @property
    def allowed(self) -> frozenset[tuple[str, ...]]:
        """The ``(module, name)`` pairs admitted beyond LangGraph's safe set."""
        extra = self._allowed_msgpack_modules
        return frozenset(extra) if isinstance(extra, (set, frozenset)) else frozenset()

    def with_msgpack_allowlist(
        self, extra_allowlist: Iterable[tuple[str, ...] | type]
    ) -> StrictSerializer:
        """A copy that also admits ``extra_allowlist`` (``self`` when it adds nothing).

        Args:
            extra_allowlist: ``(module, name)`` pairs or classes.

        Returns:
            The serializer to use.
        """
        clone = cast(StrictSerializer, super().with_msgpack_allowlist(extra_allowlist))
        if clone is not self:
            clone._reset()
        return clone

    def widened(self, extra: frozenset[tuple[str, ...]]) -> StrictSerializer:
        """:meth:`with_msgpack_allowlist` for one call, cached per ``extra`` (a few dozen).

        Args:
            extra: the pairs to admit as well.

        Returns:
            The serializer to use (``self`` when ``extra`` adds nothing).

        Example:
            >>> serde = StrictSerializer()
            >>> wide = serde.widened(frozenset({("my_app.models", "Item")}))
            >>> wide is serde.widened(frozenset({("my_app.models", "Item")})), serde.allowed
            (True, frozenset())
        """
        if not extra:
            return self
        clone = self._clones.get(extra)
        if clone is None:
            clone = self.with_msgpack_allowlist(extra)  # self when extra adds nothing
            with self._lock:
                if len(self._clones) >= _CLONES:
                    self._clones.clear()
                self._clones[extra] = clone
        return clone

    # -- writing --------------------------------------------------------------------------------
    def dumps_typed(self, obj: Any) -> tuple[str, bytes]:
        """Encode like ``JsonPlusSerializer.dumps_typed``, refusing what could not be read back.

        Args:
            obj: the value.

        Returns:
            The ``(type, bytes)`` pair.

        Raises:
            UnreadableValueError: a class in ``obj`` is outside the allow-list; nothing was
                returned, so nothing is stored.
        """
        if obj is None or isinstance(obj, (bytes, bytearray)):
            return super().dumps_typed(obj)
        refused: list[UnreadableValueError] = []  # ormsgpack replaces a hook's error by its own

        def default(value: Any) -> Any:
            ext = _msgpack_default(value)
            if isinstance(ext, ormsgpack.Ext):
                try:
                    self._check_written(type(value), ext)
                except UnreadableValueError as exc:
                    refused.append(exc)
                    raise
            return ext

        try:
            return "msgpack", ormsgpack.packb(obj, default=default, option=_option)
        except TypeError:
            if refused:
                raise refused[0] from None
            raise

    def _check_written(self, cls: type, ext: ormsgpack.Ext) -> None:
        """Raise unless the reader with this allow-list accepts ``ext`` (made for a ``cls``)."""
        # an Ext exposes neither its code nor its bytes: read them from its encoding
        raw = ormsgpack.packb(ext)
        start = _HEADER[raw[0]]
        if self._written.get(cls) and _MARKERS.search(raw, start) is None:
            return  # the class was admitted before and nothing is nested in this value
        code, data = int.from_bytes(raw[start - 1 : start], "big", signed=True), raw[start:]
        try:
            self._check_one(code, data, [], 0)
        except UnsafeValueError as exc:
            names = self._refused_names(code, data) if exc.names is not None else []
            raise UnreadableValueError(_unreadable(cls, exc, names)) from None
        if len(self._written) >= _CLASSES:
            self._written.clear()
        self._written[cls] = True

    def _refused_names(self, code: int, data: bytes) -> list[tuple[str, str]]:
        """Every class in an extension (nested ones too) that the reader refuses, outer first:
        so that one error names all that the fix must allow."""
        found: list[tuple[str, str]] = []

        def visit(code: int, data: bytes) -> None:
            if code in (EXT_DELTA_SNAPSHOT, EXT_NUMPY_ARRAY) or code not in _KNOWN:
                return
            inner: list[tuple[int, bytes]] = []
            fields = ormsgpack.unpackb(
                data,
                ext_hook=lambda c, d: inner.append((c, d)),
                option=ormsgpack.OPT_NON_STR_KEYS,
            )
            if isinstance(fields, list) and len(fields) >= 2 and code != EXT_METHOD_SINGLE_ARG:
                module, name = fields[0], fields[1]
                try:
                    self._check_one(code, ormsgpack.packb([module, name, None]), [], 0)
                except UnsafeValueError as exc:
                    if exc.names is not None and exc.names not in found:
                        found.append(exc.names)
            for nested in inner:
                visit(*nested)

        with contextlib.suppress(ValueError):  # written by LangGraph's encoder: well formed
            visit(code, data)
        return found

    # -- reading --------------------------------------------------------------------------------
    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        """Decode like ``JsonPlusSerializer.loads_typed``, checking every msgpack extension first.

        Args:
            data: The ``(type, bytes)`` pair ``dumps_typed`` made.

        Returns:
            The decoded value.

        Raises:
            UnsafeValueError: (a ``CorruptPayloadError``) an extension names a type outside the
                allow-list, or is one LangGraph never writes; nothing of it was constructed.
        """
        type_, raw = data
        if type_ != "msgpack":
            return super().loads_typed(data)
        refused: list[UnsafeValueError] = []  # ormsgpack replaces a hook's error by its own

        def guarded(code: int, data: bytes) -> Any:
            self._check(code, data, refused, 0)
            if not _preloaded:
                _preload()
            return _build(code, data)

        try:
            return ormsgpack.unpackb(raw, ext_hook=guarded, option=ormsgpack.OPT_NON_STR_KEYS)
        except ValueError:
            if refused:
                raise refused[0] from None
            raise

    def _check(self, code: int, data: bytes, refused: list[UnsafeValueError], depth: int) -> None:
        """Raise unless ``data`` (and every extension nested in it) names only allowed types.

        The error is also put in ``refused``: ormsgpack replaces a hook's exception by its own.
        """
        try:
            self._check_one(code, data, refused, depth)
        except UnsafeValueError as exc:
            refused.append(exc)
            raise

    def _check_one(
        self, code: int, data: bytes, refused: list[UnsafeValueError], depth: int
    ) -> None:
        if code not in _KNOWN:
            raise UnsafeValueError(
                f"a stored value uses msgpack extension {code}, which LangGraph never writes"
            )
        if depth >= MAX_EXTENSION_DEPTH:
            raise UnsafeValueError(
                f"a stored value nests msgpack extensions more than {MAX_EXTENSION_DEPTH} deep"
            )
        if code == EXT_NUMPY_ARRAY and "numpy" not in sys.modules:
            raise UnsafeValueError(
                "a stored value is a numpy array, but numpy is not loaded in this process "
                "(decoding would import it): import numpy before reading"
            )

        def nested(code: int, data: bytes) -> None:
            self._check(code, data, refused, depth + 1)

        try:
            inner = ormsgpack.unpackb(data, ext_hook=nested, option=ormsgpack.OPT_NON_STR_KEYS)
        except ValueError as exc:
            if refused:
                raise refused[0] from None
            raise UnsafeValueError(f"a stored msgpack extension is malformed: {exc}") from exc
        if code in (EXT_DELTA_SNAPSHOT, EXT_NUMPY_ARRAY):
            return
        if not (isinstance(inner, list) and len(inner) >= 3):
            raise UnsafeValueError("a stored msgpack extension is malformed")
        module, name = inner[0], inner[1]
        if not (isinstance(module, str) and isinstance(name, str)):
            raise UnsafeValueError("a stored msgpack extension names a non-string type")
        if code == EXT_METHOD_SINGLE_ARG:
            method = inner[3] if len(inner) > 3 else None
            if (module, name, method) in SAFE_MSGPACK_METHODS:
                return
            raise UnsafeValueError(
                f"a stored value calls {module}.{name}.{method!s:.100}, which is not an "
                "allowed method"
            )
        extra = self._allowed_msgpack_modules
        if (module, name) == ("zoneinfo", "ZoneInfo"):
            _check_zone(code, inner[2])
            return
        if (module, name) in SAFE_MSGPACK_TYPES or extra is True:
            return
        if isinstance(extra, (set, frozenset)) and (module, name) in extra:
            # not loaded: an explicit entry, imported when built; no such attribute (a class
            # defined in a function): the stored arguments come back, as in LangGraph
            target = getattr(sys.modules.get(module), name, None)
            if target is None or isinstance(target, type):
                return
            raise UnsafeValueError(
                f"a stored value names {module}.{name}, which is allowed as a class but is "
                f"a {type(target).__name__} in this process"
            )
        raise UnsafeValueError(
            f"a stored value names {module:.200}.{name:.200}, which is not in the msgpack "
            "allow-list; nothing was called. If it is a state type of your own graph, read it "
            "through the graph (graph.get_state, invoke), or add it with "
            f"checkpointer.with_allowlist([({module!r:.200}, {name!r:.200})]); otherwise the "
            "store was written by something else",
            names=(module, name),
        )


def _build(code: int, data: bytes) -> Any:
    """Build one checked extension the way ``JsonPlusSerializer`` does, with two differences:
    a pydantic model is only ever built by validation (LangGraph falls back to the unvalidated
    ``model_construct``; here the stored arguments come back, as for any other class that
    fails to build), and nested extensions are built here too."""
    if code == EXT_DELTA_SNAPSHOT:
        return _DeltaSnapshot(
            ormsgpack.unpackb(data, ext_hook=_build, option=ormsgpack.OPT_NON_STR_KEYS)
        )
    if code == EXT_NUMPY_ARRAY:
        return _JSONPLUS_HOOK(code, data)
    tup: Any = None
    try:
        tup = ormsgpack.unpackb(data, ext_hook=_build, option=ormsgpack.OPT_NON_STR_KEYS)
        module, name, arg = tup[0], tup[1], tup[2]
        loaded = sys.modules.get(module) or importlib.import_module(module)
        target = getattr(loaded, name)
        if code == EXT_METHOD_SINGLE_ARG:
            return getattr(target, tup[3])(arg)
        if code == EXT_CONSTRUCTOR_SINGLE_ARG:
            return target(arg)
        if code == EXT_CONSTRUCTOR_POS_ARGS:
            if (module, name) == ("langgraph.types", "Send"):
                return _send_from_args(arg)
            return target(*arg)
        return target(**arg)  # keyword arguments, pydantic v1 and v2: validated
    except Exception as exc:  # the class refused its stored arguments, as LangGraph allows
        return _reconstruction_fallback(tup, exc)


_JSONPLUS_HOOK: Final = _create_msgpack_ext_hook(None)
_preloaded = False
_PRELOAD: Final = threading.Lock()


def _preload() -> None:
    """Import the modules of LangGraph's safe set (once), so that decoding imports nothing.

    LangGraph's decoder imports the module an admitted extension names; the graph's own
    types live in modules already loaded, the safe set's are loaded here.
    """
    # in a thread of its own: decoding runs on event loops, where imports and directory scans
    # are blocking calls (langgraph dev's blockbuster refuses them)
    worker = threading.Thread(target=_load, name="foundry-checkpoint-preload", daemon=True)
    worker.start()
    worker.join()


def _load() -> None:
    global _preloaded, _zones
    with _PRELOAD:
        if _preloaded:
            return
        for module in sorted({key[0] for key in SAFE_MSGPACK_TYPES}):
            with contextlib.suppress(ImportError):  # pathlib._local exists from Python 3.13
                importlib.import_module(module)
        _zones = frozenset(zoneinfo.available_timezones())  # may import tzdata: here only
        _preloaded = True


_zones: frozenset[str] = frozenset()


def _check_zone(code: int, args: Any) -> None:
    """Refuse a ``ZoneInfo`` whose key names no time zone of this machine: looking one up
    makes ``zoneinfo`` import ``tzdata`` subpackages named by the key."""
    if code == EXT_CONSTRUCTOR_SINGLE_ARG:
        key = args
    elif code == EXT_CONSTRUCTOR_POS_ARGS and isinstance(args, list) and len(args) == 1:
        key = args[0]
    elif isinstance(args, dict) and list(args) == ["key"]:
        key = args["key"]
    else:
        key = None
    if not _preloaded:
        _preload()
    if not (isinstance(key, str) and key in _zones):
        raise UnsafeValueError(
            f"a stored zoneinfo.ZoneInfo names {str(key)[:100]!r}, which is no time zone here"
        )


def _unreadable(cls: type, refused: UnsafeValueError, names: list[tuple[str, str]]) -> str:
    """The message of an :class:`UnreadableValueError` for a ``cls`` the reader refuses."""
    if refused.names is None:
        return (
            f"cannot store a {cls.__module__}.{cls.__qualname__}: {refused}; no process could "
            "read it back, so nothing was written"
        )
    names = names or [refused.names]
    listed = ", ".join(f"{module}.{name}" for module, name in names)
    short = ", ".join(name for _, name in names)
    pairs = ", ".join(f"({module!r}, {name!r})" for module, name in names)
    return (
        f"cannot store a {listed}: not in the msgpack allow-list, so no process could read it "
        f"back; nothing was written. Declare {short} in the graph's state (or a node's input) "
        f"schema, or allow it: FoundryCheckpointer().with_allowlist([{pairs}])"
    )
