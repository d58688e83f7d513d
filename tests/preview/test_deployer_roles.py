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
# What the printed grants give on the project (actAs is granted by the stack, on the node account only).
ALWAYS_ON_PROJECT = {role.role for role in ROLES if role.when == "always" and role.on == "project"}


def _types(run) -> set[str]:
    return {r.type for r in run.resources if r.custom}


@pytest.mark.parametrize("stack", COMMITTED_STACKS)
def test_every_type_a_committed_stack_registers_has_a_role(stack):
    roles = {role.role for role in roles_for(_types(committed_stack_run(stack)))}
    assert ALWAYS <= roles


# The default worker image, built by Cloud Build (workerEnvironment=image, imageBuilder=cloud-build).
IMAGE_ROLES = {"roles/artifactregistry.admin", "roles/cloudbuild.builds.editor"}
RUNTIME = {"workerEnvironment": "runtime"}


ADMIN = {"adminBootstrap": "true"}
ADMIN_STEP = {"roles/iam.serviceAccountAdmin", "roles/iam.roleAdmin"}


@pytest.mark.parametrize("overrides, extra_role", [
    ({**RUNTIME, "adminBootstrap": "false"}, ADMIN_STEP),
    ({"adminBootstrap": "false"}, ADMIN_STEP | IMAGE_ROLES),
    (RUNTIME, None),
    ({**RUNTIME, "dcn": "true"}, "roles/compute.securityAdmin"),
    ({**RUNTIME, "zone": "us-central1-c", "tpuGeneration": "tpu7x", "tpuTopology": "2x2x4"},
     "roles/compute.instanceAdmin.v1"),
    ({"imageBuilder": "docker"}, "roles/artifactregistry.admin"),
    ({}, IMAGE_ROLES),
    ({"workerEnvironment": "image"}, IMAGE_ROLES),
])
def test_roles_follow_what_the_config_creates(overrides, extra_role):
    """With the admin's step (adminBootstrap: true) the stack creates no service account and no custom role, so
    the deployer needs neither roles/iam.serviceAccountAdmin nor roles/iam.roleAdmin."""
    roles = {role.role for role in roles_for(_types(run_program({**MINIMAL, **ADMIN, **overrides})))}
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
    return re.findall(r"gcloud projects add-iam-policy-binding (\S+)\s+--member=(\S+)\s+--role=(\S+)", joined)


PROJECT = "acme-train-1"


def test_grants_for_a_dcn_stack_include_the_firewall_role_and_are_ready_to_paste(capsys):
    """prod has dcn: its allow-internal firewall rules need roles/compute.securityAdmin, which the grants for
    'every stack' leave out; it builds the default worker image, which needs the registry and build roles."""
    code, out, _ = _grants(capsys, "--grants", "--stack", "prod", "--project", PROJECT, "--member", "me@example.com")
    assert code == 0
    granted = _granted(out)
    reader = f"projects/{PROJECT}/roles/tpuGoodput_tpu_multislice_prod_admin"
    assert {role for _, _, role in granted} == (
        (ALWAYS_ON_PROJECT | {"roles/compute.securityAdmin"} | IMAGE_ROLES) - ADMIN_STEP) | {reader}
    assert {(project, member) for project, member, _ in granted} == {(PROJECT, "user:me@example.com")}
    assert "YOU@" not in out
    assert max(len(line) for line in out.splitlines()) <= 100


def test_grants_for_a_run_stack_take_its_cluster_s_project_and_refuse_in_one_line(capsys):
    """A run stack (clusterStack) states no project or clusterName of its own: its grants read them from its
    cluster stack, as the program does (once a traceback: its config was built without the cluster's outputs)."""
    code, out, err = _grants(capsys, "--grants", "--stack", "team-8b", "--member", "me@example.com")
    assert code != 0 and "Traceback" not in err and "placeholder" in err   # the cluster's project: the placeholder
    code, out, err = _grants(capsys, "--grants", "--stack", "team-8b", "--project", PROJECT, "--member",
                             "me@example.com")
    assert code == 0 and "Traceback" not in err
    assert {(project, member) for project, member, _ in _granted(out)} == {(PROJECT, "user:me@example.com")}


def test_grants_take_the_project_and_member_given(capsys):
    code, out, _ = _grants(capsys, "--grants", "--project", "other-project", "--member",
                           "deployer@other-project.iam.gserviceaccount.com")
    assert code == 0
    granted = _granted(out)
    assert {role for _, _, role in granted} == ALWAYS_ON_PROJECT | {
        "projects/other-project/roles/tpuGoodput_tpu_multislice_admin"}
    assert {(p, m) for p, m, _ in granted} == {
        ("other-project", "serviceAccount:deployer@other-project.iam.gserviceaccount.com")}
    assert "roles/compute.securityAdmin (dcn=true)" in out     # what it left out is named
    assert max(len(line) for line in out.splitlines()) <= 100


@pytest.mark.parametrize("argv, words", [
    (["--grants", "--project", "p-123456"], "--grants and --admin-script need --member"),
    (["--grants", "--member", "me@example.com"], "--grants needs --project"),
    (["--grants", "--project", "p-123456", "--member", "me"], "--member='me' is not an e-mail"),
    (["--grants", "--stack", "nope", "--member", "me@example.com"], "--stack='nope': no such stack"),
    (["--member", "me@example.com"], "go with --grants"),
    # The committed stacks' project is a placeholder: a grant on it would name a project nobody has.
    (["--grants", "--stack", "dev", "--member", "me@example.com"], "--project=my-tpu-project is the committed"),
    (["--admin-script", "--project", "my-tpu-project", "--member", "me@example.com"], "placeholder"),
])
def test_grants_refuse_what_they_cannot_print_in_one_line_each(capsys, argv, words):
    code, out, err = _grants(capsys, *argv)
    assert code == 2 and out == ""
    assert words in err and all(len(line) <= 100 for line in err.splitlines())


def test_grants_for_a_stack_print_no_offline_warning(caplog):
    """Offline the program cannot list the run's checkpoints; that is the plan's normal state (its assumptions say
    so), not a warning for a command that only prints roles."""
    import logging
    from preview.deployer_roles import stack_roles
    with caplog.at_level(logging.WARNING):
        stack_roles("dev", REPO)
    assert [r.getMessage() for r in caplog.records if "Cloud Storage" in r.getMessage()] == []


# ---- least privilege: the documented condition, no role that grants itself more ---------------------------------

def _conditions(out: str) -> list[tuple[str, str]]:
    """(role, CEL expression) of every printed --condition other than None, as gcloud reads it: the value after
    the `^;^` delimiter, key `expression` (https://cloud.google.com/sdk/gcloud/reference/topic/escaping)."""
    import re
    found = []
    for command in re.split(r"\n(?=gcloud )", out):
        match = re.search(r'--role=(\S+).*--condition="\^;\^(.*?)"', command, re.DOTALL)
        if match:
            fields = dict(part.split("=", 1) for part in match.group(2).split(";"))
            found.append((match.group(1), "".join(fields["expression"].split())))
    return found


def _listed(expression: str) -> list[str]:
    import re
    [inner] = re.findall(r"\.hasOnly\(\[(.*)\]\)$", expression)
    return [item.strip().strip("'") for item in inner.split(",")]


# IAM "Set limits on granting roles" (https://cloud.google.com/iam/docs/setting-limits-on-granting-roles): the
# documented form, whitespace aside, with at most 10 role constants.
DOCUMENTED = "api.getAttribute('iam.googleapis.com/modifiedGrantsByRole',[]).hasOnly(["


@pytest.mark.parametrize("stack", COMMITTED_STACKS)
def test_project_iam_admin_is_conditioned_on_exactly_the_roles_the_stack_grants(capsys, stack):
    """Unconditioned, roles/resourcemanager.projectIamAdmin lets the deployer grant itself Owner. The printed grant
    carries the documented hasOnly form over exactly the roles the stack's gcp.projects.IAMMember resources grant
    (read from the program's registrations, run as after the admin's step), the custom role named in the
    --project given: a grant added to the stack without its role in the condition fails this test (and would fail
    `pulumi up` with 403)."""
    code, out, _ = _grants(capsys, "--grants", "--stack", stack, "--project", PROJECT, "--member", "me@example.com")
    assert code == 0
    run = run_program({**_stack_raw(stack), **ADMIN}, stack=stack)
    project_roles = {r.inputs["role"].replace("my-tpu-project", PROJECT)
                     for r in run.of_type("gcp:projects/iAMMember:IAMMember")}
    conditions = _conditions(out)
    assert [role for role, _ in conditions] == ["roles/resourcemanager.projectIamAdmin"]
    [(_, expression)] = conditions
    assert expression.startswith(DOCUMENTED) and expression.endswith("])")
    listed = _listed(expression)
    assert set(listed) == project_roles and len(listed) <= 10
    assert any(role.startswith(f"projects/{PROJECT}/roles/") for role in listed)
    assert "roles/owner" not in listed and "roles/resourcemanager.projectIamAdmin" not in listed
    # No unconditioned projectIamAdmin, and no role that can change roles or every service account's policy.
    roles = [role for _, _, role in _granted(out)]
    assert roles.count("roles/resourcemanager.projectIamAdmin") == 1
    assert not set(roles) & ADMIN_STEP
    assert max(len(line) for line in out.splitlines()) <= 100


def _stack_raw(stack: str) -> dict:
    from preview.stack_files import load_stack_config
    return load_stack_config(stack, REPO)


def test_a_grant_the_condition_does_not_name_is_caught():
    """The condition is computed from the resources: a project grant added to the stack shows up in it, and an
    eleventh role is refused rather than printed as a condition IAM would reject."""
    from preview.deployer_roles import GrantedRoles, conditions, granted_roles
    run = committed_stack_run("dev")
    before = granted_roles(run.resources)
    extra = type(run.resources[0])(**{**run.resources[0].__dict__, "type": "gcp:projects/iAMMember:IAMMember",
                                     "inputs": {"role": "roles/bigquery.dataViewer"}})
    after = granted_roles([*run.resources, extra])
    assert "roles/bigquery.dataViewer" in _listed("".join(conditions(after)[0][1].split()))
    assert "roles/bigquery.dataViewer" not in _listed("".join(conditions(before)[0][1].split()))
    with pytest.raises(ValueError, match="at most 10"):
        conditions(GrantedRoles(tuple(f"roles/r{i}" for i in range(11))))


def test_the_admin_step_and_the_deployers_grants_are_printed_apart(capsys):
    """--admin-script: the APIs the look-ups need, the two accounts, the goodput role (each only if missing);
    then, apart, the deployer's grants, with actAs on those two accounts alone."""
    code, out, _ = _grants(capsys, "--admin-script", "--stack", "prod", "--project", PROJECT,
                           "--member", "me@example.com")
    assert code == 0
    admin, _, grants = out.partition("\n\n# The deployer's grants")
    assert grants, "the deployer's grants follow the admin's step as a block of their own"
    assert "gcloud services enable --project=acme-train-1" in admin and "  cloudbuild.googleapis.com" in admin
    for account in ("tpu-multislice-prod-nodes", "tpu-multislice-prod-builds"):
        assert f"gcloud iam service-accounts create {account} --project={PROJECT}" in admin
        assert f"  {account}@{PROJECT}.iam.gserviceaccount.com \\\n  --project={PROJECT} " \
               "--member=user:me@example.com \\\n  --role=roles/iam.serviceAccountUser" in grants
    assert "gcloud iam roles create tpuGoodput_tpu_multislice_prod_admin --project=acme-train-1" in admin
    assert "add-iam-policy-binding" not in admin
    assert "pulumi config set adminBootstrap true --stack prod" in grants
    assert max(len(line) for line in out.splitlines()) <= 100


def test_the_admin_script_runs_and_is_idempotent(tmp_path, capsys):
    """Run with a stand-in gcloud: the first run creates the accounts and the role, a second creates nothing
    (describe finds them)."""
    import os
    import stat
    import subprocess
    from preview.deployer_roles import Deployment, admin_script
    script = admin_script(Deployment(project=PROJECT, member="user:me@example.com"))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    gcloud = bin_dir / "gcloud"
    gcloud.write_text(f"""#!/bin/sh
d={tmp_path}
echo "$*" >> "$d/calls"
case "$*" in
  *" describe "*) [ -f "$d/made" ] || exit 1
                 while read -r m; do case "$4" in "$m"|"$m"@*) exit 0;; esac; done < "$d/made"; exit 1;;
  *" create "*) echo "$4" >> "$d/made";;
esac
""")
    gcloud.chmod(gcloud.stat().st_mode | stat.S_IEXEC)
    env = {**os.environ, "PATH": f"{bin_dir}:/usr/bin:/bin"}
    for _ in range(2):
        done = subprocess.run(["/bin/sh", "-c", script], env=env, capture_output=True, text=True, timeout=30)
        assert done.returncode == 0, done.stderr
    calls = (tmp_path / "calls").read_text().splitlines()
    creates = [c for c in calls if " create " in c]
    assert len(creates) == 3                       # two accounts and the role, once each
    assert sum(c.startswith("services enable") for c in calls) == 2


def test_after_the_admin_step_the_stack_creates_no_account_role_or_act_as_grant():
    """adminBootstrap: true: the accounts and the goodput role are the admin's (created once, never deleted by
    the stack); the cluster and pools run as the admin's node account, the build as its build account, and the
    pods' goodput grant names the admin's role."""
    run = run_program({**MINIMAL, **ADMIN}, stack="adm")
    for kind in ("gcp:serviceaccount/account:Account", "gcp:serviceaccount/iAMMember:IAMMember",
                 "gcp:projects/iAMCustomRole:IAMCustomRole"):
        assert run.of_type(kind) == [], kind
    node = "tpu-multislice-nodes@my-tpu-project.iam.gserviceaccount.com"
    pools = run.of_type("gcp:container/nodePool:NodePool")
    assert pools and {p.inputs["nodeConfig"]["serviceAccount"] for p in pools} == {node}
    assert "--service-account=projects/my-tpu-project/serviceAccounts/tpu-multislice-builds@" in run.one(
        "command:local:Command", "worker-build").inputs["create"]
    roles = {g.inputs["role"] for g in run.of_type("gcp:projects/iAMMember:IAMMember")}
    assert "projects/my-tpu-project/roles/tpuGoodput_tpu_multislice_admin" in roles


def test_without_the_deployers_e_mail_the_stack_goes_on_and_says_which_grant_is_missing(caplog):
    """Credentials whose user info has no e-mail (no userinfo.email scope): nothing is granted on the node account,
    and one warning names the grant (terraform-provider-google data_source_google_client_openid_userinfo.go)."""
    from preview import harness
    from preview.harness import GcpMocks, RecordingMonitor

    class NoUserInfo(GcpMocks):
        def call(self, args):
            if args.token == harness.CLIENT_USER_INFO_TOKEN:
                return {}, [("email", "googleapi: Error 401: Request is missing required authentication "
                                      "credential, unauthorized")]
            return super().call(args)

    from infra.config import build
    from preview.harness import run_program
    from tests.conftest import MINIMAL
    caplog.clear()
    run = run_program(MINIMAL, stack="nouser", monitor=RecordingMonitor(NoUserInfo()))
    assert run.of_type("gcp:serviceaccount/iAMMember:IAMMember") == []
    assert run.of_type("gcp:container/cluster:Cluster")
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "who runs pulumi up is not known:\n  (googleapi: Error 401" in text
    assert "gcloud iam service-accounts add-iam-policy-binding" in text and "--role=roles/iam.serviceAccountUser" in text
    # Both accounts the deployer acts as: the node account and the image build's (the default build).
    names = build(MINIMAL).names
    for account in (names.node_service_account, names.build_service_account):
        assert f"    {account}@my-tpu-project.iam.gserviceaccount.com \\" in text.splitlines()
    assert text.count("--role=roles/iam.serviceAccountUser") == 2
    warning = next(r.getMessage() for r in caplog.records if "is not known" in r.getMessage())
    assert max(len(line) for line in warning.splitlines()) <= 100


def test_after_the_admin_step_an_unknown_deployer_is_no_warning(caplog):
    """adminBootstrap: true: actAs on both accounts came with the admin's step, so credentials without an e-mail
    leave nothing to grant and nothing to warn about."""
    from preview import harness
    from preview.harness import GcpMocks, RecordingMonitor, run_program

    class NoUserInfo(GcpMocks):
        def call(self, args):
            if args.token == harness.CLIENT_USER_INFO_TOKEN:
                return {}, [("email", "googleapi: Error 401: unauthorized")]
            return super().call(args)

    caplog.clear()
    run_program({**MINIMAL, **ADMIN}, stack="adm", monitor=RecordingMonitor(NoUserInfo()))
    assert not any("is not known" in r.getMessage() for r in caplog.records)
