"""Pulumi.yaml's config schema, the code's key table and the config reference (docs/configuration.md) say the
same thing."""
from pathlib import Path

import yaml

from infra.config.docs import REFERENCE_PAGE, markdown_table
from infra.config.schema import KEYS, NAMESPACE
from preview.stack_files import load_stack_config
from infra.config import build
from tests.conftest import ALL_STACKS, COMMITTED_STACKS, build_stack

REPO = Path(__file__).resolve().parents[2]


def _keys_the_cli_requires(project: dict, stack_config: dict) -> list[str]:
    """The Pulumi CLI's rule (pulumi/pulumi sdk/go/common/workspace/config.go mergeConfig): a key of the project's
    namespace declared in Pulumi.yaml's `config:` with neither `default` nor `value`, and unset in the stack, makes
    `pulumi up` refuse the stack ("Stack 'dev' is missing configuration value ...")."""
    missing = []
    for name, declared in (project.get("config") or {}).items():
        key = name if ":" in name else f"{project['name']}:{name}"
        namespace = key.split(":", 1)[0]
        if (namespace == project["name"] and key not in stack_config
                and not (isinstance(declared, dict) and ("default" in declared or "value" in declared))):
            missing.append(key)
    return missing


def test_the_pulumi_cli_requires_no_key_a_stack_leaves_unset():
    """Pulumi.yaml once declared every key with a type and no default, which the CLI takes as "required": every
    committed stack (they set a handful of keys) would have been refused before the program ran. It now declares
    none; each stack file is checked against the CLI's rule as it reads Pulumi.yaml."""
    project = yaml.safe_load((REPO / "Pulumi.yaml").read_text())
    assert project["name"] == NAMESPACE
    assert "config" not in project, "regenerate with: .venv/bin/python -m infra.config.docs --write"
    for stack in ALL_STACKS:
        stack_file = yaml.safe_load((REPO / f"Pulumi.{stack}.yaml").read_text()) or {}
        assert _keys_the_cli_requires(project, stack_file.get("config") or {}) == [], stack
    # The rule as played here, on the old block: the dev stack would have missed most keys.
    old_block = {"name": NAMESPACE, "config": {key.name: {"type": key.type} for key in KEYS}}
    dev = (yaml.safe_load((REPO / "Pulumi.dev.yaml").read_text()) or {}).get("config") or {}
    assert len(_keys_the_cli_requires(old_block, dev)) > len(KEYS) // 2


def test_config_reference_table_is_current():
    page = (REPO / REFERENCE_PAGE).read_text()
    assert markdown_table() in page, "regenerate with: .venv/bin/python -m infra.config.docs --write"


def test_every_committed_stack_config_is_valid():
    assert {"dev", "prod"} <= set(COMMITTED_STACKS)
    for stack in ALL_STACKS:     # the shared cluster and its runs too (reading the cluster's outputs)
        build_stack(stack)
