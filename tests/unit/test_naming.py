"""Identifiers map to store names, keys and tags injectively and within the store's limits."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from foundry_checkpoint._store._limits import MAX_NAME, MAX_TAG_VALUE
from foundry_checkpoint._store._naming import (
    check_identifier,
    item_key,
    store_name,
    tag_value,
    validate_prefix,
)
from foundry_checkpoint.errors import InvalidIdentifierError

_TAG_KEY = re.compile(r"[a-zA-Z0-9_.-]{1,64}")
identifiers = st.one_of(
    st.text(min_size=1, max_size=40),
    st.text(min_size=100, max_size=400),
    st.text(alphabet="ab/.~!\x00é", min_size=1, max_size=200),
)


@settings(max_examples=3000, deadline=None)
@given(st.lists(identifiers, min_size=2, max_size=6, unique=True))
def test_distinct_identifiers_never_share_a_name_key_or_tag(ids: list[str]) -> None:
    for make, limit in (
        (lambda s: store_name("langgraph", "t", s), MAX_NAME),
        (lambda s: item_key("c", s, "x"), MAX_NAME),
        (tag_value, MAX_TAG_VALUE),
    ):
        out = [make(i) for i in ids]
        assert len(set(out)) == len(out)
        assert all(1 <= len(o) <= limit for o in out)


@pytest.mark.parametrize(
    "ident", ["/", "..", "../../etc/passwd", "ü🙂漢字", "a\x00b", "x" * 10_000, " ", "~7e", "!"]
)
def test_awkward_identifiers_are_accepted_within_limits(ident: str) -> None:
    name = store_name("langgraph", "t", check_identifier(ident, "thread_id"))
    assert 1 <= len(name) <= MAX_NAME
    assert name.startswith("langgraph/t/")
    assert ".." not in name.split("/")
    assert 1 <= len(item_key("c", ident, ident)) <= MAX_NAME
    assert 1 <= len(tag_value(ident)) <= MAX_TAG_VALUE


def test_escaped_and_hashed_forms_cannot_meet() -> None:
    long_id = "y" * 500
    hashed = tag_value(long_id)
    assert hashed.startswith("!")
    assert tag_value(hashed) != hashed  # a user identifier spelled like a hash escapes its "!"


@pytest.mark.parametrize("bad", ["", None, 3, b"bytes"])
def test_bad_identifiers_raise_typed_errors(bad: object) -> None:
    with pytest.raises(InvalidIdentifierError):
        check_identifier(bad, "thread_id")


@pytest.mark.parametrize("bad", ["", "a//b", "/a", "a b", "x" * 49, "é"])
def test_bad_prefixes_are_refused(bad: str) -> None:
    with pytest.raises(InvalidIdentifierError, match="store_prefix"):
        validate_prefix(bad)


def test_kinds_never_share_names() -> None:
    assert store_name("p", "index") != store_name("p", "t", "index")
    assert store_name("p", "default") != store_name("p", "t", "default")
    assert _TAG_KEY.fullmatch("kind")


@settings(max_examples=500, deadline=None)
@given(identifiers)
def test_unescape_inverts_escape(ident: str) -> None:
    from foundry_checkpoint._store._naming import escape, unescape

    assert unescape(escape(ident)) == ident


def _escape_by_bytes(value: str) -> str:
    """The byte-by-byte definition of ``escape`` (what stored keys were written with)."""
    safe = frozenset(b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
    raw = value.encode("utf-8", "surrogatepass")
    out = "".join(chr(b) if b in safe else f"~{b:02x}" for b in raw)
    return "~2e" + out[1:] if out.startswith(".") else out


@settings(max_examples=1000, deadline=None)
@given(st.one_of(identifiers, st.text(alphabet="aZ09_.-~\x7f\x80\xff\u0100\U0001f600")))
def test_escape_keeps_its_byte_definition(ident: str) -> None:
    from foundry_checkpoint._store._naming import escape

    assert escape(ident) == _escape_by_bytes(ident)
    assert escape("." + ident) == _escape_by_bytes("." + ident)


@pytest.mark.parametrize("bad", ["!" + "0" * 64, "a~zz", "a~2", "a b", "~ff"])
def test_unescape_refuses_hashed_and_malformed_forms(bad: str) -> None:
    from foundry_checkpoint._store._naming import unescape

    assert unescape(bad) is None
