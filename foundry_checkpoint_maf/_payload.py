"""Checkpoint <-> payload bytes, and the restricted decoder.

A checkpoint is stored as one compact JSON document: MAF's own encoding
(``encode_checkpoint_value(checkpoint.to_dict())``: JSON for plain values, pickle envelopes
for everything else) dumped with sorted keys and compact separators. Those bytes are exactly
what Foundry hosting hashes to pin a checkpoint to a response, so the sha256 of the stored
payload is the integrity hash ``load_with_hash`` returns.

Decoding never calls MAF's own decoder. MAF's restricted unpickler admits any attribute of an
``agent_framework.*`` module, including names such a module merely imported, so a tampered
item could make it construct a class that evaluates a string. :func:`decode_payload` walks
the same envelope format with a stricter unpickler of its own (see :class:`_SafeUnpickler`):
every global it resolves must be *defined* in the module the pickle names (no re-exported
names), must be a class (functions only from a fixed set), and is checked against the
allow-list before anything is constructed; and only value types, enums and allowed classes may
be *called* with arguments (:func:`_check_calls` reads the opcodes first). Whatever fails is
a :class:`CheckpointDecodeError` (both a ``WorkflowCheckpointException`` and a
``CorruptPayloadError``).

Example:
    >>> from agent_framework import WorkflowCheckpoint
    >>> cp = WorkflowCheckpoint(workflow_name="wf", graph_signature_hash="h", state={"n": 1})
    >>> payload = encode_payload(cp)
    >>> decode_payload(payload, allowed=frozenset(), checkpoint_id=cp.checkpoint_id).state
    {'n': 1}
    >>> type_keys([dict, "my_app.models:MyState"]) == frozenset(
    ...     {"builtins:dict", "my_app.models:MyState"})
    True
"""

from __future__ import annotations

import _compat_pickle
import base64
import binascii
import copyreg
import functools
import hashlib
import importlib
import io
import json
import pickle  # nosec: only through _SafeUnpickler, which admits an allow-list of classes
import pickletools
import sys
from collections.abc import Iterable
from enum import EnumMeta
from typing import Any, Final, cast

from agent_framework import WorkflowCheckpoint, WorkflowCheckpointException
from agent_framework._workflows import _checkpoint_encoding as _maf_encoding

from foundry_checkpoint.errors import CorruptPayloadError, InvalidArgumentError

__all__ = [
    "AllowedTypeEntryError",
    "CheckpointDecodeError",
    "CheckpointRefusedError",
    "check_value",
    "decode_payload",
    "encode_document",
    "encode_payload",
    "payload_hash",
    "type_keys",
    "verify_document",
]


def _encode_value(value: Any) -> Any:
    """MAF's own encoding of ``value`` (JSON for plain values, pickle envelopes for the rest).

    This module is the package's only user of MAF's private ``_checkpoint_encoding`` module:
    MAF's encoder and its ``register_checkpoint_type`` registrations are read here, nowhere else.
    """
    return _maf_encoding.encode_checkpoint_value(value)


def _admitted(allowed: frozenset[str]) -> frozenset[str]:
    """``allowed`` plus the types registered with MAF's ``register_checkpoint_type``."""
    return allowed | frozenset(_maf_encoding._REGISTERED_CHECKPOINT_TYPE_KEYS)


class AllowedTypeEntryError(InvalidArgumentError, TypeError):
    """An ``allowed_checkpoint_types`` entry that is neither a class nor a string.

    An :class:`~foundry_checkpoint.errors.InvalidArgumentError`, and still a ``TypeError`` (what
    this case raised before), so either ``except`` keeps catching it.

    Example:
        >>> issubclass(AllowedTypeEntryError, TypeError)
        True
    """


def type_keys(types: Iterable[type | str] | None) -> frozenset[str]:
    """The ``"module:qualname"`` keys of ``types`` (classes or such strings).

    Raises:
        InvalidArgumentError: a string entry is not ``"module:qualname"`` (also a
            ``ValueError``).
        AllowedTypeEntryError: an entry is neither a class nor a string (an
            ``InvalidArgumentError`` that is also a ``TypeError``).

    Example:
        >>> sorted(type_keys([int, "my_app.models:MyState"]))
        ['builtins:int', 'my_app.models:MyState']
    """
    if types is None:
        return frozenset()
    if isinstance(types, (str, type)):
        types = [types]
    keys: set[str] = set()
    for item in types:
        if isinstance(item, type):
            keys.add(f"{item.__module__}:{item.__qualname__}")
        elif isinstance(item, str):
            module, sep, qualname = item.partition(":")
            if not sep or not module or not qualname:
                raise InvalidArgumentError(
                    f"allowed_checkpoint_types entry {item!r} must be 'module:qualname', "
                    "for example 'my_app.models:MyState', or the class itself"
                )
            keys.add(item)
        else:
            raise AllowedTypeEntryError(
                "allowed_checkpoint_types entries must be classes or 'module:qualname' strings, "
                f"got {type(item).__name__}: {item!r}"
            )
    return frozenset(keys)


def encode_document(checkpoint: WorkflowCheckpoint) -> tuple[dict[str, Any], bytes]:
    """MAF's encoding of ``checkpoint`` and the stored bytes it dumps to (a snapshot: nothing
    refers back to the object).

    The encoding holds only what JSON round-trips (string keys, JSON scalars, lists and pickle
    envelopes), so :func:`verify_document` on it answers what :func:`decode_payload` on the
    bytes would, without parsing them again.

    Example:
        >>> from agent_framework import WorkflowCheckpoint
        >>> cp = WorkflowCheckpoint(workflow_name="wf", graph_signature_hash="h")
        >>> encoded, payload = encode_document(cp)
        >>> payload == encode_payload(cp), encoded["workflow_name"]
        (True, 'wf')
    """
    encoded = _encode_value(checkpoint.to_dict())
    text = json.dumps(encoded, sort_keys=True, separators=(",", ":"))
    return encoded, text.encode("utf-8")


def encode_payload(checkpoint: WorkflowCheckpoint) -> bytes:
    """The stored bytes of ``checkpoint`` (a snapshot: nothing refers back to the object)."""
    return encode_document(checkpoint)[1]


def payload_hash(payload: bytes) -> str:
    """The sha256 (hex) of a stored payload: Foundry hosting's checkpoint integrity hash."""
    return hashlib.sha256(payload).hexdigest()


class CheckpointDecodeError(WorkflowCheckpointException, CorruptPayloadError):
    """A stored checkpoint cannot be decoded safely: damaged, or holding a refused type.

    Both a ``WorkflowCheckpointException`` (what MAF's ``CheckpointStorage`` contract raises)
    and a :class:`~foundry_checkpoint.errors.CorruptPayloadError`. Raised before any refused
    class is called.

    Example:
        >>> issubclass(CheckpointDecodeError, CorruptPayloadError)
        True
    """


class CheckpointRefusedError(CheckpointDecodeError):
    """A stored checkpoint holds a pickle no encoder writes; nothing in it was run.

    A re-exported name (the class is defined elsewhere), a global that is not a class, a class
    derived from a callable wrapper or a string evaluator: signs of tampering, so listings raise
    it instead of skipping the checkpoint. A class that is merely outside the allow-list is a
    plain :class:`CheckpointDecodeError`.
    """


_PICKLE_MARKER: Final = "__pickled__"
_TYPE_MARKER: Final = "__type__"
_MAX_DEPTH: Final = 200
# Classes admitted by prefix: only where they are *defined*, never where they are re-exported.
_FRAMEWORK_PREFIXES: Final = (
    "agent_framework.",
    "agent_framework_orchestrations.",
    "openai.types.",
)
# Plain value types (what pickle names for primitives, dates, ids and collections).
_VALUE_TYPE_KEYS: Final = frozenset(
    {
        "builtins:object",
        "builtins:complex",
        "builtins:range",
        "builtins:slice",
        "builtins:int",
        "builtins:float",
        "builtins:str",
        "builtins:bytes",
        "builtins:bytearray",
        "builtins:bool",
        "builtins:set",
        "builtins:frozenset",
        "builtins:list",
        "builtins:dict",
        "builtins:tuple",
        "datetime:datetime",
        "datetime:date",
        "datetime:time",
        "datetime:timedelta",
        "datetime:timezone",
        "uuid:UUID",
        "decimal:Decimal",
        "collections:OrderedDict",
        "collections:defaultdict",
        "collections:deque",
        "collections:Counter",
    }
)
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


def _key_of(cls: type) -> str:
    return f"{cls.__module__}:{cls.__qualname__}"


def _py3_name(module: str, name: str) -> tuple[str, str]:
    """The Python 3 name of a global an old-protocol pickle names (``copy_reg``...)."""
    if (module, name) in _compat_pickle.NAME_MAPPING:
        return _compat_pickle.NAME_MAPPING[(module, name)]
    return _compat_pickle.IMPORT_MAPPING.get(module, module), name


class _Tampered(pickle.UnpicklingError):
    """A pickle no encoder writes: a re-exported name, a function, a refused base class."""


def _type_of(*args: Any) -> type:
    """``builtins.type`` as pickle calls it (``type(None)``): one argument, never a new class."""
    if len(args) != 1:
        raise _Tampered("builtins.type may only be called with one argument here")
    return type(args[0])


# Keys a _SafeUnpickler admitted, per allow-list, with the class each resolved to. A hit counts
# only while the module still binds that name to that very class; only admitted keys are kept.
_ADMITTED: dict[tuple[frozenset[str], str], type] = {}
_MAX_ADMITTED: Final = 4096


@functools.lru_cache(maxsize=64)
def _modules_of(allowed: frozenset[str]) -> frozenset[str]:
    return frozenset(k.partition(":")[0] for k in allowed)


class _SafeUnpickler(pickle.Unpickler):
    """An unpickler that resolves only admitted classes, judged by where they are defined.

    A global ``module:name`` is admitted when ``name`` has no dot (nested classes are reached
    through the checked ``getattr``), the module is already admitted by name (so no other
    module is imported), the object found there is a class whose own ``__module__`` and
    ``__qualname__`` are exactly that ``module:name`` (a re-exported name is refused), the key
    is a plain value type, in ``allowed`` (the storage's and MAF's registrations), or the
    module lies under an ``agent_framework`` or ``openai.types`` prefix, and no base class is a
    callable wrapper or a string evaluator. The only functions it hands out are
    ``copyreg._reconstructor``, a one-argument ``type`` and a ``getattr`` limited to nested
    admitted classes and enum members.
    """

    def __init__(self, data: bytes, allowed: frozenset[str]) -> None:
        super().__init__(io.BytesIO(data))
        self._allowed = allowed
        self._allowed_modules = _modules_of(allowed)

    def _module_admitted(self, module: str) -> bool:
        return (
            module in self._allowed_modules
            or module.startswith(_FRAMEWORK_PREFIXES)
            or any(k.startswith(f"{module}:") for k in _VALUE_TYPE_KEYS)
        )

    def _class_admitted(self, cls: type) -> bool:
        key = _key_of(cls)
        return (
            key in _VALUE_TYPE_KEYS
            or key in self._allowed
            or cls.__module__.startswith(_FRAMEWORK_PREFIXES)
        ) and not any(_key_of(base) in _REFUSED_BASE_KEYS for base in cls.__mro__)

    def find_class(self, module: str, name: str) -> Any:
        module, name = _py3_name(module, name)
        key = f"{module}:{name}"
        if key in ("builtins:getattr", "__builtin__:getattr"):
            return self._getattr
        if key == "builtins:type":
            return _type_of
        if key == "copyreg:_reconstructor":
            return copyreg._reconstructor  # type: ignore[attr-defined]
        if "." in name:
            raise _Tampered(f"global {key!r} is a dotted name, which checkpoints never hold")
        memo_key = (self._allowed, key)
        admitted = _ADMITTED.get(memo_key)
        loaded = sys.modules.get(module)
        if admitted is not None and loaded is not None and vars(loaded).get(name) is admitted:
            return admitted  # the very class this key resolved to and passed every check
        found = self._resolve(module, name, key, loaded)
        if len(_ADMITTED) >= _MAX_ADMITTED:
            _ADMITTED.clear()
        _ADMITTED[memo_key] = found
        return found

    def _resolve(self, module: str, name: str, key: str, loaded: Any) -> type:
        """The class ``key`` names, once every check of :meth:`find_class` has passed."""
        if loaded is None and self._module_admitted(module):
            try:
                loaded = importlib.import_module(module)
            except ImportError as exc:
                raise pickle.UnpicklingError(f"module of {key!r} cannot be imported") from exc
        if loaded is None:
            raise pickle.UnpicklingError(f"class {key!r} is not an allowed checkpoint type")
        found = vars(loaded).get(name)
        if not isinstance(found, type):
            raise _Tampered(f"global {key!r} is not a class")
        if _key_of(found) != key:
            raise _Tampered(f"global {key!r} is {_key_of(found)!r}, re-exported by {module!r}")
        if any(_key_of(base) in _REFUSED_BASE_KEYS for base in found.__mro__):
            raise _Tampered(f"class {key!r} is a callable wrapper or evaluates strings")
        if not self._class_admitted(found):
            raise pickle.UnpicklingError(f"class {key!r} is not an allowed checkpoint type")
        return found

    def _getattr(self, owner: Any, name: Any) -> Any:
        if not isinstance(owner, type) or not isinstance(name, str):
            raise _Tampered("getattr is allowed only on classes, with a name")
        if isinstance(owner, EnumMeta) and name in owner.__members__:
            return owner.__members__[name]
        found = vars(owner).get(name)
        if (
            isinstance(found, type)
            and found.__qualname__ == f"{owner.__qualname__}.{name}"
            and found.__module__ == owner.__module__
            and self._class_admitted(found)
        ):
            return found
        raise _Tampered(f"attribute {name!r} of {_key_of(owner)!r} is not an allowed class")


_MARK: Final = object()
_STRING_OPS: Final = frozenset(
    {"STRING", "BINSTRING", "SHORT_BINSTRING", "UNICODE", "BINUNICODE", "SHORT_BINUNICODE",
     "BINUNICODE8"}
)  # fmt: skip
_GET_OPS: Final = frozenset({"GET", "BINGET", "LONG_BINGET"})
_PUT_OPS: Final = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})
# Called with arguments by the encoders' own pickles (dates, decimals, enum members by value,
# object reconstruction); anything else is only ever constructed through ``cls.__new__``.
_CALLABLE_KEYS: Final = _VALUE_TYPE_KEYS | {
    "builtins:getattr",
    "__builtin__:getattr",
    "builtins:type",
    "copyreg:_reconstructor",
}


# What each opcode does to the stack, computed once from pickletools' own descriptions:
# (kind, slots popped below a mark or all of them, pushes, whether it pops to a mark).
_OP_MARK, _OP_STRING, _OP_GLOBAL, _OP_STACK_GLOBAL = 1, 2, 3, 4
_OP_PUT, _OP_MEMOIZE, _OP_GET, _OP_DUP, _OP_REDUCE, _OP_OBJ, _OP_INST, _OP_OTHER = range(5, 13)
_OP_KINDS: Final = {
    "MARK": _OP_MARK,
    "GLOBAL": _OP_GLOBAL,
    "STACK_GLOBAL": _OP_STACK_GLOBAL,
    "MEMOIZE": _OP_MEMOIZE,
    "DUP": _OP_DUP,
    "REDUCE": _OP_REDUCE,
    "OBJ": _OP_OBJ,
    "INST": _OP_INST,
    **dict.fromkeys(_STRING_OPS, _OP_STRING),
    **dict.fromkeys(_PUT_OPS, _OP_PUT),
    **dict.fromkeys(_GET_OPS, _OP_GET),
}


def _op_effect(op: pickletools.OpcodeInfo) -> tuple[int, int, int, bool]:
    before = op.stack_before
    to_mark = pickletools.markobject in before
    if to_mark:
        before = before[: before.index(pickletools.markobject)]
    return _OP_KINDS.get(op.name, _OP_OTHER), len(before), len(op.stack_after), to_mark


_OP_EFFECTS: Final = {op.name: _op_effect(op) for op in pickletools.opcodes}


def _check_calls(raw: bytes, unpickler: _SafeUnpickler) -> None:
    """Refuse a pickle that *calls* a class other than a value type, an enum or an allowed one.

    Pickles of framework classes (dataclasses, models) build them with ``cls.__new__`` and set
    their state; only value types, enums and reconstruction helpers are called with arguments,
    plus classes of the caller's allow-list (which may define ``__reduce__``). This walks the
    opcodes without running anything, tracking which global each stack slot holds, so a stored
    pickle cannot call a framework class's constructor (which may have side effects) either.
    """
    stack: list[object] = []
    memo: dict[int, object] = {}

    def pop_to_mark() -> list[object]:
        items: list[object] = []
        while stack and stack[-1] is not _MARK:
            items.append(stack.pop())
        if not stack:
            raise _Tampered("a pickle pops past its stack")
        stack.pop()
        return items[::-1]

    def check_call(target: object) -> None:
        if not (isinstance(target, tuple) and target[0] == "global"):
            raise _Tampered("a pickle calls something that is not a named class")
        module, name = _py3_name(*str(target[1]).split(":", 1))
        key = f"{module}:{name}"
        if key in _CALLABLE_KEYS or key in unpickler._allowed:
            return
        found = unpickler.find_class(module, name)  # validates, and refuses, as the load would
        if not isinstance(found, EnumMeta):
            raise _Tampered(f"a pickle calls {key!r}, which encoders only build with __new__")

    effects = _OP_EFFECTS
    for op, arg, _pos in pickletools.genops(raw):
        kind, popped, pushed, to_mark = effects[op.name]
        if kind == _OP_STRING:
            stack.append(("str", arg))
        elif kind == _OP_MEMOIZE:
            memo[len(memo)] = stack[-1] if stack else None
        elif kind == _OP_OTHER:  # generic stack effect, values unknown
            if to_mark:
                pop_to_mark()
            if popped > len(stack):
                raise _Tampered("a pickle pops past its stack")
            if popped:
                del stack[-popped:]
            if pushed:
                stack.extend([None] * pushed)
        elif kind == _OP_MARK:
            stack.append(_MARK)
        elif kind == _OP_GLOBAL:
            stack.append(("global", str(arg).replace(" ", ":", 1)))
        elif kind == _OP_STACK_GLOBAL:
            qual, mod = stack.pop() if stack else None, stack.pop() if stack else None
            ok = isinstance(qual, tuple) and isinstance(mod, tuple) and qual[0] == mod[0] == "str"
            stack.append(("global", f"{mod[1]}:{qual[1]}") if ok else None)  # type: ignore[index]
        elif kind == _OP_PUT:
            memo[cast(int, arg)] = stack[-1] if stack else None
        elif kind == _OP_GET:
            stack.append(memo.get(cast(int, arg)))
        elif kind == _OP_DUP:
            stack.append(stack[-1] if stack else None)
        elif kind == _OP_REDUCE:
            stack.pop()
            check_call(stack.pop() if stack else None)
            stack.append(None)
        elif kind == _OP_OBJ:
            items = pop_to_mark()
            check_call(items[0] if items else None)
            stack.append(None)
        else:  # INST
            pop_to_mark()
            check_call(("global", str(arg).replace(" ", ":", 1)))
            stack.append(None)


def _unpickle(envelope: dict[str, Any], allowed: frozenset[str]) -> Any:
    data, expected = envelope[_PICKLE_MARKER], envelope[_TYPE_MARKER]
    if not isinstance(data, str) or not isinstance(expected, str):
        raise CorruptPayloadError("a pickle envelope holds non-string fields")
    try:
        raw = base64.b64decode(data.encode("ascii"), validate=True)
    except (UnicodeEncodeError, binascii.Error) as exc:
        raise CorruptPayloadError(f"a pickle envelope is not base64: {exc}") from exc
    unpickler = _SafeUnpickler(raw, allowed)
    _check_calls(raw, unpickler)
    value = unpickler.load()
    if _key_of(type(value)) != expected:
        raise CorruptPayloadError(
            f"a pickle envelope records type {expected!r} but holds {_key_of(type(value))!r}"
        )
    return value


# Pickle envelopes that passed the full check (walked and unpickled) while a save verified its
# checkpoint, by (admitted types, recorded type, sha256 of the data). A later save holding the
# very same envelope (state or history that did not change since the last superstep) is not
# walked and unpickled again. Only passes are kept; loads never consult it.
_VERIFIED: dict[tuple[frozenset[str], str, bytes], None] = {}
_MAX_VERIFIED: Final = 4096


def _verify_envelope(envelope: dict[str, Any], allowed: frozenset[str]) -> Any:
    """:func:`_unpickle` for a save's check: None (not the value) for an envelope already
    checked under ``allowed``."""
    data, expected = envelope[_PICKLE_MARKER], envelope[_TYPE_MARKER]
    if not isinstance(data, str) or not isinstance(expected, str) or not data.isascii():
        return _unpickle(envelope, allowed)  # raises as a load would
    key = (allowed, expected, hashlib.sha256(data.encode("ascii")).digest())
    if key in _VERIFIED:
        return None
    value = _unpickle(envelope, allowed)
    if len(_VERIFIED) >= _MAX_VERIFIED:
        _VERIFIED.clear()
    _VERIFIED[key] = None
    return value


def _decode_value(
    value: Any, allowed: frozenset[str], depth: int = 0, *, verifying: bool = False
) -> Any:
    if depth > _MAX_DEPTH:
        raise CorruptPayloadError(f"values are nested more than {_MAX_DEPTH} levels deep")
    if isinstance(value, dict):
        if _PICKLE_MARKER in value and _TYPE_MARKER in value:
            if verifying:
                return _verify_envelope(value, allowed)
            return _unpickle(value, allowed)
        return {
            k: _decode_value(v, allowed, depth + 1, verifying=verifying) for k, v in value.items()
        }
    if isinstance(value, list):
        return [_decode_value(v, allowed, depth + 1, verifying=verifying) for v in value]
    return value


def check_value(value: object, allowed: frozenset[str]) -> None:
    """Raise :class:`CheckpointDecodeError` unless ``value`` would decode under ``allowed``.

    Example:
        >>> check_value({"n": 1}, frozenset())
    """
    try:
        _decode_value(_encode_value(value), _admitted(allowed))
    except Exception as exc:
        raise CheckpointDecodeError(
            f"A {type(value).__name__} value would not be restored from a checkpoint: {exc}. "
            "If the type is yours and trusted, pass it in allowed_checkpoint_types=[...]."
        ) from exc


def decode_payload(
    payload: bytes, *, allowed: frozenset[str], checkpoint_id: str
) -> WorkflowCheckpoint:
    """A new :class:`WorkflowCheckpoint` from stored bytes, through :class:`_SafeUnpickler`.

    ``allowed`` adds ``"module:qualname"`` keys to the admitted classes (as do MAF's
    ``register_checkpoint_type`` registrations). Raises :class:`CheckpointDecodeError` naming
    ``checkpoint_id`` when the bytes are not a checkpoint, hold a class that is not admitted
    (before it is called), or belong to another checkpoint id.
    """
    try:
        encoded: Any = json.loads(payload.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise CheckpointDecodeError(
            f"Checkpoint {checkpoint_id!r} is stored in an unreadable form (not UTF-8 JSON "
            f"of a sane depth): {type(exc).__name__}"
        ) from exc
    return _checkpoint_from(encoded, allowed, checkpoint_id, verifying=False)


def verify_document(encoded: Any, *, allowed: frozenset[str], checkpoint_id: str) -> None:
    """Raise what :func:`decode_payload` would raise on the bytes :func:`encode_document`
    dumps ``encoded`` to; nothing when they decode.

    The encoding holds only what JSON round-trips, so it is checked as it is, without dumping
    and parsing it again. A pickle envelope that already passed under the same allowed types
    (on an earlier save in this process) is not walked and unpickled again.

    Example:
        >>> from agent_framework import WorkflowCheckpoint
        >>> cp = WorkflowCheckpoint(workflow_name="wf", graph_signature_hash="h", state={"n": 1})
        >>> encoded, _ = encode_document(cp)
        >>> verify_document(encoded, allowed=frozenset(), checkpoint_id=cp.checkpoint_id)
        >>> verify_document(encoded, allowed=frozenset(), checkpoint_id="another")
        Traceback (most recent call last):
        ...
        foundry_checkpoint_maf._payload.CheckpointDecodeError: Checkpoint 'another' holds ...
    """
    _checkpoint_from(encoded, allowed, checkpoint_id, verifying=True)


def _checkpoint_from(
    encoded: Any, allowed: frozenset[str], checkpoint_id: str, *, verifying: bool
) -> WorkflowCheckpoint:
    try:
        decoded = _decode_value(encoded, _admitted(allowed), verifying=verifying)
    except _Tampered as exc:
        raise CheckpointRefusedError(
            f"Checkpoint {checkpoint_id!r} was refused, nothing in it was run: {exc}. The item "
            "was written outside this storage; restore it from a trusted copy or delete it."
        ) from exc
    except pickle.UnpicklingError as exc:
        raise CheckpointDecodeError(
            f"Checkpoint {checkpoint_id!r} was refused: {exc}. If the type is yours and trusted, "
            "pass it in allowed_checkpoint_types=[...] or register it with "
            "agent_framework.register_checkpoint_type()."
        ) from exc
    except Exception as exc:  # a damaged envelope can fail in many ways inside pickle
        raise CheckpointDecodeError(
            f"Checkpoint {checkpoint_id!r} cannot be decoded: {type(exc).__name__}: {exc}"
        ) from exc
    if not isinstance(decoded, dict):
        raise CheckpointDecodeError(
            f"Checkpoint {checkpoint_id!r} is stored as {type(decoded).__name__}, not a checkpoint"
        )
    try:
        checkpoint = WorkflowCheckpoint.from_dict(decoded)
    except Exception as exc:
        raise CheckpointDecodeError(
            f"Checkpoint {checkpoint_id!r} is not a checkpoint record: {type(exc).__name__}: {exc}"
        ) from exc
    if checkpoint.checkpoint_id != checkpoint_id:
        raise CheckpointDecodeError(
            f"Checkpoint {checkpoint_id!r} holds checkpoint {checkpoint.checkpoint_id!r}; "
            "the item was changed outside this storage"
        )
    return checkpoint
