"""A pickle decoder that can only build values: the opcode stream is interpreted here.

MAF stores every value JSON cannot hold as a pickle (``pickle.dumps(value, HIGHEST_PROTOCOL)``
in a ``{"__pickled__": ..., "__type__": ...}`` envelope). :func:`loads` reads such a stream
without ``pickle.Unpickler``: a small reader splits it into opcodes (``pickletools``' table of
opcodes, and its readers for protocol 0's text arguments), and this module gives each opcode a
meaning of its own. What it can produce:

* primitives (``None``, ``bool``, ``int``, ``float``, ``str``, ``bytes``, ``bytearray``) and
  containers (``list``, ``tuple``, ``dict``, ``set``, ``frozenset``) built from them;
* a short, fixed list of value constructors, each with checked arguments: ``set``,
  ``frozenset``, ``bytes``, ``bytearray``, ``complex``, ``range``, ``slice``, ``_codecs.encode``
  (protocol 2's spelling of bytes), ``type(None)``, the ``datetime`` types, ``decimal.Decimal``
  and ``collections``' ``OrderedDict``, ``defaultdict`` (of a built-in factory), ``deque`` and
  ``Counter``;
* enum members, looked up by value or name on an admitted enum class (never by calling it);
* admitted classes, as values (MAF's request events record their request and response types);
* instances of admitted classes, built the way pickle builds them for the framework's types:
  ``object.__new__(cls)`` (``tuple.__new__`` for named tuples) and then the saved state on the
  *new instance*: into its ``__dict__`` and slots, or through the one hook of a known kind that
  the class has (pydantic's ``BaseModel.__setstate__``, a frozen dataclass's, ``uuid.UUID``'s,
  agent_framework's ``SerializationMixin`` and ``Content``). No state may name an attribute that
  the class implements with a descriptor (a method, a property, ``__class__``...).

Classes named exactly in the caller's allow-list (``allowed_checkpoint_types`` and
``register_checkpoint_type``) are the application's own, trusted by that naming: their own
pickle hooks run (a ``__reduce__`` that calls the class, ``__new__`` with arguments, their own
``__setstate__``). Classes admitted by module prefix (``agent_framework.*``,
``agent_framework_orchestrations.*``, ``openai.types.*``) and the plain value types are only
ever built from data.

Everything else is refused with a :class:`Refusal`: :class:`Blocked` (a class that is not
admitted: a configuration matter), :class:`Tampered` (a stream no encoder writes: a function, a
metaclass, ``builtins.type``, a re-exported name, a call of a framework class, ``BUILD`` on a
class or on anything this decode did not create, out-of-band buffers, persistent ids, memo
tricks...) or :class:`Damaged` (not a pickle: truncated, malformed). Globals resolve only in
modules that are already imported (a module named by an exact allow-list entry may be
imported), through the modules' and classes' own ``__dict__`` (no ``getattr``, so no module
``__getattr__`` runs). The stack and the memo grow by at most one entry per opcode read, and a
memo index may not exceed the number of entries stored so far, and the value builders copy at
most 16 units per stream byte in all (a value referenced many times through the memo is not
copied once per reference), so memory stays proportional to the payload. A value may nest at
most :data:`MAX_NESTING` levels deep (checked on the value, whatever order the stream built it
in).

Example:
    >>> import pickle
    >>> from datetime import date
    >>> loads(pickle.dumps({"when": date(2025, 1, 2), "ids": (1, 2)}), frozenset())
    {'when': datetime.date(2025, 1, 2), 'ids': (1, 2)}
    >>> loads(b"cos\\nsystem\\n(Vtouch /tmp/x\\ntR.", frozenset())
    Traceback (most recent call last):
    ...
    foundry_checkpoint_maf._unpickle.Tampered: a pickle names 'os:system', which is not a class
"""

from __future__ import annotations

import _compat_pickle
import abc
import codecs
import collections
import contextlib
import datetime
import decimal
import enum
import functools
import importlib
import io
import pickletools
import struct
import sys
import types
import typing
import uuid
from collections.abc import Callable, Iterable
from typing import Any, Final, NoReturn

__all__ = ["Blocked", "Damaged", "Refusal", "Tampered", "key_of", "loads"]


class Refusal(Exception):
    """A stored pickle this decoder does not turn into a value; nothing in it was run.

    ``type_key`` is the ``"module:qualname"`` the refusal is about, when there is one.

    Example:
        >>> Blocked("not an allowed checkpoint type", "my_app.models:MyState").type_key
        'my_app.models:MyState'
    """

    def __init__(self, reason: str, type_key: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.type_key = type_key


class Blocked(Refusal):
    """A class that is not admitted (or that is admitted but not built from data alone)."""


class Tampered(Refusal):
    """A stream no encoder writes: a sign that the stored bytes were written by someone else."""


class Damaged(Refusal):
    """Bytes that are not a complete, well-formed pickle."""


# Classes admitted by prefix: where they are *defined* (``__module__``), never re-exported.
FRAMEWORK_PREFIXES: Final = ("agent_framework.", "agent_framework_orchestrations.", "openai.types.")

#: The framework's modules whose classes a workflow's checkpoint holds (its messages, events and
#: executors' state). They load with this module, so a process that never ran a workflow (the
#: command line, the explorer) reads a checkpoint as the process that wrote it does, and a decode
#: itself still imports nothing.
_WORKFLOW_MODULES: Final = (
    "agent_framework._workflows._workflow",
    "agent_framework._workflows._agent_executor",
    "agent_framework._workflows._workflow_executor",
)
for _module in _WORKFLOW_MODULES:
    with contextlib.suppress(ImportError):  # a framework version that moved one reads as before
        importlib.import_module(_module)

_VALUE_CLASSES: Final[tuple[type, ...]] = (
    object, complex, range, slice, int, float, str, bytes, bytearray, bool, set, frozenset,
    list, dict, tuple, datetime.datetime, datetime.date, datetime.time, datetime.timedelta,
    datetime.timezone, uuid.UUID, decimal.Decimal, collections.OrderedDict,
    collections.defaultdict, collections.deque, collections.Counter,
)  # fmt: skip


def key_of(cls: type) -> str:
    """The ``"module:qualname"`` a pickle envelope and the allow-lists name ``cls`` by."""
    return f"{cls.__module__}:{cls.__qualname__}"


# Plain value types, by the key pickle names them with: admitted as classes (values, NEWOBJ
# when they build from ``object.__new__``) and, for some, called through a checked builder.
_VALUE_CLASS_BY_KEY: Final = {key_of(c): c for c in _VALUE_CLASSES}
VALUE_TYPE_KEYS: Final = frozenset(_VALUE_CLASS_BY_KEY)

# Bases that make a class a callable wrapper or an evaluator of strings: refused even when the
# class itself is admitted (a subclass defined in an allowed module inherits the behaviour).
_REFUSED_BASE_KEYS: Final = frozenset(
    {
        "pydantic.type_adapter:TypeAdapter",
        "functools:partial",
        "functools:partialmethod",
        "operator:attrgetter",
        "operator:itemgetter",
        "operator:methodcaller",
    }
)
# defaultdict factories that may be stored: built-in value types only (a stored callable would
# run on the application's first missing key).
_FACTORIES: Final[frozenset[type]] = frozenset(
    {list, dict, set, frozenset, tuple, int, float, complex, str, bytes, bytearray, bool,
     collections.OrderedDict, collections.deque, collections.Counter}
)  # fmt: skip
_TZINFO_OK: Final = (type(None), datetime.tzinfo)
# value builders copy at most this many units (bytes, or items at _ITEM each) per stream byte
_COPY_FACTOR: Final = 16
_COPY_ALLOWANCE: Final = 1 << 20
_ITEM: Final = 8


def _static(cls: type, name: str) -> Any:
    """``name`` as the class defines it (first in its MRO), without running any lookup hook."""
    for base in cls.__mro__:
        found = vars(base).get(name, _MISSING)
        if found is not _MISSING:
            return found
    return _MISSING


def _has_dict(cls: type) -> bool:
    """Whether instances of ``cls`` have a ``__dict__`` (as the class itself defines it)."""
    return isinstance(_static(cls, "__dict__"), types.GetSetDescriptorType)


_MISSING: Final = object()


def _admitted_metaclasses() -> frozenset[type]:
    """The metaclasses an admitted class may have (pydantic's only once pydantic is loaded)."""
    metas: set[type] = {type, abc.ABCMeta, enum.EnumMeta, type(typing.Protocol)}
    pydantic_meta = sys.modules.get("pydantic._internal._model_construction")
    if pydantic_meta is not None:
        found = vars(pydantic_meta).get("ModelMetaclass")
        if isinstance(found, type):
            metas.add(found)
    return frozenset(metas)


class _Ref:
    """A global the stream named: usable as a callable or class, never itself a value.

    ``kind`` is ``"call"`` (a fixed value builder), ``"class"`` (an admitted class),
    ``"trusted"`` (a class named exactly in the allow-list), ``"blocked"`` (a class that is not
    admitted: refused when used) or ``"bad"`` (a function, metaclass, re-export...: refused as
    tampering when used).
    """

    __slots__ = ("builder", "key", "kind", "obj", "why")

    def __init__(
        self, key: str, kind: str, obj: Any = None, why: str = "", builder: Builder | None = None
    ) -> None:
        self.key = key
        self.kind = kind
        self.obj = obj
        self.why = why
        self.builder = builder

    def refuse(self) -> NoReturn:
        if self.kind == "blocked":
            raise Blocked(self.why, self.key)
        raise Tampered(self.why, self.key)


def loads(data: bytes, allowed: frozenset[str]) -> Any:
    """The value a pickle stream builds, or a :class:`Refusal`; nothing named in it is run.

    ``allowed`` holds the ``"module:qualname"`` keys of the application's own classes (also
    admitted: :data:`VALUE_TYPE_KEYS` and classes defined under :data:`FRAMEWORK_PREFIXES`).

    Example:
        >>> import pickle
        >>> from collections import OrderedDict
        >>> loads(pickle.dumps(OrderedDict(a={1, 2})), frozenset())
        OrderedDict([('a', {1, 2})])
    """
    return _Decoder(data, allowed).run()


class _Decoder:
    """One decode: a stack, a metastack of marks and a memo, all bounded by the stream."""

    def __init__(self, data: bytes, allowed: frozenset[str]) -> None:
        self.data = data
        self.allowed = allowed
        self.stack: list[Any] = []
        self.marks: list[list[Any]] = []
        self.memo: dict[int, Any] = {}
        self.proto = 0
        self.frame_end = 0
        # mutable objects created by this decode, by id (values keep them alive): the only
        # targets of APPEND, SETITEM, ADDITEMS and BUILD
        self.mine: dict[int, Any] = {}
        self.nested = 0  # immutable containers made (mutable ones are in mine)
        self.unbuilt: dict[int, Any] = {}  # new instances still waiting for their state
        self.metas = _admitted_metaclasses()
        self.refs: dict[str, _Ref] = {}
        self.classes: dict[int, _Ref] = {}  # classes handed out as values, with their globals
        self.known = _known_setstate()
        self.handlers = _HANDLERS
        # what the value builders may copy in all (a stored value referenced many times through
        # the memo must not be copied into a bytearray, a set... once per reference)
        self.budget = _COPY_FACTOR * len(data) + _COPY_ALLOWANCE

    # -- the loop --------------------------------------------------------------------------
    def run(self) -> Any:
        data, end, handlers = self.data, len(self.data), self.handlers
        i = 0
        while True:
            if i >= end:
                raise Damaged("the pickle ends before its STOP opcode")
            pos = i
            code = data[i]
            if code == 0x94:  # MEMOIZE (every other opcode of a protocol-4 stream) is read here
                if not self.stack:
                    raise Tampered("the pickle reads past the bottom of its stack")
                self.memo[len(self.memo)] = self.stack[-1]
                i += 1
                continue
            spec = _SPECS[code]
            if spec is None:
                raise Damaged(f"the pickle holds an unknown opcode {data[i]:#04x} at byte {pos}")
            name, kind, size, op = spec
            i += 1
            if name == "STOP":
                if self.marks or len(self.stack) != 1:
                    raise Tampered(
                        "the pickle stops with a mark, or other than one value, on its stack"
                    )
                if i != end:
                    raise Tampered("the pickle carries bytes after its STOP opcode")
                result = self.value(self.stack.pop())
                if self.nested + len(self.mine) >= MAX_NESTING:  # else it cannot nest that deep
                    _check_nesting(result, self.mine)
                return result
            handler = handlers.get(name)
            if handler is None:
                raise Tampered(f"the pickle uses the {name} opcode, which checkpoints never hold")
            if kind == _NONE:
                arg = None
            elif kind == _FIXED and size == 1 and i < end:
                arg = data[i]
                i += 1
            else:
                arg, i = _read_arg(data, i, end, kind, size, op)
            try:
                handler(self, arg, pos)
            except Refusal:
                raise
            except RecursionError as exc:
                raise Damaged("the pickle nests too deeply") from exc
            except Exception as exc:  # a value builder refused its arguments
                raise Tampered(
                    f"the pickle's {name} at byte {pos} fails: {type(exc).__name__}: {exc}"
                ) from exc

    # -- stack helpers ---------------------------------------------------------------------
    def charge(self, size: int) -> None:
        """Count ``size`` units copied by a value builder against the stream's budget."""
        self.budget -= size
        if self.budget < 0:
            raise Tampered("the pickle copies more than a stream of its size can hold")

    def pop(self) -> Any:
        if not self.stack:
            raise Tampered("the pickle pops past the bottom of its stack")
        return self.stack.pop()

    def top(self) -> Any:
        if not self.stack:
            raise Tampered("the pickle reads past the bottom of its stack")
        return self.stack[-1]

    def pop_mark(self) -> list[Any]:
        if not self.marks:
            raise Tampered("the pickle pops to a mark it never set")
        items = self.stack
        self.stack = self.marks.pop()
        return items

    def push_new(self, obj: Any) -> None:
        """Push a mutable object this decode created (a target of later opcodes)."""
        self.mine[id(obj)] = obj
        self.stack.append(obj)

    def push_made(self, obj: Any) -> None:
        """Push an immutable container this decode created (counted for the nesting check)."""
        self.nested += 1
        self.stack.append(obj)

    def value(self, item: Any) -> Any:
        """``item`` used as a value: a global is then a class, if it may be one at all."""
        if isinstance(item, _Ref):
            return self.class_value(item)
        return item

    def values(self, items: Iterable[Any]) -> list[Any]:
        return [self.value(i) for i in items]

    def class_value(self, ref: _Ref) -> type:
        if ref.kind in ("class", "trusted"):
            cls = typing.cast(type, ref.obj)
            self.classes[id(cls)] = ref
            return cls
        if ref.kind == "call":
            raise Tampered(f"the pickle uses '{ref.key}' as a value", ref.key)
        ref.refuse()

    def owned(self, target: Any, what: str) -> Any:
        if (
            isinstance(target, _Ref)
            or id(target) not in self.mine
            or self.mine[id(target)] is not target
        ):
            raise Tampered(f"the pickle applies {what} to a value it did not create here")
        return target

    # -- globals ---------------------------------------------------------------------------
    def resolve(self, module: str, qualname: str) -> _Ref:
        if self.proto < 3:
            if (module, qualname) in _compat_pickle.NAME_MAPPING:
                module, qualname = _compat_pickle.NAME_MAPPING[(module, qualname)]
            elif module in _compat_pickle.IMPORT_MAPPING:
                module = _compat_pickle.IMPORT_MAPPING[module]
        key = f"{module}:{qualname}"
        cached = self.refs.get(key)
        if cached is None:
            cached = self.refs[key] = self._resolve(module, qualname, key)
        return cached

    def _resolve(self, module: str, qualname: str, key: str) -> _Ref:
        builder = _BUILDERS.get(key)
        if builder is not None:
            cls = _VALUE_CLASS_BY_KEY.get(key)
            return _Ref(key, "class" if cls else "call", cls, builder=builder)
        loaded = sys.modules.get(module)
        if loaded is None and key in self.allowed:
            try:  # the application named this very class: its module may be loaded for it
                loaded = importlib.import_module(module)
            except Exception as exc:
                return _Ref(key, "blocked", why=f"its module cannot be imported: {exc}")
        if not isinstance(loaded, types.ModuleType):
            return _Ref(key, "blocked", why="it is not an allowed checkpoint type")
        found: Any = loaded
        for part in qualname.split("."):
            if not isinstance(found, (type, types.ModuleType)) or not part:
                return _Ref(key, "bad", why=f"'{key}' is not a class defined there")
            found = vars(found).get(part, _MISSING)
        if found is _MISSING:
            return _Ref(key, "blocked", why="it is not an allowed checkpoint type (not found)")
        return self.judge(key, found)

    def judge(self, key: str, found: Any) -> _Ref:
        """The reference for ``found``, which the stream names as ``key``."""
        if not isinstance(found, type):
            return _Ref(key, "bad", why=f"a pickle names '{key}', which is not a class")
        if key_of(found) != key:
            why = f"a pickle names '{key}', which is '{key_of(found)}' re-exported"
            return _Ref(key, "bad", why=why)
        if issubclass(found, type) or type(found) not in self.metas:
            why = f"a pickle names '{key}', a metaclass or a class of a foreign metaclass"
            return _Ref(key, "bad", why=why)
        if any(key_of(base) in _REFUSED_BASE_KEYS for base in found.__mro__):
            why = f"a pickle names '{key}', a callable wrapper or an evaluator of strings"
            return _Ref(key, "bad", why=why)
        if key in self.allowed and key not in VALUE_TYPE_KEYS:
            return _Ref(key, "trusted", found)
        if key in VALUE_TYPE_KEYS or found.__module__.startswith(FRAMEWORK_PREFIXES):
            return _Ref(key, "class", found)
        return _Ref(key, "blocked", found, why="it is not an allowed checkpoint type")

    def as_ref(self, item: Any) -> _Ref | None:
        """The global behind ``item``: itself, or the one a class value was handed out for."""
        if isinstance(item, _Ref):
            return item
        if isinstance(item, type):
            ref = self.classes.get(id(item))
            if ref is not None and ref.obj is item:
                return ref
        return None

    def class_ref(self, item: Any, what: str) -> tuple[_Ref, type]:
        """``item`` as the class of a new instance: an admitted class, not an enum."""
        item = self.as_ref(item)
        if item is None:
            raise Tampered(f"the pickle's {what} names no class")
        if item.kind == "call":
            raise Tampered(f"the pickle's {what} names '{item.key}', which is not a class")
        if item.kind not in ("class", "trusted"):
            item.refuse()
        cls = typing.cast(type, item.obj)
        if isinstance(cls, enum.EnumMeta):
            raise Tampered(f"the pickle makes a new member of enum '{item.key}'", item.key)
        return item, cls

    # -- construction ----------------------------------------------------------------------
    def new_instance(self, item: Any, args: Any, kwargs: Any, what: str) -> None:
        ref, cls = self.class_ref(item, what)
        if not isinstance(args, tuple) or not isinstance(kwargs, dict):
            raise Tampered(f"the pickle's {what} arguments are not a tuple and a dict")
        args, kwargs = tuple(self.values(args)), dict(kwargs)
        if ref.kind != "trusted" and _static(cls, "__del__") is not _MISSING:
            raise Blocked(  # a finalizer would run on the stored state when the value is freed
                "it defines __del__, so it is built only when named in allowed_checkpoint_types",
                ref.key,
            )
        new = _static(cls, "__new__")
        if isinstance(new, staticmethod):
            new = new.__func__
        if new is object.__new__ or _wraps_object_new(new):
            if args or kwargs:
                raise Tampered(f"the pickle passes arguments to object.__new__ of '{ref.key}'")
            obj: Any = object.__new__(cls)
        elif issubclass(cls, tuple) and _is_namedtuple_new(cls, new) and not kwargs:
            if len(args) != len(typing.cast(Any, cls)._fields):
                raise Tampered(f"the pickle builds named tuple '{ref.key}' of the wrong length")
            obj = tuple.__new__(cls, args)
        elif ref.kind == "trusted":
            obj = cls.__new__(cls, *args, **kwargs)
            if not isinstance(obj, cls):
                raise Tampered(f"'{ref.key}'.__new__ built something else", ref.key)
        elif ref.key in VALUE_TYPE_KEYS:
            raise Tampered(f"the pickle builds '{ref.key}' with {what}, which encoders never do")
        else:
            raise Blocked(
                "it defines __new__, which is called only for classes named in "
                "allowed_checkpoint_types",
                ref.key,
            )
        self.unbuilt[id(obj)] = obj
        self.push_new(obj)

    def reduce(self, item: Any, args: Any) -> None:
        if not isinstance(item, _Ref):
            raise Tampered("the pickle calls something that is not a named global")
        if not isinstance(args, tuple):
            raise Tampered(f"the pickle calls '{item.key}' with arguments that are not a tuple")
        if item.builder is not None:
            item.builder(self, args)
            return
        if item.kind not in ("class", "trusted"):
            item.refuse()
        cls = typing.cast(type, item.obj)
        if isinstance(cls, enum.EnumMeta):
            if len(args) != 1:
                raise Tampered(f"the pickle looks up enum '{item.key}' with {len(args)} values")
            self.stack.append(_enum_member(cls, self.value(args[0]), item.key))
            return
        if item.kind == "trusted":  # the application's own class: its __reduce__ is honoured
            obj = cls(*self.values(args))
            if isinstance(obj, cls):
                self.unbuilt[id(obj)] = obj
            self.push_new(obj)
            return
        raise Tampered(
            f"the pickle calls '{item.key}', which is called only for classes named in "
            "allowed_checkpoint_types",
            item.key,
        )

    def build(self, obj: Any, state: Any) -> None:
        self.owned(obj, "BUILD")
        if self.unbuilt.pop(id(obj), None) is not obj:
            raise Tampered("the pickle applies BUILD to a value that is not a new instance")
        state = self.value(state)
        cls = type(obj)
        setstate = _static(cls, "__setstate__")
        if setstate is _MISSING:
            _default_build(obj, state)
            return
        special = self.known.get(id(setstate))
        if special is not None and special[0] is setstate:
            special[1](obj, state)
            return
        if key_of(cls) in self.allowed:  # the application's own class, its own hook
            obj.__setstate__(state)
            return
        raise Blocked(
            "it defines __setstate__, which is called only for classes named in "
            "allowed_checkpoint_types",
            key_of(cls),
        )


#: How deeply decoded values may nest (containers and instances), as MAF's JSON part may: a
#: deeper value would fail later, in any recursive reader (``copy.deepcopy``, ``repr``, ``==``).
MAX_NESTING: Final = 200
_LEAVES: Final = (str, bytes, bytearray, int, float, complex, bool, type(None), type)


def _children(obj: Any, mine: dict[int, Any]) -> list[Any]:
    if isinstance(obj, (_LEAVES, enum.Enum)):
        return []
    if isinstance(obj, dict):
        return [*obj.keys(), *obj.values()]
    if isinstance(obj, (list, tuple, set, frozenset, collections.deque)):
        return list(obj)
    if mine.get(id(obj)) is not obj:
        return []  # not built here (a date, a decimal...): nothing of the stream inside
    found: list[Any] = []
    if _has_dict(type(obj)):
        found.extend(object.__getattribute__(obj, "__dict__").values())
    for base in type(obj).__mro__:
        slots = vars(base).get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            slot = vars(base).get(name)
            if isinstance(slot, types.MemberDescriptorType):
                with contextlib.suppress(AttributeError):
                    found.append(slot.__get__(obj, type(obj)))
    return found


def _check_nesting(root: Any, mine: dict[int, Any]) -> None:
    """Refuse a value whose longest chain of nested containers exceeds :data:`MAX_NESTING`
    (each object's height is computed once; a reference back into the current chain, a
    cycle, adds nothing)."""
    too_deep = f"the pickled value nests more than {MAX_NESTING} levels deep"
    heights: dict[int, int] = {}
    on_path: set[int] = {id(root)}
    keep: list[Any] = [root]  # every walked object stays alive, so its id stays its own
    work: list[list[Any]] = [[root, _children(root, mine), 0]]
    while work:
        frame = work[-1]
        obj, children, index = frame
        if index < len(children):
            frame[2] = index + 1
            child = children[index]
            if id(child) in heights or id(child) in on_path:
                continue
            on_path.add(id(child))
            keep.append(child)
            work.append([child, _children(child, mine), 0])
            if len(work) > MAX_NESTING:
                raise Damaged(too_deep)
            continue
        work.pop()
        on_path.discard(id(obj))
        height = 1 + max((heights.get(id(child), 0) for child in children), default=0)
        if height > MAX_NESTING:
            raise Damaged(too_deep)
        heights[id(obj)] = height


def _wraps_object_new(new: Any) -> bool:
    """agent_framework's feature-stage wrapper around ``object.__new__`` (it only warns)."""
    return (
        isinstance(new, types.FunctionType)
        and new.__module__ == "agent_framework._feature_stage"
        and getattr(new, "__wrapped__", None) is object.__new__
    )


def _is_namedtuple_new(cls: type, new: Any) -> bool:
    """The ``__new__`` that ``collections.namedtuple`` generates (it only calls tuple's)."""
    fields = _static(cls, "_fields")
    return (
        isinstance(fields, tuple)
        and all(isinstance(f, str) for f in fields)
        and isinstance(new, types.FunctionType)
        and new.__globals__.get("_tuple_new") is tuple.__new__
    )


def _enum_member(cls: enum.EnumMeta, value: Any, key: str) -> Any:
    try:
        found = cls._value2member_map_.get(value, _MISSING)
    except TypeError:  # an unhashable value
        found = _MISSING
    if found is _MISSING:
        members: Iterable[Any] = cls.__members__.values()
        found = next(
            (m for m in members if type(m._value_) is type(value) and m._value_ == value), _MISSING
        )
    if (
        found is _MISSING
        and issubclass(cls, enum.Flag)
        and type(value) is int
        and _static(cls, "_missing_") is vars(enum.Flag)["_missing_"]
        and _static(type(cls), "__call__") is vars(enum.EnumMeta)["__call__"]
    ):  # a combination of flags: the enum module's own code makes the pseudo-member
        found = cls(value)
    if found is _MISSING:
        raise Damaged(f"enum '{key}' has no member of value {value!r}", key)
    return found


# -- state ---------------------------------------------------------------------------------
def _check_names(cls: type, names: Iterable[Any], *, slots_ok: bool) -> None:
    """Refuse state that would replace something the class implements (methods, properties,
    ``__class__``, ``__dict__``...): state names plain data attributes only."""
    namespaces = [vars(base) for base in cls.__mro__]
    for name in names:
        if type(name) is not str:
            raise Tampered(f"state of '{key_of(cls)}' holds a non-string attribute name")
        found: Any = _MISSING
        for namespace in namespaces:
            if name in namespace:
                found = namespace[name]
                break
        if found is _MISSING or isinstance(found, functools.cached_property):
            continue
        if slots_ok and isinstance(found, types.MemberDescriptorType):
            continue
        if hasattr(type(found), "__get__"):
            raise Tampered(
                f"state of '{key_of(cls)}' sets {name!r}, which the class implements", key_of(cls)
            )


def _default_build(obj: Any, state: Any) -> None:
    """pickle's own BUILD without ``__setstate__``: the ``__dict__`` part, then the slots."""
    cls = type(obj)
    has_dict = _has_dict(cls)
    slot_state = None
    if isinstance(state, tuple) and len(state) == 2:
        state, slot_state = state
    if state is not None:
        if not isinstance(state, dict):
            raise Tampered(f"state of '{key_of(cls)}' is not a dict")
        _check_names(cls, state, slots_ok=False)
        if state:
            if not has_dict:
                raise Tampered(f"state of '{key_of(cls)}' needs a __dict__ it does not have")
            inst_dict = object.__getattribute__(obj, "__dict__")
            for name, value in state.items():
                inst_dict[sys.intern(name)] = value
    if slot_state is not None:
        if not isinstance(slot_state, dict):
            raise Tampered(f"slot state of '{key_of(cls)}' is not a dict")
        _check_names(cls, slot_state, slots_ok=True)
        for name, value in slot_state.items():
            slot = _static(cls, name)
            if isinstance(slot, types.MemberDescriptorType):
                slot.__set__(obj, value)
            elif has_dict:
                object.__getattribute__(obj, "__dict__")[sys.intern(name)] = value
            else:
                raise Tampered(f"slot state of '{key_of(cls)}' names {name!r}, which is no slot")


def _pydantic_setstate(obj: Any, state: Any) -> None:
    """pydantic's ``BaseModel.__setstate__``, with the shapes its ``__getstate__`` writes."""
    cls = type(obj)
    expected = {"__dict__", "__pydantic_extra__", "__pydantic_fields_set__", "__pydantic_private__"}
    if not isinstance(state, dict) or not set(state) <= expected:
        raise Tampered(f"state of model '{key_of(cls)}' is not a pydantic model state")
    fields = state.get("__dict__", {})
    fields_set = state.get("__pydantic_fields_set__", set())
    extra = state.get("__pydantic_extra__")
    private = state.get("__pydantic_private__")
    if not isinstance(fields, dict) or not isinstance(fields_set, set):
        raise Tampered(f"state of model '{key_of(cls)}' is not a pydantic model state")
    for part in (extra, private):
        if part is not None and not (
            isinstance(part, dict) and all(isinstance(k, str) for k in part)
        ):
            raise Tampered(f"state of model '{key_of(cls)}' is not a pydantic model state")
    _check_names(cls, fields, slots_ok=False)
    if not all(type(name) is str for name in fields_set):
        raise Tampered(f"state of model '{key_of(cls)}' is not a pydantic model state")
    object.__setattr__(obj, "__pydantic_fields_set__", fields_set)
    object.__setattr__(obj, "__pydantic_extra__", extra)
    object.__setattr__(obj, "__pydantic_private__", private)
    object.__setattr__(obj, "__dict__", fields)


def _dataclass_setstate(obj: Any, state: Any) -> None:
    """A frozen slotted dataclass's ``__setstate__``: field values in field order."""
    import dataclasses

    cls = type(obj)
    fields = dataclasses.fields(cls)
    if not isinstance(state, (list, tuple)) or len(state) != len(fields):
        raise Tampered(f"state of dataclass '{key_of(cls)}' does not match its fields")
    for field, value in zip(fields, state, strict=True):
        object.__setattr__(obj, field.name, value)


def _uuid_setstate(obj: Any, state: Any) -> None:
    """``uuid.UUID.__setstate__``: a 128-bit int and, optionally, a ``SafeUUID`` value."""
    if not isinstance(state, dict) or not set(state) <= {"int", "is_safe"}:
        raise Tampered("state of uuid.UUID is not {'int': ..., 'is_safe': ...}")
    number = state.get("int")
    if type(number) is not int or not 0 <= number < 1 << 128:
        raise Tampered("state of uuid.UUID is not a 128-bit integer")
    safe = uuid.SafeUUID(state["is_safe"]) if "is_safe" in state else uuid.SafeUUID.unknown
    object.__setattr__(obj, "int", number)
    object.__setattr__(obj, "is_safe", safe)


def _framework_setstate(obj: Any, state: Any) -> None:
    """agent_framework's own ``__setstate__`` (restore fields, reset runtime-only ones), after
    the state has the shape its ``__getstate__`` writes."""
    cls = type(obj)
    parts = state if isinstance(state, tuple) and len(state) == 2 else (state,)
    for part in parts:
        if not isinstance(part, dict):
            raise Tampered(f"state of '{key_of(cls)}' is not a dict")
        _check_names(cls, part, slots_ok=True)
    obj.__setstate__(state)


def _content_setstate(obj: Any, state: Any) -> None:
    """agent_framework's ``Content.__setstate__``, which reads ``type``, ``hosted``,
    ``server_name`` and ``additional_properties.get``: called only when those hold the plain
    values its ``__getstate__`` writes (so nothing of the stored data is called)."""
    merged: Any = state
    if isinstance(state, tuple) and len(state) == 2 and all(isinstance(p, dict) for p in state):
        merged = {**state[0], **state[1]}
    if not isinstance(merged, dict):
        raise Tampered(f"state of '{key_of(type(obj))}' is not a dict")
    plain = (
        type(merged.get("type")) is str
        and type(merged.get("additional_properties", {})) is dict
        and type(merged.get("server_name")) in (str, type(None))
        and type(merged.get("hosted")) in (bool, type(None))
    )
    if not plain:
        raise Tampered(f"state of '{key_of(type(obj))}' is not the content state MAF writes")
    _framework_setstate(obj, state)


@functools.lru_cache(maxsize=1)
def _known_setstate_base() -> dict[int, tuple[Any, Callable[[Any, Any], None]]]:
    import dataclasses

    uuid_setstate = vars(uuid.UUID)["__setstate__"]
    known: dict[int, tuple[Any, Callable[[Any, Any], None]]] = {
        id(uuid_setstate): (uuid_setstate, _uuid_setstate),
    }
    dc_setstate = vars(dataclasses).get("_dataclass_setstate")
    if dc_setstate is not None:
        known[id(dc_setstate)] = (dc_setstate, _dataclass_setstate)
    return known


def _known_setstate() -> dict[int, tuple[Any, Callable[[Any, Any], None]]]:
    """The ``__setstate__`` functions this decoder knows, by identity (from loaded modules)."""
    known = dict(_known_setstate_base())
    for module, owner, handler in (
        ("pydantic.main", "BaseModel", _pydantic_setstate),
        ("agent_framework._serialization", "SerializationMixin", _framework_setstate),
        ("agent_framework._types", "Content", _content_setstate),
    ):
        loaded = sys.modules.get(module)
        cls = None if loaded is None else vars(loaded).get(owner)
        func = None if not isinstance(cls, type) else vars(cls).get("__setstate__")
        if func is not None:
            known[id(func)] = (func, handler)
    return known


# -- reading the stream ----------------------------------------------------------------------
# How each opcode's argument is read: fixed-size integers and floats, length-prefixed strings and
# bytes inline; the text-line arguments of protocol 0 through pickletools' own readers.
_NONE, _FIXED, _LONG, _FLOAT, _TEXT, _BYTES, _LATIN1, _LINE = range(8)
_FIXED_ARGS: Final = {
    pickletools.uint1: (1, False),
    pickletools.uint2: (2, False),
    pickletools.int4: (4, True),
    pickletools.uint4: (4, False),
    pickletools.uint8: (8, False),
}
_LENGTH_ARGS: Final = {
    pickletools.long1: (_LONG, 1),
    pickletools.long4: (_LONG, 4),
    pickletools.unicodestring1: (_TEXT, 1),
    pickletools.unicodestring4: (_TEXT, 4),
    pickletools.unicodestring8: (_TEXT, 8),
    pickletools.bytes1: (_BYTES, 1),
    pickletools.bytes4: (_BYTES, 4),
    pickletools.bytes8: (_BYTES, 8),
    pickletools.bytearray8: (_BYTES, 8),  # type: ignore[attr-defined]
    pickletools.string1: (_LATIN1, 1),
    pickletools.string4: (_LATIN1, 4),
}


def _spec(op: pickletools.OpcodeInfo) -> tuple[str, int, int, pickletools.OpcodeInfo]:
    arg = op.arg
    if arg is None:
        return op.name, _NONE, 0, op
    if arg in _FIXED_ARGS:
        size, signed = _FIXED_ARGS[arg]
        return op.name, _FIXED if not signed else -_FIXED - 1, size, op
    if arg is pickletools.float8:
        return op.name, _FLOAT, 8, op
    if arg in _LENGTH_ARGS:
        kind, size = _LENGTH_ARGS[arg]
        return op.name, kind, size, op
    return op.name, _LINE, 0, op


_SPECS: Final[list[tuple[str, int, int, pickletools.OpcodeInfo] | None]] = [None] * 256
for _op in pickletools.opcodes:
    _SPECS[ord(_op.code.encode("latin-1"))] = _spec(_op)
_FLOAT8: Final = struct.Struct(">d")
# protocol 0's UNICODE argument is read with this codec: loaded now, so no decode imports it
codecs.lookup("raw-unicode-escape")


def _read_arg(
    data: bytes, i: int, end: int, kind: int, size: int, op: pickletools.OpcodeInfo
) -> tuple[Any, int]:
    """The argument of the opcode whose argument starts at ``i``, and where the next starts."""
    if i + size > end:
        raise Damaged(f"the pickle ends inside the argument of {op.name}")
    if kind == _FIXED:
        return int.from_bytes(data[i : i + size], "little"), i + size
    if kind == -_FIXED - 1:
        return int.from_bytes(data[i : i + size], "little", signed=True), i + size
    if kind == _FLOAT:
        return _FLOAT8.unpack_from(data, i)[0], i + 8
    if kind == _LINE:
        stream = io.BytesIO(data)
        stream.seek(i)
        try:
            arg = typing.cast(Any, op.arg).reader(stream)
        except Exception as exc:
            raise Damaged(f"the pickle's {op.name} argument is malformed: {exc}") from exc
        return arg, stream.tell()
    length = int.from_bytes(data[i : i + size], "little", signed=kind == _LATIN1 and size == 4)
    start = i + size
    if length < 0 or start + length > end:
        raise Damaged(f"the pickle ends inside the argument of {op.name}")
    chunk = data[start : start + length]
    if kind == _TEXT:
        try:
            return chunk.decode("utf-8", "surrogatepass"), start + length
        except UnicodeDecodeError as exc:
            raise Damaged(f"the pickle's {op.name} is not UTF-8: {exc}") from exc
    if kind == _LONG:
        return int.from_bytes(chunk, "little", signed=True), start + length
    if kind == _LATIN1:
        return chunk.decode("latin-1"), start + length
    return chunk, start + length


# -- opcode handlers -----------------------------------------------------------------------
Handler = Callable[[_Decoder, Any, int], None]


def _push_arg(d: _Decoder, arg: Any, pos: int) -> None:
    d.stack.append(arg)


def _push_const(value: Any) -> Handler:
    def push(d: _Decoder, arg: Any, pos: int) -> None:
        d.stack.append(value)

    return push


def _push_py2_str(d: _Decoder, arg: Any, pos: int) -> None:
    text = arg.decode("latin-1") if isinstance(arg, bytes) else str(arg)
    if not text.isascii():
        raise Damaged("a protocol-2 string is not ASCII")
    d.stack.append(text)


def _push_bytearray(d: _Decoder, arg: Any, pos: int) -> None:
    d.push_new(bytearray(arg))


def _proto(d: _Decoder, arg: Any, pos: int) -> None:
    if pos != 0 or not 0 <= arg <= 5:
        raise Tampered("the pickle's PROTO opcode is not its first, or names no known protocol")
    d.proto = arg


def _frame(d: _Decoder, arg: Any, pos: int) -> None:
    start = pos + 9
    if pos < d.frame_end:
        raise Tampered("the pickle starts a frame inside another")
    if arg > len(d.data) - start:
        raise Damaged("a frame of the pickle runs past its end")
    d.frame_end = start + arg


def _mark(d: _Decoder, arg: Any, pos: int) -> None:
    d.marks.append(d.stack)
    d.stack = []


def _pop(d: _Decoder, arg: Any, pos: int) -> None:
    if d.stack:
        d.stack.pop()
    elif d.marks:
        d.pop_mark()
    else:
        raise Tampered("the pickle pops past the bottom of its stack")


def _pop_mark(d: _Decoder, arg: Any, pos: int) -> None:
    d.pop_mark()


def _dup(d: _Decoder, arg: Any, pos: int) -> None:
    d.stack.append(d.top())


def _put(d: _Decoder, arg: Any, pos: int) -> None:
    if not isinstance(arg, int) or not 0 <= arg <= len(d.memo):
        raise Tampered(f"the pickle stores memo entry {arg} of {len(d.memo)}")
    d.memo[arg] = d.top()


def _get(d: _Decoder, arg: Any, pos: int) -> None:
    if not isinstance(arg, int) or arg not in d.memo:
        raise Tampered(f"the pickle reads memo entry {arg}, which it never stored")
    d.stack.append(d.memo[arg])


def _empty(factory: Callable[[], Any]) -> Handler:
    def push(d: _Decoder, arg: Any, pos: int) -> None:
        d.push_new(factory())

    return push


def _list(d: _Decoder, arg: Any, pos: int) -> None:
    d.push_new(d.values(d.pop_mark()))


def _tuple(d: _Decoder, arg: Any, pos: int) -> None:
    items = tuple(d.values(d.pop_mark()))
    d.push_made(items)  # (on the stack below the mark, once popped)


def _tuple_n(n: int) -> Handler:
    def push(d: _Decoder, arg: Any, pos: int) -> None:
        if len(d.stack) < n:
            raise Tampered("the pickle pops past the bottom of its stack")
        items = d.stack[len(d.stack) - n :]
        del d.stack[len(d.stack) - n :]
        d.push_made(tuple(d.values(items)))

    return push


def _frozenset(d: _Decoder, arg: Any, pos: int) -> None:
    items = frozenset(d.values(d.pop_mark()))
    d.push_made(items)


def _dict(d: _Decoder, arg: Any, pos: int) -> None:
    items = d.values(d.pop_mark())
    if len(items) % 2:
        raise Tampered("the pickle's DICT holds an odd number of items")
    d.push_new(dict(zip(items[::2], items[1::2], strict=True)))


_DICT_SETITEM: Final[dict[type, Callable[[Any, Any, Any], None]]] = {
    dict: dict.__setitem__,
    collections.OrderedDict: collections.OrderedDict.__setitem__,
    collections.defaultdict: dict.__setitem__,
    collections.Counter: dict.__setitem__,
}


def _set_items(d: _Decoder, target: Any, items: list[Any]) -> None:
    d.owned(target, "SETITEMS")
    setitem = _DICT_SETITEM.get(type(target))
    if setitem is None:
        if (
            not isinstance(target, dict)
            or _static(type(target), "__setitem__") is not dict.__setitem__
        ):
            raise Tampered("the pickle sets items on something that is not a plain mapping")
        setitem = dict.__setitem__
    if len(items) % 2:
        raise Tampered("the pickle's SETITEMS holds an odd number of items")
    for i in range(0, len(items), 2):
        setitem(target, items[i], items[i + 1])


def _setitem(d: _Decoder, arg: Any, pos: int) -> None:
    value, key = d.value(d.pop()), d.value(d.pop())
    _set_items(d, d.top(), [key, value])


def _setitems(d: _Decoder, arg: Any, pos: int) -> None:
    items = d.values(d.pop_mark())
    _set_items(d, d.top(), items)


def _append_items(d: _Decoder, target: Any, items: list[Any]) -> None:
    d.owned(target, "APPENDS")
    if type(target) is list or type(target) is collections.deque:
        target.extend(items)
    elif (
        isinstance(target, list)
        and _static(type(target), "append") is list.append
        and _static(type(target), "extend") is list.extend
    ):
        list.extend(target, items)
    else:
        raise Tampered("the pickle appends to something that is not a plain list")


def _append(d: _Decoder, arg: Any, pos: int) -> None:
    item = d.value(d.pop())
    _append_items(d, d.top(), [item])


def _appends(d: _Decoder, arg: Any, pos: int) -> None:
    items = d.values(d.pop_mark())
    _append_items(d, d.top(), items)


def _additems(d: _Decoder, arg: Any, pos: int) -> None:
    items = d.values(d.pop_mark())
    target = d.owned(d.top(), "ADDITEMS")
    if type(target) is not set:
        raise Tampered("the pickle adds items to something that is not a set")
    target.update(items)


def _global(d: _Decoder, arg: Any, pos: int) -> None:
    module, _, name = str(arg).partition(" ")
    d.stack.append(d.resolve(module, name))


def _stack_global(d: _Decoder, arg: Any, pos: int) -> None:
    name, module = d.pop(), d.pop()
    if type(name) is not str or type(module) is not str:
        raise Tampered("the pickle's STACK_GLOBAL names no module and class")
    d.stack.append(d.resolve(module, name))


def _reduce(d: _Decoder, arg: Any, pos: int) -> None:
    args = d.pop()
    d.reduce(d.pop(), args)


def _newobj(d: _Decoder, arg: Any, pos: int) -> None:
    args = d.pop()
    d.new_instance(d.pop(), args, {}, "NEWOBJ")


def _newobj_ex(d: _Decoder, arg: Any, pos: int) -> None:
    kwargs, args = d.pop(), d.pop()
    d.new_instance(d.pop(), args, kwargs, "NEWOBJ_EX")


def _build(d: _Decoder, arg: Any, pos: int) -> None:
    state = d.pop()
    d.build(d.top(), state)


_HANDLERS: Final[dict[str, Handler]] = {
    "PROTO": _proto,
    "FRAME": _frame,
    "MARK": _mark,
    "POP": _pop,
    "POP_MARK": _pop_mark,
    "DUP": _dup,
    "NONE": _push_const(None),
    "NEWTRUE": _push_const(True),
    "NEWFALSE": _push_const(False),
    **dict.fromkeys(
        ("INT", "BININT", "BININT1", "BININT2", "LONG", "LONG1", "LONG4", "FLOAT", "BINFLOAT"),
        _push_arg,
    ),
    **dict.fromkeys(
        (
            "UNICODE",
            "BINUNICODE",
            "SHORT_BINUNICODE",
            "BINUNICODE8",
            "BINBYTES",
            "SHORT_BINBYTES",
            "BINBYTES8",
        ),
        _push_arg,
    ),
    **dict.fromkeys(("STRING", "BINSTRING", "SHORT_BINSTRING"), _push_py2_str),
    "BYTEARRAY8": _push_bytearray,
    "EMPTY_LIST": _empty(list),
    "EMPTY_DICT": _empty(dict),
    "EMPTY_SET": _empty(set),
    "EMPTY_TUPLE": _push_const(()),
    "LIST": _list,
    "TUPLE": _tuple,
    "TUPLE1": _tuple_n(1),
    "TUPLE2": _tuple_n(2),
    "TUPLE3": _tuple_n(3),
    "DICT": _dict,
    "FROZENSET": _frozenset,
    "APPEND": _append,
    "APPENDS": _appends,
    "SETITEM": _setitem,
    "SETITEMS": _setitems,
    "ADDITEMS": _additems,
    "PUT": _put,
    "BINPUT": _put,
    "LONG_BINPUT": _put,
    "GET": _get,
    "BINGET": _get,
    "LONG_BINGET": _get,
    "GLOBAL": _global,
    "STACK_GLOBAL": _stack_global,
    "REDUCE": _reduce,
    "NEWOBJ": _newobj,
    "NEWOBJ_EX": _newobj_ex,
    "BUILD": _build,
    # not handled, so refused as tampering: INST, OBJ (protocol 0/1 class calls), PERSID,
    # BINPERSID (persistent ids), EXT1/2/4 (the copyreg registry), NEXT_BUFFER and
    # READONLY_BUFFER (out-of-band buffers, which checkpoints never carry)
}


# -- the fixed value builders of REDUCE ----------------------------------------------------
Builder = Callable[[_Decoder, tuple[Any, ...]], None]


def _arity(args: tuple[Any, ...], low: int, high: int, what: str) -> None:
    if not low <= len(args) <= high:
        raise Tampered(f"the pickle calls {what} with {len(args)} arguments")


def _types_are(values: Iterable[Any], allowed: tuple[type, ...], what: str) -> None:
    for value in values:
        if type(value) not in allowed:
            raise Tampered(f"the pickle calls {what} with a {type(value).__name__}")


def _b_set(kind: type) -> Builder:
    def build(d: _Decoder, args: tuple[Any, ...]) -> None:
        _arity(args, 0, 1, kind.__name__)
        items = d.values(args)
        _types_are(items, (list, tuple), kind.__name__)
        d.charge(_ITEM * len(items[0]) if items else 0)
        made = kind(items[0]) if items else kind()
        if kind is set:
            d.push_new(made)
        else:
            d.push_made(made)

    return build


def _b_bytes(d: _Decoder, args: tuple[Any, ...]) -> None:
    _arity(args, 0, 0, "bytes")
    d.stack.append(b"")


def _b_bytearray(d: _Decoder, args: tuple[Any, ...]) -> None:
    _arity(args, 0, 1, "bytearray")
    items = d.values(args)
    _types_are(items, (bytes,), "bytearray")
    d.charge(len(items[0]) if items else 0)
    d.push_new(bytearray(items[0]) if items else bytearray())


def _b_codecs_encode(d: _Decoder, args: tuple[Any, ...]) -> None:
    _arity(args, 2, 2, "_codecs.encode")
    text, encoding = d.values(args)
    if type(text) is not str or encoding not in ("latin1", "latin-1"):
        raise Tampered("the pickle calls _codecs.encode other than on text, as latin1")
    d.charge(len(text))
    d.stack.append(text.encode("latin-1"))


def _b_complex(d: _Decoder, args: tuple[Any, ...]) -> None:
    _arity(args, 1, 2, "complex")
    parts = d.values(args)
    _types_are(parts, (int, float), "complex")
    d.stack.append(complex(*parts))


def _b_range(d: _Decoder, args: tuple[Any, ...]) -> None:
    _arity(args, 1, 3, "range")
    parts = d.values(args)
    _types_are(parts, (int,), "range")
    d.stack.append(range(*parts))


def _b_slice(d: _Decoder, args: tuple[Any, ...]) -> None:
    _arity(args, 1, 3, "slice")
    parts = d.values(args)
    _types_are(parts, (int, type(None)), "slice")
    d.stack.append(slice(*parts))


def _b_type(d: _Decoder, args: tuple[Any, ...]) -> None:
    _arity(args, 1, 1, "type")
    value = d.value(args[0])
    if value is not None and value is not Ellipsis and value is not NotImplemented:
        raise Tampered("the pickle calls builtins.type other than on None, ... or NotImplemented")
    d.stack.append(type(value))


def _b_getattr(d: _Decoder, args: tuple[Any, ...]) -> None:
    _arity(args, 2, 2, "getattr")
    owner, name = d.as_ref(args[0]), args[1]
    if owner is None or owner.kind not in ("class", "trusted") or type(name) is not str:
        raise Tampered("the pickle calls getattr other than on an admitted class, by name")
    cls = typing.cast(type, owner.obj)
    if isinstance(cls, enum.EnumMeta):
        members: Any = cls.__members__
        if name not in members:
            raise Damaged(f"enum '{owner.key}' has no member {name!r}", owner.key)
        d.stack.append(members[name])
        return
    found = vars(cls).get(name, _MISSING)
    if found is _MISSING:
        raise Blocked(f"it has no nested class {name!r}", owner.key)
    d.stack.append(d.judge(f"{cls.__module__}:{cls.__qualname__}.{name}", found))


def _b_datetime(kind: type, size: int, tz: bool) -> Builder:
    def build(d: _Decoder, args: tuple[Any, ...]) -> None:
        _arity(args, 1, 2 if tz else 1, kind.__name__)
        parts = d.values(args)
        if type(parts[0]) is not bytes or len(parts[0]) != size:
            raise Tampered(f"the pickle builds {kind.__name__} from other than its state bytes")
        if len(parts) == 2 and not isinstance(parts[1], _TZINFO_OK):
            raise Tampered(f"the pickle builds {kind.__name__} with a tzinfo that is none")
        d.stack.append(kind(*parts))

    return build


def _b_timedelta(d: _Decoder, args: tuple[Any, ...]) -> None:
    _arity(args, 0, 3, "timedelta")
    parts = d.values(args)
    _types_are(parts, (int,), "timedelta")
    d.stack.append(datetime.timedelta(*parts))


def _b_timezone(d: _Decoder, args: tuple[Any, ...]) -> None:
    _arity(args, 1, 2, "timezone")
    parts = d.values(args)
    if type(parts[0]) is not datetime.timedelta or (len(parts) == 2 and type(parts[1]) is not str):
        raise Tampered("the pickle builds a timezone from other than an offset and a name")
    d.stack.append(datetime.timezone(*parts))


def _b_decimal(d: _Decoder, args: tuple[Any, ...]) -> None:
    _arity(args, 1, 1, "Decimal")
    text = d.value(args[0])
    if type(text) is not str:
        raise Tampered("the pickle builds a Decimal from other than its text")
    d.charge(len(text))
    d.stack.append(decimal.Decimal(text))


def _b_ordered_dict(d: _Decoder, args: tuple[Any, ...]) -> None:
    _arity(args, 0, 0, "OrderedDict")
    d.push_new(collections.OrderedDict())


def _b_defaultdict(d: _Decoder, args: tuple[Any, ...]) -> None:
    _arity(args, 0, 1, "defaultdict")
    factory = args[0] if args else None
    if factory is not None and not (isinstance(factory, type) and factory in _FACTORIES):
        raise Tampered("the pickle builds a defaultdict whose factory is not a built-in type")
    d.push_new(collections.defaultdict(factory))


def _b_deque(d: _Decoder, args: tuple[Any, ...]) -> None:
    _arity(args, 0, 2, "deque")
    parts = d.values(args)
    if parts and type(parts[0]) not in (list, tuple):
        raise Tampered("the pickle builds a deque from other than a list")
    if len(parts) == 2 and not (parts[1] is None or (type(parts[1]) is int and parts[1] >= 0)):
        raise Tampered("the pickle builds a deque with a maxlen that is no size")
    d.charge(_ITEM * len(parts[0]) if parts else 0)
    d.push_new(collections.deque(*parts))


def _b_counter(d: _Decoder, args: tuple[Any, ...]) -> None:
    _arity(args, 0, 1, "Counter")
    parts = d.values(args)
    _types_are(parts, (dict,), "Counter")
    d.charge(_ITEM * len(parts[0]) if parts else 0)
    made: collections.Counter[Any] = collections.Counter()
    if parts:
        dict.update(made, parts[0])
    d.push_new(made)


def _b_reconstructor(d: _Decoder, args: tuple[Any, ...]) -> None:
    _arity(args, 3, 3, "copyreg._reconstructor")
    cls, base, state = args
    if base is not object or state is not None:
        raise Tampered("the pickle calls copyreg._reconstructor with a base other than object")
    d.new_instance(cls, (), {}, "copyreg._reconstructor")


def _b_newobj(d: _Decoder, args: tuple[Any, ...]) -> None:
    _arity(args, 1, 1 << 30, "copyreg.__newobj__")
    d.new_instance(args[0], args[1:], {}, "copyreg.__newobj__")


def _b_newobj_ex(d: _Decoder, args: tuple[Any, ...]) -> None:
    _arity(args, 3, 3, "copyreg.__newobj_ex__")
    d.new_instance(args[0], args[1], args[2], "copyreg.__newobj_ex__")


_BUILDERS: Final[dict[str, Builder]] = {
    "builtins:set": _b_set(set),
    "builtins:frozenset": _b_set(frozenset),
    "builtins:bytes": _b_bytes,
    "builtins:bytearray": _b_bytearray,
    "_codecs:encode": _b_codecs_encode,
    "builtins:complex": _b_complex,
    "builtins:range": _b_range,
    "builtins:slice": _b_slice,
    "builtins:type": _b_type,
    "builtins:getattr": _b_getattr,
    "datetime:datetime": _b_datetime(datetime.datetime, 10, True),
    "datetime:date": _b_datetime(datetime.date, 4, False),
    "datetime:time": _b_datetime(datetime.time, 6, True),
    "datetime:timedelta": _b_timedelta,
    "datetime:timezone": _b_timezone,
    "decimal:Decimal": _b_decimal,
    "collections:OrderedDict": _b_ordered_dict,
    "collections:defaultdict": _b_defaultdict,
    "collections:deque": _b_deque,
    "collections:Counter": _b_counter,
    "copyreg:_reconstructor": _b_reconstructor,
    "copyreg:__newobj__": _b_newobj,
    "copyreg:__newobj_ex__": _b_newobj_ex,
}
