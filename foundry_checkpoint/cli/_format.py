"""Turning checkpoints into JSON-able data and short previews for ``foundry-checkpoint``.

Everything shown comes from the store, which someone else may have written. So text reaches
the terminal only through :func:`visible` (control and format characters, escape sequences
included, become visible ``\\x1b``-style escapes) and :func:`cell` (a ``rich`` ``Text``, never
parsed as markup), JSON is strict (:func:`jsonable` turns NaN and infinities into strings), and
a Postgres DSN is shown with its password masked (:func:`mask_secrets`).

Example:
    >>> jsonable({"a": (1, b"x"), "b": {1, 2}, "c": float("nan")})
    {'a': [1, "b'x'"], 'b': [1, 2], 'c': 'nan'}
    >>> preview("x" * 100, width=10)
    "'xxxxxxxx…"
    >>> visible("t\\x1b[2J1")
    't\\\\x1b[2J1'
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
import math
import re
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from rich.text import Text

if TYPE_CHECKING:
    from langgraph.checkpoint.base import CheckpointTuple

__all__ = [
    "cell",
    "jsonable",
    "mask_secrets",
    "preview",
    "strict_json",
    "summary",
    "tuple_json",
    "visible",
]

#: ``scheme://user:password@host``: the password runs to the authority's last ``@`` (a
#: password may hold ``@``; the host never does), the user may hold ``@`` too.
_URL_PASSWORD: Final = re.compile(r"(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^:/\s]*:)[^\s/?#]*(?=@)")
#: A quoted value as libpq's conninfo (and most key=value forms) spells it: single- or
#: double-quoted with backslash escapes (an unterminated quote runs to the end).
_QUOTED: Final = r"""'(?:[^'\\]|\\.)*'?|"(?:[^"\\]|\\.)*"?"""
#: ``password=...``, ``sslpassword=...``, ``PGPASSWORD=...`` (any case, spaces around ``=``).
_KV_PASSWORD: Final = re.compile(
    r"(?i)(?P<head>(?<![a-z0-9])(?:ssl|pg)?password\s*=\s*)(?:" + _QUOTED + r"|\S+)"
)
#: A mapping's ``'password': ...`` or ``"sslpassword": ...`` (a repr or JSON).
_MAPPING_PASSWORD: Final = re.compile(
    r"""(?i)(?P<head>(?P<q>['"])(?:ssl|pg)?password(?P=q)\s*:\s*)(?:""" + _QUOTED + r"|[^\s,}]+)"
)


def _escape_char(char: str) -> str:
    code = ord(char)
    if code <= 0xFF:
        return f"\\x{code:02x}"
    if code <= 0xFFFF:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def visible(value: object) -> str:
    """``str(value)`` with every non-printable character (controls, escape sequences, bidi
    overrides, line breaks) spelled as a visible ``\\xNN``/``\\uNNNN`` escape.

    Example:
        >>> print(visible("a\\nb\\u202ec"))
        a\\x0ab\\u202ec
    """
    text = value if isinstance(value, str) else str(value)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else _escape_char(c) for c in text)


def cell(value: object) -> Text:
    """A table cell (or line) showing ``value`` as :func:`visible` text, never as markup.

    Example:
        >>> cell("[link=https://example.com]x[/link]").plain
        '[link=https://example.com]x[/link]'
    """
    return Text(visible(value))


def mask_secrets(text: str) -> str:
    """``text`` with URL, ``password=``/``sslpassword=`` and mapping passwords replaced by
    ``***`` (quoted values whole, a URL password up to the host even when it holds ``@``).

    Example:
        >>> mask_secrets("postgres:postgresql://app:s3cret@db:5432/x")
        'postgres:postgresql://app:***@db:5432/x'
        >>> mask_secrets("postgres:host=db password='a b' user=app")
        'postgres:host=db password=*** user=app'
        >>> mask_secrets("postgres://u:p@ss@host/db sslpassword=k")
        'postgres://u:***@host/db sslpassword=***'
    """
    text = _URL_PASSWORD.sub(lambda m: m.group("head") + "***", text)
    text = _KV_PASSWORD.sub(lambda m: m.group("head") + "***", text)
    return _MAPPING_PASSWORD.sub(lambda m: m.group("head") + "***", text)


def strict_json(data: Any) -> str:
    """``data`` as strict JSON (RFC 8259: no NaN or infinities), indented.

    Example:
        >>> strict_json({"x": float("inf")})
        '{\\n  "x": "inf"\\n}'
    """
    return json.dumps(jsonable(data), indent=2, sort_keys=False, allow_nan=False)


def jsonable(value: Any, *, depth: int = 0) -> Any:
    """``value`` as plain JSON data: containers recursively, models dumped, the rest ``repr``."""
    if depth > 50:
        return repr(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # 'nan', 'inf', '-inf': strict JSON has no such numbers
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, Mapping):
        return {str(k): jsonable(v, depth=depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v, depth=depth + 1) for v in value]
    if isinstance(value, (set, frozenset)):
        items = [jsonable(v, depth=depth + 1) for v in value]
        try:
            return sorted(items)
        except TypeError:
            return items
    if isinstance(value, (datetime.datetime, datetime.date)):
        return value.isoformat()
    if isinstance(value, (uuid.UUID, enum.Enum)):
        return str(value.value if isinstance(value, enum.Enum) else value)
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return jsonable(dump(), depth=depth + 1)
        except Exception:  # a model that cannot dump itself is shown as repr
            return repr(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(dataclasses.asdict(value), depth=depth + 1)
    return repr(value)


def preview(value: Any, *, width: int = 60) -> str:
    """A one-line ``repr`` of ``value`` cut to ``width`` characters."""
    text = " ".join(repr(value).split())
    return text if len(text) <= width else text[: width - 1] + "…"


def summary(item: CheckpointTuple) -> dict[str, Any]:
    """The identifying fields of a checkpoint (no channel values)."""
    conf = item.config["configurable"]
    parent = (item.parent_config or {}).get("configurable", {}).get("checkpoint_id")
    metadata = item.metadata or {}
    return {
        "thread_id": conf.get("thread_id"),
        "checkpoint_ns": conf.get("checkpoint_ns", ""),
        "checkpoint_id": conf.get("checkpoint_id"),
        "parent_checkpoint_id": parent,
        "ts": item.checkpoint.get("ts"),
        "step": metadata.get("step"),
        "source": metadata.get("source"),
        "pending_writes": len(item.pending_writes or []),
    }


def tuple_json(item: CheckpointTuple) -> dict[str, Any]:
    """A whole checkpoint as JSON data: identity, metadata, channel values, pending writes."""
    out = summary(item)
    out["metadata"] = jsonable(item.metadata)
    out["channel_versions"] = jsonable(item.checkpoint.get("channel_versions", {}))
    out["values"] = jsonable(item.checkpoint.get("channel_values", {}))
    out["pending_writes"] = [
        {"task_id": task, "channel": channel, "value": jsonable(value)}
        for task, channel, value in item.pending_writes or []
    ]
    return out
