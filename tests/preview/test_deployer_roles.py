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
    ({"workerEnvironment": "image", "imageBuilder": "docker"}, "roles/artifactregistry.admin"),
    ({"workerEnvironment": "image"}, ("roles/artifactregistry.admin", "roles/cloudbuild.builds.editor")),
])
def test_roles_follow_what_the_config_creates(overrides, extra_role):
    roles = {role.role for role in roles_for(_types(run_program({**MINIMAL, **overrides})))}
    extra = {extra_role} if isinstance(extra_role, str) else set(extra_role or ())
    assert roles == ALWAYS | extra


def test_an_unknown_resource_type_is_not_silently_allowed():
    with pytest.raises(KeyError, match="gcp:sql/databaseInstance:DatabaseInstance"):
        roles_for({"gcp:sql/databaseInstance:DatabaseInstance"})


def test_the_deploy_guide_lists_exactly_these_roles():
    guide = (REPO / "docs" / "deploying.md").read_text()
    assert markdown_table() in guide, "regenerate with: .venv/bin/python -m preview.deployer_roles"


def _grants(capsys, *argv: str) -> tuple[int, str, str]:
    from preview.deployer_roles import main
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _granted(out: str) -> list[tuple[str, str, str]]:
    """(project, member, role) of every pasted command, continuation lines joined as the shell joins them."""
    import re
    joined = out.replace("\\\n", " ")
    return re.findall(r"gcloud projects add-iam-policy-binding (\S+) --condition=None\s+--member=(\S+)\s+--role=(\S+)",
                      joined)


def test_grants_for_a_dcn_stack_include_the_firewall_role_and_are_ready_to_paste(capsys):
    """prod has dcn: its allow-internal firewall rules need roles/compute.securityAdmin, which the grants for
    'every stack' leave out."""
    code, out, _ = _grants(capsys, "--grants", "--stack", "prod", "--member", "me@example.com")
    assert code == 0
    granted = _granted(out)
    assert {role for _, _, role in granted} == ALWAYS | {"roles/compute.securityAdmin"}
    assert {(project, member) for project, member, _ in granted} == {("my-tpu-project", "user:me@example.com")}
    assert "PROJECT" not in out and "YOU@" not in out
    assert max(len(line) for line in out.splitlines()) <= 100


def test_grants_take_the_project_and_member_given(capsys):
    code, out, _ = _grants(capsys, "--grants", "--project", "other-project", "--member",
                           "deployer@other-project.iam.gserviceaccount.com")
    assert code == 0
    granted = _granted(out)
    assert {role for _, _, role in granted} == ALWAYS
    assert {(p, m) for p, m, _ in granted} == {
        ("other-project", "serviceAccount:deployer@other-project.iam.gserviceaccount.com")}
    assert "roles/compute.securityAdmin (dcn=true)" in out     # what it left out is named
    assert max(len(line) for line in out.splitlines()) <= 100


@pytest.mark.parametrize("argv, words", [
    (["--grants", "--project", "p-123456"], "--grants needs --member"),
    (["--grants", "--member", "me@example.com"], "--grants needs --project"),
    (["--grants", "--project", "p-123456", "--member", "me"], "--member='me' is not an e-mail"),
    (["--grants", "--stack", "nope", "--member", "me@example.com"], "--stack='nope': no such stack"),
    (["--member", "me@example.com"], "go with --grants"),
])
def test_grants_refuse_what_they_cannot_print_in_one_line_each(capsys, argv, words):
    code, out, err = _grants(capsys, *argv)
    assert code == 2 and out == ""
    assert words in err and all(len(line) <= 100 for line in err.splitlines())
