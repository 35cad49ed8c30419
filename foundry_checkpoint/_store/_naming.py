"""Collision-free encoding of user identifiers into store names, item keys and tag values.

The store accepts names and keys of 1-128 characters and tag values of at most 256 characters.
Identifiers (thread ids, context ids, checkpoint namespaces) can be anything a user passes, so
they are escaped: characters of ``[A-Za-z0-9_.-]`` stand for themselves and every other UTF-8
byte becomes ``~XX``. Escaping is injective, and its output never contains ``!`` or ``/``. An
escaped form that does not fit is replaced by ``!`` followed by the sha256 of the escaped form;
``!`` marks a hashed form, so a hashed form can never equal an escaped one. Callers keep the
full identifier in the item value whenever it may have been hashed.

Example:
    >>> escape("a/b c")
    'a~2fb~20c'
    >>> fit("x" * 300, 128).startswith("!")
    True
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from typing import Final

from foundry_checkpoint.errors import CorruptPayloadError, InvalidIdentifierError

from ._limits import MAX_NAME, MAX_TAG_VALUE

__all__ = [
    "check_identifier",
    "check_text",
    "check_user_id",
    "checked_spill_namespace",
    "escape",
    "fit",
    "item_key",
    "store_name",
    "tag_value",
    "unescape",
    "validate_prefix",
]

_MAX_PREFIX: Final = 48
_SAFE: Final = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
_PREFIX_RE: Final = re.compile(r"[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*")
_ESCAPED_RE: Final = re.compile(r"(?:[A-Za-z0-9_.-]|~[0-9a-f]{2})*")
_RUN_RE: Final = re.compile(r"(?:~[0-9a-f]{2})+")
_PLAIN_RE: Final = re.compile(r"[A-Za-z0-9_.-]*")
#: ``str.translate`` table over UTF-8 bytes read as Latin-1: every byte outside ``_SAFE``.
_BYTE_ESCAPES: Final = {b: f"~{b:02x}" for b in range(256) if b not in _SAFE}


def check_text(value: object, what: str) -> str:
    """Return ``value`` if it is a string UTF-8 can encode (no lone surrogates), else raise.

    Example:
        >>> check_text("", "checkpoint_ns")
        ''
        >>> check_text(chr(0xD800), "checkpoint_ns")
        Traceback (most recent call last):
        ...
        foundry_checkpoint.errors.InvalidIdentifierError: checkpoint_ns ... lone surrogate, ...
    """
    if not isinstance(value, str):
        raise InvalidIdentifierError(
            f"{what} must be a string, got {type(value).__name__}: {value!r}"
        )
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidIdentifierError(
            f"{what} {value!r} holds a lone surrogate, which no store name, key or request can "
            "carry; pass valid Unicode text"
        ) from None
    return value


def check_identifier(value: object, what: str) -> str:
    """Return ``value`` if it is a non-empty string of valid Unicode, else raise.

    Raises :class:`InvalidIdentifierError` for anything else (lone surrogates included).
    """
    if not check_text(value, what):
        raise InvalidIdentifierError(f"{what} must be a non-empty string")
    return str(value)


def check_user_id(value: object) -> str:
    """Return ``value`` if it can name a user the same way locally and hosted, else raise.

    Control characters (they would break the ``x-ms-user-id`` header) and surrounding
    whitespace (HTTP trims it, so ``"alice "`` would be ``"alice"`` hosted but another
    partition locally) are refused with :class:`InvalidIdentifierError`.

    Example:
        >>> check_user_id("Alice Smith")
        'Alice Smith'
        >>> check_user_id("alice ")
        Traceback (most recent call last):
        ...
        foundry_checkpoint.errors.InvalidIdentifierError: user_id 'alice ' ...
    """
    text = check_identifier(value, "user_id")
    if any(unicodedata.category(c) == "Cc" for c in text):
        raise InvalidIdentifierError(
            f"user_id {text!r} holds control characters; it is sent as an HTTP header in hosted "
            "mode. Pass the user's stable id without them"
        )
    if text != text.strip():
        raise InvalidIdentifierError(
            f"user_id {text!r} has surrounding whitespace, which HTTP trims in hosted mode (so "
            "it would name another user there than here); strip it"
        )
    return text


def escape(value: str) -> str:
    """Escape ``value`` injectively into ``[A-Za-z0-9_.~-]`` (``~XX`` per other UTF-8 byte)."""
    if _PLAIN_RE.fullmatch(value):  # the common case (uuid6 ids, task ids): nothing to do
        out = value
    else:
        out = value.encode("utf-8", "surrogatepass").decode("latin-1").translate(_BYTE_ESCAPES)
    # A segment never starts with "." (no "." or ".." path segments); "~2e" decodes the same.
    return "~2e" + out[1:] if out.startswith(".") else out


def unescape(escaped: str) -> str | None:
    """Invert :func:`escape`; None for a hashed (``!``) or malformed form.

    Example:
        >>> unescape("a~2fb~20c")
        'a/b c'
        >>> unescape("!" + "0" * 64) is None
        True
    """
    if not _ESCAPED_RE.fullmatch(escaped):
        return None
    if "~" not in escaped:
        return escaped
    try:
        return _RUN_RE.sub(
            lambda run: bytes.fromhex(run.group().replace("~", "")).decode(
                "utf-8", "surrogatepass"
            ),
            escaped,
        )
    except UnicodeDecodeError:
        return None


def fit(escaped: str, limit: int) -> str:
    """``escaped`` if it fits ``limit`` characters, else ``!`` + its sha256 (65 characters)."""
    if len(escaped) <= limit:
        return escaped
    return "!" + hashlib.sha256(escaped.encode("ascii")).hexdigest()


def validate_prefix(prefix: object) -> str:
    """Check a store prefix: 1-48 characters of ``[A-Za-z0-9_.-]`` segments joined by ``/``.

    No segment may be ``.`` or ``..`` (the prefix also names spill folders and blob paths).

    Example:
        >>> validate_prefix("team-a/langgraph")
        'team-a/langgraph'
    """
    text = check_identifier(prefix, "store_prefix")
    if len(text) > _MAX_PREFIX or not _PREFIX_RE.fullmatch(text):
        raise InvalidIdentifierError(
            f"store_prefix {text!r} must be 1-{_MAX_PREFIX} characters of [A-Za-z0-9_.-] "
            "segments separated by '/'"
        )
    if any(segment in (".", "..") for segment in text.split("/")):
        raise InvalidIdentifierError(
            f"store_prefix {text!r} has a '.' or '..' segment; the prefix also names spill "
            "folders and blob paths, so use another name"
        )
    return text


def checked_spill_namespace(value: object, prefix: str, where: str) -> str:
    """``value`` if it has the shape the core writes for ``prefix`` (``<prefix>/<32 hex>``).

    A spill namespace is read back from the store before blobs are read or deleted under it, so
    a value changed in the store must not steer those operations elsewhere (another prefix,
    ``..``, a folder of another application). Anything else raises
    :class:`~foundry_checkpoint.errors.CorruptPayloadError` naming ``where``.

    Example:
        >>> checked_spill_namespace("lg/" + "0" * 32, "lg", "thread 't'")
        'lg/00000000000000000000000000000000'
    """
    if not isinstance(value, str) or not re.fullmatch(re.escape(prefix) + r"/[0-9a-f]{32}", value):
        raise CorruptPayloadError(
            f"{where}: the stored spill namespace {value!r} is not one this package writes "
            f"for store_prefix {prefix!r} ('<prefix>/<32 hex digits>'); it was changed outside "
            "foundry-checkpoint, so no blob is read or deleted under it"
        )
    return value


def store_name(prefix: str, kind: str, scope: str | None = None) -> str:
    """The store name of ``scope`` under ``prefix``: ``<prefix>/<kind>[/<escaped scope>]``.

    ``kind`` is a fixed word chosen by the caller (``"t"`` for threads, ``"index"``), so stores
    of different kinds never share a name.

    Example:
        >>> store_name("langgraph", "t", "user 1")
        'langgraph/t/user~201'
    """
    head = f"{prefix}/{kind}"
    if scope is None:
        return head
    return f"{head}/{fit(escape(scope), MAX_NAME - len(head) - 1)}"


def item_key(*parts: str) -> str:
    """An item key made of escaped ``parts`` joined by ``/`` (hashed when too long).

    The first part should be a short fixed word naming the kind of item, which keeps the
    kinds apart even when a key is hashed (``!`` keys carry their kind in tags and values).

    Example:
        >>> item_key("c", "", "1ef-2")
        'c//1ef-2'
    """
    return fit("/".join(escape(p) for p in parts), MAX_NAME)


def tag_value(value: str) -> str:
    """A tag value for ``value``: escaped, or hashed when longer than 256 characters."""
    return fit(escape(value), MAX_TAG_VALUE)
