"""Memory items as stored: a value checked as JSON, written through the codec, read back.

A value is checked before anything is written (:func:`dump`: JSON object, string keys, finite
numbers, valid Unicode), encoded as compact JSON bytes through the scope's codec (compressed
when it pays, spilled over the item limit) and nested under ``"v"`` of the item value
(:func:`~._layout.memory_value`). Reading parses the item value strictly (:func:`parse`) and
decodes the JSON bytes with ``json.loads``, which only builds values.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Final, cast

from foundry_checkpoint.adapter import Scope, StoredItem
from foundry_checkpoint.errors import CorruptPayloadError, NonJsonValueError

from ._layout import memory_value

__all__ = ["Record", "decode", "dump", "encode", "parse", "timestamp"]

_MAX_DEPTH: Final = 200
_MEASURE: Final = "m"


def _where(namespace: object, key: object) -> str:
    shown = tuple(namespace) if isinstance(namespace, list | tuple) else namespace
    return f"memory item {key!r} in namespace {shown!r}"


def _check(value: object, namespace: tuple[str, ...], key: str) -> None:
    """Raise :class:`NonJsonValueError` unless ``value`` is JSON that reads back equal."""
    stack: list[tuple[object, str, int]] = [(value, "value", 0)]
    while stack:
        current, path, depth = stack.pop()
        if depth > _MAX_DEPTH:
            raise NonJsonValueError(
                f"{_where(namespace, key)}: the value nests deeper than {_MAX_DEPTH} levels at "
                f"{path}; flatten it. Nothing was written."
            )
        if isinstance(current, str):
            try:
                current.encode("utf-8")
            except UnicodeEncodeError:
                raise NonJsonValueError(
                    f"{_where(namespace, key)}: the value holds a string with a lone surrogate "
                    f"at {path}, which UTF-8 cannot carry; pass valid Unicode text. "
                    "Nothing was written."
                ) from None
        elif current is None or isinstance(current, bool | int):
            continue
        elif isinstance(current, float):
            if not math.isfinite(current):
                raise NonJsonValueError(
                    f"{_where(namespace, key)}: the value holds {current!r} at {path}, which "
                    "JSON cannot hold; store None or a string. Nothing was written."
                )
        elif isinstance(current, Mapping):
            for name, item in current.items():
                if not isinstance(name, str):
                    raise NonJsonValueError(
                        f"{_where(namespace, key)}: the value has the non-string key {name!r} "
                        f"at {path}; JSON would turn it into a string silently, so use string "
                        "keys. Nothing was written."
                    )
                stack.append((name, f"{path} (a key)", depth + 1))
                stack.append((item, f"{path}[{name!r}]", depth + 1))
        elif isinstance(current, list | tuple):
            stack.extend((item, f"{path}[{i}]", depth + 1) for i, item in enumerate(current))
        else:
            raise NonJsonValueError(
                f"{_where(namespace, key)}: the value holds a {type(current).__name__} at "
                f"{path}, which is not JSON; store JSON types (pydantic: "
                "model_dump(mode='json'), datetimes as ISO text, bytes as base64 text). "
                "Nothing was written."
            )


def dump(value: object, namespace: tuple[str, ...], key: str) -> bytes:
    """The JSON bytes of a memory value, checked first (see :func:`_check`).

    Raises:
        NonJsonValueError: ``value`` is not a JSON object (a dict), or holds what JSON cannot.

    Example:
        >>> dump({"a": [1, "b"]}, ("n",), "k")
        b'{"a":[1,"b"]}'
    """
    if not isinstance(value, Mapping):
        raise NonJsonValueError(
            f"{_where(namespace, key)}: a memory value must be a dict, got "
            f"{type(value).__name__}; wrap it, e.g. {{'value': ...}}. Nothing was written."
        )
    _check(value, namespace, key)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode()


async def encode(
    scope: Scope,
    item: str,
    payload: bytes,
    *,
    tags: Mapping[str, str],
    meta: Mapping[str, Any],
) -> dict[str, Any]:
    """The codec value of ``payload`` for item ``item`` whose other fields are ``meta``.

    The codec decides between inline and spilled on the size of the request that writes the
    item; ``meta`` (the item value's other fields) is counted as one extra string field of
    its JSON text, which is at least as long as those fields nested in the value.
    """
    encoded = await scope.encode(item, payload, tags=tags, extra={_MEASURE: json.dumps(dict(meta))})
    out = dict(encoded)
    out.pop(_MEASURE, None)
    return out


@dataclass(frozen=True, slots=True)
class Record:
    """The fields of a stored memory item's value, checked."""

    namespace: tuple[str, ...]
    key: str
    encoded: Mapping[str, Any]
    created: float
    updated: float
    ttl: float | None
    expires: float | None
    extra: Mapping[str, Any]

    def value(self, **changes: Any) -> dict[str, Any]:
        """The item value again, with ``changes`` (``exp`` say) applied."""
        out = memory_value(
            self.namespace,
            self.key,
            encoded=self.encoded,
            created=self.created,
            updated=self.updated,
            ttl=self.ttl,
            expires=self.expires,
        )
        out.update(self.extra)
        out.update(changes)
        return out


def _number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def parse(stored: StoredItem) -> Record:
    """The checked fields of a memory item read back.

    Raises:
        CorruptPayloadError: the value does not have the shape this package writes.
    """
    value = stored.value
    ns, key, encoded = value.get("ns"), value.get("key"), value.get("v")
    created, updated = value.get("c"), value.get("u")
    ttl, expires = value.get("ttl"), value.get("exp")
    if (
        not isinstance(ns, list)
        or not all(isinstance(label, str) for label in ns)
        or not isinstance(key, str)
        or not isinstance(encoded, Mapping)
        or not _number(created)
        or not _number(updated)
        or not (ttl is None or _number(ttl))
        or not (expires is None or _number(expires))
    ):
        raise CorruptPayloadError(
            f"{_where(ns, key)}: the stored item does not have the shape foundry-checkpoint "
            "writes (it was changed outside it); delete it and put it again",
            key=stored.key,
        )
    extra = {k: v for k, v in value.items() if k not in ("ns", "key", "v", "c", "u", "ttl", "exp")}
    return Record(
        tuple(ns),
        key,
        encoded,
        float(cast(float, created)),
        float(cast(float, updated)),
        None if ttl is None else float(cast(float, ttl)),
        None if expires is None else float(cast(float, expires)),
        extra,
    )


async def decode(scope: Scope, stored: StoredItem, record: Record) -> dict[str, Any]:
    """The memory value of a stored item (spilled bytes fetched and verified).

    Raises:
        CorruptPayloadError: the bytes are not a JSON object.
    """
    payload = await scope.decode(record.encoded, key=stored.key)
    try:
        value = json.loads(payload)
    except ValueError:
        value = None
    if not isinstance(value, dict):
        raise CorruptPayloadError(
            f"{_where(record.namespace, record.key)}: the stored value is not a JSON object "
            "(it was changed outside foundry-checkpoint); delete it and put it again",
            key=stored.key,
        )
    return value


def timestamp(seconds: float) -> datetime:
    """An epoch time as an aware UTC datetime (what LangGraph's items carry).

    Example:
        >>> timestamp(0).isoformat()
        '1970-01-01T00:00:00+00:00'
    """
    return datetime.fromtimestamp(seconds, tz=timezone.utc)
