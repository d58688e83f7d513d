"""The config reference's table (docs/configuration.md), generated from infra/config/schema.py, and Pulumi.yaml
kept free of a `config:` block.

`python -m infra.config.docs` prints the table; `--write` rewrites the table and Pulumi.yaml in place.
tests/infra/test_config_schema.py fails when either is stale.
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
# Why Pulumi.yaml declares no config: the Pulumi CLI treats a project config key declared without a default as
# required, and refuses every stack that leaves it unset ("Stack 'dev' is missing configuration value ...":
# pulumi/pulumi sdk/go/common/workspace/config.go mergeConfig). Most keys here are optional with no value of their
# own (unset means "derived" or "off"), and a declared default would be merged into every stack's config, so the
# config build could no longer tell a key the user set from one they did not (rules.check_applies needs that).
PULUMI_YAML_HEADER = ("# No `config:` block on purpose: the Pulumi CLI requires every key declared there without a default,\n"
                      "# and the keys' defaults live in infra/config/schema.py (one place; docs/configuration.md lists them).\n"
                      "# Regenerate with `.venv/bin/python -m infra.config.docs --write`.\n")


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


def write(repo: Path = REPO) -> None:
    project_file = repo / "Pulumi.yaml"
    project = yaml.safe_load(project_file.read_text())
    project.pop("config", None)
    project_file.write_text(PULUMI_YAML_HEADER + yaml.safe_dump(project, sort_keys=False, width=120))
    page_file = repo / REFERENCE_PAGE
    page = page_file.read_text()
    start = page.index(_TABLE_START)
    end = page.find("\n\n", start)
    page_file.write_text(page[:start] + markdown_table() + (page[end:] if end != -1 else "\n"))


if __name__ == "__main__":
    parser = OneLineParser(prog="python -m infra.config.docs", description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite docs/configuration.md's table and Pulumi.yaml")
    if parser.parse_args().write:
        write()
    else:
        print(markdown_table())
