"""The code blocks of README.md and docs/: extraction, markers, and output comparison.

Blocks are found by markdown-it-py (the CommonMark parser), never by regular expressions. A
block is run unless marked otherwise by an HTML comment on the line just above its fence::

    <!-- docs-test: setup=langgraph,maf -->   run after these fill-ins (see _doc_setups.py)
    <!-- docs-test: output -->                 expected output of the block above: compared
    <!-- docs-test: output-of=python samples/quickstart.py -->   ... of this command, run here
    <!-- docs-test: json-output -->            the same, compared as JSON (``…`` = anything)
    <!-- docs-test: background -->             a console block that starts a server: its
                                               printed lines are compared, it runs until the
                                               page ends, and the values it printed replace the
                                               example values in later blocks
    <!-- docs-test: signature -->              a signature: names, kinds and defaults compared
                                               with ``inspect.signature`` of the named class
    <!-- docs-test: install -->                ``pip install``/``make`` lines: not run; every
                                               extra must exist in pyproject.toml, every make
                                               target in the Makefile
    <!-- docs-test: slow -->                   not run (minutes long); checked by ``bash -n``
    <!-- docs-test: requires=PKG>=VERSION -->  run only where that version is installed (for
                                               example by ``make test-pre``); else compiled

A block that needs a real Azure resource starts with a visible comment, ``# needs Azure: …``,
so a reader sees it too; it is compiled (Python) or checked by ``bash -n`` (shell), not run.
The docs test counts every kind and fails on a block that is neither run nor marked.
"""

from __future__ import annotations

import doctest
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from markdown_it import MarkdownIt

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]

MARKER = re.compile(r"<!--\s*docs-test:\s*(.*?)\s*-->")
AZURE = "# needs Azure:"
PYTHON = {"python", "py", "pycon"}
SHELL = {"bash", "sh", "shell", "console"}
OUTPUT = {"text", "", "json"}
NOT_RUN = {"install", "slow", "azure", "requires"}


@dataclass
class Block:
    """One fenced block of a page, with what its marker asks."""

    page: Path
    line: int
    lang: str
    source: str
    options: dict[str, str] = field(default_factory=dict)

    @property
    def where(self) -> str:
        """``docs/x.md:12``: where the block starts."""
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def kind(self) -> str:
        """What the test does with the block."""
        for name in ("signature", "install", "slow", "output", "output-of", "json-output"):
            if name in self.options:
                return name
        if self.source.lstrip().startswith(AZURE):
            return "azure"
        if "requires" in self.options and not _installed(self.options["requires"]):
            return "requires"
        if "background" in self.options:
            return "background"
        if self.lang in PYTHON:
            return "python"
        if self.lang in SHELL:
            return "shell"
        return "unmarked"

    @property
    def setups(self) -> list[str]:
        """The fill-ins to run first, in order."""
        value = self.options.get("setup", "")
        return [name for name in value.split(",") if name]


def _installed(requirement: str) -> bool:
    """Whether ``PKG>=VERSION`` is satisfied by what is installed."""
    from importlib.metadata import PackageNotFoundError, version

    from packaging.requirements import Requirement

    wanted = Requirement(requirement)
    try:
        return wanted.specifier.contains(version(wanted.name), prereleases=True)
    except PackageNotFoundError:
        return False


def _options(text: str) -> dict[str, str]:
    options: dict[str, str] = {}
    for part in re.split(r"\s*;\s*|\s+(?=[a-z-]+(?:=|$))", text.strip()):
        if not part:
            continue
        name, _, value = part.partition("=")
        options[name.strip()] = value.strip()
    return options


def blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page``, in order, with its marker's options."""
    text = page.read_text(encoding="utf-8")
    lines = text.splitlines()
    found: list[Block] = []
    for token in MarkdownIt().parse(text):
        if token.type != "fence" or token.map is None:
            continue
        start = token.map[0]
        above = start - 1
        while above >= 0 and not lines[above].strip():
            above -= 1
        match = MARKER.search(lines[above]) if above >= 0 else None
        found.append(
            Block(
                page=page,
                line=start + 1,
                lang=token.info.strip().split(" ")[0],
                source=token.content,
                options=_options(match.group(1)) if match else {},
            )
        )
    return found


# --- output comparison ------------------------------------------------------------------------

_MASKS = [
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b"), "<uuid>"),
    (re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:[+-]\d\d:\d\d|Z)?"), "<time>"),
    (re.compile(r"(?<![\w.])(?:~|\.\.\.)?/[^\s'\",·]*"), "<path>"),
    (re.compile(r"[━─┏┓┗┛┡┩└┘┃│╇┳┻┼┬┴╋ ]+"), " "),
]


def normalize(text: str) -> str:
    """Mask what differs from run to run (ids, times, paths, table rules); ``…`` is ``...``."""
    text = text.replace("…", "...")
    for pattern, repl in _MASKS:
        text = pattern.sub(repl, text)
    return "\n".join(line.rstrip() for line in text.strip().splitlines()) + "\n"


def same_output(expected: str, actual: str) -> bool:
    """Whether ``actual`` is what ``expected`` shows: doctest's ELLIPSIS and whitespace rules."""
    checker = doctest.OutputChecker()
    flags = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    return checker.check_output(normalize(expected), normalize(actual), flags)


def same_json(expected: Any, actual: Any, path: str = "$") -> list[str]:
    """Differences between a JSON example (``…`` in a string matches anything) and real JSON."""
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{path}: expected an object"]
        problems = [f"{path}: keys {sorted(expected)} != {sorted(actual)}"]
        if set(expected) == set(actual):
            problems = []
            for key in expected:
                problems += same_json(expected[key], actual[key], f"{path}.{key}")
        return problems
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) < len(expected):
            return [f"{path}: expected a list of at least {len(expected)}"]
        return [p for i, e in enumerate(expected) for p in same_json(e, actual[i], f"{path}[{i}]")]
    if isinstance(expected, str) and isinstance(actual, str):
        ok = same_output(expected, actual) or re.fullmatch(
            ".*".join(re.escape(part) for part in expected.split("…")), actual
        )
        return [] if ok else [f"{path}: {expected!r} != {actual!r}"]
    if type(expected) is not type(actual):
        return [f"{path}: {expected!r} != {actual!r}"]
    return []


def json_output(expected: str, actual: str) -> list[str]:
    """Compare a JSON example with real JSON output."""
    return same_json(json.loads(expected), json.loads(actual))
