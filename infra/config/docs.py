"""Pulumi.yaml's config schema and the config reference's table (docs/configuration.md), generated from
infra/config/schema.py.

`python -m infra.config.docs` prints the table; `--write` rewrites both files in place.
tests/infra/test_config_schema.py fails when either copy is stale.
"""
from __future__ import annotations

from pathlib import Path

import yaml

from core.cli_errors import OneLineParser
from infra.config.schema import DERIVED, KEYS, REQUIRED, Key

REPO = Path(__file__).resolve().parents[2]
TABLE_HEADER = "| key | type | default | applies to | description |"
# How write() finds the table, whatever columns an older copy had.
REFERENCE_PAGE = "docs/configuration.md"
_TABLE_START = "| key | type | default |"
PULUMI_YAML_HEADER = ("# Config schema: types and descriptions only. Defaults live in infra/config/schema.py (one place);\n"
                      "# regenerate with `.venv/bin/python -m infra.config.docs --write`.\n")


def _default(key: Key) -> str:
    if key.default is REQUIRED:
        return "**required**"
    if key.default is DERIVED:
        return "derived"
    if isinstance(key.default, bool):
        return f"`{str(key.default).lower()}`"
    if key.type == "object":
        return "`{}`"
    if isinstance(key.default, tuple):
        return "`" + ", ".join(key.default) + "`" if key.default else "`[]`"
    return f"`{key.default}`" if key.default != "" else "(empty)"


def _applies_to(key: Key) -> str:
    """When the key does something, e.g. `workloadBackend=rayjob`; "all" when always. Setting it otherwise is
    refused (rules.check_applies)."""
    if not key.applies_to:
        return "all"
    return ", ".join(f"`{condition.describe()}`" for condition in key.applies_to)


def markdown_table() -> str:
    rows = [TABLE_HEADER, "| --- | --- | --- | --- | --- |"]
    for key in KEYS:
        description = key.description
        if key.choices:
            description += " One of: " + ", ".join(f"`{choice}`" for choice in key.choices) + "."
        rows.append(f"| `{key.name}` | {key.type} | {_default(key)} | {_applies_to(key)} | {description} |")
    return "\n".join(rows)


# Pulumi project config declares string, integer, boolean and array keys only (pulumi/pulumi
# sdk/go/common/workspace/project.json, simpleConfigType); a map-valued key stays undeclared there, which the CLI
# accepts, and is checked by the stack's own config build like every other key.
DECLARABLE_TYPES = ("string", "integer", "boolean", "array")


def pulumi_config_schema() -> dict:
    schema = {}
    for key in KEYS:
        if key.type not in DECLARABLE_TYPES:
            continue
        entry: dict = {"type": key.type, "description": key.description}
        if key.type == "array":
            entry["items"] = {"type": "string"}
        schema[key.name] = entry
    return schema


def write(repo: Path = REPO) -> None:
    project_file = repo / "Pulumi.yaml"
    project = yaml.safe_load(project_file.read_text())
    project["config"] = pulumi_config_schema()
    project_file.write_text(PULUMI_YAML_HEADER + yaml.safe_dump(project, sort_keys=False, width=120))
    page_file = repo / REFERENCE_PAGE
    page = page_file.read_text()
    start = page.index(_TABLE_START)
    end = page.find("\n\n", start)
    page_file.write_text(page[:start] + markdown_table() + (page[end:] if end != -1 else "\n"))


if __name__ == "__main__":
    parser = OneLineParser(prog="python -m infra.config.docs", description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite Pulumi.yaml's config block and docs/configuration.md's table")
    if parser.parse_args().write:
        write()
    else:
        print(markdown_table())
