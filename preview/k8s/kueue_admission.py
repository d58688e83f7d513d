"""Kueue's admission of runs on one shared ClusterQueue, played offline from Kueue v0.19.2's rules.

What is played (kubernetes-sigs/kueue v0.19.2):
- a job's Workload is its PodSets: a JobSet one per replicatedJob, `replicas x parallelism` pods
  (pkg/controller/jobs/jobset/jobset_controller.go PodSets); a RayJob its head (1 pod), each worker group
  (`replicas x numOfHosts`, pkg/controller/jobs/raycluster/common.go effectiveWorkerCount) and, in K8sJobMode,
  its submitter (1 pod, pkg/controller/jobs/rayjob/rayjob_controller.go addSubmitterPodSet);
- a pod's requests: its containers' (a limit stands in for a missing request, pkg/workload/resources.go
  UseLimitsAsMissingRequestsInPod) plus restartable init containers, at least any other init container's;
- admission is all or nothing: a Workload is admitted only when every resource it requests is covered by the
  ClusterQueue and fits its nominal quota beside what is admitted already (no cohort, so no borrowing;
  pkg/scheduler/flavorassigner); otherwise it waits whole, and with `preemption.withinClusterQueue: Never`
  nothing admitted is evicted for it. BestEffortFIFO: a Workload that does not fit does not block a later one
  that does (pkg/queue/cluster_queue.go).
- the Workload must come from a namespace the ClusterQueue's namespaceSelector matches, through a LocalQueue of
  that namespace pointing at the ClusterQueue.
Not played: cohorts, several flavors, fair sharing, waitForPodsReady's evictions (the plan states those).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
_UNITS = {"Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9,
          "m": 1e-3}


def quantity(value: Any) -> float:
    text = str(value)
    for suffix in sorted(_UNITS, key=len, reverse=True):
        if text.endswith(suffix):
            return float(text[:-len(suffix)]) * _UNITS[suffix]
    return float(text)


def _container_requests(container: Mapping[str, Any]) -> dict[str, float]:
    resources = container.get("resources") or {}
    requests = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    return {name: quantity(value) for name, value in requests.items()}


def _add(into: dict[str, float], more: Mapping[str, float], times: float = 1) -> None:
    for name, value in more.items():
        into[name] = into.get(name, 0) + value * times


def pod_requests(pod_spec: Mapping[str, Any]) -> dict[str, float]:
    total: dict[str, float] = {}
    for container in pod_spec.get("containers") or []:
        _add(total, _container_requests(container))
    for init in pod_spec.get("initContainers") or []:
        if init.get("restartPolicy") == "Always":     # a sidecar runs beside the containers
            _add(total, _container_requests(init))
        else:
            for name, value in _container_requests(init).items():
                total[name] = max(total.get(name, 0), value)
    return total


def pod_sets(job: Mapping[str, Any]) -> list[tuple[str, int, Mapping[str, Any]]]:
    """(name, pods, pod spec) of each PodSet of a JobSet or RayJob, as Kueue builds its Workload."""
    spec = job["spec"]
    if job["kind"] == "JobSet":
        return [(rjob["name"], rjob.get("replicas", 1) * rjob["template"]["spec"].get("parallelism", 1),
                 rjob["template"]["spec"]["template"]["spec"]) for rjob in spec["replicatedJobs"]]
    if job["kind"] == "RayJob":
        cluster = spec["rayClusterSpec"]
        sets = [("head", 1, cluster["headGroupSpec"]["template"]["spec"])]
        sets += [(group["groupName"], group.get("replicas", 1) * max(group.get("numOfHosts", 1), 1),
                  group["template"]["spec"]) for group in cluster.get("workerGroupSpecs") or []]
        if spec.get("submissionMode") == "K8sJobMode":
            sets.append(("submitter", 1, spec["submitterPodTemplate"]["spec"]))
        return sets
    raise ValueError(f"no Kueue integration played for {job['kind']}")


def workload_requests(job: Mapping[str, Any]) -> dict[str, float]:
    total: dict[str, float] = {}
    for _, pods, pod_spec in pod_sets(job):
        _add(total, pod_requests(pod_spec), pods)
    return total


@dataclass
class Queue:
    """One ClusterQueue with a single flavor and no cohort, and the Workloads it has admitted."""
    cluster_queue: Mapping[str, Any]
    admitted: dict[str, dict[str, float]] = field(default_factory=dict)
    pending: list[tuple[str, dict[str, float]]] = field(default_factory=list)

    @property
    def nominal(self) -> dict[str, float]:
        [group] = self.cluster_queue["spec"]["resourceGroups"]
        [flavor] = group["flavors"]
        return {r["name"]: quantity(r["nominalQuota"]) for r in flavor["resources"]}

    def usage(self) -> dict[str, float]:
        used: dict[str, float] = {}
        for requests in self.admitted.values():
            _add(used, requests)
        return used

    def why_not(self, requests: Mapping[str, float]) -> str | None:
        nominal, used = self.nominal, self.usage()
        for name, value in requests.items():
            if value == 0:
                continue
            if name not in nominal:
                return f"{name} is not covered by ClusterQueue {self.cluster_queue['metadata']['name']}"
            if used.get(name, 0) + value > nominal[name] + 1e-9:
                return f"{name}: {used.get(name, 0):g} admitted + {value:g} asked > quota {nominal[name]:g}"
        return None

    def submit(self, name: str, job: Mapping[str, Any], namespace_labels: Mapping[str, str],
               local_queue: Mapping[str, Any]) -> None:
        selector = self.cluster_queue["spec"].get("namespaceSelector", {}).get("matchLabels", {})
        if any(namespace_labels.get(k) != v for k, v in selector.items()):
            raise ValueError(f"{name}: namespace not selected by the ClusterQueue ({selector})")
        if (job["metadata"].get("labels", {}).get(QUEUE_LABEL) != local_queue["metadata"]["name"]
                or local_queue["spec"]["clusterQueue"] != self.cluster_queue["metadata"]["name"]):
            raise ValueError(f"{name}: not queued through a LocalQueue of this ClusterQueue")
        self.pending.append((name, workload_requests(job)))
        self.schedule()

    def finish(self, name: str) -> None:
        del self.admitted[name]
        self.schedule()

    def schedule(self) -> None:
        """Admit, in order, every pending Workload that fits whole (BestEffortFIFO)."""
        waiting = []
        for name, requests in self.pending:
            if self.why_not(requests) is None:
                self.admitted[name] = requests
            else:
                waiting.append((name, requests))
        self.pending = waiting
