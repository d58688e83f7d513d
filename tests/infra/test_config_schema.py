"""Pulumi.yaml's config schema, the code's key table and the config reference (docs/configuration.md) say the
same thing."""
from pathlib import Path

import yaml

from infra.config.docs import DECLARABLE_TYPES, REFERENCE_PAGE, markdown_table, pulumi_config_schema
from infra.config.schema import KEYS, NAMESPACE
from preview.stack_files import load_stack_config
from infra.config import build
from tests.conftest import ALL_STACKS, COMMITTED_STACKS, build_stack

REPO = Path(__file__).resolve().parents[2]


def test_pulumi_yaml_declares_every_key_with_type_and_description_and_no_defaults():
    project = yaml.safe_load((REPO / "Pulumi.yaml").read_text())
    assert project["name"] == NAMESPACE
    declared = project["config"]
    assert declared == pulumi_config_schema(), "regenerate with: .venv/bin/python -m infra.config.docs --write"
    declarable = [key for key in KEYS if key.type in DECLARABLE_TYPES]
    assert list(declared) == [key.name for key in declarable]
    assert [key.name for key in KEYS if key not in declarable] == ["maxtextSettings"]
    for key in declarable:
        entry = declared[key.name]
        assert entry["type"] == key.type, key.name
        assert entry["description"] == key.description, key.name
        assert "default" not in entry, f"{key.name}: defaults live in infra/config_schema.py only"


def test_config_reference_table_is_current():
    page = (REPO / REFERENCE_PAGE).read_text()
    assert markdown_table() in page, "regenerate with: .venv/bin/python -m infra.config.docs --write"


def test_every_committed_stack_config_is_valid():
    assert {"dev", "prod"} <= set(COMMITTED_STACKS)
    for stack in ALL_STACKS:     # the shared cluster and its runs too (reading the cluster's outputs)
        build_stack(stack)
