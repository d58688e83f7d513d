"""Rules the cluster enforces beyond schemas: webhooks, admission and references between objects.

Written by kind, not for today's objects, so RayCluster/RayJob/JobSet/Kueue objects are checked as
soon as the stack registers them. Sources of each rule:
- TPU hosts vs topology: GKE's KubeRay TPU webhook (ai-on-gke/kuberay-tpu-webhook, checkWorkersMatchTopology:
  numOfHosts must equal chips(topology) ÷ google.com/tpu per pod) and docs/platform-notes.md §4 (JobSet
  parallelism/completions = hosts; google.com/tpu per pod = chips per VM).
- Extended resources must be set in limits, and requests (if set) must equal limits (Kubernetes
  "Manage resources for containers", extended resources).
- References: a pod's serviceAccountName, resourceClaimTemplateName, ConfigMap volumes/env must name
  an object in the pod's namespace, or the pod is refused or never starts.
- Names: DNS-1123 subdomain for most kinds, label for Namespace/Service (RayCluster ≤53 and RayJob ≤47
  characters, DNS-1035: preview/k8s/admission.py, from KubeRay's validation.go).
- RayJob: rayClusterSpec xor clusterSelector; runtimeEnvYAML must parse as YAML; ttlSecondsAfterFinished
  needs shutdownAfterJobFinishes (docs/platform-notes.md §7).
- Kueue: queue-name label → LocalQueue → ClusterQueue → ResourceFlavors; a queued workload's resources
  must be covered by its ClusterQueue (docs/platform-notes.md §6: a RayJob in K8sJobMode adds a cpu/memory submitter pod).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Mapping, Sequence

import yaml

from infra import naming
from preview.k8s.findings import Finding, field_path
from preview.k8s.manifests import BUILT_IN_NAMESPACES, kind_of, name_of, namespace_of, object_ref
from core.tpu_catalog import CATALOG, Generation, chips_in

TPU_RESOURCE = "google.com/tpu"
ACCELERATOR_SELECTOR = "cloud.google.com/gke-tpu-accelerator"
TOPOLOGY_SELECTOR = "cloud.google.com/gke-tpu-topology"
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"
# KubeRay's default submitter pod (K8sJobMode) requests these (docs/platform-notes.md §6).
RAYJOB_SUBMITTER_RESOURCES = frozenset({"cpu", "memory"})

# Kinds whose names KubeRay limits further (checked in preview/k8s/admission.py).
NAME_LIMITS = {"RayCluster": 53, "RayJob": 47}

FieldPath = tuple  # of str | int, e.g. ("spec", "containers", 0)


@dataclass(frozen=True)
class TpuPool:
    """What a TPU node pool of the stack offers, for matching pods against real capacity."""
    name: str
    accelerator_label: str
    machine_type: str
    chips_per_vm: int
    topology: str
    nodes: int


@dataclass
class HostsField:
    path: FieldPath
    value: Any


@dataclass
class PodSite:
    """A pod template inside an object: where it is, how many pods form one slice, how many slices."""
    path: FieldPath                     # to the object holding metadata + spec of the pod
    template: Mapping[str, Any]
    hosts: list[HostsField] = field(default_factory=list)
    replicas: HostsField | None = None


# ---------------------------------------------------------------------------------------------------
# Where pod templates live, by kind


def _ray_cluster_sites(spec: Mapping[str, Any], base: FieldPath) -> Iterator[PodSite]:
    head = spec.get("headGroupSpec") or {}
    if isinstance(head.get("template"), dict):
        yield PodSite(base + ("headGroupSpec", "template"), head["template"])
    for index, group in enumerate(spec.get("workerGroupSpecs") or []):
        if not isinstance(group, dict) or not isinstance(group.get("template"), dict):
            continue
        group_path = base + ("workerGroupSpecs", index)
        # The slices the group can come to want: up to maxReplicas (an elastic group starts at its minimum and
        # the driver, or an autoscaler, raises replicas to it), else replicas.
        key = "maxReplicas" if "maxReplicas" in group else "replicas"
        replicas = HostsField(group_path + (key,), group[key]) if key in group else None
        yield PodSite(group_path + ("template",), group["template"],
                      hosts=[HostsField(group_path + ("numOfHosts",), group.get("numOfHosts", 1))],
                      replicas=replicas)


def _job_sites(job_spec: Mapping[str, Any], base: FieldPath) -> Iterator[PodSite]:
    if isinstance(job_spec.get("template"), dict):
        hosts = [HostsField(base + ("parallelism",), job_spec.get("parallelism", 1))]
        if "completions" in job_spec:
            hosts.append(HostsField(base + ("completions",), job_spec["completions"]))
        yield PodSite(base + ("template",), job_spec["template"], hosts=hosts)


def pod_sites(obj: Mapping[str, Any]) -> Iterator[PodSite]:
    kind, spec = kind_of(obj), obj.get("spec") or {}
    if not isinstance(spec, dict):
        return
    if kind == "Pod":
        yield PodSite((), obj)
    elif kind in ("Deployment", "StatefulSet", "ReplicaSet", "DaemonSet"):
        if isinstance(spec.get("template"), dict):
            yield PodSite(("spec", "template"), spec["template"])
    elif kind == "Job":
        yield from _job_sites(spec, ("spec",))
    elif kind == "CronJob":
        job_spec = (spec.get("jobTemplate") or {}).get("spec") or {}
        yield from _job_sites(job_spec, ("spec", "jobTemplate", "spec"))
    elif kind == "RayCluster":
        yield from _ray_cluster_sites(spec, ("spec",))
    elif kind == "RayJob":
        if isinstance(spec.get("rayClusterSpec"), dict):
            yield from _ray_cluster_sites(spec["rayClusterSpec"], ("spec", "rayClusterSpec"))
        if isinstance(spec.get("submitterPodTemplate"), dict):
            yield PodSite(("spec", "submitterPodTemplate"), spec["submitterPodTemplate"])
    elif kind == "RayService":
        if isinstance(spec.get("rayClusterConfig"), dict):
            yield from _ray_cluster_sites(spec["rayClusterConfig"], ("spec", "rayClusterConfig"))
    elif kind == "JobSet":
        for index, replicated in enumerate(spec.get("replicatedJobs") or []):
            job_spec = ((replicated or {}).get("template") or {}).get("spec") or {}
            base = ("spec", "replicatedJobs", index)
            for site in _job_sites(job_spec, base + ("template", "spec")):
                site.replicas = HostsField(base + ("replicas",), replicated.get("replicas", 1))
                yield site


# ---------------------------------------------------------------------------------------------------
# The objects the stack creates, for reference checks


class ObjectIndex:
    def __init__(self, objects: Sequence[Mapping[str, Any]]):
        self.objects = objects
        self._names: dict[tuple[str, str | None], dict[str, Mapping[str, Any]]] = {}
        for obj in objects:
            self._names.setdefault((kind_of(obj), namespace_of(obj)), {})[name_of(obj)] = obj
        self.namespaces = set(self._names.get(("Namespace", None), {})) | BUILT_IN_NAMESPACES

    def get(self, kind: str, namespace: str | None, name: str) -> Mapping[str, Any] | None:
        return self._names.get((kind, namespace), {}).get(name)


class _Collector:
    def __init__(self, obj: Mapping[str, Any]):
        self.ref = object_ref(obj)
        self.errors: list[Finding] = []
        self.warnings: list[Finding] = []

    def error(self, path: FieldPath, message: str) -> None:
        self.errors.append(Finding(self.ref, field_path(path), message))

    def warn(self, path: FieldPath, message: str) -> None:
        self.warnings.append(Finding(self.ref, field_path(path), message))


# ---------------------------------------------------------------------------------------------------
# TPU rules


def _as_int(value: Any) -> int | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return int(number) if number.is_integer() else None


def _generation_by_label(label: str) -> Generation | None:
    return next((g for g in CATALOG.values() if g.accelerator_label == label), None)


def _chips_per_vm_options(generation: Generation, topology: str) -> set[int]:
    """Chips per VM of every machine type that can build a slice of this topology."""
    options = {m.chips_per_vm for m in generation.machine_types if topology in m.single_host_topologies}
    if topology in generation.multi_host_topologies:
        options.add(generation.multi_host_machine.chips_per_vm)
    return options


def _tpu_requests(spec: Mapping[str, Any], base: FieldPath, out: _Collector) -> tuple[int, FieldPath | None]:
    """Chips the pod asks for (sum over containers) and the path of the first request, checking the
    limits/requests rule for extended resources on the way."""
    total, first_path = 0, None
    for index, container in enumerate(spec.get("containers") or []):
        resources = (container or {}).get("resources") or {}
        limits, requests = resources.get("limits") or {}, resources.get("requests") or {}
        if TPU_RESOURCE not in limits and TPU_RESOURCE not in requests:
            continue
        path = base + ("containers", index, "resources", "limits" if TPU_RESOURCE in limits else "requests",
                       TPU_RESOURCE)
        if TPU_RESOURCE not in limits:
            out.error(path, f"{TPU_RESOURCE} is only in requests; extended resources must be set in limits")
        elif TPU_RESOURCE in requests and _as_int(requests[TPU_RESOURCE]) != _as_int(limits[TPU_RESOURCE]):
            out.error(path, f"{TPU_RESOURCE} requests ({requests[TPU_RESOURCE]}) must equal limits "
                            f"({limits[TPU_RESOURCE]}) for an extended resource")
        chips = _as_int(limits.get(TPU_RESOURCE, requests.get(TPU_RESOURCE)))
        if chips is None or chips < 1:
            out.error(path, f"{TPU_RESOURCE} must be a positive whole number of chips")
            continue
        total += chips
        first_path = first_path or path
    return total, first_path


def _check_tpu_site(site: PodSite, pools: Sequence[TpuPool] | None, out: _Collector) -> None:
    spec = site.template.get("spec") or {}
    spec_path = site.path + ("spec",)
    chips_per_pod, chips_path = _tpu_requests(spec, spec_path, out)
    if chips_per_pod == 0:
        return
    selector = spec.get("nodeSelector") or {}
    selector_path = spec_path + ("nodeSelector",)
    label, topology = selector.get(ACCELERATOR_SELECTOR), selector.get(TOPOLOGY_SELECTOR)
    if not label or not topology:
        missing = [key for key, value in ((ACCELERATOR_SELECTOR, label), (TOPOLOGY_SELECTOR, topology)) if not value]
        out.error(selector_path, f"requests {TPU_RESOURCE} but has no node selector {', '.join(missing)}; "
                                 "GKE schedules TPU pods by accelerator and topology")
        return
    generation = _generation_by_label(label)
    if generation is None:
        known = ", ".join(g.accelerator_label for g in CATALOG.values())
        out.error(selector_path + (ACCELERATOR_SELECTOR,), f"unknown TPU accelerator {label!r}; known: {known}")
        return
    if topology not in generation.all_topologies():
        out.error(selector_path + (TOPOLOGY_SELECTOR,), f"topology {topology!r} does not exist for {label}; "
                                                        f"allowed: {', '.join(generation.all_topologies())}")
        return
    matching = [p for p in pools or () if p.accelerator_label == label and p.topology == topology]
    if pools is not None and not matching:
        offered = sorted({f"{p.accelerator_label} {p.topology}" for p in pools}) or ["none"]
        out.error(selector_path, f"no TPU node pool of this stack offers {label} {topology} (pools offer: "
                                 f"{', '.join(offered)}); the pods would stay Pending")
    chips_options = {p.chips_per_vm for p in matching} or _chips_per_vm_options(generation, topology)
    if chips_per_pod not in chips_options:
        expected = " or ".join(str(c) for c in sorted(chips_options))
        out.error(chips_path, f"{chips_per_pod} chips per pod, but a VM of a {topology} {generation.name} slice has "
                              f"{expected}: each pod of a TPU slice takes every chip of its VM")
    chips_per_host = chips_per_pod if chips_per_pod in chips_options else (
        next(iter(chips_options)) if len(chips_options) == 1 else None)
    if chips_per_host:
        expected_hosts = chips_in(topology) // chips_per_host
        for hosts in site.hosts:
            if _as_int(hosts.value) != expected_hosts:
                out.error(hosts.path, f"{hosts.path[-1]}={hosts.value} but topology {topology} has "
                                      f"{chips_in(topology)} chips at {chips_per_host} per host, i.e. "
                                      f"{expected_hosts} hosts")
    if pools is not None and matching and site.replicas is not None:
        wanted = _as_int(site.replicas.value)
        if wanted is not None and wanted > len(matching):
            out.warn(site.replicas.path, f"{wanted} slices of {label} {topology} wanted but the stack creates "
                                         f"{len(matching)} such node pool(s); the extra replicas would stay Pending")


# ---------------------------------------------------------------------------------------------------
# Reference rules


def _check_references(site: PodSite, namespace: str | None, index: ObjectIndex, out: _Collector) -> None:
    spec = site.template.get("spec") or {}
    base = site.path + ("spec",)
    account = spec.get("serviceAccountName")
    if account and account != "default" and not index.get("ServiceAccount", namespace, account):
        out.error(base + ("serviceAccountName",), f"ServiceAccount {account!r} does not exist in namespace "
                                                  f"{namespace!r}; the pods would be refused")
    claim_names = set()
    for position, claim in enumerate(spec.get("resourceClaims") or []):
        claim = claim or {}
        claim_names.add(claim.get("name"))
        template_name = claim.get("resourceClaimTemplateName")
        if template_name and not index.get("ResourceClaimTemplate", namespace, template_name):
            out.error(base + ("resourceClaims", position, "resourceClaimTemplateName"),
                      f"ResourceClaimTemplate {template_name!r} does not exist in namespace {namespace!r}")
        claim_name = claim.get("resourceClaimName")
        if claim_name and not index.get("ResourceClaim", namespace, claim_name):
            out.error(base + ("resourceClaims", position, "resourceClaimName"),
                      f"ResourceClaim {claim_name!r} does not exist in namespace {namespace!r}")
    for group in ("initContainers", "containers"):
        for c_index, container in enumerate(spec.get(group) or []):
            container = container or {}
            c_base = base + (group, c_index)
            for k, claim in enumerate(((container.get("resources") or {}).get("claims")) or []):
                if (claim or {}).get("name") not in claim_names:
                    out.error(c_base + ("resources", "claims", k, "name"),
                              f"claim {claim.get('name')!r} is not one of the pod's resourceClaims")
            for k, source in enumerate(container.get("envFrom") or []):
                ref = (source or {}).get("configMapRef") or {}
                _check_config_map(ref.get("name"), ref.get("optional"), None, namespace, index,
                                  c_base + ("envFrom", k, "configMapRef", "name"), out)
            for k, variable in enumerate(container.get("env") or []):
                ref = ((variable or {}).get("valueFrom") or {}).get("configMapKeyRef") or {}
                _check_config_map(ref.get("name"), ref.get("optional"), ref.get("key"), namespace, index,
                                  c_base + ("env", k, "valueFrom", "configMapKeyRef"), out)
    for v_index, volume in enumerate(spec.get("volumes") or []):
        ref = (volume or {}).get("configMap") or {}
        _check_config_map(ref.get("name"), ref.get("optional"), None, namespace, index,
                          base + ("volumes", v_index, "configMap", "name"), out)
        # A projected volume's ConfigMaps must exist too (each item's key as well).
        for s_index, source in enumerate(((volume or {}).get("projected") or {}).get("sources") or []):
            ref = (source or {}).get("configMap") or {}
            path = base + ("volumes", v_index, "projected", "sources", s_index, "configMap")
            for item in ref.get("items") or [None]:
                _check_config_map(ref.get("name"), ref.get("optional"), (item or {}).get("key"), namespace,
                                  index, path + ("name",), out)


def _check_config_map(name: str | None, optional: Any, key: str | None, namespace: str | None,
                      index: ObjectIndex, path: FieldPath, out: _Collector) -> None:
    if not name or optional is True:
        return
    config_map = index.get("ConfigMap", namespace, name)
    if config_map is None:
        out.error(path, f"ConfigMap {name!r} does not exist in namespace {namespace!r}; the pod would not start")
    elif key is not None and key not in {**(config_map.get("data") or {}), **(config_map.get("binaryData") or {})}:
        out.error(path + ("key",), f"ConfigMap {name!r} has no key {key!r}")


def _check_namespace(obj: Mapping[str, Any], index: ObjectIndex, out: _Collector) -> None:
    namespace = namespace_of(obj)
    if namespace is not None and namespace not in index.namespaces:
        out.error(("metadata", "namespace"), f"namespace {namespace!r} is neither created by the stack nor built in")


def _check_name(obj: Mapping[str, Any], out: _Collector) -> None:
    kind, name = kind_of(obj), name_of(obj)
    if kind in NAME_LIMITS:
        return      # KubeRay's own limits: preview/k8s/admission.py (ValidateRayJobMetadata, ...ClusterMetadata)
    if kind in ("Namespace", "Service"):
        if not naming.DNS1123_LABEL.match(name):
            out.error(("metadata", "name"), f"{kind} names are DNS-1123 labels (≤63 lowercase letters, digits, "
                                            f"'-'); got {name!r}")
    elif not naming.DNS1123_SUBDOMAIN.match(name):
        out.error(("metadata", "name"), f"names are DNS-1123 subdomains; got {name!r}")


# ---------------------------------------------------------------------------------------------------
# Kind-specific rules


def _check_ray_job(obj: Mapping[str, Any], index: ObjectIndex, out: _Collector) -> None:
    spec = obj.get("spec") or {}
    has_spec, selector = "rayClusterSpec" in spec, spec.get("clusterSelector")
    if has_spec and selector:
        out.error(("spec",), "set either rayClusterSpec (a new cluster) or clusterSelector (an existing one), not both")
    elif not has_spec and not selector:
        out.error(("spec",), "needs rayClusterSpec or clusterSelector")
    elif selector:
        cluster = selector.get("ray.io/cluster")
        if cluster and not index.get("RayCluster", namespace_of(obj), cluster):
            out.warn(("spec", "clusterSelector", "ray.io/cluster"),
                     f"RayCluster {cluster!r} is not created by the stack; it must exist before the job runs")
    if "runtimeEnvYAML" in spec:
        try:
            parsed = yaml.safe_load(spec["runtimeEnvYAML"] or "")
        except yaml.YAMLError as error:
            out.error(("spec", "runtimeEnvYAML"), f"does not parse as YAML: {error}")
        else:
            if parsed is not None and not isinstance(parsed, dict):
                out.error(("spec", "runtimeEnvYAML"), "must be a YAML mapping (a Ray runtime_env)")
    ttl = _as_int(spec.get("ttlSecondsAfterFinished"))
    if ttl and ttl > 0 and not spec.get("shutdownAfterJobFinishes"):
        out.error(("spec", "ttlSecondsAfterFinished"), "only takes effect with shutdownAfterJobFinishes: true")


def _requested_resources(obj: Mapping[str, Any]) -> set[str]:
    names: set[str] = set()
    for site in pod_sites(obj):
        spec = site.template.get("spec") or {}
        for container in (spec.get("containers") or []) + (spec.get("initContainers") or []):
            resources = (container or {}).get("resources") or {}
            names |= set(resources.get("requests") or {}) | set(resources.get("limits") or {})
    spec = obj.get("spec") or {}
    if (kind_of(obj) == "RayJob" and spec.get("submissionMode", "K8sJobMode") == "K8sJobMode"
            and "submitterPodTemplate" not in spec):
        names |= RAYJOB_SUBMITTER_RESOURCES
    return names


def _check_kueue(obj: Mapping[str, Any], index: ObjectIndex, out: _Collector) -> None:
    kind, spec = kind_of(obj), obj.get("spec") or {}
    labels = (obj.get("metadata") or {}).get("labels") or {}
    namespace = namespace_of(obj)
    queue_name = labels.get(QUEUE_LABEL)
    if queue_name:
        path = ("metadata", "labels", QUEUE_LABEL)
        local_queue = index.get("LocalQueue", namespace, queue_name)
        if local_queue is None:
            out.error(path, f"LocalQueue {queue_name!r} does not exist in namespace {namespace!r}")
        else:
            cluster_queue = index.get("ClusterQueue", None, str((local_queue.get("spec") or {}).get("clusterQueue")))
            if cluster_queue is not None:
                covered = {resource for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or []
                           for resource in (group or {}).get("coveredResources") or []}
                uncovered = sorted(_requested_resources(obj) - covered)
                if uncovered:
                    out.error(path, f"requests {', '.join(uncovered)}, which ClusterQueue {name_of(cluster_queue)!r} "
                                    "does not cover: Kueue can never admit this workload")
    priority = labels.get(PRIORITY_LABEL)
    if priority and not index.get("WorkloadPriorityClass", None, priority):
        out.error(("metadata", "labels", PRIORITY_LABEL), f"WorkloadPriorityClass {priority!r} does not exist")
    if kind == "LocalQueue":
        target = spec.get("clusterQueue")
        if target and not index.get("ClusterQueue", None, target):
            out.error(("spec", "clusterQueue"), f"ClusterQueue {target!r} is not created by the stack")
    if kind == "ClusterQueue":
        for g, group in enumerate(spec.get("resourceGroups") or []):
            for f, flavor in enumerate((group or {}).get("flavors") or []):
                flavor_name = (flavor or {}).get("name")
                if flavor_name and not index.get("ResourceFlavor", None, flavor_name):
                    out.error(("spec", "resourceGroups", g, "flavors", f, "name"),
                              f"ResourceFlavor {flavor_name!r} is not created by the stack")


# ---------------------------------------------------------------------------------------------------


def check_objects(objects: Sequence[Mapping[str, Any]],
                  tpu_pools: Sequence[TpuPool] | None = None,
                  provided: Sequence[Mapping[str, Any]] = ()) -> tuple[list[Finding], list[Finding]]:
    """(errors, warnings) of every rule over every object. `tpu_pools=None` means the TPU capacity is
    not known (Autopilot, or objects checked on their own): pod-vs-pool matching is then skipped. `provided`:
    objects another stack creates that these may name (a run's cluster stack's queue), not checked here."""
    index = ObjectIndex([*objects, *provided])
    errors: list[Finding] = []
    warnings: list[Finding] = []
    for obj in objects:
        out = _Collector(obj)
        _check_name(obj, out)
        _check_namespace(obj, index, out)
        for site in pod_sites(obj):
            _check_tpu_site(site, tpu_pools, out)
            _check_references(site, namespace_of(obj), index, out)
        if kind_of(obj) == "RayJob":
            _check_ray_job(obj, index, out)
        _check_kueue(obj, index, out)
        errors += out.errors
        warnings += out.warnings
    return errors, warnings
