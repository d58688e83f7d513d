"""The roles the deploying account needs (preview/deployer_roles.py) cover every resource type any stack registers,
follow from what a config creates, and the deploy guide's table is generated from them."""
from __future__ import annotations

from pathlib import Path

import pytest

from preview.deployer_roles import ROLES, markdown_table, roles_for
from preview.harness import run_program
from tests.conftest import COMMITTED_STACKS, MINIMAL, committed_stack_run

REPO = Path(__file__).resolve().parents[2]
ALWAYS = {role.role for role in ROLES if role.when == "always"}


def _types(run) -> set[str]:
    return {r.type for r in run.resources if r.custom}


@pytest.mark.parametrize("stack", COMMITTED_STACKS)
def test_every_type_a_committed_stack_registers_has_a_role(stack):
    roles = {role.role for role in roles_for(_types(committed_stack_run(stack)))}
    assert ALWAYS <= roles


@pytest.mark.parametrize("overrides, extra_role", [
    ({}, None),
    ({"dcn": "true"}, "roles/compute.securityAdmin"),
    ({"zone": "us-central1-c", "tpuGeneration": "tpu7x", "tpuTopology": "2x2x4"}, "roles/compute.instanceAdmin.v1"),
    ({"workerEnvironment": "image"}, "roles/artifactregistry.admin"),
])
def test_roles_follow_what_the_config_creates(overrides, extra_role):
    roles = {role.role for role in roles_for(_types(run_program({**MINIMAL, **overrides})))}
    assert roles == ALWAYS | ({extra_role} if extra_role else set())


def test_an_unknown_resource_type_is_not_silently_allowed():
    with pytest.raises(KeyError, match="gcp:sql/databaseInstance:DatabaseInstance"):
        roles_for({"gcp:sql/databaseInstance:DatabaseInstance"})


def test_the_deploy_guide_lists_exactly_these_roles():
    guide = (REPO / "docs" / "deploying.md").read_text()
    assert markdown_table() in guide, "regenerate with: .venv/bin/python -m preview.deployer_roles"
