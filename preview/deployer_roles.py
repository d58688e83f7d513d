"""The IAM roles the account that runs `pulumi up` needs, derived from the resource types the stack registers.

Each resource type maps to the predefined role whose permissions create, change and delete it; the deploy guide's
table (docs/deploying.md) is generated from this module (`python -m preview.deployer_roles`) and
tests/preview/test_deployer_roles.py fails when a stack registers a type this table does not cover, or when the
guide's table is stale.

Two steps (`--admin-script` prints both, `--grants` the second): the admin's step, once per project, enables the
APIs the first `up`'s look-ups need and creates the node and image-build service accounts and the goodput reader
role (adminBootstrap: true makes the stack use them); then the deployer's grants, which the admin runs too: the
project roles below, projectIamAdmin under the documented condition naming exactly the roles the stack grants,
read access to the build's log, and actAs on the stack's two accounts alone. The deployer then holds no
roles/iam.roleAdmin and no project-level roles/iam.serviceAccountAdmin, so it cannot grant itself more than the
stack grants (IAM "Set limits on granting roles"). The owner or editor basic roles also work, but carry far more
than a deployment needs.
"""
from __future__ import annotations

import re
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from core.cli_errors import EXIT_USAGE, OneLineParser, refuse
from infra.identity import ACT_AS_ROLE


@dataclass(frozen=True)
class DeployerRole:
    role: str
    why: str              # what of the stack needs it
    source: str           # where Google documents what the role grants
    when: str = "always"  # the configs that register the types it covers
    verified: bool = True  # False: the role is the likely one, but no source read here names the permission
    on: str = "project"   # where it is granted: the project, or the node account (the stack grants it there)


ROOT = Path(__file__).resolve().parent.parent
NODE_ACCOUNT = "the node and image-build service accounts alone"
_IAM_COMPUTE = "https://cloud.google.com/compute/docs/access/iam"
ROLES: tuple[DeployerRole, ...] = (
    DeployerRole("roles/serviceusage.serviceUsageAdmin", "enable the APIs the stack needs (ProjectServices)",
                 "https://cloud.google.com/service-usage/docs/access-control"),
    DeployerRole("roles/compute.networkAdmin", "VPCs, subnets, Cloud Router and NAT (ClusterNetwork)",
                 _IAM_COMPUTE + " (network admin: networking resources except firewall rules)"),
    DeployerRole("roles/compute.securityAdmin", "the DCN networks' allow-internal firewall rules",
                 _IAM_COMPUTE + " (security admin: firewall rules)", when="dcn=true"),
    DeployerRole("roles/compute.instanceAdmin.v1", "the workload policy that places TPU7x slices",
                 _IAM_COMPUTE, when="tpuGeneration=tpu7x", verified=False),
    DeployerRole("roles/iam.serviceAccountAdmin", "the node and build service accounts, when the stack creates "
                 "them; never the deployer's with the admin's step (with it, it could grant itself actAs on any "
                 "account of the project)",
                 "https://cloud.google.com/iam/docs/service-account-permissions",
                 when="adminBootstrap=false"),
    DeployerRole("roles/iam.serviceAccountUser", "create the cluster and node pools that run as the node service "
                 "account, and submit the image build that runs as the build account (actAs); granted on those "
                 "accounts alone, by the admin's step (or by the stack with adminBootstrap=false), never on the "
                 "project (which would act as every service account)",
                 "https://cloud.google.com/kubernetes-engine/docs/how-to/service-accounts", on=NODE_ACCOUNT),
    DeployerRole("roles/resourcemanager.projectIamAdmin",
                 "project-level grants to the node account and the training pods (goodput, logging, image "
                 "streaming); granted with the documented condition that allows exactly the roles the stack "
                 "grants, at most 10 (unconditioned, it could grant Owner)",
                 "https://cloud.google.com/iam/docs/setting-limits-on-granting-roles"),
    DeployerRole("roles/iam.roleAdmin", "the goodput log reader custom role (one permission: "
                 "logging.logEntries.list) that replaces roles/logging.viewer, when the stack creates it; never "
                 "the deployer's with the admin's step (it could add permissions to a role it may grant)",
                 "https://cloud.google.com/iam/docs/creating-custom-roles", when="adminBootstrap=false"),
    DeployerRole("roles/container.admin",
                 "the GKE cluster and node pools, and every Kubernetes object (namespaces, RBAC of the Helm "
                 "charts, RayCluster/RayJob, JobSet, Kueue) through the cluster's API",
                 "https://cloud.google.com/kubernetes-engine/docs/how-to/iam"),
    DeployerRole("roles/storage.admin", "the checkpoint bucket and its IAM bindings",
                 "https://cloud.google.com/storage/docs/access-control/iam-roles"),
    DeployerRole("roles/monitoring.dashboardEditor", "the Cloud Monitoring dashboard",
                 "https://cloud.google.com/monitoring/access-control"),
    DeployerRole("roles/artifactregistry.admin", "the worker image repository, its reader grant, the image push",
                 "https://cloud.google.com/artifact-registry/docs/access-control",
                 when="workerEnvironment=image, the default"),
    DeployerRole("roles/cloudbuild.builds.editor", "submit the worker image's build (gcloud builds submit) and "
                 "wait for it", "https://cloud.google.com/build/docs/iam-roles-permissions",
                 when="the default image build: imageBuilder=cloud-build"),
)
_BY_ROLE = {role.role: role for role in ROLES}

# Resource type token -> the role that manages it. Kubernetes objects go through the cluster's API, which GKE
# authorises through IAM (container.admin: full access to the Kubernetes API objects) and RBAC.
_TYPE_ROLE: dict[str, str] = {
    "gcp:projects/service:Service": "roles/serviceusage.serviceUsageAdmin",
    "gcp:compute/network:Network": "roles/compute.networkAdmin",
    "gcp:compute/subnetwork:Subnetwork": "roles/compute.networkAdmin",
    "gcp:compute/router:Router": "roles/compute.networkAdmin",
    "gcp:compute/routerNat:RouterNat": "roles/compute.networkAdmin",
    "gcp:compute/firewall:Firewall": "roles/compute.securityAdmin",
    "gcp:compute/resourcePolicy:ResourcePolicy": "roles/compute.instanceAdmin.v1",
    "gcp:serviceaccount/account:Account": "roles/iam.serviceAccountAdmin",
    # iam.serviceAccounts.setIamPolicy, in serviceAccountAdmin (https://cloud.google.com/iam/docs/
    # service-account-permissions): the deployer's actAs on the node account.
    "gcp:serviceaccount/iAMMember:IAMMember": "roles/iam.serviceAccountAdmin",
    "gcp:projects/iAMMember:IAMMember": "roles/resourcemanager.projectIamAdmin",
    "gcp:projects/iAMCustomRole:IAMCustomRole": "roles/iam.roleAdmin",
    "gcp:container/cluster:Cluster": "roles/container.admin",
    "gcp:container/nodePool:NodePool": "roles/container.admin",
    "gcp:storage/bucket:Bucket": "roles/storage.admin",
    "gcp:storage/bucketIAMMember:BucketIAMMember": "roles/storage.admin",
    "gcp:monitoring/dashboard:Dashboard": "roles/monitoring.dashboardEditor",
    "gcp:artifactregistry/repository:Repository": "roles/artifactregistry.admin",
    "gcp:artifactregistry/repositoryIamMember:RepositoryIamMember": "roles/artifactregistry.admin",
    "docker-build:index:Image": "roles/artifactregistry.admin",
    # imageBuilder=cloud-build: the build the command submits (its staging bucket and account are rows above).
    "command:local:Command": "roles/cloudbuild.builds.editor",
}
# Node pools and clusters that run as a user-managed service account also need actAs on it.
_ALSO = {"gcp:container/nodePool:NodePool": ("roles/iam.serviceAccountUser",),
         "gcp:container/cluster:Cluster": ("roles/iam.serviceAccountUser",),
         # A build that runs as the stack's build account: the submitter acts as it
         # (https://cloud.google.com/build/docs/securing-builds/configure-user-specified-service-accounts).
         "command:local:Command": ("roles/iam.serviceAccountUser",)}


def role_for(resource_type: str) -> str | None:
    """The role that manages a registered resource type; None when the table has no row for it."""
    if resource_type.startswith("kubernetes:") or resource_type == "pulumi:providers:kubernetes":
        return "roles/container.admin"
    return _TYPE_ROLE.get(resource_type)


def roles_for(resource_types: set[str]) -> list[DeployerRole]:
    """The roles a deployment of these resource types needs, in the table's order. Raises KeyError naming a type
    the table does not cover."""
    needed: set[str] = set()
    for resource_type in resource_types:
        role = role_for(resource_type)
        if role is None:
            raise KeyError(f"no deployer role for resource type {resource_type}")
        needed.add(role)
        needed.update(_ALSO.get(resource_type, ()))
    return [role for role in ROLES if role.role in needed]


def markdown_table() -> str:
    rows = ["| role | what it is for | needed when | granted on | source |", "| --- | --- | --- | --- | --- |"]
    for role in ROLES:
        source = role.source if role.verified else f"{role.source} (assumed: no source read names the permission)"
        rows.append(f"| `{role.role}` | {role.why} | {role.when} | {role.on} | {source} |")
    return "\n".join(rows)


# ---- the condition on roles/resourcemanager.projectIamAdmin ----------------------------------------------------

PROJECT_GRANT = "gcp:projects/iAMMember:IAMMember"
# IAM "Set limits on granting roles" (https://cloud.google.com/iam/docs/setting-limits-on-granting-roles): a
# condition on a role-granting role, in exactly this form, allows a setIamPolicy call only when every role it adds
# or removes is in the list: api.getAttribute('iam.googleapis.com/modifiedGrantsByRole', []).hasOnly([...]), with
# at most 10 role names, each a string constant. The same page warns that a principal who may also change custom
# roles (roles/iam.roleAdmin) can add permissions to a role the list allows; so the deployer holds no roleAdmin:
# the one custom role the stack grants is created by the admin's step (adminBootstrap, infra/identity.py).
_MODIFIED = "api.getAttribute('iam.googleapis.com/modifiedGrantsByRole', [])"
MAX_LISTED_ROLES = 10
PLACEHOLDER_PROJECT = "my-tpu-project"


@dataclass(frozen=True)
class GrantedRoles:
    """The project-level roles a stack grants (its gcp.projects.IAMMember resources), by full name."""
    predefined: tuple[str, ...]
    custom: tuple[str, ...] = ()

    def __or__(self, other: "GrantedRoles") -> "GrantedRoles":
        return GrantedRoles(tuple(sorted({*self.predefined, *other.predefined})),
                            tuple(sorted({*self.custom, *other.custom})))


def granted_roles(resources) -> GrantedRoles:
    """From what the program registered (preview.harness Registration list)."""
    roles = {r.inputs["role"] for r in resources if r.type == PROJECT_GRANT}
    return GrantedRoles(tuple(sorted(role for role in roles if role.startswith("roles/"))),
                        tuple(sorted(role for role in roles if role.startswith("projects/"))))


def conditions(granted: GrantedRoles) -> list[tuple[str, str]]:
    """(title, CEL expression) of the projectIamAdmin binding: the documented form, naming every role the stack
    grants as a constant. Raises ValueError past the page's limit of 10."""
    roles = [*granted.predefined, *granted.custom]
    if len(roles) > MAX_LISTED_ROLES:
        raise ValueError(f"{len(roles)} roles to list; IAM allows at most {MAX_LISTED_ROLES} in one condition")
    listed = ", ".join(f"'{role}'" for role in roles)
    return [("tpu-multislice grants", f"{_MODIFIED}.hasOnly([{listed}])")]


# IAM members as `gcloud projects add-iam-policy-binding --member` takes them
# (https://cloud.google.com/sdk/gcloud/reference/projects/add-iam-policy-binding).
_MEMBER = re.compile(r"^(user|serviceAccount|group|domain|principal|principalSet):\S+$")


def member_of(value: str) -> str | None:
    """`value` as an IAM member: a bare e-mail becomes user:… (serviceAccount:… for a service account);
    None when it is neither a member nor an e-mail."""
    if _MEMBER.match(value):
        return value
    if re.match(r"^[^@\s:]+@[^@\s:]+\.[^@\s:]+$", value):
        kind = "serviceAccount" if value.endswith(".gserviceaccount.com") else "user"
        return f"{kind}:{value}"
    return None


def _condition_flag(title: str, expression: str) -> str:
    """--condition for gcloud: the expression holds commas, so the key=value list takes another delimiter
    (`^;^`, https://cloud.google.com/sdk/gcloud/reference/topic/escaping); double-quoted for the shell, so the
    CEL strings keep the documented single quotes; the list broken over lines (CEL ignores the newlines) to fit
    100 columns."""
    head, _, rest = expression.partition(".hasOnly([")
    items = rest.removesuffix("])").split(", ")
    expression = head + "\n    .hasOnly([\n" + ",\n".join(f"      {item}" for item in items) + "\n    ])"
    return f'  --condition="^;^title={title};expression=\n    {expression}"'


@dataclass(frozen=True)
class Deployment:
    """What the admin's step and the deployer's grants are about: the project, who deploys, and the stack's
    accounts and custom role (from its cluster name and image builder)."""
    project: str
    member: str
    cluster: str = "tpu-multislice"
    image_builder: str | None = "cloud-build"      # None: no image built (workerEnvironment=runtime, Pathways)

    @property
    def node_account(self) -> str:
        from infra.naming import Names
        return Names(self.cluster).node_service_account

    @property
    def build_account(self) -> str | None:
        from infra.naming import Names
        return Names(self.cluster).build_service_account if self.image_builder == "cloud-build" else None

    @property
    def goodput_role(self) -> str:
        from infra.identity import admin_goodput_role_id
        return admin_goodput_role_id(self.cluster)

    def email(self, account_id: str) -> str:
        return f"{account_id}@{self.project}.iam.gserviceaccount.com"


def gcloud_grants(deployment: Deployment, roles: list[DeployerRole] | None = None,
                  granted: GrantedRoles | None = None) -> str:
    """The deployer's grants, ready to paste (run by the admin: the deployer cannot make them): each project role
    (`roles` defaults to those every stack needs), projectIamAdmin only under the documented condition, the
    goodput reader role (logging.logEntries.list: the image build's log in Cloud Logging, the least that reads
    it), and actAs on the stack's accounts alone."""
    project, member = deployment.project, deployment.member
    chosen = roles if roles is not None else [role for role in ROLES if role.when == "always"]
    commands = ["# The deployer's grants (an admin runs them; the deployer cannot grant itself these):"]
    for role in chosen:
        if role.on != "project" or role.role in ADMIN_STEP_ROLES:
            continue
        # Shell continuations, one option a line, so each fits 100 columns for any usual member.
        head = f"gcloud projects add-iam-policy-binding {project} \\\n  --member={member} \\\n  --role={role.role}"
        if role.role == "roles/resourcemanager.projectIamAdmin":
            # The custom role the stack grants is the admin's step's, in the --project given.
            listed = GrantedRoles((granted or GrantedRoles(())).predefined,
                                  (f"projects/{project}/roles/{deployment.goodput_role}",))
            commands += [f"{head} \\\n{_condition_flag(title, expression)}"
                         for title, expression in conditions(listed)]
        else:
            commands.append(f"{head} \\\n  --condition=None")
    reader = f"projects/{project}/roles/{deployment.goodput_role}"
    commands.append(f"# Read the image build's log (Cloud Logging; entries.list needs logging.logEntries.list,\n"
                    f"# https://cloud.google.com/logging/docs/reference/v2/rest/v2/entries/list), nothing more:\n"
                    f"gcloud projects add-iam-policy-binding {project} \\\n  --member={member} \\\n"
                    f"  --role={reader} \\\n  --condition=None")
    commands.append(f"# actAs ({ACT_AS_ROLE}) on the stack's own accounts alone, never on the project:")
    for account in filter(None, (deployment.node_account, deployment.build_account)):
        commands.append(f"gcloud iam service-accounts add-iam-policy-binding \\\n  {deployment.email(account)} \\\n"
                        f"  --project={project} --member={member} \\\n  --role={ACT_AS_ROLE}")
    return "\n".join(commands)


# Roles only the admin's step needs (it creates the accounts and the custom role); never the deployer's.
ADMIN_STEP_ROLES = ("roles/iam.serviceAccountAdmin", "roles/iam.roleAdmin")


def admin_script(deployment: Deployment) -> str:
    """The admin's step, once per project and cluster name, as a POSIX shell script: the APIs the first `up`'s
    look-ups need (they run before the stack can enable anything), the node and build service accounts, and the
    goodput reader role, each created only when missing (so the script can run again)."""
    from infra.identity import (GOODPUT_LOG_PERMISSIONS, GOODPUT_ROLE_TITLE, display_name,
                                goodput_role_description)
    from infra.cloud_build import BUILD_ACCOUNT_DISPLAY_NAME
    from infra.services import required_apis

    project = deployment.project
    lines = ["#!/bin/sh",
             f"# The admin's step for tpu-multislice in project {project}, cluster {deployment.cluster}: once per",
             "# project and cluster name, by someone who may create service accounts and roles and grant roles",
             "# (e.g. the project's Owner). What exists already is left as it is.",
             "set -eu",
             "# The APIs the first pulumi up's look-ups need before the stack enables anything:",
             f"gcloud services enable --project={project} \\"]
    apis = required_apis(deployment.image_builder)
    lines += [f"  {api}" + (" \\" if i < len(apis) - 1 else "") for i, api in enumerate(apis)]
    accounts = [(deployment.node_account, display_name(deployment.cluster))]
    if deployment.build_account:
        accounts.append((deployment.build_account, BUILD_ACCOUNT_DISPLAY_NAME))
    lines.append("# The stack's service accounts (it uses them with adminBootstrap: true):")
    for account, shown in accounts:
        lines += ["gcloud iam service-accounts describe \\",
                  f"  {deployment.email(account)} \\",
                  f"  --project={project} >/dev/null 2>&1 ||",
                  f"  gcloud iam service-accounts create {account} --project={project} \\",
                  f"    --display-name={shlex.quote(shown)}"]
    role = deployment.goodput_role
    lines += ["# The goodput log reader role (one permission; its id is fixed, so the deployer's",
              "# condition can name it):",
              f"gcloud iam roles describe {role} \\",
              f"  --project={project} >/dev/null 2>&1 ||",
              f"  gcloud iam roles create {role} --project={project} \\",
              "    --stage=GA \\",
              f"    --title={shlex.quote(GOODPUT_ROLE_TITLE)} \\",
              f"    --description={shlex.quote(goodput_role_description(deployment.cluster))} \\",
              f"    --permissions={','.join(GOODPUT_LOG_PERMISSIONS)}"]
    return "\n".join(lines)


def stack_roles(stack: str, root: Path) -> tuple[dict, list[DeployerRole], GrantedRoles]:
    """The stack's config, the roles what it registers needs, and the project roles it grants (the program run
    offline, under mocks, as after the admin's step: adminBootstrap true)."""
    from preview.harness import run_program
    from preview.stack_files import load_stack_config
    raw = load_stack_config(stack, root)
    run = run_program({**raw, "adminBootstrap": "true"}, stack=stack)
    return raw, roles_for({r.type for r in run.resources if r.custom}), granted_roles(run.resources)


def built_stack(stack: str, raw: dict, root: Path):
    """The stack's validated config as after the admin's step; a run stack's project and cluster are its cluster
    stack's (read offline: preview/harness.py cluster_outputs_reader)."""
    from infra.config import build
    from preview.harness import cluster_outputs_reader
    return build({**raw, "adminBootstrap": "true"}, stack=stack, cluster_outputs=cluster_outputs_reader(raw, root))


def every_stack_grants(root: Path) -> GrantedRoles:
    """What any committed stack grants on the project: the condition for a deployer of every stack."""
    found = GrantedRoles(())
    for path in sorted(root.glob("Pulumi.*.yaml")):
        found = found | stack_roles(path.name[len("Pulumi."):-len(".yaml")], root)[2]
    return found


def _placeholder(project: str) -> str:
    return (f"--project={project} is the committed stacks' placeholder, not a project: "
            "pass --project YOUR_PROJECT_ID")


def main(argv: list[str] | None = None) -> int:
    prog = "python -m preview.deployer_roles"
    parser = OneLineParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("--grants", action="store_true",
                        help="print the deployer's grants, which an admin runs (needs --member; --project or "
                             "--stack)")
    parser.add_argument("--admin-script", action="store_true",
                        help="print the admin's once-per-project step, then the deployer's grants")
    parser.add_argument("--member", help="who deploys: user:EMAIL, serviceAccount:EMAIL, group:EMAIL, or an e-mail")
    parser.add_argument("--project", help="the project to grant on (default: the stack's project)")
    parser.add_argument("--stack", help="grant what this stack needs (Pulumi.STACK.yaml, run offline); without it: "
                                        "the roles every stack needs")
    args = parser.parse_args(argv)
    if not (args.grants or args.admin_script):
        if args.member or args.project or args.stack:
            return refuse(prog, "--member, --project and --stack go with --grants or --admin-script")
        print(markdown_table())
        return 0
    problems = []
    member = member_of(args.member) if args.member else None
    if args.member is None:
        problems.append("--grants and --admin-script need --member (e.g. --member user:you@example.com)")
    elif member is None:
        problems.append(f"--member={args.member!r} is not an e-mail or an IAM member such as user:EMAIL")
    roles, granted, raw, config = None, None, {}, None
    project = args.project
    if args.stack:
        from infra.config import ConfigError
        from preview.stack_files import StackFileError
        try:
            raw, roles, granted = stack_roles(args.stack, ROOT)
            config = built_stack(args.stack, raw, ROOT)
        except StackFileError:
            known = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in ROOT.glob("Pulumi.*.yaml"))
            return refuse(prog, f"--stack={args.stack!r}: no such stack; stacks: {', '.join(known)}")
        except ConfigError as error:
            for problem in error.problems:       # one refusal per mistake, each laid out within 100 columns
                refuse(prog, problem)
            return EXIT_USAGE
        project = project or config.gcp.project
    if project is None:
        problems.append("--grants needs --project PROJECT, or --stack NAME (its project)")
    elif project == PLACEHOLDER_PROJECT:
        problems.append(_placeholder(project))
    if problems:
        for problem in problems:
            refuse(prog, problem)
        return EXIT_USAGE
    if roles is None:
        granted = every_stack_grants(ROOT)
    deployment = Deployment(project=project, member=member,
                            cluster=config.cluster.name if args.stack else "tpu-multislice",
                            image_builder=_image_builder(config) if args.stack else "cloud-build")
    if args.admin_script:
        print(admin_script(deployment))
        print()
    print(gcloud_grants(deployment, roles, granted))
    if args.stack and str(raw.get("adminBootstrap", "false")).lower() != "true":
        print(f"# Then set adminBootstrap in Pulumi.{args.stack}.yaml:\n"
              f"#   pulumi config set adminBootstrap true --stack {args.stack}")
    if roles is None:
        print("# Not included; a stack whose config asks for one needs it too (--stack NAME picks them):")
        for role in ROLES:
            if role.when != "always" and role.on == "project" and role.role not in ADMIN_STEP_ROLES:
                print(f"#   {role.role} ({role.when})")
    return 0


def _image_builder(config) -> str | None:
    """The stack's image builder as the admin's step needs it: None when the stack builds no image."""
    return config.worker_image.builder if config.worker_image else None


if __name__ == "__main__":
    sys.exit(main())
