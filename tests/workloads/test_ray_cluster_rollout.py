"""How changes reach the job's RayCluster, and what of the head is reachable (KubeRay v1.7.0 CRD in ../shared)."""
from __future__ import annotations

import copy

import pytest

from infra.config import build
from preview.k8s.validation import default_schemas_dir, validate_objects
from preview.stack_files import load_stack_config
from tests.conftest import MINIMAL, REPO
from workloads.bundle import load_bundle
from workloads.ray import manifests as ray_manifests
from workloads.ray.component import ray_objects

BUNDLE = load_bundle()


def cluster_of(raw: dict) -> dict:
    """The RayCluster the training job creates (RayJob spec.rayClusterSpec), as KubeRay creates it."""
    job = ray_objects(build(raw), BUNDLE)["ray-job"]
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": f"{job['metadata']['name']}-abcde", "namespace": job["metadata"]["namespace"]},
            "spec": job["spec"]["rayClusterSpec"]}


def job_name_of(raw: dict) -> str:
    return ray_objects(build(raw), BUNDLE)["ray-job"]["metadata"]["name"]


def schema_findings(cluster: dict, prefix: str) -> list:
    """CRD findings under `prefix` (the cluster alone: cross-object findings about its namespace, service
    account and claim template belong to the whole-stack validation in test_ray.py)."""
    report = validate_objects([cluster], default_schemas_dir())
    assert not report.cr_check_skipped
    return [f for f in report.errors if f.field_path.startswith(prefix)]


def test_a_changed_cluster_relaunches_the_job_and_an_unchanged_one_does_not():
    """KubeRay creates a RayJob's cluster once, when the job starts (kuberay v1.7.0 rayjob_controller.go
    initRayJobStatusIfNeed names it, then it is only created if missing): an edited rayClusterSpec never reaches
    a running job. So the job's name hashes its cluster spec: a new image makes a new job (and cluster), while
    the same config gives the same name and `pulumi up` changes nothing."""
    raw = {**load_stack_config("prod", REPO), "workerEnvironment": "runtime"}
    assert cluster_of(raw) == cluster_of(copy.deepcopy(raw))
    assert job_name_of(raw) == job_name_of(copy.deepcopy(raw))
    changed = {**raw, "rayImage": "rayproject/ray:2.60.0-py312-cu128"}
    assert cluster_of(changed)["spec"] != cluster_of(raw)["spec"]
    assert job_name_of(changed) != job_name_of(raw)
    # The built image (the default): a new build context is a new tag, and so a new job.
    config = build(load_stack_config("prod", REPO))
    first, rebuilt = (ray_objects(config, BUNDLE, worker_image=f"r/worker:{tag}")["ray-job"]["metadata"]["name"]
                      for tag in ("0123456789abcdef", "fedcba9876543210"))
    assert first != rebuilt
    # A job's cluster is never upgraded in place, so it carries no upgrade strategy.
    assert "upgradeStrategy" not in cluster_of(raw)["spec"]


def test_head_service_is_cluster_internal_and_token_auth_is_on():
    """Ray's job API runs arbitrary code: the head Service KubeRay creates is ClusterIP (KubeRay v1.7.0 CRD
    headGroupSpec.serviceType), and the dashboard/job API need Ray's token (authOptions, KubeRay >= 1.5.1)."""
    for stack in ("prod", "dev"):
        cluster = cluster_of(load_stack_config(stack, REPO))
        spec = cluster["spec"]
        assert spec["headGroupSpec"]["serviceType"] == "ClusterIP"
        assert schema_findings(cluster, "spec.headGroupSpec.serviceType") == []
        assert spec["authOptions"] == {"mode": "token"}


def test_the_dashboard_load_balancer_is_refused_without_token_auth(monkeypatch):
    raw = {**MINIMAL, "dashboardExposure": "internal-lb", "dashboardSourceRanges": ["10.10.0.0/16"]}
    objects = ray_objects(build(raw), BUNDLE)
    assert objects["ray-job"]["spec"]["rayClusterSpec"]["authOptions"]["mode"] == "token"
    assert objects["dashboard-ilb"]["spec"]["selector"] == objects["head-service"]["spec"]["selector"]
    original = ray_manifests.ray_cluster_spec

    def without_auth(*args, **kwargs):
        cluster = original(*args, **kwargs)
        del cluster["authOptions"]
        return cluster

    monkeypatch.setattr(ray_manifests, "ray_cluster_spec", without_auth)
    with pytest.raises(ValueError, match="token auth"):
        ray_objects(build(raw), BUNDLE)
