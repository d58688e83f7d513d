"""Text for a terminal: every line of the offline plan fits WIDTH columns.

Long lines are wrapped at spaces with a hanging indent that keeps the resource tree's guides, so the tree still
reads as a tree; a single word longer than the room left (a URL) is split. `--json` is the form for machines and
keeps every value whole.
"""
from __future__ import annotations

import re
import textwrap

WIDTH = 100
# Leading part of a line that a wrapped continuation must repeat: tree guides and indentation.
_TREE_PREFIX = re.compile(r"^((?:[│ ] {2})*)([├└]─ )?")
_INDENT = re.compile(r"^( *)(- )?")


def _prefixes(line: str) -> tuple[str, str]:
    """(first-line prefix, continuation prefix) of a line."""
    tree = _TREE_PREFIX.match(line)
    if tree and tree.group(2):
        guides, branch = tree.group(1), tree.group(2)
        below = "│  " if branch.startswith("├") else "   "
        return guides + branch, guides + below + "    "
    indent = _INDENT.match(line)
    spaces, bullet = indent.group(1), indent.group(2) or ""
    return spaces + bullet, spaces + (" " * len(bullet)) + "    "


def fit_line(line: str, width: int = WIDTH) -> list[str]:
    if len(line) <= width:
        return [line]
    first, rest = _prefixes(line)
    body = line[len(first):]
    return textwrap.wrap(body, width=width, initial_indent=first, subsequent_indent=rest,
                         break_long_words=True, break_on_hyphens=False, replace_whitespace=False,
                         drop_whitespace=True) or [line[:width]]


def fit(text: str, width: int = WIDTH) -> str:
    """Every line of `text` at most `width` columns."""
    return "\n".join(part for line in text.split("\n") for part in fit_line(line, width))
