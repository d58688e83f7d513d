"""The Pathways path (issue 7, seed 003): one JobSet valid against JobSet v0.12 / Kubernetes schemas, matching the
node pools it runs on, MaxText argv from the shared builder with the elastic keys, goldens, and bad input refused
before anything is registered."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pulumi
import pytest

from infra.config import ConfigError, build
from preview.k8s.manifests import is_kubernetes_type, object_from_inputs
from preview.k8s.validation import default_schemas_dir, validate_objects
from preview.harness import GcpMocks, RecordingMonitor, run_program
from preview.model import tpu_pools
from preview.stack_files import load_stack_config
from core.tpu_catalog import chips_in
from tests.conftest import assert_matches_golden, MINIMAL, REPO, committed_stack_run
from core.maxtext_args import PRE_TRAIN_MODULE, maxtext_overrides
from workloads.pathways import spec as pathways_inputs
from workloads.pathways.manifests import HEAD_JOB, WORKER_JOB
from workloads.pathways.component import pathways_objects

STACK = "pathways"
JOBSET_TOKEN = "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"
# Smallest Pathways config that is not elastic: the defaults plus what the head needs (a CPU node that fits it).
FIXED = {**MINIMAL, "workloadBackend": "pathways", "systemPoolMachineType": "n2-standard-64"}


@pytest.fixture(scope="module")
def run():
    return committed_stack_run(STACK)


@pytest.fixture(scope="module")
def config():
    return build(load_stack_config(STACK, REPO))


def registered_objects(program_run) -> list[dict]:
    return [object_from_inputs(r.inputs, r.name) for r in program_run.resources if is_kubernetes_type(r.type)]


def the_jobset(program_run) -> dict:
    [jobset] = [o for o in registered_objects(program_run) if o["kind"] == "JobSet"]
    return jobset


def replicated(jobset: dict, name: str) -> dict:
    [job] = [j for j in jobset["spec"]["replicatedJobs"] if j["name"] == name]
    return job


def pod_spec(jobset: dict, name: str) -> dict:
    return replicated(jobset, name)["template"]["spec"]["template"]["spec"]


def container(spec: dict, name: str) -> dict:
    [found] = [c for c in spec.get("initContainers", []) + spec["containers"] if c["name"] == name]
    return found


def maxtext_keys(command: list[str]) -> dict[str, str]:
    return dict(arg.split("=", 1) for arg in command[4:])


# ---- the seed scenario -----------------------------------------------------------------------------------

def test_committed_stack_is_seed_003(config):
    assert (config.workload.model, config.tpu.shape.pod_type, config.tpu.shape.machine.name, config.tpu.slices) == \
        ("qwen3-0.6b", "v5litepod-16", "ct5lp-hightpu-4t", 3)
    pathways = config.pathways
    assert (pathways.elastic_slices, pathways.elastic_max_retries, pathways.max_slice_restarts) == (1, 10, 10)
    assert config.workload.checkpoint_period == 100 <= config.workload.train_steps


# ---- schema validation -----------------------------------------------------------------------------------

def test_every_object_validates_against_crds_core_schemas_and_node_pools(run, config):
    objects = registered_objects(run)
    pools = tpu_pools(run.resources)
    assert len(pools) == config.tpu.slices
    report = validate_objects(objects, default_schemas_dir(), config.cluster.minimum_version, tpu_pools=pools)
    assert not report.cr_check_skipped
    assert report.errors == [], report.errors
    assert report.warnings == [], report.warnings
    kinds = {o["kind"] for o in objects}
    # The ConfigMap: the trainer code the head runs MaxText through (trainer.pathways_run).
    assert kinds == {"ConfigMap", "JobSet", "Namespace", "ServiceAccount"}, kinds


def test_a_broken_jobset_is_caught_with_its_field_path(config):
    jobset = pathways_objects(config)["pathways-jobset"]
    worker = replicated(jobset, WORKER_JOB)
    worker["template"]["spec"]["parallelism"] = 3
    worker["replicas"] = "three"
    report = validate_objects([jobset], default_schemas_dir())
    paths = {finding.field_path for finding in report.errors}
    assert "spec.replicatedJobs[1].replicas" in paths, paths
    assert any("parallelism" in f.field_path for f in report.errors), report.errors


# ---- cross-object rules ----------------------------------------------------------------------------------

def test_workers_match_the_slice_node_pools(run, config):
    jobset = the_jobset(run)
    worker = replicated(jobset, WORKER_JOB)
    pools = [r for r in run.resources if r.type == "gcp:container/nodePool:NodePool" and r.name.startswith("slice-")]
    # One worker Job per slice, one pod per TPU VM of the slice.
    assert worker["replicas"] == len(pools) == config.tpu.slices == 3
    job = worker["template"]["spec"]
    hosts = pools[0].inputs["autoscaling"]["maxNodeCount"]
    assert job["parallelism"] == job["completions"] == hosts == config.tpu.shape.hosts == 4
    pod = job["template"]["spec"]
    chips = container(pod, "pathways-worker")["resources"]["limits"]["google.com/tpu"]
    assert int(chips) * job["parallelism"] == chips_in(pod["nodeSelector"]["cloud.google.com/gke-tpu-topology"])
    pool_topology = pools[0].inputs["placementPolicy"]["tpuTopology"]
    assert pod["nodeSelector"] == {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
                                   "cloud.google.com/gke-tpu-topology": pool_topology}
    assert {p.inputs["nodeConfig"]["machineType"] for p in pools} == {"ct5lp-hightpu-4t"}
    # Exclusive placement: each slice's Job on its own node pool.
    assert worker["template"]["metadata"]["annotations"] == {
        "alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"}


def test_resource_manager_knows_the_slices_the_workers_provide(run):
    jobset = the_jobset(run)
    rm = container(pod_spec(jobset, HEAD_JOB), "pathways-rm")
    worker = replicated(jobset, WORKER_JOB)
    topology = pod_spec(jobset, WORKER_JOB)["nodeSelector"]["cloud.google.com/gke-tpu-topology"]
    assert f"--instance_count={worker['replicas']}" in rm["args"]
    assert f"--instance_type=tpuv5e:{topology}" in rm["args"]


def test_head_is_the_coordinator_and_runs_on_the_system_pool(run):
    jobset = the_jobset(run)
    assert jobset["spec"]["coordinator"]["replicatedJob"] == HEAD_JOB == jobset["spec"]["replicatedJobs"][0]["name"]
    assert jobset["spec"]["network"]["enableDNSHostnames"] is True
    assert jobset["spec"]["startupPolicy"] == {"startupPolicyOrder": "InOrder"}
    assert jobset["spec"]["successPolicy"] == {"operator": "All", "targetReplicatedJobs": [HEAD_JOB]}
    head = pod_spec(jobset, HEAD_JOB)
    system_pool = run.one("gcp:container/nodePool:NodePool", "system")
    labels = system_pool.inputs["nodeConfig"]["labels"]
    assert head["nodeSelector"].items() <= labels.items()
    assert system_pool.inputs["nodeConfig"]["machineType"] == "n2-standard-64"
    # Resource manager and proxy are native sidecars; MaxText is the one container whose exit ends the pod.
    assert [c["name"] for c in head["initContainers"]] == ["pathways-proxy", "pathways-rm"]
    assert all(c["restartPolicy"] == "Always" for c in head["initContainers"])
    assert [c["name"] for c in head["containers"]] == ["maxtext"]
    assert head["hostNetwork"] is True and head["restartPolicy"] == "Never"


def test_every_component_finds_the_head_through_the_coordinator_label(run):
    jobset = the_jobset(run)
    coordinator = "metadata.labels['jobset.sigs.k8s.io/coordinator']"
    for job, name in ((HEAD_JOB, "pathways-proxy"), (HEAD_JOB, "maxtext"), (WORKER_JOB, "pathways-worker")):
        env = container(pod_spec(jobset, job), name)["env"]
        first = env[0] if name == "maxtext" else next(e for e in env if e["name"] == "PATHWAYS_HEAD")
        assert first == {"name": "PATHWAYS_HEAD", "valueFrom": {"fieldRef": {"fieldPath": coordinator}}}, name
    maxtext_env = {e["name"]: e.get("value") for e in container(pod_spec(jobset, HEAD_JOB), "maxtext")["env"]}
    assert maxtext_env["JAX_PLATFORMS"] == "proxy"
    assert maxtext_env["JAX_BACKEND_TARGET"] == "grpc://$(PATHWAYS_HEAD):29000"
    proxy = container(pod_spec(jobset, HEAD_JOB), "pathways-proxy")
    assert "--server_port=29000" in proxy["args"] and "--resource_manager_address=$(PATHWAYS_HEAD):29001" in \
        proxy["args"]


def test_elastic_slices_and_restarts_follow_the_config(run, config):
    jobset = the_jobset(run)
    proxy = container(pod_spec(jobset, HEAD_JOB), "pathways-proxy")
    assert [a for a in proxy["args"] if a.startswith("--num_elastic_slices")] == ["--num_elastic_slices=1"]
    worker_job = replicated(jobset, WORKER_JOB)["template"]["spec"]
    # xpk: with elastic slices, a slice's Job absorbs max-slice-restarts failures per host.
    assert worker_job["backoffLimit"] == config.pathways.max_slice_restarts * config.tpu.shape.hosts == 40
    assert pod_spec(jobset, WORKER_JOB)["restartPolicy"] == "OnFailure"
    policy = jobset["spec"]["failurePolicy"]     # its rules: tests/workloads/test_failure_policy.py
    assert (policy["maxRestarts"], policy["restartStrategy"]) == (config.pathways.max_restarts, "Recreate")


def test_not_elastic_without_elastic_slices():
    config = build(FIXED)
    jobset = pathways_objects(config)["pathways-jobset"]
    proxy = container(pod_spec(jobset, HEAD_JOB), "pathways-proxy")
    assert not [a for a in proxy["args"] if "elastic" in a]
    assert replicated(jobset, WORKER_JOB)["template"]["spec"]["backoffLimit"] == 4 * config.tpu.shape.hosts
    keys = maxtext_keys(container(pod_spec(jobset, HEAD_JOB), "maxtext")["command"])
    assert keys["enable_single_controller"] == "True"
    assert not [key for key in keys if key.startswith("elastic_")]


def test_pods_run_as_the_workload_identity_service_account_with_pinned_images(run):
    objects = registered_objects(run)
    [ksa] = [o for o in objects if o["kind"] == "ServiceAccount"]
    jobset = the_jobset(run)
    assert jobset["metadata"]["namespace"] == ksa["metadata"]["namespace"]
    images = {}
    for job in (HEAD_JOB, WORKER_JOB):
        spec = pod_spec(jobset, job)
        assert spec["serviceAccountName"] == ksa["metadata"]["name"]
        for c in spec.get("initContainers", []) + spec["containers"]:
            images[c["name"]] = c["image"]
            assert c["imagePullPolicy"] == "IfNotPresent"
            assert "securityContext" not in c
    tags = {}
    for name, image in images.items():
        reference, _, digest = image.partition("@sha256:")
        tags[name] = reference.rsplit(":", 1)[1]
        assert re.fullmatch(r"(jax-|\d{8}-jax_)?\d+\.\d+\.\d+", tags[name]), (name, image)
        assert not digest or re.fullmatch(r"[0-9a-f]{64}", digest), (name, image)
    assert images["pathways-rm"] == images["pathways-worker"]
    assert tags["pathways-rm"] == tags["pathways-proxy"]


# ---- MaxText arguments -----------------------------------------------------------------------------------

def test_maxtext_argv_comes_from_the_shared_builder_with_the_elastic_keys(run, config):
    command = container(pod_spec(the_jobset(run), HEAD_JOB), "maxtext")["command"]
    # MaxText's pre_train through trainer.pathways_run (exit codes for the failure policy), base.yml of the image.
    assert command[:2] == ["bash", "-c"] and command[3] == "pathways_run"
    assert 'python3 -m trainer.pathways_run src/maxtext/configs/base.yml "$@" &' in command[2].splitlines()
    assert pathways_inputs.maxtext_argv(config)[:2] == [PRE_TRAIN_MODULE, "src/maxtext/configs/base.yml"]
    assert command[4:] == maxtext_overrides(config.workload.plan, pathways_inputs.run_settings(config))
    keys = maxtext_keys(command)
    bucket = config.storage.bucket_name
    expected = {
        "enable_single_controller": "True",
        "elastic_enabled": "true",
        "elastic_backup_kind": "checkpoint",
        "elastic_timeout_seconds": str(config.pathways.elastic_timeout_seconds),
        "elastic_max_retries": str(config.pathways.elastic_max_retries),
        "enable_checkpointing": "true",
        "checkpoint_period": "100",
        "steps": str(config.workload.train_steps),
        "model_name": "qwen3-0.6b",
        "dcn_data_parallelism": "3",
        "base_output_directory": f"gs://{bucket}/maxtext",
    }
    assert {key: keys.get(key) for key in expected} == expected
    assert keys["elastic_max_retries"] == "10" and keys["elastic_timeout_seconds"] == "300"
    # Profiling is off in an elastic run: no profiler key, so MaxText's default (none) applies.
    assert "profiler" not in keys
    assert keys["jax_cache_dir"].startswith(f"gs://{bucket}/")


def test_profiling_is_passed_only_to_a_run_that_is_not_elastic():
    config = build({**FIXED, "pathwaysProfiling": "true"})
    command = container(pod_spec(pathways_objects(config)["pathways-jobset"], HEAD_JOB), "maxtext")["command"]
    assert maxtext_keys(command)["profiler"] == "xplane"


def test_exports_point_at_the_head_logs(run):
    out = run.outputs
    assert out["pathwaysJobSet"] == "maxtext-pathways"
    assert out["pathwaysHeadAddress"] == "maxtext-pathways-pathways-head-0-0.maxtext-pathways"
    assert out["pathwaysLogsCommand"].endswith("-c maxtext") and "replicatedjob-name=pathways-head" in \
        out["pathwaysLogsCommand"]
    assert out["checkpointDir"] == \
        "gs://my-tpu-project-tpu-multislice-pathways-ckpt/maxtext/maxtext-pathways-qwen3-0.6b/checkpoints"
    assert not [key for key in out if key.startswith("ray")]


# ---- the graph on the cluster ----------------------------------------------------------------------------

def test_jobset_waits_for_the_jobset_controller_and_goes_with_the_cluster(run):
    jobset = run.one(JOBSET_TOKEN)
    releases = run.of_type("kubernetes:helm.sh/v3:Release")
    assert "jobset" in {r.name for r in releases}
    identity = [run.one("kubernetes:core/v1:Namespace"), run.one("kubernetes:core/v1:ServiceAccount")]
    for dependency in [*releases, *identity]:
        assert dependency.urn in jobset.dependencies, dependency.name
    cluster_urn = run.one("gcp:container/cluster:Cluster").urn
    provider_urn = run.one("pulumi:providers:kubernetes").urn
    for resource in [jobset, *releases]:
        assert resource.deleted_with == cluster_urn, resource.name
        assert resource.provider.startswith(provider_urn), resource.name
    assert jobset.delete_before_replace is True
    assert run.by_urn(jobset.parent).type == "tpu-multislice:workloads:PathwaysWorkload"
    assert not run.of_type("kubernetes:ray.io/v1:RayCluster")


# ---- bad input -------------------------------------------------------------------------------------------

@pytest.mark.parametrize("overrides,fragment", [
    ({"pathwaysElasticSlices": 2}, "pathwaysElasticSlices=2 is not below tpu-multislice:slices=2"),
    ({"pathwaysElasticSlices": 5}, "pathwaysElasticSlices=5 is not below"),
    ({"pathwaysElasticSlices": -1}, "pathwaysElasticSlices=-1"),
    ({"pathwaysElasticMaxRetries": -1}, "pathwaysElasticMaxRetries=-1"),
    ({"pathwaysElasticSlices": 1, "pathwaysElasticMaxRetries": 0}, "pathwaysutils refuses max_retries=0"),
    ({"pathwaysMaxSliceRestarts": -1}, "pathwaysMaxSliceRestarts=-1"),
    ({"pathwaysElasticTimeoutSeconds": 0}, "pathwaysElasticTimeoutSeconds=0"),
    ({"tpuGeneration": "tpu7x", "tpuTopology": "2x2x2"}, "tpuGeneration='tpu7x' on tpu7x-standard-4t is not supported"),
    ({"tpuGeneration": "v5e", "tpuTopology": "1x1", "slices": 1, "zone": "us-west4-a"},
     "ct5lp-hightpu-1t is not supported by Pathways"),
    ({"pathwaysElasticSlices": 1, "pathwaysProfiling": True}, "pathwaysProfiling=true conflicts"),
    ({"pathwaysServerImage": "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server:latest"}, "pathwaysServerImage="),
    ({"pathwaysTrainerImage": "maxtext"}, "pathwaysTrainerImage='maxtext'"),
    ({"pathwaysServerImage": "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/server:jax-0.10.2",
      "pathwaysProxyImage": "us-docker.pkg.dev/cloud-tpu-v2-images/pathways/proxy_server:jax-0.9.2"},
     "differs from tpu-multislice:pathwaysServerImage tag"),
    ({"pathwaysElasticSlices": 1,
      "pathwaysTrainerImage": "us-docker.pkg.dev/cloud-tpu-images/maxtext-images/tpu_pre_training:0.2.3"},
     "MaxText 0.2.4 or later"),
    ({"clusterMode": "autopilot", "systemPoolMachineType": None}, "clusterMode='autopilot' conflicts"),
    ({"dcn": True, "dranet": True}, "dranet=true conflicts"),
    ({"elasticMinSlices": 1}, "elasticMinSlices=1: unset it; it does nothing with"),
    ({"systemPoolMachineType": "e2-standard-16"}, "cannot hold the Pathways head"),
    ({"pathwaysJobName": "p" * 23}, "at most 22 characters"),
    ({"workloadBackend": "pathway"}, "allowed: rayjob"),
])
def test_bad_pathways_config_is_refused_before_registration(overrides, fragment):
    raw = {key: value for key, value in {**FIXED, **overrides}.items() if value is not None}
    with pytest.raises(ConfigError) as error:
        build(raw)
    assert any(fragment in line for line in error.value.problems), error.value.problems


def test_bad_pathways_config_registers_nothing():
    monitor = RecordingMonitor(GcpMocks())
    with pytest.raises(pulumi.RunError) as error:
        run_program({**load_stack_config(STACK, REPO), "pathwaysElasticSlices": 3}, monitor=monitor)
    assert monitor.registrations == []
    assert "pathwaysElasticSlices=3" in str(error.value)


# ---- goldens ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,raw", [
    ("elastic", lambda: load_stack_config(STACK, REPO)),
    ("fixed", lambda: FIXED),
])
def test_manifests_match_goldens(name, raw):
    """Regenerate with UPDATE_GOLDENS=1 .venv/bin/python -m pytest tests/workloads/test_pathways.py"""
    objects = pathways_objects(build(raw()))
    assert_matches_golden(f"pathways-{name}", objects)


def test_the_run_ends_when_the_head_finishes_and_leaves_nothing_on_tpu_nodes(run):
    """The Pathways workers serve until told otherwise; the JobSet succeeds when the head's MaxText finishes
    (successPolicy on the head job), and JobSet v0.12.0 then deletes every still-active child Job, the workers'
    included (kubernetes-sigs/jobset pkg/controllers/jobset_controller.go: "If JobSet is already completed or
    failed, clean up active child jobs"), so the slice pools go back to zero. The head (resource manager, proxy,
    MaxText) runs on the CPU system pool, never on a TPU node. No ttlSecondsAfterFinished: deleting the JobSet
    object would make the next `pulumi up` create it and train again."""
    jobset = the_jobset(run)
    assert jobset["spec"]["successPolicy"] == {"operator": "All", "targetReplicatedJobs": [HEAD_JOB]}
    assert "ttlSecondsAfterFinished" not in jobset["spec"]
    head = pod_spec(jobset, HEAD_JOB)
    assert "google.com/tpu" not in json.dumps(head)
    assert "cloud.google.com/gke-tpu-topology" not in (head.get("nodeSelector") or {})
    slice_pools = [r for r in run.of_type("gcp:container/nodePool:NodePool") if r.name.startswith("slice-")]
    assert slice_pools and all(r.inputs.get("autoscaling", {}).get("minNodeCount") == 0 for r in slice_pools)
