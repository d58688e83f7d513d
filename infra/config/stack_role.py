"""Which lifecycle a stack holds: a cluster with its one run (the default), a shared cluster, or a run on one.

Pulumi's convention for parts that live and die at different rates is a stack per lifecycle, joined by stack
references (Pulumi "Organizing projects and stacks", https://www.pulumi.com/docs/iac/using-pulumi/organizing-projects-stacks/;
"Stack references", https://www.pulumi.com/docs/iac/concepts/stacks/#stackreferences). Here the cluster lives for
weeks and a run for hours: `stackRole: cluster` holds the network, the cluster, its system pool and the
controllers, and exports what runs need; a stack with `clusterStack: ORG/PROJECT/STACK` is a run on it and owns
only what is the run's (slice pools, identity, bucket, job, dashboard). A stack with neither is today's single
stack, unchanged.

Refusals (one line each, key, value and what is allowed) come before anything is registered: a run stack may
not set what the cluster stack decides (network, cluster settings), nor the names that must come from its own
stack name so that two runs on one cluster never share one; a cluster stack may not set what only a run reads.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Any, Callable, Mapping

from infra import naming
from infra.config.model import Problem, Role, StackRole
from infra.config.schema import KEYS_BY_NAME, NAMESPACE


# What the cluster stack decides for every run on it: a run stack that sets one is refused.
CLUSTER_ONLY_KEYS = ("clusterMode", "gkeVersion", "releaseChannel", "controlPlaneAuthorizedNetworks",
                     "systemPoolMachineType", "systemPoolNodes", "nodeCidr", "podCidr", "serviceCidr", "dcn",
                     "dcnMtu", "dcnSubnets", "dranet", "kueueTpuQuota")
# Names a run stack takes from its own stack name (run_names), never from config: two runs cannot then pick the
# same namespace, bucket or Ray cluster label on one cluster.
RUN_NAMED_KEYS = ("namespace", "bucketName", "rayClusterName")
# What a cluster stack reads; every other key configures a run and is refused on it.
CLUSTER_KEYS = ("project", "zone", "region", "tpuZoneCheck", "clusterName", "clusterMode", "gkeVersion",
                "releaseChannel", "deletionProtection", "controlPlaneAuthorizedNetworks", "systemPoolMachineType",
                "systemPoolNodes", "nodeCidr", "podCidr", "serviceCidr", "stackRole", "clusterTpuQuota", "runStacks",
                # The cluster stack makes the node account and the goodput role, or uses the admin's step's.
                "adminBootstrap")
# Not on a shared cluster yet: its runs would need the DCN NICs wired into their pods from the reference.
DCN_KEYS = ("dcn", "dcnMtu", "dcnSubnets", "dranet")
# Backends a run on a shared cluster can use: both queue through the cluster's Kueue (the RayJob through Kueue's
# RayJob integration, the JobSet through its JobSet integration). Pathways is not wired to the shared queue yet.
RUN_BACKENDS = ("rayjob", "jobset")
SINGLE = StackRole()
# What a run stack reads of its cluster stack at config build, before anything registers: each key a run stack
# no longer repeats, with the cluster stack's output it comes from (workloads/stack_programs.py cluster_stack
# exports them). The Pulumi program reads them through the engine's own stack-outputs invoke
# (infra/cluster_ref.py read_outputs); the offline plan from the cluster stack's program played under mocks.
FROM_CLUSTER = (("project", "project"), ("zone", "location"), ("clusterName", "clusterName"))
RUN_STACKS_EXPORT = "runStacks"
# Reads a stack's outputs by its fully qualified name; raises LookupError(why) when it cannot.
ClusterOutputs = Callable[[str], Mapping[str, Any]]


def with_cluster_exports(raw: Mapping[str, Any], read: ClusterOutputs | None, stack: str | None
                         ) -> tuple[dict[str, Any], list[str], tuple[str, ...] | None]:
    """A run stack's config with project, zone and clusterName taken from its cluster stack's outputs: a value
    the run repeats is kept if it equals the cluster's (older run stacks set all three) and refused in one line
    naming the key if it differs. Returns (config, problems, the cluster's runStacks as read, None if unread).
    Other stacks' config, a run stack read with no reader (a tool that builds without one), and a reference
    check_role refuses (another project's stack, the run itself) pass as they are."""
    raw = dict(raw)
    reference = raw.get("clusterStack")
    if (_declared_role(raw) != Role.RUN.value or read is None or not isinstance(reference, str)
            or reference.count("/") != 2 or reference.split("/")[1] != NAMESPACE
            or reference.split("/")[2] == stack):
        return raw, [], None
    try:
        outputs = read(reference)
    except LookupError as error:
        cluster = reference.rsplit("/", 1)[1]
        return raw, [Problem(f"{NAMESPACE}:clusterStack={reference!r} is not valid: its outputs could not be read "
                             f"({error}); allowed: a cluster stack that is up (pulumi up --stack {cluster})",
                             "clusterStack", reference, "a cluster stack that is up")], None
    problems: list[str] = []
    for key, export in FROM_CLUSTER:
        theirs = outputs.get(export)
        if theirs is None:
            _refuse("clusterStack", reference, f"a stack with stackRole=cluster (it exports no {export})",
                    problems)
        elif key in raw and str(raw[key]) != str(theirs):
            _refuse(key, raw[key], f"{theirs!r}, what cluster stack {reference} exports (or unset it)", problems)
            raw[key] = theirs       # the rest is checked on the cluster's value: one line for this mistake
        else:
            raw[key] = theirs
    listed = outputs.get(RUN_STACKS_EXPORT)
    return raw, problems, tuple(listed) if isinstance(listed, (list, tuple)) else None


def without_unread_requirements(raw: Mapping[str, Any], problems: list[str]) -> list[str]:
    """A run stack whose cluster stack's outputs were not read (its reference is refused, or the tool building it
    reads none) is missing project, zone and clusterName for that one reason: said once, naming clusterStack,
    not as three keys the user was never asked to set."""
    reference = raw.get("clusterStack")
    missing = [key for key, _ in FROM_CLUSTER if key not in raw]
    if _declared_role(raw) != Role.RUN.value or not isinstance(reference, str) or not missing:
        return problems
    kept = [p for p in problems if not (getattr(p, "key", None) in missing and " is required" in p)]
    if any(getattr(p, "key", None) == "clusterStack" for p in kept):
        return kept
    return kept + [Problem(f"{NAMESPACE}:clusterStack={reference!r}: {', '.join(missing)} come from the cluster "
                           "stack's outputs, which this build did not read; allowed: set them to the cluster's",
                           "clusterStack", reference, "set them to the cluster's")]


def with_listing(role: StackRole, listed: tuple[str, ...] | None) -> StackRole:
    """A run's role with its cluster stack's runStacks as read (None: not read)."""
    return replace(role, cluster_run_stacks=listed) if role.role is Role.RUN else role


def unlisted_run(role: StackRole) -> str | None:
    """What a run stack says when its cluster stack's runStacks does not list it: `pulumi destroy` of the
    cluster is then not refused while this run is up (the cluster's protection comes from that list)."""
    if role.listed_on_cluster is not False:
        return None
    cluster = role.cluster_stack.rsplit("/", 1)[1]
    index = len(role.cluster_run_stacks or ())
    return (f"runStacks: cluster stack {role.cluster_stack} does not list this run, so its destroy is not "
            f"refused while this run is up; list it there:\n  pulumi config set --path 'runStacks[{index}]' "
            f"{role.reference} --stack {cluster} && pulumi up --stack {cluster}")


def _declared_role(raw: Mapping[str, Any]) -> str:
    """The role as written (before parsing; a bad value is refused by the key's own choices)."""
    if "stackRole" in raw:
        return str(raw["stackRole"])
    return Role.RUN.value if raw.get("clusterStack") else Role.CLUSTER_AND_RUN.value


def with_run_names(raw: Mapping[str, Any], stack: str | None) -> dict[str, Any]:
    """A run stack's config with the names its stack name decides filled in (run_names); the user's own values
    of those keys stay, to be refused by check_role. Other stacks' config is returned as it is."""
    raw = dict(raw)
    if _declared_role(raw) != Role.RUN.value or not stack or not naming.CLUSTER_NAME.match(stack):
        return raw
    for key, value in run_names(stack, raw).items():
        raw.setdefault(key, value)
    return raw


def run_names(stack: str, raw: Mapping[str, Any]) -> dict[str, str]:
    """The names a run takes from its stack name: its namespace (every namespaced object of the run is in it),
    its run name unless set (MaxText's goodput job name: two runs' series in one project never mix), its bucket (PROJECT-STACK-ckpt, shortened with a hash like a single stack's), and on Ray the label of its
    job cluster (which names its cluster-scoped admission policy, workloads/ray/manifests.py grow_policy)."""
    names = {"namespace": stack, "runName": stack}
    project = raw.get("project")
    if isinstance(project, str) and naming.PROJECT_ID.match(project):
        names["bucketName"] = naming.fit(f"{project}-{stack}", naming.BUCKET_MAX - len("-ckpt")) + "-ckpt"
    if str(raw.get("workloadBackend", "rayjob")) == "rayjob":
        names["rayClusterName"] = stack
    return names


def check_role(v: dict[str, Any], raw: Mapping[str, Any], stack: str | None, problems: list[str]) -> StackRole:
    """The stack's role from stackRole and clusterStack, with every key the role does not allow refused."""
    declared = v["stackRole"] or _declared_role(raw)
    if declared not in {role.value for role in Role}:
        return SINGLE       # refused by the key's choices already
    role = Role(declared)
    cluster_stack = v["clusterStack"]
    if role is Role.RUN:
        return _run_role(v, raw, stack, cluster_stack, problems)
    if "clusterStack" in raw:
        problems.append(Problem(f"{NAMESPACE}:clusterStack={raw['clusterStack']!r} makes this a run stack: unset "
                                f"it, or unset stackRole={role.value} (a run stack has stackRole=run)",
                                "clusterStack", raw["clusterStack"], "unset with stackRole=" + role.value))
    if role is Role.CLUSTER:
        return _cluster_role(v, raw, problems)
    # With stackRole written out, rules.check_applies has refused them already.
    for key in ("clusterTpuQuota", "runStacks") if v["stackRole"] is None else ():
        if key in raw and raw[key] not in ((), [], "[]"):
            _refuse(key, raw[key], "unset it: only a cluster stack (stackRole=cluster) has it", problems)
    return SINGLE


def _refuse(key: str, value: Any, allowed: str, problems: list[str]) -> None:
    problems.append(Problem(f"{NAMESPACE}:{key}={value!r} is not valid; {allowed}", key, value, allowed))


def _run_role(v: dict[str, Any], raw: Mapping[str, Any], stack: str | None, cluster_stack: str | None,
              problems: list[str]) -> StackRole:
    if cluster_stack is None:
        if "clusterStack" not in raw:
            problems.append(Problem(f"{NAMESPACE}:stackRole=run needs {NAMESPACE}:clusterStack: the cluster stack "
                                    "the run lands on, ORG/PROJECT/STACK", "clusterStack", None,
                                    "ORG/PROJECT/STACK of a stack with stackRole=cluster"))
        return SINGLE
    org, project, cluster = cluster_stack.split("/")
    if project != NAMESPACE:
        _refuse("clusterStack", cluster_stack, f"a stack of this project ({NAMESPACE}): ORG/{NAMESPACE}/STACK; "
                "a run reads the exports this project's cluster stacks make", problems)
    if stack is not None and cluster == stack:
        _refuse("clusterStack", cluster_stack, "another stack than this run stack itself", problems)
    if stack is None or not naming.CLUSTER_NAME.match(stack):
        problems.append(Problem(f"{NAMESPACE}:clusterStack={cluster_stack!r} needs a run stack named like a GKE "
                                f"name (1-40 lowercase letters, digits or '-', starting with a letter), not "
                                f"{stack!r}: its pools, namespace and bucket are named from it",
                                "clusterStack", cluster_stack, "a run stack named like team-8b"))
    for key in CLUSTER_ONLY_KEYS:
        if key in raw:
            _refuse(key, raw[key], f"unset it: the cluster stack {cluster_stack} decides it for every run on it",
                    problems)
    derived = run_names(stack, raw) if stack else {}
    for key in RUN_NAMED_KEYS:
        if key in raw and raw[key] != derived.get(key):
            _refuse(key, raw[key], "unset it: a run stack names it from its stack name, so two runs on one "
                    "cluster never share it", problems)
    for key in ("clusterTpuQuota", "runStacks"):
        if key in raw:
            _refuse(key, raw[key], "unset it: only a cluster stack (stackRole=cluster) has it", problems)
    backend = v["workloadBackend"]
    if backend is not None and backend not in RUN_BACKENDS:
        _refuse("workloadBackend", backend, f"a run on a shared cluster is one of {', '.join(RUN_BACKENDS)} "
                "(pathways does not queue through the shared Kueue yet)", problems)
    return StackRole(Role.RUN, cluster_stack=cluster_stack, run=stack)


def _cluster_role(v: dict[str, Any], raw: Mapping[str, Any], problems: list[str]) -> StackRole:
    for key in raw:
        if key in DCN_KEYS:
            _refuse(key, raw[key], "unset it: runs on a shared cluster do not use DCN VPCs yet (a single stack "
                    "does)", problems)
        elif key in KEYS_BY_NAME and key not in CLUSTER_KEYS and key != "clusterStack":
            _refuse(key, raw[key], "unset it: a cluster stack runs nothing; set it on a run stack "
                    "(clusterStack=ORG/PROJECT/THIS-STACK)", problems)
    if v["clusterMode"] == "autopilot":
        _refuse("clusterMode", "autopilot", "standard with stackRole=cluster: each run creates its own slice "
                "pools, which Autopilot does not have", problems)
    quota = v["clusterTpuQuota"]
    if quota is None and "clusterTpuQuota" not in raw:
        problems.append(Problem(f"{NAMESPACE}:stackRole=cluster needs {NAMESPACE}:clusterTpuQuota: the TPU chips "
                                "all runs may hold at once (your project's TPU quota in the zone)",
                                "clusterTpuQuota", None, "a whole number of chips, at least 1"))
    return StackRole(Role.CLUSTER, tpu_quota=quota, run_stacks=tuple(v["runStacks"] or ()))


def check_run_plan(role: StackRole, v: dict[str, Any], plan: Any, problems: list[str]) -> None:
    """A Ray run on a shared cluster starts on all of its slices: Kueue admits the RayJob at the size its
    RayCluster asks for when it starts, and an elastic run grows later by patching that RayCluster
    (trainer/grow.py), which Kueue would not have admitted (Kueue v0.19.2 admits an elastic RayCluster only
    through ElasticJobsViaWorkloadSlices and its scheduling gate, pkg/controller/jobs/raycluster
    raycluster_webhook.go validateElasticJob, which this project does not use)."""
    if role.role is not Role.RUN or plan is None or not plan.elastic or v["workloadBackend"] != "rayjob":
        return
    value = v["elasticMinSlices"]
    _refuse("elasticMinSlices", value if value is not None else f"(unset: {plan.min_slices} on spot)",
            f"{v['slices']} (all slices) on a run stack: Kueue admits a run whole, it cannot grow later", problems)
