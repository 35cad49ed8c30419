"""Fuzz LangGraph's strict decoding: seeded hostile msgpack extensions, under an audit hook.

A seeded generator writes msgpack documents an attacker could store as a channel value or a
pending write: every extension code LangGraph defines (0-7) and others, naming builtins, ``os``,
``subprocess``, ``importlib``, ``functools``, ``operator``, ``pickle``, pydantic internals and
LangGraph's own modules; the allowed classes (LangGraph's safe set, a pydantic model, a
dataclass, an enum and a named tuple of the graph) with hostile arguments and methods;
extensions nested up to 80 deep; truncated, bit-flipped and random bytes; headers claiming
huge lengths. Each case is decoded the way every read path of the saver decodes
(``Context.loads`` with the ``StrictSerializer`` of a graph that declares those types).

Each case must end as a value or as a ``CorruptPayloadError`` (``UnsafeValueError`` when it
names something refused), without an audit event for an import, ``exec``/``compile``, an
``os``/``subprocess``/``shutil`` call or a file opened for writing; no module appears in
``sys.modules``, and traced memory stays bounded. The counts are printed past pytest's output
capture.
"""

from __future__ import annotations

import collections
import dataclasses
import enum
import random
import sys
import time
import tracemalloc
from typing import Any, Final, NamedTuple

import ormsgpack
import pytest
from azure.ai.agentserver.core import FoundryAgentRequestContext
from langchain_core.messages import AIMessage, HumanMessage
from pydantic import BaseModel

from foundry_checkpoint import CorruptPayloadError
from foundry_checkpoint._langgraph._context import Caches, Context
from foundry_checkpoint._serde import StrictSerializer, UnsafeValueError
from foundry_checkpoint.adapter import Call, Caller

from ._audit import watching

FUZZ_SEED: Final = 20251201
FUZZ_CASES: Final = 12_000
MEMORY_LIMIT: Final = 64 * 2**20


class FuzzColor(enum.Enum):
    RED = "red"
    BLUE = 2


class FuzzPair(NamedTuple):
    left: int
    right: str


@dataclasses.dataclass
class FuzzData:
    x: int
    pair: FuzzPair | None = None


class FuzzModel(BaseModel):
    name: str
    data: list[FuzzData] = []
    color: FuzzColor = FuzzColor.RED


ALLOWED: Final = frozenset(
    (c.__module__, c.__qualname__) for c in (FuzzColor, FuzzPair, FuzzData, FuzzModel)
)

HOSTILE_NAMES: Final = [
    ("builtins", "eval"), ("builtins", "exec"), ("builtins", "compile"), ("builtins", "open"),
    ("builtins", "__import__"), ("builtins", "getattr"), ("builtins", "setattr"),
    ("builtins", "type"), ("builtins", "object"), ("builtins", "print"), ("builtins", "input"),
    ("builtins", "breakpoint"), ("builtins", "globals"), ("builtins", "vars"),
    ("os", "system"), ("os", "popen"), ("os", "remove"), ("os", "mkdir"), ("os", "execv"),
    ("os", "putenv"), ("os", "kill"), ("posix", "system"), ("nt", "system"),
    ("subprocess", "Popen"), ("subprocess", "run"), ("subprocess", "call"),
    ("subprocess", "check_output"), ("importlib", "import_module"), ("importlib", "reload"),
    ("importlib.util", "find_spec"), ("functools", "partial"), ("functools", "reduce"),
    ("operator", "attrgetter"), ("operator", "methodcaller"), ("operator", "itemgetter"),
    ("pickle", "loads"), ("marshal", "loads"), ("codecs", "decode"), ("ctypes", "CDLL"),
    ("shutil", "rmtree"), ("tempfile", "mkdtemp"), ("runpy", "run_path"), ("code", "interact"),
    ("pydantic", "TypeAdapter"), ("pydantic", "ImportString"), ("pydantic.types", "ImportString"),
    ("pydantic._internal._validators", "import_string"), ("pydantic.main", "BaseModel"),
    ("pydantic", "create_model"), ("pydantic_settings", "BaseSettings"),
    ("pydantic.functional_validators", "field_validator"), ("typing", "ForwardRef"),
    ("langgraph.checkpoint.serde.jsonplus", "JsonPlusSerializer"),
    ("langgraph.checkpoint.memory", "InMemorySaver"), ("langgraph.graph", "StateGraph"),
    ("langchain_core.load", "loads"), ("foundry_checkpoint", "FoundryCheckpointer"),
    ("antigravity", "geohash"), ("this", "s"), ("__main__", "Anything"), ("", ""),
    ("tests.security.test_fuzz_msgpack", "FuzzModel.__init__"),
]  # fmt: skip
SAFE_NAMES: Final = [
    ("datetime", "datetime"), ("datetime", "date"), ("datetime", "time"),
    ("datetime", "timedelta"), ("datetime", "timezone"), ("uuid", "UUID"),
    ("decimal", "Decimal"), ("builtins", "set"), ("builtins", "frozenset"),
    ("collections", "deque"), ("ipaddress", "IPv4Address"), ("ipaddress", "IPv6Network"),
    ("pathlib", "Path"), ("pathlib", "PosixPath"), ("zoneinfo", "ZoneInfo"), ("re", "compile"),
    ("langchain_core.messages.human", "HumanMessage"), ("langchain_core.messages.ai", "AIMessage"),
    ("langchain_core.messages.tool", "ToolMessage"), ("langchain_core.documents.base", "Document"),
    ("langgraph.types", "Send"), ("langgraph.types", "Command"), ("langgraph.types", "Interrupt"),
    ("langgraph.store.base", "Item"), *sorted(ALLOWED),
]  # fmt: skip
METHODS: Final = [
    "fromisoformat", "fromtimestamp", "write_text", "write_bytes", "unlink", "mkdir", "open",
    "__reduce__", "__init_subclass__", "__class__", "model_validate", "model_construct",
    "parse_raw", "__setattr__", "system", None, 7,
]  # fmt: skip
HUGE_HEADERS: Final = [
    b"\xdd\xff\xff\xff\xff",  # array32 of 4 Gi items
    b"\xdf\xff\xff\xff\xff",  # map32 of 4 Gi pairs
    b"\xdb\xff\xff\xff\xff",  # str32 of 4 GiB
    b"\xc6\xff\xff\xff\xff",  # bin32 of 4 GiB
    b"\xc9\xff\xff\xff\xff\x01",  # ext32 of 4 GiB, code 1
    b"\xc9\x7f\xff\xff\xff\x05",  # ext32 of 2 GiB, code 5
    b"\xdc\xff\xff" + b"\xc0" * 10,  # array16 of 65535 with 10 present
]


class Hostile:
    """Seeded hostile msgpack documents (``bytes``), one per :meth:`case`."""

    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.valid = self._valid_documents()

    @staticmethod
    def _valid_documents() -> list[bytes]:
        serde = StrictSerializer(sorted(ALLOWED))
        values: list[Any] = [
            FuzzModel(name="m", data=[FuzzData(1, FuzzPair(2, "b"))], color=FuzzColor.BLUE),
            {"messages": [HumanMessage("hi"), AIMessage("hello")]},
            [FuzzPair(1, "a"), FuzzColor.RED, {"d": FuzzData(3)}],
        ]
        return [serde.dumps_typed(v)[1] for v in values]

    def scalar(self) -> Any:
        rng = self.rng
        pick = rng.randrange(12)
        if pick == 0:
            return rng.choice([0, -1, 2**63 - 1, -(2**63), 2**64 - 1])
        if pick == 1:
            return rng.random() * 10 ** rng.randrange(-300, 300)
        if pick == 2:
            return "x" * rng.randrange(0, 5000)
        if pick == 3:
            return rng.choice(["", "../../etc/passwd", "/etc/passwd", "__import__('os')", "\x00"])
        if pick == 4:
            return rng.randbytes(rng.randrange(0, 64))
        if pick == 5:
            return None
        if pick == 6:
            return rng.choice([True, False])
        if pick == 7:
            return rng.choice(["(a+)+$", "a{1000000}", "(?P<x>" * 50, "[", "\\"])
        if pick == 8:
            return rng.choice(["Europe/Berlin", "UTC", "../../etc/passwd", "Foo/Bar", "/abs"])
        if pick == 9:
            return rng.choice(["__class__", "__globals__", "__init__", "__dict__", "model_config"])
        return rng.randrange(-1000, 1000)

    def value(self, depth: int) -> Any:
        rng = self.rng
        if depth > 3 or rng.random() < 0.45:
            return self.scalar()
        if rng.random() < 0.25:
            return self.ext(depth + 1)
        if rng.random() < 0.5:
            return [self.value(depth + 1) for _ in range(rng.randrange(0, 5))]
        return {str(self.scalar())[:40]: self.value(depth + 1) for _ in range(rng.randrange(0, 4))}

    def ext(self, depth: int = 0) -> ormsgpack.Ext:
        rng = self.rng
        code = rng.choice([0, 1, 2, 3, 4, 5, 0, 1, 2, 5, 6, 7, rng.randrange(8, 128)])
        names = SAFE_NAMES if rng.random() < 0.5 else HOSTILE_NAMES
        module, name = rng.choice(names)
        if code == 7:
            return ormsgpack.Ext(7, ormsgpack.packb(self.value(depth + 1)))
        if code == 6:
            fields: list[Any] = [rng.choice(["<i4", "O", "V8", "|S3"]), [2, 2], "C", b"\x00" * 16]
        elif code == 0:
            fields = [module, name, self.value(depth + 1)]
        elif code in (1, 2, 4, 5) and rng.random() < 0.5:
            fields = [module, name, {str(self.scalar())[:20]: self.value(depth + 1)}]
        elif code == 3:
            fields = [module, name, self.value(depth + 1), rng.choice(METHODS)]
        else:
            fields = [module, name, [self.value(depth + 1) for _ in range(rng.randrange(0, 4))]]
        if rng.random() < 0.1:
            fields = fields[: rng.randrange(0, len(fields))]  # too short
        if rng.random() < 0.05:
            fields[0:2] = [rng.randrange(10), [module]]  # not strings
        return ormsgpack.Ext(code, ormsgpack.packb(fields))

    def nested(self) -> bytes:
        """Extensions nested ``depth`` deep, each a constructor holding the next."""
        depth = self.rng.randrange(1, 81)
        module, name = self.rng.choice(SAFE_NAMES + HOSTILE_NAMES)
        inner: Any = self.scalar()
        for _ in range(depth):
            inner = ormsgpack.Ext(
                self.rng.choice([0, 1, 7]), ormsgpack.packb([module, name, inner])
            )
        return ormsgpack.packb({"deep": inner})

    def case(self) -> tuple[str, bytes]:
        rng = self.rng
        kind = rng.randrange(10)
        if kind <= 4:
            return "ext", ormsgpack.packb(self.value(0) if kind == 0 else self.ext())
        if kind == 5:
            return "nested", self.nested()
        if kind == 6:  # a valid document, truncated
            data = rng.choice(self.valid)
            return "truncated", data[: rng.randrange(0, len(data))]
        if kind == 7:  # a valid document, a few bytes flipped
            flipped = bytearray(rng.choice(self.valid))
            for _ in range(rng.randrange(1, 4)):
                flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
            return "flipped", bytes(flipped)
        if kind == 8:
            if rng.random() < 0.3:  # an extension with a negative code (ext 8, raw bytes)
                body = rng.randbytes(rng.randrange(0, 40))
                code = rng.randrange(-128, 0).to_bytes(1, "big", signed=True)
                return "huge", b"\xc7" + bytes([len(body)]) + code + body
            return "huge", rng.choice(HUGE_HEADERS) + rng.randbytes(rng.randrange(0, 16))
        return "random", rng.randbytes(rng.randrange(0, 200))


def _report(capsys: pytest.CaptureFixture[str], line: str) -> None:
    """Print ``line`` past pytest's capture, so the counts show in every run's output."""
    with capsys.disabled():
        print(f"\n{line}")


def test_hostile_msgpack_never_runs_anything(capsys: pytest.CaptureFixture[str]) -> None:
    serde = StrictSerializer().widened(ALLOWED)
    call = Call(Caller("user:fuzz"), FoundryAgentRequestContext())
    # decoding reads only the serializer: no core (store) behind this context
    ctx = Context(core=None, serde=serde, caches=Caches(), call=call)  # type: ignore[arg-type]
    generator = Hostile(FUZZ_SEED)
    for document in generator.valid:  # the legitimate values decode (and warm lazy imports)
        assert ctx.loads(("msgpack", document)) is not None
    classes = [FuzzColor, FuzzPair, FuzzData, FuzzModel, StrictSerializer]
    before = {c.__qualname__: dict(vars(c)) for c in classes}
    modules_before = set(sys.modules)
    outcomes: collections.Counter[str] = collections.Counter()
    kinds: collections.Counter[str] = collections.Counter()
    failures: list[str] = []
    started = time.perf_counter()
    tracemalloc.start()
    try:
        with watching() as seen:
            for number in range(FUZZ_CASES):
                kind, data = generator.case()
                kinds[kind] += 1
                try:
                    ctx.loads(("msgpack", data))
                    outcomes["value"] += 1
                except UnsafeValueError:
                    outcomes["UnsafeValueError"] += 1
                except CorruptPayloadError:
                    outcomes["CorruptPayloadError"] += 1
                except Exception as exc:  # never: every refusal is typed
                    failures.append(f"case {number}: {type(exc).__name__}: {exc} {data[:200]!r}")
                if seen:
                    failures.append(f"case {number} raised audit events {seen} for {data[:200]!r}")
                    seen.clear()
                if len(failures) > 5:
                    break
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    elapsed = time.perf_counter() - started
    assert failures == []
    assert set(sys.modules) == modules_before
    assert {c.__qualname__: dict(vars(c)) for c in classes} == before
    assert peak < MEMORY_LIMIT, peak
    assert sum(outcomes.values()) == FUZZ_CASES
    assert {"value", "UnsafeValueError", "CorruptPayloadError"} <= set(outcomes), outcomes
    _report(
        capsys,
        f"LangGraph msgpack fuzz: {FUZZ_CASES} cases (seed {FUZZ_SEED}) in {elapsed:.1f} s, "
        f"peak {peak / 2**20:.1f} MiB: {outcomes['value']} values, "
        f"{outcomes['UnsafeValueError']} UnsafeValueError, "
        f"{outcomes['CorruptPayloadError']} other CorruptPayloadError; cases by kind "
        + ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())),
    )
