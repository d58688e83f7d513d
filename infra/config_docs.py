"""The README's config reference table, generated from infra/config_schema.py.

`python -m infra.config_docs` prints it; tests/test_config_schema.py fails when the README's copy is stale.
"""
from __future__ import annotations

from infra.config_schema import DERIVED, KEYS, REQUIRED, Key


def _default(key: Key) -> str:
    if key.default is REQUIRED:
        return "**required**"
    if key.default is DERIVED:
        return "derived"
    if isinstance(key.default, bool):
        return f"`{str(key.default).lower()}`"
    if isinstance(key.default, tuple):
        return "`" + ", ".join(key.default) + "`" if key.default else "`[]`"
    return f"`{key.default}`" if key.default != "" else "(empty)"


def markdown_table() -> str:
    rows = ["| key | type | default | description |", "| --- | --- | --- | --- |"]
    for key in KEYS:
        description = key.description
        if key.choices:
            description += " One of: " + ", ".join(f"`{choice}`" for choice in key.choices) + "."
        rows.append(f"| `{key.name}` | {key.type} | {_default(key)} | {description} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown_table())
