"""Payloads an attacker with write access to the store could plant, each touching a marker file.

They exist to prove the readers refuse them; nothing here is used outside the tamper tests.
"""

from __future__ import annotations

import base64
from pathlib import Path


def touch_expression(marker: Path) -> str:
    """A Python expression that creates ``marker`` (no newline, no backslash)."""
    text = str(marker)
    assert "\n" not in text and "\\" not in text
    return f"__import__('pathlib').Path({text!r}).touch()"


def type_adapter_pickle(marker: Path, module: str = "agent_framework._tools") -> bytes:
    """``TypeAdapter("<expr> or int")`` reached through ``module``, which only imports it."""
    expression = f"{touch_expression(marker)} or int"
    return (
        f"c{module}\nTypeAdapter\n(V".encode() + expression.encode("raw_unicode_escape") + b"\ntR."
    )


def global_call_pickle(module: str, name: str, *args: str) -> bytes:
    """``module.name(*args)`` as a protocol-0 pickle."""
    out = f"c{module}\n{name}\n(".encode()
    for arg in args:
        out += b"V" + arg.encode("raw_unicode_escape") + b"\n"
    return out + b"tR."


def pickle_envelope(data: bytes, type_key: str = "builtins:int") -> dict[str, str]:
    """MAF's JSON envelope of a pickled value."""
    return {"__pickled__": base64.b64encode(data).decode("ascii"), "__type__": type_key}


def msgpack_ext(code: int, *fields: object) -> bytes:
    """A msgpack document that is one LangGraph extension ``code`` holding ``fields``."""
    import ormsgpack

    return ormsgpack.packb(ormsgpack.Ext(code, ormsgpack.packb(list(fields))))


def langgraph_gadgets(marker: Path) -> dict[str, tuple[str, bytes]]:
    """Typed values (``(type, bytes)``, as ``serde.dumps_typed`` returns) that touch ``marker``."""

    import ormsgpack
    from langgraph.checkpoint.serde.jsonplus import (
        EXT_CONSTRUCTOR_KW_ARGS,
        EXT_CONSTRUCTOR_POS_ARGS,
        EXT_CONSTRUCTOR_SINGLE_ARG,
        EXT_PYDANTIC_V2,
    )

    cmd = f"touch {marker}"
    inner = ormsgpack.Ext(EXT_CONSTRUCTOR_POS_ARGS, ormsgpack.packb(["os", "system", [cmd]]))
    nested = ormsgpack.packb({"ok": [1, {"deep": ormsgpack.Ext(
        EXT_CONSTRUCTOR_SINGLE_ARG, ormsgpack.packb(["uuid", "UUID", inner])
    )}]})  # fmt: skip
    return {
        "os_system": ("msgpack", msgpack_ext(EXT_CONSTRUCTOR_POS_ARGS, "os", "system", [cmd])),
        "eval": (
            "msgpack",
            msgpack_ext(EXT_CONSTRUCTOR_SINGLE_ARG, "builtins", "eval", touch_expression(marker)),
        ),
        "subprocess_pos": (
            "msgpack",
            msgpack_ext(EXT_CONSTRUCTOR_POS_ARGS, "subprocess", "call", [["touch", str(marker)]]),
        ),
        "subprocess_kw": (
            "msgpack",
            msgpack_ext(
                EXT_CONSTRUCTOR_KW_ARGS, "subprocess", "run", {"args": ["touch", str(marker)]}
            ),
        ),
        "pydantic_v2": (
            "msgpack",
            msgpack_ext(EXT_PYDANTIC_V2, "subprocess", "run", {"args": ["touch", str(marker)]}),
        ),
        "nested": ("msgpack", nested),
        "pickle": ("pickle", global_call_pickle("os", "system", cmd)),
    }


class Planted:
    """A value the attacker's serializer writes as ``typed`` verbatim."""

    def __init__(self, typed: tuple[str, bytes]) -> None:
        self.typed = typed


def attacker_serde() -> object:
    """A serializer that writes :class:`Planted` values verbatim and anything else as usual."""
    from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer

    class _Attacker(JsonPlusSerializer):
        def dumps_typed(self, obj: object) -> tuple[str, bytes]:
            if isinstance(obj, Planted):
                return obj.typed
            return super().dumps_typed(obj)

    return _Attacker()


# -- MAF: gadgets of a pickle that reaches a metaclass, a constructor or a class ----------------
def _op_str(text: str) -> bytes:
    data = text.encode("utf-8")
    return b"X" + len(data).to_bytes(4, "little") + data


def _op_global(module: str, name: str) -> bytes:
    return f"c{module}\n{name}\n".encode()


def metaclass_pickle(
    marker: Path, model: str = "agent_framework.security:InspectVariableInput"
) -> bytes:
    """``type(<pydantic model>)`` is ``ModelMetaclass``; a NEWOBJ on it makes a model class whose
    string annotation pydantic evaluates (creating ``marker``)."""
    module, _, name = model.partition(":")
    annotation = f"{touch_expression(marker)} or int"
    return (
        b"\x80\x04"
        + _op_global("builtins", "type")
        + _op_global(module, name)
        + b"\x85R"  # TUPLE1, REDUCE: type(model) -> ModelMetaclass
        + _op_str("Planted")
        + _op_global(module, name)
        + b"\x85"  # bases: (model,)
        + b"}"  # the class body: {"__annotations__": {"x": annotation}, "__module__": module}
        + _op_str("__annotations__")
        + b"}"
        + _op_str("x")
        + _op_str(annotation)
        + b"ss"
        + _op_str("__module__")
        + _op_str(module)
        + b"s"
        + b"\x87\x81."  # TUPLE3, NEWOBJ: ModelMetaclass.__new__(mcs, name, bases, namespace)
    )


def reconstructor_pickle(directory: Path, cls: str) -> bytes:
    """``copyreg._reconstructor(cls, cls, str(directory))``: pickle then runs
    ``cls.__init__(obj, str(directory))`` (MAF's ``FileCheckpointStorage`` makes the folder)."""
    module, _, name = cls.partition(":")
    return (
        b"\x80\x02"
        + _op_global("copyreg", "_reconstructor")
        + _op_global(module, name)
        + _op_global(module, name)
        + _op_str(str(directory))
        + b"\x87R."  # TUPLE3, REDUCE
    )


def build_on_class_pickle(cls: str, attribute: str, value: str, *, slots: bool = False) -> bytes:
    """``BUILD`` applied to a class (pickle then sets ``cls.attribute = value`` for the whole
    process), followed by an innocent ``{'n': 1}`` as the decoded value."""
    module, _, name = cls.partition(":")
    state = b"}" + _op_str(attribute) + _op_str(value) + b"s"
    if slots:
        state = b"N" + state + b"\x86"  # (None, {attribute: value}): the slot-state form
    return b"\x80\x04" + _op_global(module, name) + state + b"b0" + b"}" + _op_str("n") + b"K\x01s."


def memo_index_pickle(index: int) -> bytes:
    """A 9-byte pickle storing a list at memo ``index`` (C pickle sizes its memo to it)."""
    return b"\x80\x04]" + b"r" + index.to_bytes(4, "little") + b"."
