"""A thread's checkpoints as a tree: for the terminal, Mermaid and Graphviz ``dot``.

A checkpoint history forks: time travel (``invoke`` from an older checkpoint) and
``update_state`` start a new branch from an older checkpoint. :func:`build` turns the summary
rows of ``history`` (newest first, with ``parent_checkpoint_id``) into one :class:`Node` forest
per namespace; :func:`text_lines`, :func:`mermaid` and :func:`dot` draw it. Every label is
stored data, so each renderer escapes it for its own syntax (and the terminal output goes
through ``visible``).

Example:
    >>> rows = [
    ...     {"checkpoint_id": "3", "parent_checkpoint_id": "1", "checkpoint_ns": "", "step": 1,
    ...      "source": "update", "pending_writes": 0},
    ...     {"checkpoint_id": "2", "parent_checkpoint_id": "1", "checkpoint_ns": "", "step": 1,
    ...      "source": "loop", "pending_writes": 0},
    ...     {"checkpoint_id": "1", "parent_checkpoint_id": None, "checkpoint_ns": "", "step": 0,
    ...      "source": "input", "pending_writes": 0},
    ... ]
    >>> print("\\n".join(text_lines(build(rows)[""])))
    1  step 0 · input
    ├─ 2  step 1 · loop
    └─ 3  step 1 · update  ← head
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Node", "build", "dot", "mermaid", "text_lines"]


@dataclass
class Node:
    """One checkpoint in the tree, its children oldest first."""

    checkpoint_id: str
    parent_id: str | None
    ns: str
    step: Any
    source: Any
    writes: int
    interrupted: bool = False
    head: bool = False
    children: list[Node] = field(default_factory=list)

    @property
    def label(self) -> str:
        """``<id>  step <n> · <source>`` plus the markers (writes, interrupt, head)."""
        text = f"{self.checkpoint_id}  step {self.step} · {self.source}"
        if self.writes:
            text += f"  [{self.writes} pending write(s)]"
        if self.interrupted:
            text += "  [interrupt]"
        if self.head:
            text += "  ← head"
        return text


def build(
    rows: Sequence[Mapping[str, Any]], interrupted: Iterable[str] = ()
) -> dict[str, list[Node]]:
    """The forest of each namespace from ``history`` rows (newest first): its roots, oldest
    first. The head of a namespace is its newest checkpoint (what ``get_tuple`` returns);
    ``interrupted`` names the checkpoints whose pending writes hold an interrupt."""
    marked = set(interrupted)
    nodes: dict[tuple[str, str], Node] = {}
    order: list[Node] = []
    for item in reversed(rows):  # oldest first
        ns = item.get("checkpoint_ns") or ""
        node = Node(
            checkpoint_id=str(item["checkpoint_id"]),
            parent_id=item.get("parent_checkpoint_id"),
            ns=ns,
            step=item.get("step"),
            source=item.get("source"),
            writes=int(item.get("pending_writes") or 0),
        )
        node.interrupted = node.checkpoint_id in marked
        nodes[(ns, node.checkpoint_id)] = node
        order.append(node)
    forest: dict[str, list[Node]] = {}
    for node in order:
        parent = nodes.get((node.ns, node.parent_id)) if node.parent_id else None
        if parent is None:
            forest.setdefault(node.ns, []).append(node)
        else:
            parent.children.append(node)
    seen: set[str] = set()
    for item in rows:  # newest first: the first row of each namespace is its head
        ns = item.get("checkpoint_ns") or ""
        if ns not in seen:
            seen.add(ns)
            nodes[(ns, str(item["checkpoint_id"]))].head = True
    return dict(sorted(forest.items()))


def text_lines(roots: Sequence[Node]) -> list[str]:
    """The tree as text lines: a chain stays in one column, a fork opens ``├─``/``└─``."""
    lines: list[str] = []

    def draw(node: Node, first: str, rest: str) -> None:
        current = node
        lines.append(first + current.label)
        while len(current.children) == 1:
            current = current.children[0]
            lines.append(rest + current.label)
        for index, child in enumerate(current.children):
            last = index == len(current.children) - 1
            draw(child, rest + ("└─ " if last else "├─ "), rest + ("   " if last else "│  "))

    for root in roots:
        draw(root, "", "")
    return lines


def _walk(roots: Sequence[Node]) -> list[Node]:
    out: list[Node] = []
    stack = list(reversed(roots))
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(reversed(node.children))
    return out


def _mermaid_text(text: str) -> str:
    """Text safe inside a Mermaid ``"..."`` label (entity codes for the characters it parses)."""
    codes = {'"': "#quot;", "<": "#lt;", ">": "#gt;", "#": "#35;", "&": "#amp;", "\n": " "}
    return "".join(codes.get(c, c) if c.isprintable() or c == "\n" else "?" for c in text)


def mermaid(forest: Mapping[str, Sequence[Node]]) -> str:
    """A Mermaid ``flowchart`` (oldest at the top); the head is drawn with a thick border."""
    lines = ["flowchart TD"]
    index: dict[int, str] = {}
    for ns, roots in forest.items():
        nodes = _walk(roots)
        if ns:
            lines.append(f'  subgraph ns{len(index)}["{_mermaid_text(ns)}"]')
        for node in nodes:
            name = index.setdefault(id(node), f"c{len(index)}")
            label = _mermaid_text(node.label.replace("  ← head", "")).replace("  ", "<br/>", 1)
            lines.append(f'  {name}["{label}"]')
        if ns:
            lines.append("  end")
        for node in nodes:
            for child in node.children:
                lines.append(f"  {index[id(node)]} --> {index[id(child)]}")
        for node in nodes:
            if node.head:
                lines.append(f"  class {index[id(node)]} head")
            elif node.interrupted:
                lines.append(f"  class {index[id(node)]} interrupt")
    lines.append("  classDef head stroke-width:4px")
    lines.append("  classDef interrupt stroke-dasharray:5 5")
    return "\n".join(lines) + "\n"


def _dot_text(text: str) -> str:
    """Text safe inside a ``dot`` ``"..."`` string."""
    out = text.replace("\\", "\\\\").replace('"', '\\"')
    return "".join(c if c.isprintable() else " " for c in out)


def dot(forest: Mapping[str, Sequence[Node]]) -> str:
    """A Graphviz digraph (oldest at the top); the head is bold, interrupts dashed."""
    lines = ["digraph checkpoints {", "  rankdir=TB;", "  node [shape=box];"]
    index: dict[int, str] = {}
    for roots in forest.values():
        nodes = _walk(roots)
        for node in nodes:
            name = index.setdefault(id(node), f"c{len(index)}")
            label = _dot_text(node.label.replace("  ← head", ""))
            if node.ns:
                label = f"{_dot_text(node.ns)}\\n{label}"
            style = "bold" if node.head else "dashed" if node.interrupted else "solid"
            lines.append(f'  {name} [label="{label}", style={style}];')
        for node in nodes:
            for child in node.children:
                lines.append(f"  {index[id(node)]} -> {index[id(child)]};")
    lines.append("}")
    return "\n".join(lines) + "\n"
