"""Offline validation of Kubernetes objects (infra/k8s_validation.py) on small hand-made objects:
each broken object must be reported at its field path, and the intact ones must pass."""
from __future__ import annotations

import copy

import pytest

from preview.k8s.validation import TpuPool, default_schemas_dir, validate_objects

SCHEMAS = default_schemas_dir()
K8S = "1.34.1-gke.1829001"
NS = "train"
POOLS = [TpuPool(f"slice-{i}", "tpu-v6e-slice", "ct6e-standard-4t", 4, "4x4", 4) for i in range(2)]

pytestmark = pytest.mark.skipif(not SCHEMAS.is_dir(), reason="CRD bundle ../shared/schemas not present")


def tpu_pod(chips: int = 4, topology: str = "4x4", **spec_extra) -> dict:
    return {"spec": {
        "serviceAccountName": "trainer",
        "nodeSelector": {"cloud.google.com/gke-tpu-accelerator": "tpu-v6e-slice",
                         "cloud.google.com/gke-tpu-topology": topology},
        "containers": [{"name": "worker", "image": "rayproject/ray:2.60.0",
                        "resources": {"limits": {"google.com/tpu": chips}, "requests": {"google.com/tpu": chips}}}],
        **spec_extra}}


def base_objects() -> list[dict]:
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "trainer", "namespace": NS}},
        {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
         "metadata": {"name": "two-netdev", "namespace": NS},
         "spec": {"spec": {"devices": {"requests": [{"name": "nics", "exactly": {
             "deviceClassName": "netdev.google.com", "allocationMode": "ExactCount", "count": 2}}]}}}},
    ]


def ray_cluster(num_of_hosts: int = 4, chips: int = 4, replicas: int = 2) -> dict:
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster", "metadata": {"name": "train", "namespace": NS},
            "spec": {"headGroupSpec": {"rayStartParams": {}, "template": {"spec": {
                         "serviceAccountName": "trainer",
                         "containers": [{"name": "ray-head", "image": "rayproject/ray:2.60.0"}]}}},
                     "workerGroupSpecs": [{"groupName": "tpu", "replicas": replicas, "minReplicas": replicas,
                                           "maxReplicas": replicas, "numOfHosts": num_of_hosts,
                                           "rayStartParams": {}, "template": tpu_pod(chips)}]}}


def jobset(parallelism: int = 4) -> dict:
    return {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "metadata": {"name": "train", "namespace": NS},
            "spec": {"replicatedJobs": [{"name": "slice", "replicas": 2, "template": {"spec": {
                "parallelism": parallelism, "completions": parallelism, "backoffLimit": 0,
                "template": tpu_pod(restartPolicy="Never")}}}]}}


def check(objects: list[dict], pools=POOLS):
    return validate_objects(objects, SCHEMAS, K8S, tpu_pools=pools)


def paths(findings) -> set[str]:
    return {f.field_path for f in findings}


def test_intact_objects_pass():
    report = check(base_objects() + [ray_cluster(), jobset()])
    assert report.errors == [] and report.warnings == []
    assert not report.cr_check_skipped and report.kubernetes_version == "1.34"


def test_num_of_hosts_off_by_one_is_reported_at_its_field():
    report = check(base_objects() + [ray_cluster(num_of_hosts=3)])
    [error] = report.errors
    assert error.object_ref == f"RayCluster/{NS}/train"
    assert error.field_path == "spec.workerGroupSpecs[0].numOfHosts"
    assert "4 hosts" in error.message


def test_chips_per_pod_must_fill_the_vm():
    # 8 chips per pod on 4-chip VMs: wrong chips per pod, and 2 hosts do not match 4x4 on this pool either.
    report = check(base_objects() + [ray_cluster(num_of_hosts=2, chips=8)])
    chips_field = 'spec.workerGroupSpecs[0].template.spec.containers[0].resources.limits["google.com/tpu"]'
    assert chips_field in paths(report.errors)
    assert "spec.workerGroupSpecs[0].numOfHosts" in paths(report.errors)


def test_unknown_custom_resource_field_is_reported_at_its_path():
    cluster = ray_cluster()
    cluster["spec"]["workerGroupSpecs"][0]["numOfHost"] = 4      # typo of numOfHosts
    report = check(base_objects() + [cluster])
    found = [(e.field_path, e.message) for e in report.errors]
    assert found == [("spec.workerGroupSpecs[0].numOfHost", "unknown field")]


def test_wrong_type_in_custom_resource_is_reported():
    cluster = ray_cluster()
    cluster["spec"]["workerGroupSpecs"][0]["replicas"] = "two"
    assert "spec.workerGroupSpecs[0].replicas" in paths(check(base_objects() + [cluster]).errors)


def test_crd_defaults_apply_before_required_checks():
    # KubeRay marks minReplicas/maxReplicas required but defaults them: omitting them is valid.
    cluster = ray_cluster()
    for key in ("minReplicas", "maxReplicas"):
        del cluster["spec"]["workerGroupSpecs"][0][key]
    assert check(base_objects() + [cluster]).errors == []


def test_built_in_kind_schema_errors_are_listed_each():
    objects = base_objects()
    objects[1]["automountServiceAccountToken"] = "yes"
    objects[1]["secret"] = []
    report = check(objects)
    assert paths(report.errors) == {"automountServiceAccountToken", "secret"}


def test_jobset_parallelism_must_equal_hosts():
    report = check(base_objects() + [jobset(parallelism=3)])
    assert paths(report.errors) == {"spec.replicatedJobs[0].template.spec.parallelism",
                                    "spec.replicatedJobs[0].template.spec.completions"}


def test_references_to_missing_objects_are_errors():
    pod_spec = tpu_pod(resourceClaims=[{"name": "nics", "resourceClaimTemplateName": "missing-template"}])["spec"]
    pod_spec["serviceAccountName"] = "nobody"
    pod_spec["volumes"] = [{"name": "code", "configMap": {"name": "no-such-code"}}]
    pod_spec["containers"][0]["resources"]["claims"] = [{"name": "not-declared"}]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": NS}, "spec": pod_spec}
    report = check(base_objects() + [pod])
    assert paths(report.errors) == {
        "spec.resourceClaims[0].resourceClaimTemplateName", "spec.serviceAccountName",
        "spec.volumes[0].configMap.name", "spec.containers[0].resources.claims[0].name"}


def test_existing_references_pass():
    pod_spec = tpu_pod(resourceClaims=[{"name": "nics", "resourceClaimTemplateName": "two-netdev"}])["spec"]
    pod_spec["containers"][0]["resources"]["claims"] = [{"name": "nics"}]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": NS}, "spec": pod_spec}
    assert check(base_objects() + [pod]).errors == []


def test_pods_must_match_a_node_pool_of_the_stack():
    cluster = ray_cluster()
    cluster["spec"]["workerGroupSpecs"][0]["template"] = tpu_pod(topology="8x8")
    cluster["spec"]["workerGroupSpecs"][0]["numOfHosts"] = 16
    report = check(base_objects() + [cluster])
    assert paths(report.errors) == {"spec.workerGroupSpecs[0].template.spec.nodeSelector"}
    # Without pool facts (e.g. Autopilot) the same object is fine: 16 hosts × 4 chips = 8x8.
    assert check(base_objects() + [cluster], pools=None).errors == []


def test_more_slices_than_pools_is_a_warning():
    report = check(base_objects() + [ray_cluster(replicas=3)])
    assert report.errors == []
    assert paths(report.warnings) == {"spec.workerGroupSpecs[0].maxReplicas"}


def test_an_elastic_group_is_matched_with_pools_at_its_maximum():
    # An elastic group starts at replicas = minReplicas and the driver raises replicas to maxReplicas
    # (trainer/grow.py), so the pools must hold maxReplicas slices.
    elastic = ray_cluster(replicas=1)
    elastic["spec"]["workerGroupSpecs"][0]["maxReplicas"] = 3
    report = check(base_objects() + [elastic])
    assert report.errors == []
    assert paths(report.warnings) == {"spec.workerGroupSpecs[0].maxReplicas"}
    assert "3 slices" in report.warnings[0].message
    elastic["spec"]["workerGroupSpecs"][0]["maxReplicas"] = 2
    assert check(base_objects() + [elastic]).warnings == []
    # A group without maxReplicas is matched by its replicas.
    fixed = ray_cluster(replicas=3)
    del fixed["spec"]["workerGroupSpecs"][0]["maxReplicas"]
    assert paths(check(base_objects() + [fixed]).warnings) == {"spec.workerGroupSpecs[0].replicas"}


def test_ray_job_rules():
    job = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "job", "namespace": NS},
           "spec": {"entrypoint": "python -m trainer", "runtimeEnvYAML": "pip: [", "ttlSecondsAfterFinished": 60,
                    "rayClusterSpec": copy.deepcopy(ray_cluster()["spec"]),
                    "clusterSelector": {"ray.io/cluster": "train"}}}
    report = check(base_objects() + [job])
    assert {"spec", "spec.runtimeEnvYAML", "spec.ttlSecondsAfterFinished"} <= paths(report.errors)


def test_kueue_queue_must_cover_what_the_workload_requests():
    cluster_queue = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": "tpu"},
                     "spec": {"namespaceSelector": {}, "resourceGroups": [{
                         "coveredResources": ["google.com/tpu"],
                         "flavors": [{"name": "v6e", "resources": [{"name": "google.com/tpu", "nominalQuota": 32}]}]}]}}
    flavor = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "v6e"}, "spec": {}}
    local_queue = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
                   "metadata": {"name": "q", "namespace": NS}, "spec": {"clusterQueue": "tpu"}}
    job = {"apiVersion": "ray.io/v1", "kind": "RayJob",
           "metadata": {"name": "job", "namespace": NS, "labels": {"kueue.x-k8s.io/queue-name": "q"}},
           "spec": {"entrypoint": "python -m trainer", "rayClusterSpec": copy.deepcopy(ray_cluster()["spec"])}}
    report = check(base_objects() + [flavor, cluster_queue, local_queue, job])
    [error] = report.errors
    assert error.field_path == 'metadata.labels["kueue.x-k8s.io/queue-name"]'
    assert "cpu, memory" in error.message   # the default submitter pod of K8sJobMode (docs/platform-notes.md §6)
    cluster_queue["spec"]["resourceGroups"][0]["coveredResources"] += ["cpu", "memory"]
    for resource in ("cpu", "memory"):
        cluster_queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"].append(
            {"name": resource, "nominalQuota": 100})
    assert check(base_objects() + [flavor, cluster_queue, local_queue, job]).errors == []


def test_unserved_custom_resource_version_is_an_error():
    objects = base_objects() + [jobset()]
    objects[-1]["apiVersion"] = "jobset.x-k8s.io/v1alpha1"
    assert paths(check(objects).errors) == {"apiVersion"}


def test_without_crds_the_custom_resource_check_is_skipped_and_said(tmp_path):
    report = validate_objects(base_objects() + [ray_cluster()], tmp_path / "absent", K8S, tpu_pools=POOLS)
    assert report.cr_check_skipped
    assert any("skipped" in note for note in report.notes)
    assert report.errors == []            # rules still run; the schema part is what was skipped
    broken = ray_cluster(num_of_hosts=3)
    assert paths(validate_objects([broken], None).errors) >= {"spec.workerGroupSpecs[0].numOfHosts"}
