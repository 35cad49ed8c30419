"""The MAF checkpoint decoder: what ``pickle.dumps`` writes comes back equal, the rest is refused.

The round trip is a property: random values of every supported kind, pickled by the real
``pickle.dumps`` with protocols 2 to 5, decode equal (and of the same types). The refusals name
each construction path the decoder does not take.
"""

from __future__ import annotations

import collections
import datetime
import decimal
import enum
import itertools
import pickle
import typing
import uuid
from dataclasses import dataclass, field
from typing import Any

import pydantic
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from foundry_checkpoint_maf._unpickle import Blocked, Damaged, Tampered, loads


class Colour(str, enum.Enum):
    """A str enum of the application's own."""

    RED = "red"
    BLUE = "blue"


class Level(enum.IntEnum):
    """An int enum."""

    LOW = 1
    HIGH = 2


class Perm(enum.Flag):
    """A flag enum."""

    R = 1
    W = 2


class Mode(enum.Flag):
    """A flag enum whose combinations this process never made before decoding one."""

    X = 1
    Y = 2


@dataclass
class Point:
    """A dataclass."""

    x: int
    label: str = "p"
    tags: list[str] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Frozen:
    """A frozen dataclass with slots (its own ``__setstate__``)."""

    a: int
    b: str


class Pair(typing.NamedTuple):
    """A named tuple."""

    left: int
    right: str


class Model(pydantic.BaseModel):
    """A pydantic model."""

    name: str
    count: int = 0
    points: list[int] = []


class Slotted:
    """A plain class with slots and a dict."""

    __slots__ = ("__dict__", "a")

    def __init__(self, a: int) -> None:
        self.a = a
        self.b = a + 1

    def __eq__(self, other: object) -> bool:
        return type(other) is Slotted and (other.a, other.b) == (self.a, self.b)

    __hash__ = None  # type: ignore[assignment]


class Reduced:
    """Pickles by calling itself (its ``__reduce__``): honoured for an allowed class."""

    def __init__(self, value: str) -> None:
        self.value = value

    def __reduce__(self) -> Any:
        return (Reduced, (self.value,))

    def __eq__(self, other: object) -> bool:
        return type(other) is Reduced and other.value == self.value

    __hash__ = None  # type: ignore[assignment]


class Finalized:
    """Has a finalizer: built only when allowed by name."""

    def __del__(self) -> None:
        pass


_MINE = (Colour, Level, Perm, Mode, Point, Frozen, Pair, Model, Slotted, Reduced, Finalized)
ALLOWED = frozenset(f"{c.__module__}:{c.__qualname__}" for c in _MINE)

_text = st.text(max_size=8)
_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(allow_nan=False),
    _text,
    st.binary(max_size=8),
    st.builds(bytearray, st.binary(max_size=4)),
    st.complex_numbers(allow_nan=False, allow_infinity=False),
    st.datetimes(timezones=st.one_of(st.none(), st.timezones())).filter(
        lambda d: d.tzinfo is None or type(d.tzinfo) is datetime.timezone
    ),
    st.datetimes(timezones=st.just(datetime.timezone.utc)),
    st.dates(),
    st.times(),
    st.timedeltas(),
    st.uuids(),
    st.decimals(allow_nan=False),
    st.sampled_from([*Colour, *Level, Perm.R, Perm.R | Perm.W]),
    st.builds(range, st.integers(-5, 5), st.integers(-5, 5)),
    st.just(type(None)),
    st.sampled_from([str, int, Point, Model]),  # classes as values (MAF's request types)
)
_hashable = st.one_of(st.none(), st.integers(), _text, st.sampled_from(list(Colour)))


def _containers(children: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(
        st.lists(children, max_size=4),
        st.tuples(children, children),
        st.dictionaries(_hashable, children, max_size=4),
        st.sets(_hashable, max_size=4),
        st.frozensets(_hashable, max_size=4),
        st.builds(collections.OrderedDict, st.dictionaries(_text, children, max_size=3)),
        st.builds(collections.deque, st.lists(children, max_size=3)),
        st.builds(lambda d: collections.defaultdict(list, d), st.dictionaries(_text, children)),
        st.builds(collections.Counter, st.dictionaries(_text, st.integers(), max_size=3)),
        st.builds(Point, st.integers(), _text, st.lists(_text, max_size=2)),
        st.builds(Frozen, st.integers(), _text),
        st.builds(Pair, st.integers(), _text),
        st.builds(Model, name=_text, count=st.integers(), points=st.lists(st.integers())),
        st.builds(Slotted, st.integers()),
        st.builds(Reduced, _text),
    )


_values = st.recursive(_scalars, _containers, max_leaves=12)


@settings(max_examples=300, deadline=None)
@given(_values, st.integers(2, pickle.HIGHEST_PROTOCOL))
def test_what_pickle_dumps_writes_comes_back_equal(value: Any, protocol: int) -> None:
    back = loads(pickle.dumps(value, protocol), ALLOWED)
    assert back == value
    assert type(back) is type(value)


def test_shared_and_recursive_references_are_kept() -> None:
    shared = [1]
    loop: list[Any] = []
    loop.append(loop)
    back = loads(pickle.dumps({"a": shared, "b": shared, "loop": loop}, 5), frozenset())
    assert back["a"] is back["b"] and back["loop"][0] is back["loop"]


def test_framework_types_come_back_by_their_own_paths() -> None:
    from agent_framework import Content, Message, WorkflowEvent

    message = Message(role="user", contents=["hi", Content.from_text("there")])
    event = WorkflowEvent.request_info(
        request_id="r1", source_executor_id="a", request_data=Point(1), response_type=str
    )
    back = loads(pickle.dumps([message, event], 5), ALLOWED)
    assert back[0].text == message.text and type(back[0].contents[1]) is Content
    assert vars(back[1]) == vars(event)  # request and response types come back as classes


def _refused(
    data: bytes, kind: type[Exception], match: str, allowed: frozenset[str] = ALLOWED
) -> None:
    with pytest.raises(kind, match=match):
        loads(data, allowed)


def _g(module: str, name: str) -> bytes:
    return f"c{module}\n{name}\n".encode()


def _s(text: str) -> bytes:
    return b"\x8c" + bytes([len(text)]) + text.encode()


_POINT = _g(__name__, "Point")


def test_a_class_outside_the_allow_list_is_blocked_by_name() -> None:
    with pytest.raises(Blocked) as caught:
        loads(pickle.dumps(Point(1)), frozenset())
    assert caught.value.type_key == f"{__name__}:Point"


def test_state_never_replaces_what_the_class_implements() -> None:
    for name in ("__class__", "__dict__", "__eq__", "__init__"):
        state = b"}" + _s(name) + _s("x") + b"s"
        _refused(b"\x80\x04" + _POINT + b")\x81" + state + b"b.", Tampered, "implements")


def test_an_enum_member_is_looked_up_never_made_or_changed() -> None:
    colour = _g(__name__, "Colour")
    _refused(b"\x80\x04" + colour + b")\x81.", Tampered, "new member")
    get_red = _g("builtins", "getattr") + colour + _s("RED") + b"\x86R"
    _refused(b"\x80\x04" + get_red + b"}" + _s("x") + b"K\x01sb.", Tampered, "did not create")
    _refused(b"\x80\x04" + colour + _s("green") + b"\x85R.", Damaged, "no member")
    assert loads(b"\x80\x04" + colour + _s("red") + b"\x85R.", ALLOWED) is Colour.RED
    combined = loads(b"\x80\x04" + _g(__name__, "Mode") + b"K\x03\x85R.", ALLOWED)
    assert combined == Mode.X | Mode.Y


def test_no_metaclass_and_no_type_is_a_value() -> None:
    _refused(b"\x80\x04" + _g("builtins", "type") + b".", Tampered, "as a value")
    meta = _g("pydantic._internal._model_construction", "ModelMetaclass")
    _refused(b"\x80\x04" + meta + b".", Tampered, "metaclass")
    model = _g(__name__, "Model")
    _refused(b"\x80\x04" + _g("builtins", "type") + model + b"\x85R.", Tampered, "builtins.type")


def test_only_builtin_types_make_a_defaultdict_factory() -> None:
    ddict = _g("collections", "defaultdict")
    _refused(b"\x80\x04" + ddict + _POINT + b"\x85R.", Tampered, "factory")
    _refused(b"\x80\x04" + ddict + _g("os", "getcwd") + b"\x85R.", Tampered, "not a class")


def test_object_reconstruction_only_from_object() -> None:
    recon = _g("copyreg", "_reconstructor")
    ok = b"\x80\x02" + recon + _POINT + _g("builtins", "object") + b"N\x87R."
    assert type(loads(ok, ALLOWED)) is Point
    bad = b"\x80\x02" + recon + _POINT + _g("builtins", "dict") + b"}\x87R."
    _refused(bad, Tampered, "base other than object")


def test_an_allowed_class_may_pickle_by_calling_itself_a_framework_class_may_not() -> None:
    assert loads(pickle.dumps(Reduced("v")), ALLOWED) == Reduced("v")
    _refused(pickle.dumps(Reduced("v")), Blocked, "not an allowed", frozenset())
    storage = _g("agent_framework._workflows._checkpoint", "FileCheckpointStorage")
    _refused(b"\x80\x04" + storage + _s("/tmp/x") + b"\x85R.", Tampered, "calls")


def test_a_finalizer_class_is_built_only_when_named() -> None:
    assert type(loads(pickle.dumps(Finalized()), ALLOWED)) is Finalized
    from foundry_checkpoint_maf import _unpickle

    assert _unpickle.FRAMEWORK_PREFIXES[0] == "agent_framework."


@pytest.mark.parametrize(
    ("stream", "match"),
    [
        (b"\x80\x05\x97.", "NEXT_BUFFER"),
        (b"\x80\x05C\x01x\x98.", "READONLY_BUFFER"),
        (b"\x80\x04P1\n.", "PERSID"),
        (b"\x80\x04\x82\x01.", "EXT1"),
        (b"\x80\x04](" + _POINT + b"o.", "OBJ"),
        (b"\x80\x04]h\x05.", "memo entry 5"),
        (b"\x80\x04]r\x00\x00\x00\x04.", "memo entry 67108864"),
        (b"\x80\x040.", "bottom of its stack"),
        (b"\x80\x04N0.", "other than one value"),
        (b"\x80\x041.", "mark it never set"),
        (b"\x80\x04NN.", "other than one value"),
        (b"\x80\x04N.N", "after its STOP"),
        (
            b"\x80\x04\x95\x01\x00\x00\x00\x00\x00\x00\x00\x95\x01\x00\x00\x00\x00\x00\x00\x00N.",
            "frame",
        ),
        (b"\x80\x04N\x8c\x01x\x8c\x01y\x86b.", "did not create"),
    ],
)
def test_streams_no_encoder_writes_are_tampering(stream: bytes, match: str) -> None:
    _refused(stream, Tampered, match)


@pytest.mark.parametrize("stream", [b"", b"\x80\x04", b"\x80\x04\x8c\x05ab", b"\xff."])
def test_broken_streams_are_damaged(stream: bytes) -> None:
    _refused(stream, Damaged, "")


def test_dates_decimals_and_ids_are_built_by_their_checked_constructors() -> None:
    values = [
        datetime.datetime(
            2025, 1, 2, 3, 4, 5, 6, tzinfo=datetime.timezone(datetime.timedelta(hours=-3), "X")
        ),
        datetime.time(1, 2, 3, tzinfo=datetime.timezone.utc),
        decimal.Decimal("-0.000"),
        uuid.uuid4(),
    ]
    for protocol in range(2, pickle.HIGHEST_PROTOCOL + 1):
        assert loads(pickle.dumps(values, protocol), frozenset()) == values
    huge = _g("builtins", "bytes") + b"J\x00\x00\x00\x40\x85R."  # bytes(2**30): no allocation
    _refused(b"\x80\x04" + huge, Tampered, "bytes")


def test_a_value_referenced_many_times_is_not_copied_without_bound() -> None:
    """``bytearray(<memo 0>)`` 20,000 times: 64 KiB each would be 1.3 GB from 200 KB."""
    big = b"B" + (65536).to_bytes(4, "little") + b"x" * 65536
    copy = _g("builtins", "bytearray") + b"h\x00\x85R0"
    stream = b"\x80\x04" + big + b"\x94" + copy * 20_000 + b"."
    _refused(stream, Tampered, "copies more")
    few = b"\x80\x04" + big + b"\x94" + copy * 3 + b"."
    assert loads(few, frozenset()) == b"x" * 65536


def test_nesting_deeper_than_the_limit_is_refused_however_it_is_reached() -> None:
    from foundry_checkpoint_maf._unpickle import MAX_NESTING

    nested: list[Any] = []
    for _ in range(MAX_NESTING - 1):
        nested = [nested]
    assert loads(pickle.dumps(nested), frozenset()) == nested  # exactly at the limit
    _refused(pickle.dumps([nested]), Damaged, "nests more than")
    # a chain each of whose links the root also holds directly, in the order that would make a
    # depth-first walk see every link at depth 1: the chain is what a recursive reader follows
    links: list[list[Any]] = [[] for _ in range(MAX_NESTING + 50)]
    for first, second in itertools.pairwise(links):
        first.append(second)
    _refused(pickle.dumps(links[::-1]), Damaged, "nests more than")
    loop: list[Any] = []
    loop.append(loop)  # a cycle is no depth
    assert loads(pickle.dumps([loop] * (MAX_NESTING * 2)), frozenset())[0][0] is not None
