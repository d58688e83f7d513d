"""The JobSet + Kueue backend: every object valid against JobSet v0.12.0 / Kueue v0.19.2 / Kubernetes schemas,
queue references and quotas, slice shape against the node pools, controllers first, goldens, bad input."""
from __future__ import annotations

import copy
import json
import os
import re
from pathlib import Path

import pytest
import yaml

from infra.config import ConfigError, build
from preview.k8s.manifests import is_kubernetes_type, object_from_inputs
from preview.k8s.validation import default_schemas_dir, validate_objects
from preview.harness import GcpMocks, RecordingMonitor, run_program
from preview.stack_files import load_stack_config
from core.tpu_catalog import chips_in
from tests.conftest import MINIMAL, REPO, assert_matches_golden, committed_stack_run
from core.maxtext_args import RunSettings, pre_train_argv
from core.slice_wait import DISTRIBUTED_INIT_TIMEOUT_S
from workloads import common
from workloads.jobset import manifests as jobset_manifests
from workloads.jobset import spec as jobset_inputs
from workloads.controllers import JOBSET_CHART, KUEUE_CHART
from workloads.bundle import TrainerBundle

FIXED_BUNDLE = TrainerBundle({"trainer/__init__.py": "", "trainer/smoke.py": "# stand-in\n"})
RELEASE = "kubernetes:helm.sh/v3:Release"
JOBSET = "kubernetes:jobset.x-k8s.io/v1alpha2:JobSet"
NODE_POOL = "gcp:container/nodePool:NodePool"
# The jobset stack without DRANET/DCN: the host-network variant.
NO_DRANET = {**MINIMAL, "workloadBackend": "jobset"}


@pytest.fixture(scope="module")
def run():
    return committed_stack_run("jobset")


@pytest.fixture(scope="module")
def config():
    return build(load_stack_config("jobset", REPO))


def objects_of(run_) -> list[dict]:
    return [object_from_inputs(r.inputs, r.name) for r in run_.resources if is_kubernetes_type(r.type)]


def by_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


def named(objects: list[dict], kind: str, name: str) -> dict:
    [obj] = [o for o in by_kind(objects, kind) if o["metadata"]["name"] == name]
    return obj


def quantity(value: str) -> float:
    """cpu in cores, memory in GiB, chips as counted."""
    units = {"Gi": 1.0, "Mi": 1 / 1024, "m": 1 / 1000}
    for suffix, factor in units.items():
        if str(value).endswith(suffix):
            return float(str(value)[: -len(suffix)]) * factor
    return float(value)


def jobset_requests(jobset: dict, objects: list[dict] = (), dra_mappings: dict[str, str] | None = None
                    ) -> dict[str, float]:
    """What Kueue charges for a JobSet: container requests, plus each claimed device (the request's `count`)
    under the quota resource its DeviceClass maps to (Kueue v0.19.2 DRA "device count" accounting)."""
    totals: dict[str, float] = {}
    templates = {o["metadata"]["name"]: o for o in objects if o["kind"] == "ResourceClaimTemplate"}
    for replicated in jobset["spec"]["replicatedJobs"]:
        job = replicated["template"]["spec"]
        pods = replicated["replicas"] * job["parallelism"]
        pod = job["template"]["spec"]
        for container in pod["containers"]:
            for name, value in container["resources"]["requests"].items():
                totals[name] = totals.get(name, 0.0) + pods * quantity(value)
        for claim in pod.get("resourceClaims", []):
            template = templates[claim["resourceClaimTemplateName"]]
            for request in template["spec"]["spec"]["devices"]["requests"]:
                device_class = request["exactly"]["deviceClassName"]
                assert dra_mappings and device_class in dra_mappings, f"Kueue never admits unmapped {device_class}"
                name = dra_mappings[device_class]
                totals[name] = totals.get(name, 0.0) + pods * request["exactly"].get("count", 1)
    return totals


def kueue_dra_mappings(run_) -> dict[str, str]:
    """DeviceClass → quota resource, from the Kueue release's Configuration (the chart's one YAML string)."""
    [kueue] = [r for r in run_.of_type(RELEASE) if r.name == "kueue"]
    text = (kueue.inputs.get("values") or {}).get("managerConfig", {}).get("controllerManagerConfigYaml")
    if not text:
        return {}
    mappings = yaml.safe_load(text).get("resources", {}).get("deviceClassMappings", [])
    return {device_class: m["name"] for m in mappings for device_class in m["deviceClassNames"]}


# ---- schemas -------------------------------------------------------------------------------------------

def test_every_object_validates_against_the_crds_and_core_schemas(run, config):
    objects = objects_of(run)
    report = validate_objects(objects, default_schemas_dir(), config.cluster.minimum_version)
    assert not report.cr_check_skipped
    assert report.errors == [], report.errors
    kinds = {o["kind"] for o in objects}
    assert {"JobSet", "ResourceFlavor", "ClusterQueue", "LocalQueue", "WorkloadPriorityClass",
            "ResourceClaimTemplate", "ServiceAccount", "Namespace"} <= kinds
    assert not kinds & {"RayCluster", "RayJob"}, "the jobset backend replaces the Ray objects"
    kueue_versions = {o["apiVersion"] for o in objects if o["kind"] in ("ClusterQueue", "LocalQueue")}
    assert kueue_versions == {"kueue.x-k8s.io/v1beta2"}


def test_a_broken_jobset_is_caught_by_the_crd_schema(config):
    objects = jobset_inputs.jobset_objects(config, FIXED_BUNDLE)
    objects["jobset"]["spec"]["failurePolicy"]["maxRestarts"] = "three"
    report = validate_objects(list(objects.values()), default_schemas_dir())
    assert "spec.failurePolicy.maxRestarts" in {f.field_path for f in report.errors}


# ---- cross-object rules --------------------------------------------------------------------------------

def test_queue_chain_local_to_cluster_queue_to_flavor(run, config):
    objects = objects_of(run)
    for jobset in by_kind(objects, "JobSet"):
        labels = jobset["metadata"]["labels"]
        local = named(objects, "LocalQueue", labels["kueue.x-k8s.io/queue-name"])
        assert local["metadata"]["namespace"] == jobset["metadata"]["namespace"]
        cluster_queue = named(objects, "ClusterQueue", local["spec"]["clusterQueue"])
        [group] = cluster_queue["spec"]["resourceGroups"]
        [flavor_ref] = group["flavors"]
        flavor = named(objects, "ResourceFlavor", flavor_ref["name"])
        pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        for key, value in flavor["spec"]["nodeLabels"].items():
            assert pod["nodeSelector"][key] == value
        named(objects, "WorkloadPriorityClass", labels["kueue.x-k8s.io/priority-class"])
        selector = cluster_queue["spec"]["namespaceSelector"]["matchLabels"]
        assert selector == {"kubernetes.io/metadata.name": config.kubernetes.namespace}


def test_quota_covers_everything_each_jobset_requests(run, config):
    objects = objects_of(run)
    [cluster_queue] = by_kind(objects, "ClusterQueue")
    [group] = cluster_queue["spec"]["resourceGroups"]
    quota = {r["name"]: quantity(r["nominalQuota"]) for r in group["flavors"][0]["resources"]}
    # The jobset stack claims its DCN NICs through DRANET: Kueue charges them too (workloads/kueue_config.py).
    assert set(group["coveredResources"]) == set(quota) == {"google.com/tpu", "cpu", "memory",
                                                            "tpu-multislice/dcn-nic"}
    for jobset in by_kind(objects, "JobSet"):
        requests = jobset_requests(jobset, objects, kueue_dra_mappings(run))
        assert set(requests) <= set(group["coveredResources"]), "Kueue never admits uncovered resources"
        for name, amount in requests.items():
            assert amount <= quota[name], (jobset["metadata"]["name"], name, amount, quota[name])
    assert quota["google.com/tpu"] == config.tpu.slices * config.tpu.shape.chips == 32


def test_one_child_job_per_slice_fills_a_node_pool(run, config):
    pools = [r for r in run.of_type(NODE_POOL) if r.name.startswith("slice-")]
    for jobset in by_kind(objects_of(run), "JobSet"):
        assert jobset["metadata"]["annotations"] == {
            "alpha.jobset.sigs.k8s.io/exclusive-topology": "cloud.google.com/gke-nodepool"}
        [replicated] = jobset["spec"]["replicatedJobs"]
        job = replicated["template"]["spec"]
        pod = job["template"]["spec"]
        [container] = pod["containers"]
        chips = int(container["resources"]["limits"]["google.com/tpu"])
        topology = pod["nodeSelector"]["cloud.google.com/gke-tpu-topology"]
        assert replicated["replicas"] == len(pools) == config.tpu.slices == 2
        assert job["parallelism"] == job["completions"] == config.tpu.shape.hosts == 4
        assert job["parallelism"] * chips == chips_in(topology)
        assert chips == config.tpu.shape.chips_per_host == 4
        assert job["parallelism"] == pools[0].inputs["autoscaling"]["maxNodeCount"]
        assert topology == pools[0].inputs["placementPolicy"]["tpuTopology"]
        # The TPU chips are asked for whole; CPU and memory requests are what the job needs, at most the limits
        # (the node's ceiling), so the pod fits the node GKE really gives (core/pod_sizing.py).
        requests, limits = container["resources"]["requests"], container["resources"]["limits"]
        assert requests["google.com/tpu"] == limits["google.com/tpu"]
        assert int(requests["cpu"]) <= int(limits["cpu"])
        assert int(requests["memory"].removesuffix("Gi")) <= int(limits["memory"].removesuffix("Gi"))
        assert pod["serviceAccountName"] == config.kubernetes.service_account


def test_multislice_env_points_every_slice_at_pod_0_of_job_0(run, config):
    for jobset in by_kind(objects_of(run), "JobSet"):
        name = jobset["metadata"]["name"]
        container = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
        env = {e["name"]: e for e in container["env"]}
        # JobSet pod hostnames: <jobset>-<replicatedJob>-<jobIndex>-<podIndex>.<subdomain = jobset name>.
        assert env["MEGASCALE_COORDINATOR_ADDRESS"]["value"] == f"{name}-slice-0-0.{name}"
        assert env["MEGASCALE_NUM_SLICES"]["value"] == str(config.tpu.slices)
        assert env["MEGASCALE_SLICE_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == \
            "metadata.annotations['jobset.sigs.k8s.io/job-index']"
        assert env["MEGASCALE_PORT"]["value"] == "8081"
        assert "--xla_tpu_enable_data_parallel_all_reduce_opt=true" in env["LIBTPU_INIT_ARGS"]["value"]
        assert jobset["spec"]["network"]["enableDNSHostnames"] is True


def test_dranet_claim_replaces_host_network(run):
    objects = objects_of(run)
    [template] = by_kind(objects, "ResourceClaimTemplate")
    for jobset in by_kind(objects, "JobSet"):
        pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        assert pod["resourceClaims"] == [{"name": "dcn-nics",
                                          "resourceClaimTemplateName": template["metadata"]["name"]}]
        assert pod["containers"][0]["resources"]["claims"] == [{"name": "dcn-nics"}]
        assert "hostNetwork" not in pod, "DRANET NICs move into the pod's own network namespace"


def test_without_dranet_pods_use_the_host_network():
    objects = jobset_inputs.jobset_objects(build(NO_DRANET), FIXED_BUNDLE)
    assert "dcn-netdevs" not in objects
    pod = objects["jobset"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert "resourceClaims" not in pod


# ---- the containers ------------------------------------------------------------------------------------

def test_training_runs_maxtext_pre_train_with_the_shared_argv_builder(run, config):
    [jobset] = by_kind(objects_of(run), "JobSet")
    container = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    # The Ray trainer's builder, called here with the settings the Ray path uses (run name aside), plus the wait
    # for a late slice (core/slice_wait.py).
    run_settings = RunSettings(run_name="maxtext-llama3-8b", base_output_directory=common.output_directory(config),
                               steps=config.workload.train_steps, checkpoint_period=config.workload.checkpoint_period,
                               extra={"jax_distributed_initialization_timeout": str(DISTRIBUTED_INIT_TIMEOUT_S)})
    argv = pre_train_argv(config.workload.plan, run_settings, "$BASE_CONFIG")
    assert argv[0] == "maxtext.trainers.pre_train.train"
    assert container["args"] == argv[2:]
    script = container["command"][2]
    assert container["command"][:2] == ["bash", "-c"]
    # MaxText's own argv, through the trainer's wrapper that exits with core/exit_codes.py (failure policy).
    assert 'python -m trainer.jobset_run "$BASE_CONFIG" "$@" &' in script.splitlines()
    # The stack's image holds the lock: nothing is installed (tests/workloads/test_cold_start.py).
    assert "pip install" not in script
    args = dict(a.split("=", 1) for a in container["args"])
    assert args["base_output_directory"] == "gs://my-tpu-project-tpu-multislice-jobset-ckpt/maxtext"
    assert args["checkpoint_period"] == str(config.workload.checkpoint_period) == "50"
    assert args["steps"] == "200" and args["dcn_data_parallelism"] == "2"
    # maxRestarts from the config; the rules are tests/workloads/test_failure_policy.py's.
    assert jobset["spec"]["failurePolicy"]["maxRestarts"] == 3
    assert re.fullmatch(r"[\w./-]+:[\w.-]+", container["image"]) and "latest" not in container["image"]


def test_the_runtime_install_is_exactly_the_shipped_lock_with_a_pinned_uv():
    """workerEnvironment=runtime: the plain Python image installs the lock at the start of every pod."""
    from workloads.bundle import load_bundle
    objects = jobset_inputs.jobset_objects(build({**load_stack_config("jobset", REPO), "workerEnvironment": "runtime"}),
                                           load_bundle())
    pod = objects["jobset"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    [container] = pod["containers"]
    script = container["command"][2]
    # Exactly the workers' lock, shipped with the code: hashes checked, nothing resolved again; uv (itself pinned
    # and hash-checked) installs it into the image's Python.
    assert ("python -m uv pip install --system --cache-dir /var/cache/install/uv --no-deps --require-hashes -r "
            "/opt/tpu-multislice/worker_env/requirements.lock") in script
    assert "uv==0.13.9 --hash=sha256:" in script and "--require-hashes -r /dev/stdin" in script
    assert script.index("-r /dev/stdin") < script.index("python -m uv pip install")
    # A failed install is a runtime failure (retried), never one of the trainer's non-retryable codes: uv exits 2
    # on any error (its ExitStatus::Error), which would read as CONFIG_ERROR.
    install_lines = [line for line in script.splitlines() if "pip install" in line]
    assert len(install_lines) == 2 and all(line.endswith("|| exit 1") for line in install_lines)
    # The code and, in a ConfigMap of its own, the lock the pods install, mounted together (tests/workloads/
    # test_code_size.py says why two).
    code, lock = objects["trainer-code"], objects["worker-lock"]
    volume = next(v for v in pod["volumes"] if v["name"] == "trainer-code")
    assert [s["configMap"]["name"] for s in volume["projected"]["sources"]] == [
        code["metadata"]["name"], lock["metadata"]["name"]]
    assert {"key": "worker_env__requirements.lock", "path": "worker_env/requirements.lock"} in \
        volume["projected"]["sources"][1]["configMap"]["items"]
    assert container["image"] == "python:3.12.11-slim-bookworm"


def test_training_pods_run_the_shipped_smoke_program_first_and_train_only_if_it_passed(run, config):
    """One JobSet: Kueue admits every replicatedJob's pods at once (kubernetes-sigs/kueue v0.19.2
    pkg/controller/jobs/jobset: one PodSet per replicatedJob, quota reclaimed only after pods succeed), so a smoke
    JobSet or replicatedJob beside training would need twice the TPU quota; created together, training also ran
    whatever the smoke test said. The smoke program therefore runs in the training container, before MaxText."""
    objects = objects_of(run)
    [jobset] = by_kind(objects, "JobSet")
    assert [j["name"] for j in jobset["spec"]["replicatedJobs"]] == ["slice"]
    pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
    [container] = pod["containers"]
    script = container["command"][2].splitlines()
    assert script[0] == "set -euo pipefail"                     # a failed smoke test ends the container
    [smoke_line] = [i for i, line in enumerate(script) if "-m trainer.smoke" in line]
    [train_line] = [i for i, line in enumerate(script) if line.startswith("python -m trainer.jobset_run ")]
    assert smoke_line < train_line
    # Run as a step SIGTERM reaches (workloads/jobset/manifests.py as_step; tests/workloads/test_term_before_start.py).
    assert script[smoke_line] == ("{ set +m; (cd /opt/tpu-multislice && python -m trainer.smoke --distributed "
                                  f"--expect-devices 32 --expect-slices 2 --init-timeout {DISTRIBUTED_INIT_TIMEOUT_S})")
    # The code, mounted where the script runs it; the image holds the lock, so no lock travels with it.
    [code] = by_kind(objects, "ConfigMap")
    volume = next(v for v in pod["volumes"] if v["name"] == "trainer-code")
    assert volume["configMap"]["name"] == code["metadata"]["name"]
    assert "worker_env__requirements.lock" not in code["data"]
    assert {"name": "trainer-code", "mountPath": "/opt/tpu-multislice", "readOnly": True} in container["volumeMounts"]
    assert "trainer__smoke.py" in code["data"]
    assert [o["metadata"]["name"] for o in by_kind(objects, "WorkloadPriorityClass")] == ["tpu-training"]


def test_smoke_expects_every_jax_device_of_every_slice():
    """TPU7x has two JAX devices per chip (MaxText src/maxtext/utils/accelerator_to_spec_map.py @e591f30c)."""
    # us-central1-c: a zone the Cloud TPU regions-and-zones page lists for TPU7x.
    spec = jobset_inputs.jobset_spec(build({**NO_DRANET, "zone": "us-central1-c", "tpuGeneration": "tpu7x",
                                            "tpuTopology": "2x2x2"}))
    argv = jobset_manifests.smoke_argv(spec)
    assert argv[argv.index("--expect-devices") + 1] == str(2 * 2 * 8)


def test_smoke_can_be_switched_off():
    objects = jobset_inputs.jobset_objects(build({**NO_DRANET, "smokeTest": False}), FIXED_BUNDLE)
    assert [o["kind"] for o in objects.values()].count("JobSet") == 1
    # The code ConfigMap stays: it carries the workers' lock the pods install.
    assert "trainer-code" in objects
    container = objects["jobset"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    assert "trainer.smoke" not in container["command"][2] and "volumeMounts" in container


def test_with_the_image_path_the_pods_run_the_built_image_and_install_nothing():
    config = build({**NO_DRANET, "workerEnvironment": "image"})
    ref = "us-east5-docker.pkg.dev/my-tpu-project/tpu-multislice-images/worker:0123456789abcdef"
    objects = jobset_inputs.jobset_objects(config, FIXED_BUNDLE, worker_image=ref)
    container = objects["jobset"]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == ref and "pip install" not in container["command"][2]


# ---- graph ---------------------------------------------------------------------------------------------

def test_controllers_are_pinned_helm_releases_installed_jobset_first(run):
    releases = {r.name: r for r in run.of_type(RELEASE)}
    assert set(releases) == {"jobset", "kueue"}
    for chart in (JOBSET_CHART, KUEUE_CHART):
        inputs = releases[chart.release].inputs
        assert (inputs["chart"], inputs["version"], inputs["namespace"]) == (chart.chart, chart.version,
                                                                            chart.namespace)
    assert JOBSET_CHART.chart == "oci://registry.k8s.io/jobset/charts/jobset" and JOBSET_CHART.version == "0.12.0"
    assert KUEUE_CHART.chart == "oci://registry.k8s.io/kueue/charts/kueue" and KUEUE_CHART.version == "0.19.2"
    assert releases["jobset"].urn in releases["kueue"].dependencies


def test_workload_objects_wait_for_the_controllers_and_go_with_the_cluster(run):
    releases = {r.name: r.urn for r in run.of_type(RELEASE)}
    cluster_urn = run.one("gcp:container/cluster:Cluster").urn
    provider_urn = run.one("pulumi:providers:kubernetes").urn
    for resource in run.resources:
        if resource.type.startswith("kubernetes:kueue.x-k8s.io/"):
            assert releases["kueue"] in resource.dependencies, resource.name
        if resource.type == JOBSET:
            assert {releases["jobset"], releases["kueue"]} <= set(resource.dependencies), resource.name
            assert run.one("kubernetes:kueue.x-k8s.io/v1beta2:LocalQueue").urn in resource.dependencies
            assert resource.delete_before_replace is True
        if resource.type.startswith("kubernetes:"):
            assert resource.deleted_with == cluster_urn, resource.name
            assert resource.provider.startswith(provider_urn), resource.name


def test_exports_say_how_to_read_the_smoke_result(run):
    out = run.outputs
    assert out["smokeJobName"] == out["jobsetName"]            # the training pods run the smoke test
    assert f"kubectl get jobset -n tpu-training {out['smokeJobName']}" in out["smokeResultCommand"]
    assert f"-l jobset.sigs.k8s.io/jobset-name={out['jobsetName']}" in out["smokeResultCommand"]
    assert "SMOKE (PASSED|FAILED)" in out["smokeResultCommand"]
    assert out["jobsetStatusCommand"] == f"kubectl get jobset -n tpu-training {out['jobsetName']}"
    assert "rayJobName" not in out


# ---- bad input -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("overrides,fragment", [
    ({"kueueTpuQuota": 31}, "kueueTpuQuota=31 cannot admit the workload"),
    ({"kueueTpuQuota": 0}, "allowed: at least 32"),
    ({"maxRestarts": -1}, "maxRestarts=-1"),
    ({"workloadBackend": "slurm"}, "workloadBackend='slurm' is not allowed; allowed: rayjob, jobset"),
    ({"jobsetName": "j" * 25}, "at most 24 characters"),
    ({"jobsetName": "Train"}, "jobsetName='Train'"),
    ({"jobsetImage": "python:latest"}, "jobsetImage='python:latest'"),
])
def test_bad_jobset_config_is_refused_before_registration(overrides, fragment):
    raw = {**load_stack_config("jobset", REPO), **overrides}
    with pytest.raises(ConfigError) as error:
        build(raw)
    assert any(fragment in line for line in error.value.problems), error.value.problems


@pytest.mark.parametrize("path,value,fragment", [
    (("parallelism",), 3, "parallelism=3 but topology 4x4 has 4 hosts"),
    (("completions",), 8, "completions=8"),
    (("replicas",), 3, "replicas=3 but the stack has slices=2"),
    (("topology",), "4x8", "node selector topology '4x8'"),
    (("chips",), "8", "8 google.com/tpu per pod"),
])
def test_topology_and_parallelism_mismatches_are_found(config, path, value, fragment):
    objects = jobset_inputs.jobset_objects(config, FIXED_BUNDLE)
    jobset = copy.deepcopy(objects["jobset"])
    replicated = jobset["spec"]["replicatedJobs"][0]
    pod = replicated["template"]["spec"]["template"]["spec"]
    if path == ("replicas",):
        replicated["replicas"] = value
    elif path == ("topology",):
        pod["nodeSelector"]["cloud.google.com/gke-tpu-topology"] = value
    elif path == ("chips",):
        pod["containers"][0]["resources"]["limits"]["google.com/tpu"] = value
    else:
        replicated["template"]["spec"][path[0]] = value
    problems = jobset_inputs.shape_problems(config, {"jobset": jobset})
    assert any(fragment in p for p in problems), problems
    assert jobset_inputs.shape_problems(config, objects) == []


@pytest.mark.parametrize("overrides", [{}, {"slices": "4"}, {"dranet": "false"}, {"smokeTest": "false"},
                                       {"kueueTpuQuota": "64"}])
def test_the_builder_fills_the_slices_and_fits_the_quota(overrides):
    """A builder invariant, asserted here and not at deploy time: every JobSet the builder makes fills exactly the
    slices' node pools and fits the queue's quota."""
    config = build({**load_stack_config("jobset", REPO), **overrides})
    objects = jobset_inputs.jobset_objects(config, FIXED_BUNDLE)
    assert jobset_inputs.shape_problems(config, objects) == []
    objects["jobset"]["spec"]["replicatedJobs"][0]["template"]["spec"]["parallelism"] = 2
    assert any("parallelism=2" in p for p in jobset_inputs.shape_problems(config, objects))


def test_quota_smaller_than_one_workload_is_also_caught_on_the_manifest(config):
    objects = jobset_inputs.jobset_objects(config, FIXED_BUNDLE)
    problems = jobset_manifests.shape_problems(objects["jobset"], config.tpu.shape, config.tpu.slices, quota=16)
    assert any("Kueue could never admit it" in p for p in problems)


# ---- goldens -------------------------------------------------------------------------------------------

def test_manifests_match_golden(config):
    """Regenerate with UPDATE_GOLDENS=1 .venv/bin/python -m pytest tests/workloads/test_jobset.py"""
    from tests.workloads.test_ray import built_image
    objects = jobset_inputs.jobset_objects(config, FIXED_BUNDLE, worker_image=built_image(config))
    assert_matches_golden("jobset-jobset", objects)


@pytest.mark.parametrize("stack", ["jobset", "pathways"])
def test_helm_controllers_wait_for_the_system_pool(stack):
    """The releases are atomic: a chart whose pods cannot be scheduled times out and is rolled back, and a Standard
    cluster has no node until the system pool exists (the default pool is removed; pulumi-kubernetes
    helm.v3.Release `atomic`)."""
    run = committed_stack_run(stack)
    [system_pool] = [r for r in run.resources if r.type == "gcp:container/nodePool:NodePool" and r.name == "system"]
    releases = {r.name: r for r in run.of_type(RELEASE)}
    assert system_pool.urn in releases["jobset"].dependencies


# ---- nodes come with admission and go with the JobSet -------------------------------------------------

def test_kueue_admits_no_more_tpu_than_the_pools_can_reach_and_the_jobset_fills_them(run, config):
    """Kueue admits a JobSet against the ClusterQueue's nominal quota, then its pods make GKE scale the slice
    pools up from zero (each pool reaches at most its per-zone maximum): the google.com/tpu quota must equal the
    chips the pools can reach, so an admitted JobSet can always be placed and no chip of a reached pool is idle."""
    from preview.model import pool_node_range, tpu_pools
    objects = objects_of(run)
    [cluster_queue] = by_kind(objects, "ClusterQueue")
    quota = {r["name"]: quantity(r["nominalQuota"])
             for r in cluster_queue["spec"]["resourceGroups"][0]["flavors"][0]["resources"]}
    pools = tpu_pools(run.resources)
    reachable = sum(pool.nodes * pool.chips_per_vm for pool in pools)
    assert quota["google.com/tpu"] == reachable == config.tpu.total_chips
    # Idle, the pools hold nothing: every slice pool may scale to zero on the committed stack.
    assert all(pool_node_range(r.inputs)[0] == 0 for r in run.of_type(NODE_POOL) if r.name.startswith("slice-"))


def test_a_finished_jobset_keeps_no_pod_and_is_not_deleted_behind_pulumis_back(run):
    """JobSet v0.12.0 deletes a finished JobSet's active child Jobs (kubernetes-sigs/jobset
    pkg/controllers/jobset_controller.go: "If JobSet is already completed or failed, clean up active child
    jobs"), so no pod holds a TPU node after the run and GKE scales the pools back to zero. No
    ttlSecondsAfterFinished: it deletes the JobSet object itself, and the next `pulumi up` would create it
    again and train (and bill) once more."""
    for jobset in by_kind(objects_of(run), "JobSet"):
        assert "ttlSecondsAfterFinished" not in jobset["spec"]
        # Kueue's queue label: the JobSet waits, suspended, until its quota is admitted (no pod before).
        assert jobset["metadata"]["labels"][jobset_manifests.QUEUE_LABEL]
        for replicated in jobset["spec"]["replicatedJobs"]:
            assert replicated["template"]["spec"]["template"]["spec"]["restartPolicy"] == "Never"


def test_a_restarted_pod_installs_from_the_nodes_cache():
    """Every JobSet restart recreates every pod, which installs the lock again; uv's cache on a node-level
    hostPath (workloads/install_cache.py) spares the download on a node that stayed. Autopilot refuses writable
    hostPath volumes (GKE "Autopilot security capabilities"): an emptyDir there."""
    from workloads import install_cache
    from workloads.bundle import load_bundle
    from workloads.jobset.spec import jobset_objects
    for raw, kind in ((load_stack_config("jobset", REPO), "hostPath"),
                      ({**MINIMAL, "workloadBackend": "jobset", "clusterMode": "autopilot"}, "emptyDir")):
        jobset = jobset_objects(build({**raw, "workerEnvironment": "runtime"}), load_bundle())["jobset"]
        pod = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        volume = {v["name"]: v for v in pod["volumes"]}["install-cache"]
        assert kind in volume
        if kind == "hostPath":
            assert volume["hostPath"]["path"] == install_cache.HOST_PATH
        [container] = pod["containers"]
        assert {"name": "install-cache", "mountPath": "/var/cache/install"} in container["volumeMounts"]
        assert "--cache-dir /var/cache/install/uv" in container["command"][2]
