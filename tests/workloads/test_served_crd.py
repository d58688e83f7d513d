"""The RayJob is created only when the cluster's KubeRay serves every field it sets (authOptions above all).

Why a check and not trust: the GKE Ray add-on's KubeRay version is not published per GKE version, and an unknown
field is not refused but dropped: pulumi-kubernetes creates objects with field validation "Warn"
(pulumi/pulumi-kubernetes provider/pkg/await/await.go: `FieldValidation: metav1.FieldValidationWarn` on server-side
apply; a plain create sends none and the API server's default is Warn: "This is the default in v1.23+", Kubernetes
API reference, fieldValidation). A KubeRay older than 1.5.1 has no `authOptions` (ray-project/kuberay
ray-operator/config/crd/bases/ray.io_rayjobs.yaml: absent at v1.5.0, present at v1.5.1), so the RayJob would run
with an unauthenticated dashboard and Jobs API. The stack reads rayjobs.ray.io from the cluster
(CustomResourceDefinition.get) and stops before the RayJob exists if its schema lacks a field.
Schemas: the shared bundle's KubeRay v1.7.0 CRD; "older" ones are that schema with the newer field removed.
"""
from __future__ import annotations

import copy

import pulumi
import pytest

from preview import harness
from preview.harness import GcpMocks, RecordingMonitor, bundled_crd_spec, run_program
from preview.stack_files import load_stack_config
from infra.config import build
from tests.conftest import MINIMAL, REPO
from workloads.bundle import load_bundle
from workloads.ray.component import ray_objects
from workloads.ray.served_schema import undeclared_fields, unserved_problem, version_schema

RAY_JOB = "kubernetes:ray.io/v1:RayJob"


def kuberay_without(path: tuple[str, ...]) -> dict:
    """The bundled RayJob CRD with the field at `path` (under spec) removed from every version's schema."""
    spec = copy.deepcopy(bundled_crd_spec("rayjobs.ray.io"))
    assert spec is not None, "the shared schema bundle (kuberay/ray.io_rayjobs.yaml) is needed"
    removed = []
    for version in spec["versions"]:
        node = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
        for key in path[:-1]:
            node = node["properties"][key]
        removed.append(node["properties"].pop(path[-1], None))
    assert any(removed), path
    return spec


@pytest.fixture(autouse=True)
def _restore_served():
    yield
    harness.SERVED_CRDS.clear()


@pytest.mark.parametrize("stack", ["dev", "prod"])
def test_the_bundled_kuberay_serves_every_field_the_ray_job_sets(stack):
    job = ray_objects(build(load_stack_config(stack, REPO)), load_bundle())["ray-job"]
    assert job["spec"]["rayClusterSpec"]["authOptions"] == {"mode": "token"}
    assert unserved_problem(job, bundled_crd_spec("rayjobs.ray.io")) is None


def test_a_kuberay_without_auth_options_is_named_with_the_release_that_has_it():
    job = ray_objects(build(load_stack_config("prod", REPO)), load_bundle())["ray-job"]
    problem = unserved_problem(job, kuberay_without(("rayClusterSpec", "authOptions")))
    assert "without spec.rayClusterSpec.authOptions (KubeRay >= 1.5.1)" in problem
    assert "unauthenticated" in problem
    assert unserved_problem({**job, "apiVersion": "ray.io/v2"}, bundled_crd_spec("rayjobs.ray.io")).startswith(
        "the cluster's KubeRay does not serve RayJob ray.io/v2")


def test_maps_lists_and_preserved_fields_are_not_reported():
    schema = {"type": "object", "properties": {
        "labels": {"type": "object", "additional_properties": {"type": "string"}},
        "items": {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "string"}}}},
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}
    value = {"labels": {"x/y": "1"}, "items": [{"a": "1"}, {"b": "2"}], "free": {"anything": {"at": "all"}},
             "extra": 1}
    assert sorted(undeclared_fields(value, schema)) == ["extra", "items[1].b"]
    assert version_schema({"versions": [{"name": "v1", "served": False}]}, "v1") is None


def test_up_stops_before_the_ray_job_when_the_served_schema_lacks_auth_options():
    harness.SERVED_CRDS["rayjobs.ray.io"] = kuberay_without(("rayClusterSpec", "authOptions"))
    monitor = RecordingMonitor(GcpMocks())
    with pytest.raises(pulumi.RunError) as error:
        run_program(MINIMAL, monitor=monitor)
    message = str(error.value)
    assert "spec.rayClusterSpec.authOptions" in message and "\n" not in message
    assert RAY_JOB not in {r.type for r in monitor.registrations}


def test_up_creates_the_ray_job_after_reading_the_served_crd():
    run = run_program(MINIMAL)
    [job] = [r for r in run.resources if r.type == RAY_JOB]
    assert job.inputs["spec"]["rayClusterSpec"]["authOptions"] == {"mode": "token"}


def test_the_served_crd_is_read_after_the_system_pool_is_up():
    """Nothing public says the GKE Ray add-on's CRDs are installed when cluster creation returns, and a `get` is not
    retried: the read waits for the system pool (created after the cluster) as well as the cluster."""
    monitor = RecordingMonitor(GcpMocks())
    run = run_program(MINIMAL, monitor=monitor)
    [crd_read] = [urn for urn in monitor.reads if "CustomResourceDefinition" in urn]
    pool = run.one("gcp:container/nodePool:NodePool", "system")
    cluster = run.one("gcp:container/cluster:Cluster")
    assert {pool.urn, cluster.urn} <= set(monitor.reads[crd_read])
    assert cluster.urn in pool.dependencies or cluster.urn in sum(pool.property_dependencies.values(), [])
