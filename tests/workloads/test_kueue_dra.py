"""Kueue 0.19 admits pods with DRANET claims only when their DeviceClass is mapped to a quota resource.

Sources, kubernetes-sigs/kueue at v0.19.2: pkg/features/kube_features.go (KueueDRAIntegration Beta, default on
since 0.18); pkg/dra/claims.go ("DeviceClass %s is not mapped in DRA configuration"); pkg/config/validation.go
validateDeviceClassMappings (label-key names, at most 16 mappings of 1-8 classes); charts/kueue/values.yaml and
templates/manager/manager-config.yaml (managerConfig.controllerManagerConfigYaml is one YAML string that replaces the
default Configuration, integrations included); site/content/en/docs/tasks/manage/setup_dra.md (the ClusterQueue
covers the mapped name).
"""
from __future__ import annotations

import re

import yaml

from infra.config import build
from preview.stack_files import load_stack_config
from tests.conftest import MINIMAL, REPO
from workloads.bundle import load_bundle
from workloads.common import DRANET_DEVICE_CLASS
from workloads.controllers import kueue_values
from workloads.jobset.spec import jobset_objects
from workloads.kueue_config import CHART_DEFAULT, DRANET_QUOTA_RESOURCE

# k8s.io/apimachinery IsLabelKey: optional DNS-1123 subdomain prefix, then a name of at most 63 characters.
LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
                       r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$")


def parsed(values: dict) -> dict:
    return yaml.safe_load(values["managerConfig"]["controllerManagerConfigYaml"])


def test_dranet_stack_maps_the_netdev_class_and_keeps_the_chart_defaults():
    config = parsed(kueue_values(build(load_stack_config("jobset", REPO))))
    [mapping] = config["resources"]["deviceClassMappings"]
    assert mapping == {"name": DRANET_QUOTA_RESOURCE, "deviceClassNames": [DRANET_DEVICE_CLASS]}
    assert LABEL_KEY.match(mapping["name"]) and LABEL_KEY.match(DRANET_DEVICE_CLASS)
    # The value replaces the chart's default Configuration as a whole: every default setting is restated.
    assert {k: v for k, v in config.items() if k not in ("resources", "waitForPodsReady")} == CHART_DEFAULT
    assert config["apiVersion"] == "config.kueue.x-k8s.io/v1beta2" and config["kind"] == "Configuration"
    assert "jobset.x-k8s.io/jobset" in config["integrations"]["frameworks"]
    assert "batch/job" in config["integrations"]["frameworks"]


def test_without_dranet_the_chart_defaults_are_kept_with_no_device_class_mapping():
    config = parsed(kueue_values(build({**MINIMAL, "workloadBackend": "jobset"})))
    assert "resources" not in config
    assert {k: v for k, v in config.items() if k != "waitForPodsReady"} == CHART_DEFAULT


def test_cluster_queue_covers_every_claimed_nic():
    """NICs per pod (the claim's count, one per DCN network) x pods, under the mapped name."""
    config = build(load_stack_config("jobset", REPO))
    objects = jobset_objects(config, load_bundle())
    [request] = objects["dcn-netdevs"]["spec"]["spec"]["devices"]["requests"]
    mapped = {c: m["name"] for m in parsed(kueue_values(config))["resources"]["deviceClassMappings"]
              for c in m["deviceClassNames"]}
    resource = mapped[request["exactly"]["deviceClassName"]]
    [group] = objects["cluster-queue"]["spec"]["resourceGroups"]
    assert resource in group["coveredResources"]
    quota = {r["name"]: r["nominalQuota"] for r in group["flavors"][0]["resources"]}
    pods = config.tpu.slices * config.tpu.shape.hosts
    assert int(quota[resource]) == request["exactly"]["count"] * pods == 2 * 8


def test_no_nic_quota_without_dranet():
    objects = jobset_objects(build({**MINIMAL, "workloadBackend": "jobset", "dcn": True}), load_bundle())
    [group] = objects["cluster-queue"]["spec"]["resourceGroups"]
    assert DRANET_QUOTA_RESOURCE not in group["coveredResources"]
