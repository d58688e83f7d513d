"""What the offline plan knows about a stack, computed from one run of the program under mocks.

No printing here (preview/cli.py renders); no Pulumi engine either: only the registrations, outputs and
the validated config.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from pulumi.runtime import rpc

from preview import prices as tpu_prices
from preview.costs import CPU_MACHINE_USD_PER_HOUR, CostSummary, PoolCost, cost_summary, data_cache_quota
from preview.k8s import manifests as k8s_manifests
from infra.config import StackConfig
from preview.graph import CriticalPath, DependencyGraph, provider_urn
from preview.startup import budget_lines
from preview.k8s.validation import TpuPool, ValidationReport, validate_objects
from preview.harness import ProgramRun, Registration
from core.tpu_catalog import CATALOG, Generation, MachineType
from infra.tpu_quota import QuotaNeed, quota_need
from core.maxtext_args import GOODPUT_OVERRIDES
from infra.dashboard import chart_summaries
from core.planner import Plan as CorePlan, batch_bounds
from core.recipes import recipe_summary
from preview.assumptions import assumptions
from workloads.backends import backend_for

SECRET = "[secret]"
CLUSTER_TYPE = "gcp:container/cluster:Cluster"
NODE_POOL_TYPE = "gcp:container/nodePool:NodePool"
RESOURCE_POLICY_TYPE = "gcp:compute/resourcePolicy:ResourcePolicy"
DASHBOARD_TYPE = "gcp:monitoring/dashboard:Dashboard"
# The MaxText keys that decide whether the run records and uploads goodput (core.maxtext_args, and the one
# the Pathways backend adds).
GOODPUT_KEYS = (*GOODPUT_OVERRIDES, "enable_pathways_goodput")


def _is_secret(value: Any) -> bool:
    # How Pulumi marks a secret inside deserialized properties (a dict carrying its signature key).
    return isinstance(value, dict) and value.get(rpc._special_sig_key) == rpc._special_secret_sig


def mask_secrets(value: Any) -> Any:
    if _is_secret(value):
        return SECRET
    if isinstance(value, dict):
        return {key: mask_secrets(item) for key, item in value.items()}
    if isinstance(value, list):
        return [mask_secrets(item) for item in value]
    return value


def unwrap_secrets(value: Any) -> Any:
    """The plain values, for validation only (never printed)."""
    if _is_secret(value):
        return unwrap_secrets(value.get("value"))
    if isinstance(value, dict):
        return {key: unwrap_secrets(item) for key, item in value.items()}
    if isinstance(value, list):
        return [unwrap_secrets(item) for item in value]
    return value


def _machine(name: str) -> tuple[Generation, MachineType] | None:
    for generation in CATALOG.values():
        for machine in generation.machine_types:
            if machine.name == name:
                return generation, machine
    return None


def _number(value: Any) -> int:
    return int(value) if isinstance(value, (int, float)) else 0


# ---------------------------------------------------------------------------------------------------
# Resources


@dataclass
class PlannedResource:
    urn: str
    type: str
    name: str
    custom: bool
    parent: str | None
    depends_on: list[str]
    inputs: dict[str, Any]
    facts: str
    flags: list[str]

    def as_dict(self) -> dict[str, Any]:
        return {"urn": self.urn, "type": self.type, "name": self.name, "custom": self.custom,
                "parent": self.parent, "depends_on": self.depends_on, "inputs": self.inputs,
                "facts": self.facts, "flags": self.flags}


def pool_node_range(inputs: dict) -> tuple[int, int]:
    """(nodes while idle, nodes at most) of a node pool's inputs: a fixed count, or its autoscaling bounds
    (per zone or total; each pool here has one zone), or the flex-start pool's initial 0."""
    if "nodeCount" in inputs:
        count = _number(inputs["nodeCount"])
        return count, count
    autoscaling = inputs.get("autoscaling") or {}
    if autoscaling:
        low = _number(autoscaling.get("minNodeCount", autoscaling.get("totalMinNodeCount")))
        high = _number(autoscaling.get("maxNodeCount", autoscaling.get("totalMaxNodeCount")))
        return low, high
    initial = _number(inputs.get("initialNodeCount"))
    return initial, initial


def _facts_node_pool(inputs: dict) -> str:
    node, placement = inputs.get("nodeConfig") or {}, inputs.get("placementPolicy") or {}
    parts = [node.get("machineType", "?")]
    if placement.get("tpuTopology"):
        parts.append(f"topology {placement['tpuTopology']}")
    if placement.get("policyName"):
        parts.append(f"workload policy {placement['policyName']}")
    if "nodeCount" in inputs:
        parts.append(f"{_number(inputs['nodeCount'])} nodes")
    autoscaling = inputs.get("autoscaling") or {}
    if autoscaling:
        low, high = pool_node_range(inputs)
        per_zone = "" if "totalMaxNodeCount" in autoscaling else " per zone"
        parts.append(f"autoscaling {low}-{high} nodes{per_zone}")
    if node.get("spot"):
        parts.append("spot")
    if node.get("flexStart"):
        parts.append("flex-start")
    if (node.get("reservationAffinity") or {}).get("consumeReservationType") == "SPECIFIC_RESERVATION":
        parts.append("reservation " + ",".join(node["reservationAffinity"].get("values") or []))
    extra_networks = (inputs.get("networkConfig") or {}).get("additionalNodeNetworkConfigs") or []
    if extra_networks:
        parts.append(f"+{len(extra_networks)} NICs")
    return ", ".join(parts)


def _facts_cluster(inputs: dict) -> str:
    channel = (inputs.get("releaseChannel") or {}).get("channel", "?")
    # Unset minMasterVersion: GKE creates the cluster at the release channel's default version.
    version = inputs.get("minMasterVersion") or "channel default"
    parts = [inputs.get("location", "?"), f"version {version}",
             "autopilot" if inputs.get("enableAutopilot") else "standard", f"channel {channel}"]
    if inputs.get("deletionProtection"):
        parts.append("deletion protection")
    return ", ".join(parts)


DESCRIBE_BY_TYPE: dict[str, Callable[[dict], str]] = {
    NODE_POOL_TYPE: _facts_node_pool,
    CLUSTER_TYPE: _facts_cluster,
    "gcp:projects/service:Service": lambda i: str(i.get("service", "")),
    "gcp:compute/network:Network": lambda i: f"{i.get('name')}"
    + (f", MTU {_number(i['mtu'])}" if i.get("mtu") else ""),
    "gcp:compute/subnetwork:Subnetwork": lambda i: f"{i.get('name')}, {i.get('ipCidrRange')}" + "".join(
        f", {r.get('rangeName')} {r.get('ipCidrRange')}" for r in i.get("secondaryIpRanges") or []),
    "gcp:compute/firewall:Firewall": lambda i: f"{i.get('direction')} from {','.join(i.get('sourceRanges') or [])}",
    "gcp:compute/routerNat:RouterNat": lambda i: str(i.get("name")),
    "gcp:compute/router:Router": lambda i: str(i.get("name")),
    "gcp:compute/resourcePolicy:ResourcePolicy": lambda i: "workload topology " + str(
        (i.get("workloadPolicy") or {}).get("acceleratorTopology")),
    "gcp:storage/bucket:Bucket": lambda i: f"gs://{i.get('name')}, {i.get('location')}"
    + (", hierarchical namespace" if (i.get("hierarchicalNamespace") or {}).get("enabled") else "")
    + (", force destroy" if i.get("forceDestroy") else ""),
    "gcp:serviceaccount/account:Account": lambda i: str(i.get("accountId")),
    "gcp:projects/iAMMember:IAMMember": lambda i: f"{i.get('role')} → {i.get('member')}",
    "gcp:storage/bucketIAMMember:BucketIAMMember": lambda i: f"{i.get('role')} → {i.get('member')}",
}


def resource_facts(reg: Registration, inputs: dict) -> str:
    if k8s_manifests.is_kubernetes_type(reg.type):
        obj = k8s_manifests.object_from_inputs(inputs, reg.name)
        return k8s_manifests.object_ref(obj)
    describe = DESCRIBE_BY_TYPE.get(reg.type)
    if describe is not None:
        return describe(inputs)
    return str(inputs.get("name", "")) if reg.custom else ""


def _flags(reg: Registration, names: dict[str, str]) -> list[str]:
    flags = []
    if reg.protect:
        flags.append("protect")
    if reg.retain_on_delete:
        flags.append("retain on delete")
    if reg.deleted_with:
        flags.append(f"deleted with {names.get(reg.deleted_with, reg.deleted_with)}")
    if reg.ignore_changes:
        flags.append("ignore changes: " + ", ".join(reg.ignore_changes))
    return flags


# ---------------------------------------------------------------------------------------------------
# TPU capacity and cost


@dataclass
class TpuSummary:
    source: str                  # "node pools" or "config (Autopilot creates nodes on demand)"
    generation: str
    topology: str
    machine_type: str
    slices: int
    hosts: int
    chips: int
    hbm_gib: int
    peak_bf16_pflops: float
    capacity: str
    estimate: tpu_prices.HourlyEstimate
    quota: QuotaNeed | None = None    # the Compute Engine TPU quota the slices spend (infra/tpu_quota.py)
    disk_quota: str | None = None     # the regional disk quota the data cache disks spend (preview/costs.py)

    def as_dict(self) -> dict[str, Any]:
        return {"source": self.source, "generation": self.generation, "topology": self.topology,
                "machine_type": self.machine_type, "slices": self.slices, "hosts": self.hosts, "chips": self.chips,
                "hbm_gib": self.hbm_gib, "peak_bf16_pflops": self.peak_bf16_pflops, "capacity": self.capacity,
                "usd_per_hour": {"on_demand": self.estimate.on_demand_usd_per_hour,
                                 "spot": self.estimate.spot_usd_per_hour},
                "price_source": self.estimate.source, "spot_assumption": self.estimate.spot_assumption,
                "quota": None if self.quota is None else {
                    "region": self.quota.region, "chips": self.quota.chips, "kind": self.quota.kind,
                    "quota_ids": [q.describe() for q in self.quota.quotas], "request": self.quota.request(),
                    "ids_assumed": True},
                "disk_quota": self.disk_quota}


def tpu_pools(registrations: list[Registration]) -> list[TpuPool]:
    """The TPU node pools the stack creates, with the facts pods are matched against."""
    topology_of_policy = {
        str(r.inputs.get("name")): str((r.inputs.get("workloadPolicy") or {}).get("acceleratorTopology"))
        for r in registrations if r.type == RESOURCE_POLICY_TYPE}
    pools = []
    for r in registrations:
        if r.type != NODE_POOL_TYPE:
            continue
        node, placement = r.inputs.get("nodeConfig") or {}, r.inputs.get("placementPolicy") or {}
        found = _machine(str(node.get("machineType", "")))
        if found is None:
            continue
        generation, machine = found
        topology = placement.get("tpuTopology") or topology_of_policy.get(str(placement.get("policyName")), "")
        nodes = pool_node_range(r.inputs)[1]
        pools.append(TpuPool(name=str(r.inputs.get("name", r.name)), accelerator_label=generation.accelerator_label,
                             machine_type=machine.name, chips_per_vm=machine.chips_per_vm, topology=topology,
                             nodes=nodes))
    return pools


def pool_costs(registrations: list[Registration]) -> list[PoolCost]:
    """Every node pool the stack creates with the nodes it holds idle and at most, priced per node-hour."""
    pools = []
    for r in registrations:
        if r.type != NODE_POOL_TYPE:
            continue
        machine_type = str((r.inputs.get("nodeConfig") or {}).get("machineType", ""))
        low, high = pool_node_range(r.inputs)
        found = _machine(machine_type)
        pools.append(PoolCost(name=str(r.inputs.get("name", r.name)), machine_type=machine_type, idle_nodes=low,
                              max_nodes=high, usd_per_node_hour=None if found else
                              CPU_MACHINE_USD_PER_HOUR.get(machine_type),
                              tpu_chips_per_vm=found[1].chips_per_vm if found else 0))
    return pools


def tpu_summary(pools: list[TpuPool], config: StackConfig) -> TpuSummary:
    shape = config.tpu.shape
    capacity = config.tpu.capacity.value
    if pools:
        first = pools[0]
        generation, _ = _machine(first.machine_type)
        hosts = sum(p.nodes for p in pools)
        chips = sum(p.nodes * p.chips_per_vm for p in pools)
        topologies = sorted({p.topology for p in pools})
        source = "node pools"
        machine_type, topology, slices = first.machine_type, ",".join(topologies), len(pools)
    else:
        generation, hosts, chips = shape.generation, config.tpu.total_hosts, config.tpu.total_chips
        source = "config (Autopilot creates TPU nodes when workloads ask)"
        machine_type, topology, slices = shape.machine.name, shape.topology, config.tpu.slices
    return TpuSummary(
        source=source, generation=generation.name, topology=topology, machine_type=machine_type, slices=slices,
        hosts=hosts, chips=chips, hbm_gib=chips * generation.hbm_gib_per_chip,
        peak_bf16_pflops=round(chips * generation.peak_bf16_tflops_per_chip / 1000, 2), capacity=capacity,
        estimate=tpu_prices.hourly_estimate(generation.name, chips),
        quota=quota_need(generation.name, config.gcp.region, chips, capacity), disk_quota=data_cache_quota(config))


# ---------------------------------------------------------------------------------------------------
# Dashboard and goodput


@dataclass
class DashboardSummary:
    display_name: str
    charts: list[str]                 # one line per chart: its question and the metric types it reads
    workload_id: str                  # the MaxText run (goodput job name) the goodput charts follow
    goodput: dict[str, str]           # the goodput keys on the launched MaxText command line

    def as_dict(self) -> dict[str, Any]:
        return {"display_name": self.display_name, "charts": self.charts, "workload_id": self.workload_id,
                "goodput": self.goodput}


def launched_overrides(config: StackConfig) -> dict[str, str]:
    """MaxText key=value settings of the run the stack's backend launches, as the backend gives them."""
    return backend_for(config).maxtext_settings(config)


def dashboard_summary(registrations: list[Registration], config: StackConfig) -> DashboardSummary | None:
    dashboards = [r for r in registrations if r.type == DASHBOARD_TYPE]
    if not dashboards:
        return None
    spec = json.loads(dashboards[0].inputs["dashboardJson"])
    launched = launched_overrides(config)
    return DashboardSummary(display_name=spec["displayName"], charts=chart_summaries(spec),
                            workload_id=launched.get("run_name", ""),
                            goodput={key: launched[key] for key in GOODPUT_KEYS if key in launched})


# ---------------------------------------------------------------------------------------------------
# The plan


@dataclass
class ManifestEntry:
    resource_name: str
    obj: dict[str, Any]


@dataclass
class Plan:
    stack: str
    resources: list[PlannedResource]
    manifests: list[ManifestEntry]
    gcp_resources: list[PlannedResource]
    exports: dict[str, Any]
    tpu: TpuSummary
    cost: CostSummary
    validation: ValidationReport
    deploy: CriticalPath
    destroy: CriticalPath
    graph: DependencyGraph
    dashboard: DashboardSummary | None = None
    notes: list[str] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)   # what cannot be verified offline
    recipe: list[str] = field(default_factory=list)        # the tuned recipe the run follows, and how it departs
    # The save at a Spot notice and what a preemption costs (core/preemption.py ShutdownBudget.as_dict(), plus
    # "summary": its lines for the text plan); its "warnings" are the plan's preemption warnings.
    preemption: dict[str, Any] = field(default_factory=dict)
    # The planner's notes on the run (core/planner.py Plan.notes): largest batch, expected step, memory warnings.
    planner: list[str] = field(default_factory=list)
    # A shared cluster (stackRole=cluster): no TPU and no run of its own; its runs' stacks have them.
    shared_cluster: bool = False
    # The stack's role (stackRole: cluster-and-run, cluster, run): which sections are its own.
    role: str = "cluster-and-run"
    planner_fields: dict[str, Any] = field(default_factory=dict)   # the same as numbers (planner_fields below)
    compile: dict[str, Any] | None = None   # `--compile`: preview/compile/ CompileResult.as_dict()
    # From a cold node to the first step, per host, from benchmarks/startup_bench.py's figures (preview/startup.py).
    startup: list[str] = field(default_factory=list)

    def as_dict(self, summary: bool = False) -> dict[str, Any]:
        """The plan as JSON; `summary` leaves out what --out writes (the Kubernetes objects, resource inputs)."""
        resources = [r.as_dict() for r in self.resources]
        if summary:
            resources = [{key: value for key, value in r.items() if key != "inputs"} for r in resources]
        document = {
            "stack": self.stack,
            "resources": resources,
            "manifests": None if summary else [m.obj for m in self.manifests],
            "exports": self.exports,
            "validation": self.validation.as_dict(),
            "cost": {**self.tpu.as_dict(), **self.cost.as_dict()},
            "critical_path": {"deploy": self.deploy.as_dict(), "destroy": self.destroy.as_dict()},
            "dashboard": self.dashboard.as_dict() if self.dashboard else None,
            "notes": self.notes,
            "assumptions": self.assumptions,
            "recipe": self.recipe,
            "preemption": self.preemption,
            "planner": {"notes": self.planner, **self.planner_fields},
            "startup": self.startup,
        }
        if self.compile is not None:
            document["compile"] = self.compile
        return document


def cluster_version(run: ProgramRun, config: StackConfig) -> str:
    clusters = run.of_type(CLUSTER_TYPE)
    if clusters and clusters[0].inputs.get("minMasterVersion"):
        return str(clusters[0].inputs["minMasterVersion"])
    return config.cluster.minimum_version


def _preemption(config: StackConfig) -> dict[str, Any]:
    """The save at a notice and what each interruption costs (core/preemption.py, core/interruptions.py)."""
    from core.interruptions import interruption_costs

    budget = config.workload.shutdown
    costs = interruption_costs(budget, chips=config.tpu.total_chips,
                               smoke_test=backend_for(config).runs_smoke_test(config))
    return {"summary": budget.describe() + costs.describe(), **budget.as_dict(), "costs": costs.as_dict()}


def run_listing_notes(config: StackConfig, stack: str, root: Path | None) -> list[str]:
    """runStacks against the stacks that reference the cluster: a run its cluster does not list (its plan says
    so from the cluster's outputs), and on a cluster stack the run stacks in `root` it does not list and the
    listed ones no stack file in `root` references it from. Offline, the stack files in `root` are the project's
    stacks (`pulumi stack ls` lists them on a backend)."""
    from infra.config import stack_role
    from preview.stack_files import runs_referencing

    if config.stack.role.value == "run":
        unlisted = stack_role.unlisted_run(config.stack)
        return [unlisted.replace("\n  ", " ")] if unlisted else []
    if config.stack.has_run or root is None:
        return []
    here = runs_referencing(stack, root)
    listed = list(config.stack.run_stacks)
    notes = []
    missing = [run for run in here if run not in listed]
    if missing:
        notes.append(f"runStacks: {', '.join(missing)} reference(s) this cluster (stack files here) but are not "
                     "listed: `pulumi destroy` of this stack is not refused while they run; list them: "
                     + "; ".join(f"pulumi config set --path 'runStacks[{len(listed) + i}]' {run}"
                                 for i, run in enumerate(missing)))
    extra = [run for run in listed if run not in here]
    if extra:
        notes.append(f"runStacks: {', '.join(extra)} listed, but no stack file here references this cluster from "
                     "it (destroyed, or kept elsewhere); while listed the cluster stays protected: remove it once "
                     "the run is destroyed")
    return notes


def build_plan(run: ProgramRun, config: StackConfig, stack: str, schemas_dir: Path | None,
               root: Path | None = None) -> Plan:
    """root: the project directory whose stack files a cluster stack's runStacks is compared with."""
    names = {r.urn: r.name for r in run.resources}
    resources, manifests, notes = [], [], []
    for reg in run.resources:
        # Mocked numbers come back as floats (docs/platform-notes.md §2): 4.0 nodes are shown and written as 4.
        inputs = k8s_manifests.integral_floats_to_ints(mask_secrets(reg.inputs))
        depends_on = sorted(set(reg.dependencies) | {u for urns in reg.property_dependencies.values() for u in urns}
                            | ({provider_urn(reg.provider)} if reg.provider else set()))
        resources.append(PlannedResource(
            urn=reg.urn, type=reg.type, name=reg.name, custom=reg.custom, parent=reg.parent or None,
            depends_on=depends_on, inputs=inputs, facts=resource_facts(reg, inputs), flags=_flags(reg, names)))
        if k8s_manifests.is_kubernetes_type(reg.type):
            if not (reg.inputs.get("metadata") or {}).get("name"):
                notes.append(f"{reg.type} {reg.name!r} has no metadata.name: Pulumi will auto-name it "
                             f"({reg.name}-<random suffix>); the plan uses {reg.name!r}")
            manifests.append(ManifestEntry(reg.name, k8s_manifests.object_from_inputs(inputs, reg.name)))
    manifests.sort(key=lambda m: k8s_manifests.apply_rank(m.obj))
    pools = tpu_pools(run.resources)
    plain_objects = [k8s_manifests.object_from_inputs(unwrap_secrets(r.inputs), r.name)
                     for r in run.resources if k8s_manifests.is_kubernetes_type(r.type)]
    # A run stack's objects may name what its cluster stack creates (the shared queue, the priority class).
    provided = [k8s_manifests.object_from_inputs(unwrap_secrets(r.inputs), r.name)
                for referenced in run.referenced.values() for r in referenced.resources
                if k8s_manifests.is_kubernetes_type(r.type)]
    validation = validate_objects(plain_objects, schemas_dir, kubernetes_version=cluster_version(run, config),
                                  tpu_pools=None if config.cluster.autopilot else pools, provided=provided)
    graph = DependencyGraph.from_registrations(run.resources)
    has_run = config.stack.has_run
    cost = cost_summary(pool_costs(run.resources), config)
    cost.notes.extend(run_listing_notes(config, stack, root))
    exports = {key: SECRET if key in run.secret_outputs else k8s_manifests.integral_floats_to_ints(mask_secrets(value))
               for key, value in sorted(run.outputs.items())}
    return Plan(
        stack=stack, resources=resources, manifests=manifests,
        gcp_resources=[r for r in resources if r.custom and r.type.startswith("gcp:")],
        exports=exports, tpu=tpu_summary(pools, config), cost=cost,
        validation=validation,
        deploy=graph.deploy_path(), destroy=graph.destroy_path(), graph=graph,
        dashboard=dashboard_summary(run.resources, config), notes=notes, assumptions=assumptions(config),
        shared_cluster=not has_run, role=config.stack.role.value,
        # A shared cluster runs nothing: the run's sections (recipe, preemption, planner, start-up) are its runs'.
        recipe=recipe_summary(config.workload.plan, config.tpu.shape.generation.name, config.tpu.shape.topology)
        if has_run else [],
        preemption=_preemption(config) if has_run else {}, planner=list(config.workload.plan.notes) if has_run else [],
        planner_fields=planner_fields(config.workload.plan) if has_run else {},
        startup=budget_lines(config) if has_run else [])


def planner_fields(chosen: CorePlan) -> dict[str, Any]:
    """The planner's verdict as numbers: XLA's per-device estimate against its limit, the largest per-device batch
    with everything else kept (core/planner.py batch_bounds), and for each slice count the run may have (an elastic
    run resizes) the global batch and the estimate there."""
    memory = chosen.memory
    fits_outright, accepted = batch_bounds(chosen)

    def at(slices: int) -> dict[str, Any]:
        sized = chosen.at_slices(slices)
        return {"slices": slices, "global_batch_size": sized.global_batch_size,
                "estimate_bytes": sized.memory.total, "verdict": sized.memory.verdict}

    return {"per_device_batch_size": chosen.per_device_batch_size, "estimate_bytes": memory.total,
            "need_range_bytes": list(memory.need_range), "limit_bytes": memory.hbm,
            "recompute_point_bytes": memory.recompute_point, "verdict": memory.verdict,
            "largest_batch": accepted, "largest_batch_fits_outright": fits_outright,
            "per_slice_count": [at(n) for n in range(chosen.min_slices, chosen.slices + 1)]}
