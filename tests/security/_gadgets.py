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
