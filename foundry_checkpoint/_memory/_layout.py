"""How LangGraph memory maps onto one state store: item keys, tags and item values.

All memory of one user lives in one store, ``<store_prefix>/default`` (isolated per user like
every store). The first part of an item key names the kind of item: ``i`` a memory item,
``n`` a namespace index entry, ``v`` a vector page (``m`` is the core's own).

* a memory item's key is :func:`memory_key`: the escaped namespace labels and the key joined
  by ``/`` (injective: the key is always the last part), hashed (``!...``) when over 128
  characters, so the value always holds the namespace and key too;
* its tags (:func:`memory_tags`, 16 at most): ``k`` = ``"i"``; ``p1``..``p8``, the
  :func:`prefix_tag` of the namespace's first 1..8 labels; ``n``, that of the whole namespace;
  ``x``, the expiry epoch in whole seconds rounded up, only when the item has a TTL (a listing
  skips an item whose tag has passed, and reads one expiring within the current second);
  ``f.<field>``, the :func:`field_tag` of each declared tag field whose value is a string,
  number or bool;
* its value (:func:`memory_value`): ``{"ns": [labels], "key": key, "v": <codec value of the
  JSON bytes>, "c": created, "u": updated, "ttl": minutes or None, "exp": epoch or None}``
  (plus ``"vec"``, the item's own vectors, when the store is indexed).

Example:
    >>> memory_key(("users", "ann"), "pref")
    'i/users/ann/pref'
    >>> prefix_tag(("a/b", "c"))
    'a~2fb/c'
    >>> sorted(memory_tags(("users", "ann"), expires=None, fields={}).items())
    [('k', 'i'), ('n', 'users/ann'), ('p1', 'users'), ('p2', 'users/ann')]
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any, Final

from foundry_checkpoint.adapter import item_key, tag_value, unescape

__all__ = [
    "FIELD_TAG",
    "KIND_TAG",
    "MAX_PREFIX_TAGS",
    "MAX_TAG_FIELDS",
    "MEMORY_KIND",
    "NAMESPACE_TAG",
    "EXPIRY_TAG",
    "expired",
    "expiry",
    "expiry_tag",
    "field_tag",
    "labels_of",
    "memory_key",
    "memory_tags",
    "may_have_expired",
    "memory_value",
    "now",
    "prefix_tag",
    "prefix_tag_key",
]

#: The tag every item of the memory store carries: its kind word.
KIND_TAG: Final = "k"
#: The kind word of a memory item (first part of its key, value of its ``k`` tag).
MEMORY_KIND: Final = "i"
#: The tag holding the whole namespace's :func:`prefix_tag`.
NAMESPACE_TAG: Final = "n"
#: The tag holding a memory item's expiry (whole epoch seconds), when it has a TTL.
EXPIRY_TAG: Final = "x"
#: The prefix of a tag field's tag key (``f.<field>``).
FIELD_TAG: Final = "f."
#: Namespace prefixes with a tag of their own (``p1``..``p8``).
MAX_PREFIX_TAGS: Final = 8
#: Tag fields a store may declare (16 tags - ``k`` - ``p1..p8`` - ``n`` - ``x``).
MAX_TAG_FIELDS: Final = 5
_MAX_TAG_VALUE: Final = 256


def now() -> float:
    """The clock of memory TTLs: epoch seconds (tests replace it to move time).

    Example:
        >>> now() > 1.7e9
        True
    """
    return time.time()


def _hashed(text: str) -> str:
    return "!" + hashlib.sha256(text.encode("utf-8")).hexdigest()


def prefix_tag(labels: Sequence[str]) -> str:
    """The tag value naming the namespace prefix ``labels`` (readable, injective).

    Each label escaped (hashed when one alone is over 256 characters), joined by ``/`` (which
    no escaped label holds); the whole hashed (``!`` + sha256) when over 256 characters.

    Example:
        >>> prefix_tag(("users", "ann"))
        'users/ann'
        >>> prefix_tag(("x" * 300,)).startswith("!")
        True
    """
    joined = "/".join(tag_value(label) for label in labels)
    return joined if len(joined) <= _MAX_TAG_VALUE else _hashed(joined)


def prefix_tag_key(depth: int) -> str:
    """The tag key of the prefix of ``depth`` labels (1..8).

    Example:
        >>> prefix_tag_key(3)
        'p3'
    """
    return f"p{depth}"


def labels_of(tag: str) -> tuple[str, ...] | None:
    """The namespace a :func:`prefix_tag` names, or None when it was hashed.

    Example:
        >>> labels_of("a~2fb/c")
        ('a/b', 'c')
        >>> labels_of("!" + "0" * 64) is None
        True
    """
    labels: list[str] = []
    for part in tag.split("/"):
        label = unescape(part)
        if not label:
            return None
        labels.append(label)
    return tuple(labels)


def memory_key(namespace: Sequence[str], key: str) -> str:
    """The item key of memory item ``key`` in ``namespace``.

    Example:
        >>> memory_key(("a",), "b/c")
        'i/a/b~2fc'
    """
    return item_key(MEMORY_KIND, *namespace, key)


def field_tag(value: object) -> str | None:
    """The tag value of a tag field's ``value``, or None when a tag cannot hold it.

    Equal values (as Python compares them, which is how LangGraph's filters compare) get the
    same tag: numbers and bools by their exact numeric value (``1``, ``1.0`` and ``True`` are
    all ``"n:1"``), strings as ``"s:..."``; hashed when over 256 characters. Anything else
    (None, lists, objects, NaN) has none.

    Example:
        >>> field_tag(True), field_tag(1.0), field_tag(2.5), field_tag("ann")
        ('n:1', 'n:1', 'n:2.5', 's:ann')
        >>> field_tag(None) is None
        True
    """
    if isinstance(value, str):
        text = "s:" + value
    elif isinstance(value, bool | int):
        text = f"n:{int(value)}"
    elif isinstance(value, float):
        if not math.isfinite(value):
            return None
        text = f"n:{int(value)}" if value.is_integer() else f"n:{value!r}"
    else:
        return None
    return text if len(text) <= _MAX_TAG_VALUE else _hashed(text)


def expiry(ttl_minutes: float | None, at: float) -> float | None:
    """The expiry epoch of a TTL of ``ttl_minutes`` starting ``at``; None: never.

    Example:
        >>> expiry(1, 100.5), expiry(None, 100.5)
        (160.5, None)
    """
    if ttl_minutes is None:
        return None
    return at + ttl_minutes * 60


def expiry_tag(expires: float) -> str:
    """The ``x`` tag of an expiry: whole seconds, rounded up (never before the expiry).

    Example:
        >>> expiry_tag(160.5), expiry_tag(160.0)
        ('161', '160')
    """
    return str(math.ceil(expires))


def expired(exp: object, at: float) -> bool:
    """Whether an item has expired at ``at``, by its ``exp`` field (a number: exact) or its
    ``x`` tag (a string: True only when it has surely expired; see :func:`may_have_expired`).

    Example:
        >>> expired(100.5, 100.5), expired("101", 100.5), expired(None, 1e12)
        (True, False, False)
    """
    if isinstance(exp, bool):
        return False
    if isinstance(exp, int | float):
        return exp <= at
    if isinstance(exp, str):
        try:
            return int(exp) <= at
        except ValueError:
            return False
    return False


def may_have_expired(tag: str | None, at: float) -> bool:
    """Whether an item whose ``x`` tag is ``tag`` may have expired at ``at`` (its expiry lies
    within the second the tag rounds up to): only its ``exp`` field tells.

    Example:
        >>> may_have_expired("101", 100.5), may_have_expired("102", 100.5)
        (True, False)
    """
    if tag is None:
        return False
    try:
        return int(tag) - 1 < at
    except ValueError:
        return False


def memory_tags(
    namespace: Sequence[str],
    *,
    expires: float | None,
    fields: Mapping[str, str],
) -> dict[str, str]:
    """The tags of a memory item in ``namespace``.

    Args:
        namespace: the item's namespace labels.
        expires: its expiry epoch, or None (the tag holds it rounded up to whole seconds).
        fields: the tag fields' tags, by field name (from :func:`field_tag`).

    Example:
        >>> memory_tags(("a",), expires=6.5, fields={"kind": "s:x"})
        {'k': 'i', 'p1': 'a', 'n': 'a', 'x': '7', 'f.kind': 's:x'}
    """
    tags = {KIND_TAG: MEMORY_KIND}
    for depth in range(1, min(len(namespace), MAX_PREFIX_TAGS) + 1):
        tags[prefix_tag_key(depth)] = prefix_tag(namespace[:depth])
    tags[NAMESPACE_TAG] = prefix_tag(namespace)
    if expires is not None:
        tags[EXPIRY_TAG] = expiry_tag(expires)
    for name, tag in fields.items():
        tags[FIELD_TAG + name] = tag
    return tags


def memory_value(
    namespace: Sequence[str],
    key: str,
    *,
    encoded: Mapping[str, Any],
    created: float,
    updated: float,
    ttl: float | None,
    expires: float | None,
) -> dict[str, Any]:
    """The item value of a memory item (``encoded``: the codec value of its JSON bytes).

    Example:
        >>> sorted(memory_value(("a",), "k", encoded={}, created=1.0, updated=1.0, ttl=None,
        ...                     expires=None))
        ['c', 'exp', 'key', 'ns', 'ttl', 'u', 'v']
    """
    return {
        "ns": list(namespace),
        "key": key,
        "v": dict(encoded),
        "c": created,
        "u": updated,
        "ttl": ttl,
        "exp": expires,
    }
