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


@pytest.mark.parametrize("overrides, extra_role", [
    (RUNTIME, None),
    ({**RUNTIME, "dcn": "true"}, "roles/compute.securityAdmin"),
    ({**RUNTIME, "zone": "us-central1-c", "tpuGeneration": "tpu7x", "tpuTopology": "2x2x4"},
     "roles/compute.instanceAdmin.v1"),
    ({"imageBuilder": "docker"}, "roles/artifactregistry.admin"),
    ({}, IMAGE_ROLES),
    ({"workerEnvironment": "image"}, IMAGE_ROLES),
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
    return re.findall(r"gcloud projects add-iam-policy-binding (\S+)\s+--member=(\S+)\s+--role=(\S+)", joined)


def test_grants_for_a_dcn_stack_include_the_firewall_role_and_are_ready_to_paste(capsys):
    """prod has dcn: its allow-internal firewall rules need roles/compute.securityAdmin, which the grants for
    'every stack' leave out; it builds the default worker image, which needs the registry and build roles."""
    code, out, _ = _grants(capsys, "--grants", "--stack", "prod", "--member", "me@example.com")
    assert code == 0
    granted = _granted(out)
    assert {role for _, _, role in granted} == ALWAYS_ON_PROJECT | {"roles/compute.securityAdmin"} | IMAGE_ROLES
    assert {(project, member) for project, member, _ in granted} == {("my-tpu-project", "user:me@example.com")}
    assert "PROJECT" not in out and "YOU@" not in out
    assert max(len(line) for line in out.splitlines()) <= 100


def test_grants_take_the_project_and_member_given(capsys):
    code, out, _ = _grants(capsys, "--grants", "--project", "other-project", "--member",
                           "deployer@other-project.iam.gserviceaccount.com")
    assert code == 0
    granted = _granted(out)
    assert {role for _, _, role in granted} == ALWAYS_ON_PROJECT
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


def test_grants_for_a_stack_print_no_offline_warning(caplog):
    """Offline the program cannot list the run's checkpoints; that is the plan's normal state (its assumptions say
    so), not a warning for a command that only prints roles."""
    import logging
    from preview.deployer_roles import stack_roles
    with caplog.at_level(logging.WARNING):
        stack_roles("dev", REPO)
    assert [r.getMessage() for r in caplog.records if "Cloud Storage" in r.getMessage()] == []


# ---- least privilege: a conditional projectIamAdmin, actAs on the node account only -------------------------

def _conditions(out: str) -> list[tuple[str, str]]:
    """(role, CEL expression) of every printed --condition other than None, as gcloud reads it: the value after
    the `^;^` delimiter, key `expression` (https://cloud.google.com/sdk/gcloud/reference/topic/escaping)."""
    import re
    found = []
    for command in re.split(r"\n(?=gcloud )", out):
        match = re.search(r"--role=(\S+).*--condition='\^;\^(.*?)'", command, re.DOTALL)
        if match:
            fields = dict(part.split("=", 1) for part in match.group(2).split(";"))
            found.append((match.group(1), " ".join(fields["expression"].split())))
    return found


def _listed(expression: str) -> set[str]:
    import re
    [inner] = re.findall(r"\.hasOnly\(\[(.*)\]\)$", expression)
    return {item.strip().strip('"') for item in inner.split(",")}


@pytest.mark.parametrize("stack", COMMITTED_STACKS)
def test_project_iam_admin_is_conditioned_on_exactly_the_roles_the_stack_grants(capsys, stack):
    """Unconditioned, roles/resourcemanager.projectIamAdmin lets the deployer grant itself Owner. The printed grant
    carries `modifiedGrantsByRole ... hasOnly([...])` (https://cloud.google.com/iam/docs/conditions-attribute-
    reference#modified-grants-by-role) over exactly the predefined roles the stack's gcp.projects.IAMMember
    resources grant, read here from the program's registrations: a grant added to the stack without its role in
    the condition fails this test (and would fail `pulumi up` with 403)."""
    code, out, _ = _grants(capsys, "--grants", "--stack", stack, "--member", "me@example.com")
    assert code == 0
    run = committed_stack_run(stack)
    project_roles = {r.inputs["role"] for r in run.of_type("gcp:projects/iAMMember:IAMMember")}
    predefined = {role for role in project_roles if role.startswith("roles/")}
    custom = project_roles - predefined
    conditions = _conditions(out)
    assert {role for role, _ in conditions} == {"roles/resourcemanager.projectIamAdmin"}
    prefix = 'api.getAttribute("iam.googleapis.com/modifiedGrantsByRole", [])'
    [exact] = [e for _, e in conditions if ".hasOnly(" in e]
    assert exact.startswith(prefix) and _listed(exact) == predefined
    assert "roles/owner" not in _listed(exact) and "roles/resourcemanager.projectIamAdmin" not in _listed(exact)
    # The goodput reader's id is new per creation: its condition names the stem every id of this cluster has.
    stems = [e.split('startsWith("')[1].split('"')[0] for _, e in conditions if ".all(" in e]
    assert len(custom) == 1 and len(stems) == 1 and next(iter(custom)).startswith(stems[0])
    # No unconditioned projectIamAdmin is printed beside them.
    assert all(role != "roles/resourcemanager.projectIamAdmin" for _, _, role in _granted(out.replace(
        "--role=roles/resourcemanager.projectIamAdmin \\\n  --condition='", "--role=conditional \\\n")))
    assert max(len(line) for line in out.splitlines()) <= 100


def test_a_grant_the_condition_does_not_name_is_caught(capsys):
    """The condition is computed from the resources: a project grant added to the stack shows up in it."""
    from preview.deployer_roles import GrantedRoles, conditions, granted_roles
    run = committed_stack_run("dev")
    before = granted_roles(run.resources)
    extra = type(run.resources[0])(**{**run.resources[0].__dict__, "type": "gcp:projects/iAMMember:IAMMember",
                                     "inputs": {"role": "roles/bigquery.dataViewer"}})
    after = granted_roles([*run.resources, extra])
    assert "roles/bigquery.dataViewer" in _listed(conditions(after)[0][1])
    assert "roles/bigquery.dataViewer" not in _listed(conditions(before)[0][1])
    assert isinstance(after, GrantedRoles)


def test_act_as_is_granted_by_the_stack_on_its_own_accounts_alone_before_what_runs_as_them(capsys):
    """roles/iam.serviceAccountUser on the project acts as every service account. The node account and the
    workers' image build account exist only once the stack creates them, so the stack grants the deployer (who
    runs `pulumi up`, from the provider's OpenID user info) actAs on each of those accounts alone, and what runs
    as them waits for that grant (the cluster and node pools; the build it submits): the printed project grants,
    in order, then `pulumi up`, need nothing else
    (https://cloud.google.com/kubernetes-engine/docs/how-to/service-accounts,
    https://cloud.google.com/build/docs/securing-builds/configure-user-specified-service-accounts)."""
    from preview import harness
    code, out, _ = _grants(capsys, "--grants", "--stack", "prod", "--member", "me@example.com")
    assert "roles/iam.serviceAccountUser" not in {role for _, _, role in _granted(out)}
    run = committed_stack_run("prod")
    grants = {g.name: g for g in run.of_type("gcp:serviceaccount/iAMMember:IAMMember")}
    accounts = {"nodes-deployer-act-as": "nodes", "builder-deployer-act-as": "worker-builder"}
    assert set(grants) == set(accounts)
    for grant, account_name in accounts.items():
        act_as, account = grants[grant], run.one("gcp:serviceaccount/account:Account", account_name)
        assert act_as.inputs["role"] == "roles/iam.serviceAccountUser"
        assert act_as.inputs["member"] == f"user:{harness.FAKE_DEPLOYER}"
        assert act_as.inputs["serviceAccountId"] == (
            f"projects/{account.inputs['project']}/serviceAccounts/{account.inputs['accountId']}@"
            f"{account.inputs['project']}.iam.gserviceaccount.com")
    runs_as_nodes = run.of_type("gcp:container/cluster:Cluster") + run.of_type("gcp:container/nodePool:NodePool")
    assert runs_as_nodes and all(grants["nodes-deployer-act-as"].urn in r.dependencies for r in runs_as_nodes)
    build = run.one("command:local:Command", "worker-build")
    assert grants["builder-deployer-act-as"].urn in build.dependencies


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
