"""Griffe extension for the API reference: ``Example:`` sections are Google examples sections.

The packages' docstrings title their doctests ``Example:`` (Google style allows the singular);
griffe's Google parser knows only ``Examples:``, and would render the doctest lines as Markdown
block quotes. This extension renames the section title before the docstring is parsed, so the
examples render as code.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

_EXAMPLE = re.compile(r"^(\s*)Example:[ \t]*$", re.M)


class ExampleSections(griffe.Extension):
    """Rename every ``Example:`` section title to ``Examples:``."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        """Rewrite ``obj``'s docstring as soon as the object is created."""
        if obj.docstring is not None:
            obj.docstring.value = _EXAMPLE.sub(r"\1Examples:", obj.docstring.value)
