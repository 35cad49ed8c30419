"""Argument checks of the SQLite engine: the store's documented limits, answered with 400.

Each check returns the clean value or raises ``FoundryStorageBadRequestError`` (status 400)
naming the offending field in ``param``, as the hosted service does.

Example:
    >>> validate_limit(None), validate_ttl(-1)
    (20, -1)
    >>> validate_value({"a": 1})
    '{"a":1}'
    >>> try:
    ...     validate_identifier("", "key")
    ... except FoundryStorageBadRequestError as exc:
    ...     print(exc.param)
    key
"""

from __future__ import annotations

import json
import re
import secrets
from collections.abc import Mapping
from typing import Final

from azure.ai.agentserver.core.storage import FoundryStorageBadRequestError

from ._limits import (
    DEFAULT_PAGE,
    MAX_DESCRIPTION,
    MAX_NAME,
    MAX_PAGE,
    MAX_TAG_KEY,
    MAX_TAG_VALUE,
    MAX_TAGS,
    MAX_TTL_SECONDS,
    MAX_VALUE_BYTES,
)

__all__ = [
    "bad_request",
    "dump_tags",
    "new_etag",
    "validate_description",
    "validate_identifier",
    "validate_limit",
    "validate_tags",
    "validate_ttl",
    "validate_value",
]

_TAG_KEY_RE: Final = re.compile(r"[a-zA-Z0-9_.\-]+")


def bad_request(message: str, param: str) -> FoundryStorageBadRequestError:
    """The 400 error the service answers for a bad ``param``.

    Args:
        message: What is wrong, for the caller.
        param: The request field at fault.

    Returns:
        The error, ready to raise.
    """
    return FoundryStorageBadRequestError(message, status_code=400, param=param)


def validate_identifier(value: object, param: str) -> str:
    """Check a store name or item key: a string of 1 to ``MAX_NAME`` characters.

    Args:
        value: The name or key given.
        param: The field name for the error (``name`` or ``key``).

    Returns:
        ``value``.

    Raises:
        FoundryStorageBadRequestError: ``value`` is not such a string.
    """
    if not isinstance(value, str) or not 1 <= len(value) <= MAX_NAME:
        raise bad_request(
            f"{param} must be a string of 1 to {MAX_NAME} characters, got {value!r:.80}.",
            param,
        )
    return value


_WIDEST: Final = 12
"""Most bytes one character of compact JSON takes in the default form: an astral character
becomes two ``\\uXXXX`` escapes; a ``,`` or ``:`` separator gains one space."""


def _default_size_bound(compact: str) -> int:
    """At least the byte size of the default form (``json.dumps(value)``, which the limit
    counts: ASCII escapes, ``", "`` and ``": "``) of a value whose compact form is given.

    ASCII text is the same in both forms but for one space after each separator (every
    ``,`` and ``:`` is counted, inside strings too); other text is bounded by
    :data:`_WIDEST`. The exact size is measured only when the bound is over the limit.

    Example:
        >>> _default_size_bound('{"a":[1,2]}'), len('{"a": [1, 2]}')
        (13, 13)
    """
    if compact.isascii():
        return len(compact) + compact.count(",") + compact.count(":")
    return len(compact) * _WIDEST


_PLAIN_FROM: Final = 4096
"""Strings at least this long are checked for characters JSON escapes before encoding."""
_PLAIN_CHARS: Final = bytes(c for c in range(0x20, 0x80) if c not in b'"\\')
"""The ASCII characters compact JSON writes as they are (``json.dumps`` escapes ``"``,
``\\`` and control characters only)."""


def compact_json(value: Mapping[str, object]) -> str:
    """``json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)``,
    with long plain-ASCII strings of the top level copied instead of escaped char by char
    (a base64 payload: half the time of the encoder's own scan). A value without such a
    string is encoded in one call (one call per field cost a small value four times as much).

    Raises:
        TypeError: A value is not JSON serializable.
        ValueError: A float is not finite.

    Example:
        >>> compact_json({"a": "x" * 5000, "b": [1, None]}) == json.dumps(
        ...     {"a": "x" * 5000, "b": [1, None]}, separators=(",", ":"))
        True
    """
    if not any(isinstance(item, str) and len(item) >= _PLAIN_FROM for item in value.values()):
        # Nothing to copy (a small value, the common case): one pass of the C encoder.
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    if not all(isinstance(k, str) for k in value):
        return json.dumps(value, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    parts: list[str] = []
    for name, item in value.items():
        head = json.dumps(name, ensure_ascii=False)
        if (
            isinstance(item, str)
            and len(item) >= _PLAIN_FROM
            and item.isascii()
            and not item.encode("ascii").translate(None, _PLAIN_CHARS)
        ):
            parts.append(f'{head}:"{item}"')
        else:
            body = json.dumps(item, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
            parts.append(f"{head}:{body}")
    return "{" + ",".join(parts) + "}"


def validate_value(value: object) -> str:
    """Check one item value and return its compact JSON text.

    Args:
        value: The item value given.

    Returns:
        The compact JSON text stored for it.

    Raises:
        FoundryStorageBadRequestError: Not a JSON object, or over ``MAX_VALUE_BYTES``.
    """
    if not isinstance(value, Mapping):
        raise bad_request(f"value must be a JSON object, got {type(value).__name__}.", "value")
    plain = dict(value)
    try:
        compact = compact_json(plain)
        size = 0
        # ASCII text at most doubles in the default form (one space per separator), so a
        # value under half the limit needs no count of its separators.
        small = compact.isascii() and 2 * len(compact) <= MAX_VALUE_BYTES
        if not small and _default_size_bound(compact) > MAX_VALUE_BYTES:
            size = len(json.dumps(plain, allow_nan=False).encode("utf-8"))
    except (TypeError, ValueError) as exc:
        raise bad_request(f"value is not serializable as JSON: {exc}.", "value") from exc
    if size > MAX_VALUE_BYTES:
        raise bad_request(
            f"value is {size} bytes serialized; the limit is {MAX_VALUE_BYTES} bytes.",
            "value",
        )
    return compact


def validate_tags(tags: object) -> dict[str, str] | None:
    """Check a tag mapping; ``None`` and ``{}`` both mean "no tags".

    Args:
        tags: The tags given.

    Returns:
        A plain copy of the tags, or None for no tags.

    Raises:
        FoundryStorageBadRequestError: Too many tags, or a bad tag key or value.
    """
    if tags is None:
        return None
    if not isinstance(tags, Mapping):
        raise bad_request(f"tags must be a mapping, got {type(tags).__name__}.", "tags")
    if len(tags) > MAX_TAGS:
        raise bad_request(f"at most {MAX_TAGS} tags are allowed, got {len(tags)}.", "tags")
    out: dict[str, str] = {}
    for key, value in tags.items():
        if not isinstance(key, str) or len(key) > MAX_TAG_KEY or _TAG_KEY_RE.fullmatch(key) is None:
            raise bad_request(
                f"tag key {key!r:.80} must be 1 to {MAX_TAG_KEY} characters of [a-zA-Z0-9_.-].",
                "tags",
            )
        if not isinstance(value, str) or len(value) > MAX_TAG_VALUE:
            raise bad_request(
                f"tag {key!r} must have a string value of at most {MAX_TAG_VALUE} characters.",
                "tags",
            )
        out[key] = value
    return out or None


def validate_ttl(ttl: object) -> int:
    """Check ``item_ttl_seconds``: -1 (never expire) or 1 to ``MAX_TTL_SECONDS``.

    Args:
        ttl: The TTL given.

    Returns:
        ``ttl``.

    Raises:
        FoundryStorageBadRequestError: Out of range or not an integer.
    """
    if (
        not isinstance(ttl, int)
        or isinstance(ttl, bool)
        or not (ttl == -1 or 1 <= ttl <= MAX_TTL_SECONDS)
    ):
        raise bad_request(
            f"item_ttl_seconds must be -1 (never expire) or 1 to {MAX_TTL_SECONDS}, got {ttl!r}.",
            "item_ttl_seconds",
        )
    return ttl


def validate_limit(limit: object) -> int:
    """Check a page size; None means ``DEFAULT_PAGE``.

    Args:
        limit: The page size given.

    Returns:
        The page size to use.

    Raises:
        FoundryStorageBadRequestError: Not 1 to ``MAX_PAGE``.
    """
    if limit is None:
        return DEFAULT_PAGE
    if not isinstance(limit, int) or isinstance(limit, bool) or not 1 <= limit <= MAX_PAGE:
        raise bad_request(f"limit must be 1 to {MAX_PAGE}, got {limit!r}.", "limit")
    return limit


def validate_description(description: object) -> str | None:
    """Check a store description: a string of at most ``MAX_DESCRIPTION`` characters, or None.

    Args:
        description: The description given.

    Returns:
        ``description``.

    Raises:
        FoundryStorageBadRequestError: Neither a string nor None, or too long.
    """
    if description is not None and not isinstance(description, str):
        raise bad_request("description must be a string or null.", "description")
    if description is not None and len(description) > MAX_DESCRIPTION:
        raise bad_request(
            f"description is {len(description)} characters; the limit is {MAX_DESCRIPTION}.",
            "description",
        )
    return description


def dump_tags(tags: Mapping[str, str] | None) -> str | None:
    """The stored JSON text of a tag mapping (None for no tags).

    Args:
        tags: Checked tags.

    Returns:
        Compact JSON, or None.
    """
    return json.dumps(dict(tags), separators=(",", ":"), ensure_ascii=False) if tags else None


def new_etag() -> str:
    """A fresh quoted ETag.

    ``secrets``, not ``uuid.uuid4``: a graph that patches or seeds uuid generation (as
    LangGraph's own tests do) must see the same ids with this store as with any other saver.

    Returns:
        A quoted random string.
    """
    return f'"{secrets.token_hex(16)}"'
