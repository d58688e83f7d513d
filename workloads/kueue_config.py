"""Kueue's controller-manager Configuration for the Helm chart (pure: plain dicts, no Pulumi import).

Kueue 0.19 accounts DRA ResourceClaims against ClusterQueue quota (feature gate KueueDRAIntegration, Beta and on
by default since 0.18: kubernetes-sigs/kueue v0.19.2 pkg/features/kube_features.go). A pod whose claim names a
DeviceClass that `resources.deviceClassMappings` does not map is never admitted ("DeviceClass ... is not mapped in
DRA configuration", pkg/dra/claims.go), and the chart's default Configuration maps none. So with DRANET the stack
maps the managed netdev class to a quota resource of its own and the ClusterQueue covers that resource.

The chart takes the Configuration as one YAML string, `managerConfig.controllerManagerConfigYaml`, and uses it
instead of its default as a whole (charts/kueue/templates/manager/manager-config.yaml reads it with fromYaml and
only adds internalCertManagement; templates/webhook/manifests.yaml reads its integrations). Setting it therefore
means restating every default setting too: CHART_DEFAULT below holds the settings of the chart's default
Configuration at v0.19.2 (charts/kueue/values.yaml), with the integrations it enables (JobSet among them).

The stack always sets it, for waitForPodsReady: on by default since Kueue 0.19 with a 30 min timeout
(apis/config/v1beta2/defaults.go), it is what turns a slice that comes up late into waiting instead of a counted
JobSet restart, so its timeout is stated here, sized from the slice start-up the plan assumes (core/slice_wait.py),
rather than left to a default that may change between Kueue releases.
"""
from __future__ import annotations

import copy

import yaml

from core.slice_wait import PODS_READY_TIMEOUT_S, REQUEUE_LIMIT

KUEUE_CONFIG_API = "config.kueue.x-k8s.io/v1beta2"

# The settings of kubernetes-sigs/kueue v0.19.2 charts/kueue/values.yaml managerConfig.controllerManagerConfigYaml
# (commented-out entries there are Kueue's built-in defaults and stay unset here too).
CHART_DEFAULT: dict = {
    "apiVersion": KUEUE_CONFIG_API,
    "kind": "Configuration",
    "health": {"healthProbeBindAddress": ":8081"},
    "metrics": {"bindAddress": ":8443"},
    "webhook": {"port": 9443},
    "leaderElection": {"leaderElect": True, "resourceName": "c1f6bfd2.kueue.x-k8s.io"},
    "controller": {"groupKindConcurrency": {
        "Job.batch": 5,
        "Pod": 5,
        "Workload.kueue.x-k8s.io": 10,
        "LocalQueue.kueue.x-k8s.io": 5,
        "ClusterQueue.kueue.x-k8s.io": 5,
        "ResourceFlavor.kueue.x-k8s.io": 1,
    }},
    "clientConnection": {"qps": 300, "burst": 500},
    "integrations": {"frameworks": [
        "batch/job",
        "kubeflow.org/mpijob",
        "ray.io/rayjob",
        "ray.io/rayservice",
        "ray.io/raycluster",
        "jobset.x-k8s.io/jobset",
        "workload.codeflare.dev/appwrapper",
        "trainer.kubeflow.org/trainjob",
        "pod",
        "deployment",
        "statefulset",
        "leaderworkerset.x-k8s.io/leaderworkerset",
    ]},
}

# The quota resource DRANET NICs are charged to: one unit per device a claim asks for (the request's `count`;
# Kueue's "device count" accounting). Any valid label key works (pkg/config/validation.go checks IsLabelKey); a
# name under the project's own prefix cannot be mistaken for a resource some device plugin advertises.
DRANET_QUOTA_RESOURCE = "tpu-multislice/dcn-nic"


def wait_for_pods_ready() -> dict:
    """Kueue's all-or-nothing admission (apis/config/v1beta2 WaitForPodsReady): a JobSet whose pods are not all
    Ready PODS_READY_TIMEOUT_S after admission (or after a restart: recoveryTimeout defaults to the same value) is
    evicted and requeued, with Kueue's default backoff (60 s doubling up to 1 h), at most REQUEUE_LIMIT times:
    unset, Kueue requeues forever and the slices that come up bill for every timeout; at the limit it deactivates
    the Workload (spec.active=false, the JobSet stays suspended) and clears its requeue count, so setting
    spec.active back to true starts a fresh round (core/slice_wait.py; Kueue v0.19.2
    pkg/controller/core/workload_controller.go "a deactivated workload is re-activated")."""
    return {"timeout": f"{PODS_READY_TIMEOUT_S}s", "blockAdmission": False,
            "requeuingStrategy": {"timestamp": "Eviction", "backoffLimitCount": REQUEUE_LIMIT}}


def manager_config(device_classes: dict[str, list[str]]) -> dict:
    """The chart's default Configuration with waitForPodsReady, plus one deviceClassMapping per quota resource
    (`{quota resource: [DeviceClass names]}`)."""
    config = copy.deepcopy(CHART_DEFAULT)
    config["waitForPodsReady"] = wait_for_pods_ready()
    if device_classes:
        config["resources"] = {"deviceClassMappings": [
            {"name": name, "deviceClassNames": list(classes)} for name, classes in device_classes.items()]}
    return config


def chart_values(device_classes: dict[str, list[str]]) -> dict:
    """Helm values of the Kueue release: the whole Configuration as the one YAML string the chart reads."""
    text = yaml.safe_dump(manager_config(device_classes), sort_keys=False, default_flow_style=False)
    return {"managerConfig": {"controllerManagerConfigYaml": text}}
