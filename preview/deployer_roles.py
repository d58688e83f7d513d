"""The IAM roles the account that runs `pulumi up` needs, derived from the resource types the stack registers.

Each resource type maps to the predefined role whose permissions create, change and delete it; the deploy guide's
table (docs/deploying.md) is generated from this module (`python -m preview.deployer_roles`) and
tests/preview/test_deployer_roles.py fails when a stack registers a type this table does not cover, or when the
guide's table is stale. Roles are granted on the project, except actAs, which the stack grants itself on the node
service account only; projectIamAdmin is printed with conditions that allow exactly the roles the stack's own
resources grant. The owner or editor basic roles also work, but carry far more than a deployment needs.
"""
from __future__ import annotations

import re
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
NODE_ACCOUNT = "the node service account, and the image build's (the stack grants it)"
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
    DeployerRole("roles/iam.serviceAccountAdmin", "the node service account (NodeServiceAccount)",
                 "https://cloud.google.com/iam/docs/service-account-permissions"),
    DeployerRole("roles/iam.serviceAccountUser", "create the cluster and node pools that run as the node service "
                 "account, and submit the image build that runs as the build account (actAs); the stack grants "
                 "it to whoever runs pulumi up on those accounts alone, not on the project (which would act as "
                 "every service account)",
                 "https://cloud.google.com/kubernetes-engine/docs/how-to/service-accounts", on=NODE_ACCOUNT),
    DeployerRole("roles/resourcemanager.projectIamAdmin",
                 "project-level grants to the node account and the training pods (goodput, logging); granted "
                 "with a condition that allows exactly the roles the stack grants (unconditioned, it could "
                 "grant Owner)",
                 "https://cloud.google.com/iam/docs/conditions-attribute-reference#modified-grants-by-role"),
    DeployerRole("roles/iam.roleAdmin", "the goodput log reader custom role (one permission: "
                 "logging.logEntries.list) that replaces roles/logging.viewer",
                 "https://cloud.google.com/iam/docs/creating-custom-roles"),
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
# Which roles a setIamPolicy call adds or removes bindings for, as IAM Conditions see it
# (https://cloud.google.com/iam/docs/conditions-attribute-reference#modified-grants-by-role; the pattern of
# https://cloud.google.com/iam/docs/setting-limits-on-granting-roles): `hasOnly` is true when every role the call
# changes is in the list, so a deployer holding projectIamAdmin under it cannot grant Owner or anything else.
_MODIFIED = 'api.getAttribute("iam.googleapis.com/modifiedGrantsByRole", [])'


@dataclass(frozen=True)
class GrantedRoles:
    """The project-level roles a stack grants (its gcp.projects.IAMMember resources): predefined roles by name, and
    custom roles by the stem of their id (the goodput reader's id is new per creation: infra/identity.py)."""
    predefined: tuple[str, ...]
    custom_stems: tuple[str, ...] = ()

    def __or__(self, other: "GrantedRoles") -> "GrantedRoles":
        return GrantedRoles(tuple(sorted({*self.predefined, *other.predefined})),
                            tuple(sorted({*self.custom_stems, *other.custom_stems})))


def granted_roles(resources) -> GrantedRoles:
    """From what the program registered (preview.harness Registration list)."""
    from infra.identity import custom_role_stem
    roles = {r.inputs["role"] for r in resources if r.type == PROJECT_GRANT}
    stems = {custom_role_stem(role) for role in roles} - {None}
    return GrantedRoles(tuple(sorted(role for role in roles if custom_role_stem(role) is None)),
                        tuple(sorted(stems)))


def conditions(granted: GrantedRoles) -> list[tuple[str, str]]:
    """(title, CEL expression) of each conditional projectIamAdmin binding: one allowing exactly the predefined
    roles; one per custom role stem, allowing only roles whose name starts with it. The second cannot list the
    role itself, whose id exists only once `pulumi up` creates it; that IAM evaluates the CEL `all` macro on this
    attribute is assumed (the published examples use hasOnly only)."""
    listed = ", ".join(f'"{role}"' for role in granted.predefined)
    found = [("tpu-multislice grants", f"{_MODIFIED}.hasOnly([{listed}])")]
    found += [("tpu-multislice custom role grants", f'{_MODIFIED}.all(r, r.startsWith("{stem}"))')
              for stem in granted.custom_stems]
    return found


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
    (`^;^`, https://cloud.google.com/sdk/gcloud/reference/topic/escaping); single-quoted for the shell, with the
    CEL strings double-quoted; the list broken over lines (CEL ignores the newlines) to fit 100 columns."""
    head, _, rest = expression.partition("hasOnly([")
    if rest:
        items = rest.removesuffix("])").split(", ")
        expression = head + "hasOnly([\n" + ",\n".join(f"      {item}" for item in items) + "\n    ])"
    else:
        expression = expression.replace(".all(", "\n    .all(")
    return f"  --condition='^;^title={title};expression=\n    {expression}'"


def gcloud_grants(project: str, member: str, roles: list[DeployerRole] | None = None,
                  granted: GrantedRoles | None = None) -> str:
    """One grant command per project role, ready to paste, conditioned where a condition narrows it (`granted`:
    the roles the stack grants); `roles` defaults to those every stack needs."""
    chosen = roles if roles is not None else [role for role in ROLES if role.when == "always"]
    commands = []
    for role in chosen:
        if role.on != "project":
            continue
        # Shell continuations, one option a line, so each fits 100 columns for any usual member.
        head = f"gcloud projects add-iam-policy-binding {project} \\\n  --member={member} \\\n  --role={role.role}"
        if role.role == "roles/resourcemanager.projectIamAdmin" and granted is not None:
            commands += [f"{head} \\\n{_condition_flag(title, expression)}"
                         for title, expression in conditions(granted)]
        else:
            commands.append(f"{head} \\\n  --condition=None")
    return "\n".join(commands)


def stack_roles(stack: str, root: Path) -> tuple[dict, list[DeployerRole], GrantedRoles]:
    """The stack's config, the roles what it registers needs, and the project roles it grants (the program run
    offline, under mocks)."""
    from preview.harness import run_program
    from preview.stack_files import load_stack_config
    raw = load_stack_config(stack, root)
    run = run_program(raw, stack=stack)
    return raw, roles_for({r.type for r in run.resources if r.custom}), granted_roles(run.resources)


def every_stack_grants(root: Path) -> GrantedRoles:
    """What any committed stack grants on the project: the condition for a deployer of every stack."""
    found = GrantedRoles(())
    for path in sorted(root.glob("Pulumi.*.yaml")):
        found = found | stack_roles(path.name[len("Pulumi."):-len(".yaml")], root)[2]
    return found


def main(argv: list[str] | None = None) -> int:
    prog = "python -m preview.deployer_roles"
    parser = OneLineParser(prog=prog, description=__doc__.splitlines()[0])
    parser.add_argument("--grants", action="store_true",
                        help="print the gcloud commands that grant the roles (needs --member; --project or --stack)")
    parser.add_argument("--member", help="who deploys: user:EMAIL, serviceAccount:EMAIL, group:EMAIL, or an e-mail")
    parser.add_argument("--project", help="the project to grant on (default: the stack's project)")
    parser.add_argument("--stack", help="grant what this stack needs (Pulumi.STACK.yaml, run offline); without it: "
                                        "the roles every stack needs")
    args = parser.parse_args(argv)
    if not args.grants:
        if args.member or args.project or args.stack:
            return refuse(prog, "--member, --project and --stack go with --grants")
        print(markdown_table())
        return 0
    problems = []
    member = member_of(args.member) if args.member else None
    if args.member is None:
        problems.append("--grants needs --member (e.g. --member user:you@example.com)")
    elif member is None:
        problems.append(f"--member={args.member!r} is not an e-mail or an IAM member such as user:EMAIL")
    roles, granted = None, None
    project = args.project
    if args.stack:
        from infra.config import ConfigError
        from preview.stack_files import StackFileError
        try:
            raw, roles, granted = stack_roles(args.stack, ROOT)
        except StackFileError:
            known = sorted(p.name[len("Pulumi."):-len(".yaml")] for p in ROOT.glob("Pulumi.*.yaml"))
            return refuse(prog, f"--stack={args.stack!r}: no such stack; stacks: {', '.join(known)}")
        except ConfigError as error:
            for problem in error.problems:       # one refusal per mistake, each laid out within 100 columns
                refuse(prog, problem)
            return EXIT_USAGE
        project = project or raw.get("project")
    if project is None:
        problems.append("--grants needs --project PROJECT, or --stack NAME (its project)")
    if problems:
        for problem in problems:
            refuse(prog, problem)
        return EXIT_USAGE
    if roles is None:
        granted = every_stack_grants(ROOT)
    print(gcloud_grants(project, member, roles, granted))
    print(f"# {ACT_AS_ROLE}: not on the project; the stack grants it to whoever runs pulumi up,\n"
          "#   on the node service account alone")
    if roles is None:
        print("# Not included; a stack whose config asks for one needs it too (--stack NAME picks them):")
        for role in ROLES:
            if role.when != "always" and role.on == "project":
                print(f"#   {role.role} ({role.when})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
