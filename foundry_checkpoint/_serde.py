"""The saver's default serializer: LangGraph's ``JsonPlusSerializer``, strict and loud.

LangGraph's default serializer imports and calls any ``module.name`` a msgpack extension
names (``allowed_msgpack_modules=True``), so whoever can write to the store can run code in
every reader. :class:`StrictSerializer` is a ``JsonPlusSerializer`` with an explicit msgpack
allow-list: LangGraph's own safe set (dates, ids, collections, LangChain messages, LangGraph
types) plus what ``with_msgpack_allowlist`` adds, which is how ``StateGraph.compile`` adds the
graph's state types (``checkpointer.with_allowlist``). Unlike LangGraph's strict mode, which
logs and hands back the constructor's raw arguments, a value naming anything else is refused
with :class:`UnsafeValueError` before any constructor is looked up.

Example:
    >>> serde = StrictSerializer()
    >>> serde.loads_typed(serde.dumps_typed({"n": 1}))
    {'n': 1}
    >>> import ormsgpack
    >>> evil = ormsgpack.packb(ormsgpack.Ext(1, ormsgpack.packb(["os", "system", ["true"]])))
    >>> serde.loads_typed(("msgpack", evil))
    Traceback (most recent call last):
    ...
    foundry_checkpoint._serde.UnsafeValueError: a stored value names os.system, which is not in the msgpack allow-list; ...
"""  # noqa: E501

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final

import ormsgpack
from langgraph.checkpoint.serde._msgpack import SAFE_MSGPACK_METHODS, SAFE_MSGPACK_TYPES
from langgraph.checkpoint.serde.jsonplus import (
    EXT_CONSTRUCTOR_KW_ARGS,
    EXT_CONSTRUCTOR_POS_ARGS,
    EXT_CONSTRUCTOR_SINGLE_ARG,
    EXT_DELTA_SNAPSHOT,
    EXT_METHOD_SINGLE_ARG,
    EXT_PYDANTIC_V1,
    EXT_PYDANTIC_V2,
    JsonPlusSerializer,
)

from foundry_checkpoint.errors import CorruptPayloadError

__all__ = ["StrictSerializer", "UnsafeValueError"]

_CONSTRUCTORS: Final = frozenset(
    {
        EXT_CONSTRUCTOR_SINGLE_ARG,
        EXT_CONSTRUCTOR_POS_ARGS,
        EXT_CONSTRUCTOR_KW_ARGS,
        EXT_PYDANTIC_V1,
        EXT_PYDANTIC_V2,
    }
)


class UnsafeValueError(CorruptPayloadError):
    """A stored value names a constructor outside the serializer's allow-list; nothing ran.

    Either the store was written by something else (tampering), or the graph keeps a type of
    its own in state that the allow-list lacks: add it with
    ``FoundryCheckpointer().with_allowlist([("my_app.models", "MyState")])``, or compile with
    ``LANGGRAPH_STRICT_MSGPACK=true`` so LangGraph adds the graph's state types.
    """


class StrictSerializer(JsonPlusSerializer):
    """``JsonPlusSerializer`` with an explicit msgpack allow-list that raises on anything else.

    Writing is unchanged, so checkpoints stay readable by any LangGraph saver.

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

    @property
    def allowed(self) -> frozenset[tuple[str, ...]]:
        """The ``(module, name)`` pairs admitted beyond LangGraph's safe set."""
        extra = self._allowed_msgpack_modules
        return frozenset(extra) if isinstance(extra, (set, frozenset)) else frozenset()

    def loads_typed(self, data: tuple[str, bytes]) -> Any:
        """Decode like ``JsonPlusSerializer.loads_typed``, checking every msgpack extension first.

        Args:
            data: The ``(type, bytes)`` pair ``dumps_typed`` made.

        Returns:
            The decoded value.

        Raises:
            UnsafeValueError: (a ``CorruptPayloadError``) an extension names a type outside the
                allow-list; nothing of it was constructed.
        """
        type_, raw = data
        if type_ != "msgpack":
            return super().loads_typed(data)
        refused: list[UnsafeValueError] = []  # ormsgpack replaces a hook's error by its own

        def guarded(code: int, data: bytes) -> Any:
            self._check(code, data, refused)
            return self._unpack_ext_hook(code, data)

        try:
            return ormsgpack.unpackb(raw, ext_hook=guarded, option=ormsgpack.OPT_NON_STR_KEYS)
        except ValueError:
            if refused:
                raise refused[0] from None
            raise

    def _check(self, code: int, data: bytes, refused: list[UnsafeValueError]) -> None:
        """Raise unless ``data`` (and every extension nested in it) names only allowed types.

        The error is also put in ``refused``: ormsgpack replaces a hook's exception by its own.
        """
        try:
            self._check_one(code, data, refused)
        except UnsafeValueError as exc:
            refused.append(exc)
            raise

    def _check_one(self, code: int, data: bytes, refused: list[UnsafeValueError]) -> None:
        if not (code in _CONSTRUCTORS or code in (EXT_METHOD_SINGLE_ARG, EXT_DELTA_SNAPSHOT)):
            return

        def nested(code: int, data: bytes) -> None:
            self._check(code, data, refused)

        try:
            inner = ormsgpack.unpackb(data, ext_hook=nested, option=ormsgpack.OPT_NON_STR_KEYS)
        except ValueError as exc:
            if refused:
                raise refused[0] from None
            raise UnsafeValueError(f"a stored msgpack extension is malformed: {exc}") from exc
        if code == EXT_DELTA_SNAPSHOT:
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
                f"a stored value calls {module}.{name}.{method}, which is not an allowed method"
            )
        extra = self._allowed_msgpack_modules
        if (module, name) in SAFE_MSGPACK_TYPES or extra is True:
            return
        if isinstance(extra, (set, frozenset)) and (module, name) in extra:
            return
        raise UnsafeValueError(
            f"a stored value names {module}.{name}, which is not in the msgpack allow-list; "
            "nothing was called. If it is a state type of your own graph, add it with "
            "checkpointer.with_allowlist([(module, name)]); otherwise the store was written "
            "by something else"
        )
