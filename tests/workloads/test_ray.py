"""The Ray path: manifests valid against KubeRay v1.7.0 / Kubernetes schemas, cross-object rules, goldens,
relaunch-on-change, exposure, and the graph on the cluster."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
import yaml

from infra.config import ConfigError, build
from preview.k8s.manifests import is_kubernetes_type, object_from_inputs
from preview.k8s.validation import default_schemas_dir, validate_objects
from preview.harness import FAKE_PROJECT_NUMBER, run_program
from preview.stack_files import load_stack_config
from core.tpu_catalog import chips_in
from tests.conftest import assert_matches_golden, COMMITTED_STACKS, MINIMAL, REPO, committed_stack_run
from core.worker_lock import load_pins, requirement_lines
from workloads import common
from workloads.ray import spec as ray_inputs
from workloads.ray.component import ray_objects
from workloads.bundle import TrainerBundle, load_bundle

# Goldens use a fixed stand-in for the trainer code so they change only when the manifests' shape does.
FIXED_BUNDLE = TrainerBundle({"trainer/__init__.py": "", "trainer/entrypoint.py": "# stand-in\n",
                              "worker_env/requirements.lock": "maxtext==0.2.5 \\\n    --hash=sha256:00\nray==2.60.0\n"})


def stack_config(stack: str):
    return build(load_stack_config(stack, REPO))


def runtime_config(stack: str):
    """The committed stack with the runtime install, the choice a user makes with workerEnvironment: runtime."""
    return build({**load_stack_config(stack, REPO), "workerEnvironment": "runtime"})


def built_image(config) -> str:
    """The image reference the stack pushes (infra/worker_image.py), with a fixed tag: goldens then change only
    when the manifests' shape does."""
    from infra.worker_image import WorkerImageSpec
    return WorkerImageSpec(project=config.gcp.project, region=config.gcp.region,
                           repository_id=config.worker_image.repository_id, tag="0123456789abcdef").ref


# Stacks whose workload runs on Ray (the jobset/pathways stacks have no RayCluster/RayJob).
RAY_STACKS = [s for s in COMMITTED_STACKS if load_stack_config(s, REPO).get("workloadBackend", "rayjob") == "rayjob"]


def training_jobs(objects: list[dict]) -> list[dict]:
    return by_kind(objects, "RayJob")


def job_cluster(objects: list[dict]) -> dict:
    """The RayCluster the training job creates (RayJob spec.rayClusterSpec), shaped as KubeRay creates it: named
    `<RayJob>-<5 random characters>` (kuberay v1.7.0 utils.GenerateRayClusterName)."""
    [job] = training_jobs(objects)
    return {"apiVersion": "ray.io/v1", "kind": "RayCluster",
            "metadata": {"name": f"{job['metadata']['name']}-abcde", "namespace": job["metadata"]["namespace"]},
            "spec": job["spec"]["rayClusterSpec"]}


def registered_objects(run) -> list[dict]:
    return [object_from_inputs(r.inputs, r.name) for r in run.resources if is_kubernetes_type(r.type)]


def by_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


# ---- schema validation -------------------------------------------------------------------------------

@pytest.mark.parametrize("stack", RAY_STACKS)
def test_every_object_of_every_stack_validates(stack):
    schemas = default_schemas_dir()
    assert schemas.is_dir(), "CI runs with ../shared beside the repository"
    run = committed_stack_run(stack)
    objects = registered_objects(run)
    report = validate_objects(objects, schemas, stack_config(stack).cluster.minimum_version)
    assert not report.cr_check_skipped
    assert report.errors == [], report.errors
    assert {"RayJob", "Service", "ConfigMap", "ServiceAccount", "Namespace"} <= {o["kind"] for o in objects}


def test_a_broken_worker_group_is_caught_with_its_field_path():
    objects = ray_objects(stack_config("prod"), FIXED_BUNDLE)
    cluster = objects["ray-job"]["spec"]["rayClusterSpec"]
    cluster["workerGroupSpecs"][0]["numOfHosts"] = 3
    cluster["workerGroupSpecs"][0]["replicas"] = "two"
    report = validate_objects(list(objects.values()), default_schemas_dir())
    paths = {finding.field_path for finding in report.errors}
    assert "spec.rayClusterSpec.workerGroupSpecs[0].replicas" in paths
    assert any("numOfHosts" in finding.field_path or "numOfHosts" in finding.message for finding in report.errors)


# ---- cross-object rules ----------------------------------------------------------------------------------

@pytest.mark.parametrize("stack", ["prod", "dev"])
def test_worker_group_matches_node_pools_and_topology(stack):
    run, config = committed_stack_run(stack), stack_config(stack)
    objects = registered_objects(run)
    cluster = job_cluster(objects)
    [group] = cluster["spec"]["workerGroupSpecs"]
    pools = [r for r in run.resources if r.type == "gcp:container/nodePool:NodePool" and r.name.startswith("slice-")]
    # One node pool per slice the run may use; the group starts at the fewest it may train on (an elastic run's
    # driver raises it: tests/workloads/test_ray_elastic_start.py).
    assert group["maxReplicas"] == len(pools) == config.tpu.slices
    assert group["replicas"] == group["minReplicas"] == config.workload.plan.min_slices
    pod = group["template"]["spec"]
    [container] = pod["containers"]
    chips_per_pod = int(container["resources"]["limits"]["google.com/tpu"])
    assert container["resources"]["requests"]["google.com/tpu"] == container["resources"]["limits"]["google.com/tpu"]
    topology = pod["nodeSelector"]["cloud.google.com/gke-tpu-topology"]
    # The GKE KubeRay TPU webhook's rule (docs/platform-notes.md §4).
    assert group["numOfHosts"] * chips_per_pod == chips_in(topology)
    assert group["numOfHosts"] == pools[0].inputs["autoscaling"]["maxNodeCount"]
    assert topology == pools[0].inputs["placementPolicy"]["tpuTopology"]
    assert pod["nodeSelector"]["cloud.google.com/gke-tpu-accelerator"] == "tpu-v6e-slice"
    assert chips_per_pod == config.tpu.shape.chips_per_host == 4  # ct6e-standard-4t


def test_pods_run_as_the_service_account_bound_in_iam(prod):
    objects = registered_objects(prod)
    [ksa] = by_kind(objects, "ServiceAccount")
    binding = prod.one("gcp:storage/bucketIAMMember:BucketIAMMember", "checkpoints-object-user").inputs["member"]
    assert binding.endswith(f"/subject/ns/{ksa['metadata']['namespace']}/sa/{ksa['metadata']['name']}")
    cluster = job_cluster(objects)
    [job] = training_jobs(objects)
    specs = [cluster["spec"]["headGroupSpec"]["template"]["spec"],
             cluster["spec"]["workerGroupSpecs"][0]["template"]["spec"],
             job["spec"]["submitterPodTemplate"]["spec"]]
    assert {s["serviceAccountName"] for s in specs} == {ksa["metadata"]["name"]}
    assert {o["metadata"]["namespace"] for o in objects if o["kind"] != "Namespace"} == {ksa["metadata"]["namespace"]}
    assert FAKE_PROJECT_NUMBER in binding


def test_dranet_claim_is_referenced_by_name_and_asks_one_nic_per_dcn_network(prod):
    objects = registered_objects(prod)
    [template] = by_kind(objects, "ResourceClaimTemplate")
    [request] = template["spec"]["spec"]["devices"]["requests"]
    assert request["exactly"] == {"deviceClassName": "netdev.google.com", "allocationMode": "ExactCount", "count": 2}
    pod = job_cluster(objects)["spec"]["workerGroupSpecs"][0]["template"]["spec"]
    [claim] = pod["resourceClaims"]
    assert claim["resourceClaimTemplateName"] == template["metadata"]["name"]
    assert pod["containers"][0]["resources"]["claims"] == [{"name": claim["name"]}]


def test_dev_has_no_dranet_and_is_elastic(dev):
    objects = registered_objects(dev)
    assert not by_kind(objects, "ResourceClaimTemplate")
    group = job_cluster(objects)["spec"]["workerGroupSpecs"][0]
    assert "resourceClaims" not in group["template"]["spec"]
    assert (group["minReplicas"], group["replicas"], group["maxReplicas"]) == (1, 1, 2)
    [job] = training_jobs(objects)
    assert "--elastic 1,2" in job["spec"]["entrypoint"]
    # Spot: interruptions are never failures (trainer/elastic_control.py); the plan's N attempts in a row without a
    # new step end the run (core/run_bounds.py); other failures stop after 3.
    assert "--max-failures 3" in job["spec"]["entrypoint"]
    assert re.search(r"--attempts-without-progress \d+ ", job["spec"]["entrypoint"])


def test_the_plan_shows_the_attempts_without_progress_and_what_they_cost():
    from core.run_bounds import attempt_cost_seconds, attempts_without_progress
    from workloads.ray.backend import RAY

    config = build(load_stack_config("prod", REPO))
    plan_, period = config.workload.plan, config.workload.checkpoint_period
    n = attempts_without_progress(plan_, period)
    [line] = [line for line in RAY.assumptions(config) if line.startswith("Ray run bounds")]
    assert f"after {n} attempts in a row that train no new step" in line
    assert f"at most ~{n * attempt_cost_seconds(plan_, period) / 60:.0f} min of every slice" in line
    assert "exit 8" in line and "a reclaim is never a failure" in line


def test_tpu_env_and_image_are_pinned_and_unprivileged(prod):
    cluster = job_cluster(registered_objects(prod))
    worker = cluster["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]
    head = cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]
    for container in (worker, head):
        # The stack's own image, tagged with its build context's digest (immutable tags in its repository).
        assert re.fullmatch(r"us-east5-docker\.pkg\.dev/my-tpu-project/tpu-multislice-prod-images/worker:"
                            r"[0-9a-f]{16}", container["image"])
        assert container["imagePullPolicy"] == "IfNotPresent"
        assert "securityContext" not in container
    env = {e["name"]: e.get("value") for e in worker["env"]}
    assert env["JAX_PLATFORMS"] == "tpu,cpu" and env["ENABLE_PJRT_COMPATIBILITY"] == "true"
    assert env["MEGASCALE_PORT"] == "8081"
    assert "--xla_tpu_enable_data_parallel_all_reduce_opt=true" in env["LIBTPU_INIT_ARGS"]
    assert cluster["spec"]["rayVersion"] == "2.60.0"


@pytest.mark.parametrize("stack", RAY_STACKS)
def test_tpu_workers_tell_the_ray_dashboard_where_the_tpu_metrics_are(stack):
    """Ray's dashboard agent reads per-chip TPU metrics from the GKE TPU device plugin at
    $TPU_DEVICE_PLUGIN_ADDR = "{HOST_IP}:2112" (ray-project/ray python/ray/dashboard/modules/reporter/
    reporter_agent.py, Ray 2.60); the KubeRay TPU webhook fills both variables only when the pod leaves them out
    (kuberay-tpu-webhook `mutatePod`), and which webhook the GKE Ray add-on runs is unknown, so the pods set them.
    Kubernetes expands $(VAR) only from variables defined earlier in the list."""
    cluster = job_cluster(registered_objects(committed_stack_run(stack)))
    env = cluster["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["env"]
    names = [e["name"] for e in env]
    host_ip = env[names.index("TPU_DEVICE_PLUGIN_HOST_IP")]
    assert host_ip["valueFrom"] == {"fieldRef": {"fieldPath": "status.hostIP"}}
    address = env[names.index("TPU_DEVICE_PLUGIN_ADDR")]
    assert address["value"] == "$(TPU_DEVICE_PLUGIN_HOST_IP):2112"
    assert names.index("TPU_DEVICE_PLUGIN_HOST_IP") < names.index("TPU_DEVICE_PLUGIN_ADDR")


def test_head_mounts_the_bucket_and_shm_on_the_system_pool(prod):
    head = job_cluster(registered_objects(prod))["spec"]["headGroupSpec"]["template"]
    assert head["metadata"]["annotations"]["gke-gcsfuse/volumes"] == "true"
    volumes = {v["name"]: v for v in head["spec"]["volumes"]}
    assert volumes["checkpoints"]["csi"]["volumeAttributes"]["bucketName"] == "my-tpu-project-tpu-multislice-prod-ckpt"
    assert volumes["dshm"]["emptyDir"]["medium"] == "Memory"
    assert head["spec"]["nodeSelector"] == {"tpu-multislice/pool": "system"}
    ports = {p["name"]: p["containerPort"] for p in head["spec"]["containers"][0]["ports"]}
    assert ports == {"gcs-server": 6379, "dashboard": 8265, "client": 10001, "metrics": 8080}


# ---- the job ------------------------------------------------------------------------------------------

def test_the_runtime_install_is_exactly_the_lock_but_ray():
    job = ray_objects(runtime_config("prod"), load_bundle())["ray-job"]
    runtime_env = yaml.safe_load(job["spec"]["runtimeEnvYAML"])
    # Exactly the lock: every locked package at its version, nothing resolved again.
    assert runtime_env["uv"]["uv_pip_install_options"] == ["--no-deps"]
    # Every locked package but Ray, which the image provides (Ray refuses another version in the environment).
    assert runtime_env["uv"]["packages"] == requirement_lines(
        {name: version for name, version in load_pins(REPO).items() if name != "ray"})
    assert "maxtext==0.2.5" in runtime_env["uv"]["packages"]
    assert not any(p.startswith("ray==") for p in runtime_env["uv"]["packages"])


def test_job_runs_the_shipped_trainer_with_the_stacks_plan(prod):
    objects = registered_objects(prod)
    [job] = training_jobs(objects)
    [code] = by_kind(objects, "ConfigMap")
    spec = job["spec"]
    assert "clusterSelector" not in spec and spec["rayClusterSpec"]["workerGroupSpecs"]
    runtime_env = yaml.safe_load(spec["runtimeEnvYAML"])
    # The image holds the lock: nothing to install (tests/workloads/test_cold_start.py).
    assert "uv" not in runtime_env and "pip" not in runtime_env
    volume = spec["submitterPodTemplate"]["spec"]["volumes"][0]["configMap"]
    assert volume["name"] == code["metadata"]["name"] and code["immutable"] is True
    mount = spec["submitterPodTemplate"]["spec"]["containers"][0]["volumeMounts"][0]["mountPath"]
    assert runtime_env["working_dir"] == mount
    shipped = {item["path"] for item in volume["items"]}
    # The Python packages; the lock's pins travel in the runtime env above, not as a file (workloads/bundle.py).
    assert set(load_bundle().code_files) == shipped and "worker_env/requirements.lock" not in shipped
    assert {item["key"] for item in volume["items"]} == set(code["data"])
    assert code["data"]["core__planner.py"] == (REPO / "core" / "planner.py").read_text()
    assert not any(path.startswith(("trainer/local/", "infra/", "workloads/", "preview/")) for path in shipped)
    entry = spec["entrypoint"]
    for fragment in ("python -m trainer.entrypoint", "--model llama3-8b", "--slices 2", "--steps 200",
                     "--checkpoint-period 50",
                     "--base-output-directory gs://my-tpu-project-tpu-multislice-prod-ckpt/maxtext"):
        assert fragment in entry
    assert len(job["metadata"]["name"]) <= 47 and len(job_cluster(objects)["metadata"]["name"]) <= 53


def test_with_the_image_path_every_pod_runs_the_built_image_and_installs_nothing():
    config = build({**load_stack_config("prod", REPO), "workerEnvironment": "image"})
    ref = "us-east5-docker.pkg.dev/my-tpu-project/tpu-multislice-images/worker:0123456789abcdef"
    objects = ray_objects(config, FIXED_BUNDLE, worker_image=ref)
    cluster = objects["ray-job"]["spec"]["rayClusterSpec"]
    images = {c["image"] for group in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
              for c in group["template"]["spec"]["containers"]}
    assert images == {ref}
    assert "uv" not in yaml.safe_load(objects["ray-job"]["spec"]["runtimeEnvYAML"])


def test_same_inputs_same_names_and_changes_relaunch_the_job():
    config = stack_config("prod")
    first = ray_objects(config, load_bundle())
    again = ray_objects(config, load_bundle())
    assert first == again
    edited = TrainerBundle({**load_bundle().files, "trainer/presets.py": "# edited\n"})
    changed_code = ray_objects(config, edited)
    assert changed_code["ray-job"]["metadata"]["name"] != first["ray-job"]["metadata"]["name"]
    assert changed_code["trainer-code"]["metadata"]["name"] != first["trainer-code"]["metadata"]["name"]
    assert changed_code["ray-job"]["spec"]["rayClusterSpec"] == first["ray-job"]["spec"]["rayClusterSpec"]
    more_steps = ray_objects(build({**load_stack_config("prod", REPO), "trainSteps": 400}), load_bundle())
    assert more_steps["ray-job"]["metadata"]["name"] != first["ray-job"]["metadata"]["name"]
    assert more_steps["ray-job"]["spec"]["rayClusterSpec"] == first["ray-job"]["spec"]["rayClusterSpec"]


def test_job_waits_for_its_code_and_claim_template_and_is_replaced_stop_first(prod):
    job = prod.one("kubernetes:ray.io/v1:RayJob", "ray-job")
    for token in ("kubernetes:core/v1:ConfigMap", "kubernetes:core/v1:ServiceAccount",
                  "kubernetes:resource.k8s.io/v1:ResourceClaimTemplate"):
        assert prod.one(token).urn in job.dependencies, token
    assert job.delete_before_replace is True
    cluster_urn = prod.one("gcp:container/cluster:Cluster").urn
    for resource in prod.resources:
        if is_kubernetes_type(resource.type):
            assert resource.deleted_with == cluster_urn, resource.name


# ---- exposure and exports -----------------------------------------------------------------------------

def test_dashboard_is_not_exposed_by_default(prod):
    services = [o for o in registered_objects(prod) if o["kind"] == "Service"]
    assert [s["spec"]["type"] for s in services] == ["ClusterIP"]
    out = prod.outputs
    assert out["rayDashboardPortForward"] == "kubectl port-forward -n tpu-training svc/maxtext-head-svc 8265:8265"
    assert out["rayDashboardInClusterUrl"] == "http://maxtext-head-svc.tpu-training.svc.cluster.local:8265"
    assert out["rayDashboardLocalUrl"] == "http://localhost:8265"
    assert "ray job submit --address http://localhost:8265 " in out["rayJobSubmit"]   # with the token in front
    assert out["tensorboardLogDir"].startswith("gs://my-tpu-project-tpu-multislice-prod-ckpt/")
    assert out["tensorboardCommand"] == f"tensorboard --logdir {out['tensorboardLogDir']}"
    assert "project=my-tpu-project" in out["consoleWorkloadsUrl"] and "project=my-tpu-project" in out["consoleLogsUrl"]


def test_internal_load_balancer_is_opt_in_and_source_limited():
    run = run_program({**MINIMAL, "dashboardExposure": "internal-lb", "dashboardSourceRanges": ["10.10.0.0/16"]})
    [service] = [s for s in by_kind(registered_objects(run), "Service") if s["spec"]["type"] == "LoadBalancer"]
    assert service["metadata"]["annotations"] == {"networking.gke.io/load-balancer-type": "Internal"}
    assert service["spec"]["loadBalancerSourceRanges"] == ["10.10.0.0/16"]
    assert [p["port"] for p in service["spec"]["ports"]] == [8265]


@pytest.mark.parametrize("overrides,fragment", [
    ({"dashboardExposure": "internal-lb"}, "dashboardSourceRanges"),
    ({"dashboardExposure": "public"}, "dashboardExposure='public'"),
    ({"rayClusterName": "r" * 54}, "rayClusterName='" + "r" * 54),
    ({"rayJobName": "j" * 39}, "at most 38 characters"),
    ({"rayJobName": "Train"}, "rayJobName='Train'"),
    ({"maxtextVersion": "0.2.1"}, "maxtextVersion='0.2.1'"),
    ({"rayImage": "rayproject/ray:nightly-py312-tpu"}, "rayImage='rayproject/ray:nightly-py312-tpu'"),
    ({"rayImage": "rayproject/ray"}, "pinned tag or digest"),
    ({"model": "llama3-70b", "elasticMinSlices": 1}, "llama3-70b does not fit on 1 x v6e-16"),
    ({"elasticMinSlices": 3}, "elasticMinSlices=3"),
    ({"model": "gpt-5"}, "model='gpt-5'"),
    ({"model": "tiny"}, "model='tiny'"),
    ({"perDeviceBatchSize": "0.3"}, "per_device_batch_size"),
    ({"checkpointPeriod": 500}, "only step 0 would be saved"),
    ({"maxFailures": -2}, "maxFailures=-2"),
])
def test_bad_workload_config_is_refused_before_registration(overrides, fragment):
    with pytest.raises(ConfigError) as error:
        build({**MINIMAL, **overrides})
    assert any(fragment in line for line in error.value.problems), error.value.problems


# ---- goldens ----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("stack", ["prod", "dev"])
def test_manifests_match_goldens(stack):
    """Regenerate with UPDATE_GOLDENS=1 .venv/bin/python -m pytest tests/workloads/test_ray.py"""
    config = stack_config(stack)
    objects = ray_objects(config, FIXED_BUNDLE, worker_image=built_image(config))
    assert_matches_golden(f"ray-{stack}", objects)


@pytest.mark.parametrize("stack", RAY_STACKS)
def test_job_command_is_accepted_by_the_trainer_and_gives_the_stacks_plan(stack):
    """The RayJob's command line, parsed by the trainer itself, must plan exactly what the stack planned."""
    from trainer import cli
    from trainer.entrypoint import build_parser
    from core.planner import plan

    config = stack_config(stack)
    command = ray_inputs.entrypoint(config)
    assert command[:3] == ["python", "-m", "trainer.entrypoint"]
    args = build_parser().parse_args(command[3:])
    trainer_plan = plan(cli.plan_request(args, default_slices=1))
    assert trainer_plan.overrides() == config.workload.plan.overrides()
    assert (trainer_plan.slices, trainer_plan.min_slices) == (config.workload.plan.slices,
                                                              config.workload.plan.min_slices)
    run = cli.run_settings(args, "tpu")
    assert (run.steps, run.checkpoint_period) == (config.workload.train_steps, config.workload.checkpoint_period)
    assert run.base_output_directory == common.output_directory(config)
    assert args.max_failures == config.ray.max_failures
    assert args.maxtext_version == config.workload.maxtext_version


# ---- slices follow the job ------------------------------------------------------------------------------

@pytest.mark.parametrize("stack", RAY_STACKS)
def test_only_the_job_holds_tpu_pods_and_its_cluster_goes_when_it_ends(stack):
    """Nothing long-lived asks for TPU chips: the RayJob creates its RayCluster (rayClusterSpec) and deletes it
    when the job finishes (shutdownAfterJobFinishes; ttlSecondsAfterFinished 0 keeps no TPU pod after it), per
    the KubeRay v1.7.0 RayJob CRD (../shared/schemas/kuberay/ray.io_rayjobs.yaml). The worker group keeps
    `replicas` slices without the Ray autoscaler (an elastic run's driver raises them to maxReplicas), so a lost
    slice's pods are asked for again at once (and wait for GKE to bring the pool back), which is what Ray Train's
    elastic resize needs to see it return."""
    objects = registered_objects(committed_stack_run(stack))
    assert not by_kind(objects, "RayCluster")
    def requests_tpu(node) -> bool:
        if isinstance(node, dict):
            if "google.com/tpu" in (node.get("requests") or {}):
                return True
            return any(requests_tpu(value) for value in node.values())
        return isinstance(node, list) and any(requests_tpu(item) for item in node)

    tpu_holders = [o for o in objects if requests_tpu(o)]
    assert [o["kind"] for o in tpu_holders] == ["RayJob"]
    [job] = training_jobs(objects)
    spec, config = job["spec"], stack_config(stack)
    assert spec["shutdownAfterJobFinishes"] is True and spec["ttlSecondsAfterFinished"] == 0
    cluster = spec["rayClusterSpec"]
    assert "enableInTreeAutoscaling" not in cluster
    [group] = cluster["workerGroupSpecs"]
    assert group["maxReplicas"] == config.tpu.slices
    assert group["replicas"] == group["minReplicas"] == config.workload.plan.min_slices
    # KubeRay names the cluster <RayJob>-<5 characters>; RayCluster names are at most 53.
    assert len(job["metadata"]["name"]) + 6 <= 53


def test_the_head_service_and_logs_follow_whichever_cluster_the_job_created(prod):
    """KubeRay names a job's cluster with a random suffix (kuberay v1.7.0 utils.GenerateRayClusterName), so the
    stack's Service and the log query select the stack's own pod label, which both pod templates carry."""
    objects = registered_objects(prod)
    [service] = by_kind(objects, "Service")
    cluster = job_cluster(objects)["spec"]
    head_labels = cluster["headGroupSpec"]["template"]["metadata"]["labels"]
    worker_labels = cluster["workerGroupSpecs"][0]["template"]["metadata"]["labels"]
    selector = dict(service["spec"]["selector"])
    assert selector.pop("ray.io/node-type") == "head"
    assert selector.items() <= head_labels.items() and selector.items() <= worker_labels.items()
    assert prod.outputs["rayDashboardPortForward"].endswith(f"svc/{service['metadata']['name']} 8265:8265")


# ---- starting costs TPU time ----------------------------------------------------------------------------

def test_the_runtime_install_gets_the_time_it_takes_and_keeps_uvs_cache_on_the_node():
    """Ray fails a worker whose runtime environment is not set up within `config.setup_timeout_seconds` (default
    600 s, ray/_private/ray_constants.py DEFAULT_RUNTIME_ENV_TIMEOUT_SECONDS); the lock's cold install gets more
    (benchmarks/startup_bench.py). Ray's uv plugin passes `--no-cache` unless install options are given
    (ray/_private/runtime_env/uv.py): ours are, so uv uses UV_CACHE_DIR, a hostPath that outlives the pods."""
    from workloads import install_cache
    from workloads.ray.spec import RUNTIME_ENV_SETUP_TIMEOUT_S
    job = ray_objects(runtime_config("prod"), FIXED_BUNDLE)["ray-job"]
    runtime_env = yaml.safe_load(job["spec"]["runtimeEnvYAML"])
    assert runtime_env["config"]["setup_timeout_seconds"] == RUNTIME_ENV_SETUP_TIMEOUT_S > 600
    assert "--no-cache" not in runtime_env["uv"]["uv_pip_install_options"]
    cluster = job["spec"]["rayClusterSpec"]
    for group in (cluster["headGroupSpec"], cluster["workerGroupSpecs"][0]):
        pod = group["template"]["spec"]
        [container] = pod["containers"]
        volumes = {v["name"]: v for v in pod["volumes"]}
        assert volumes["install-cache"]["hostPath"] == {"path": install_cache.HOST_PATH,
                                                        "type": "DirectoryOrCreate"}
        assert {"name": "install-cache", "mountPath": "/var/cache/install"} in container["volumeMounts"]
        assert {"name": "UV_CACHE_DIR", "value": "/var/cache/install/uv"} in container["env"]
        [init] = pod["initContainers"]
        assert init["command"] == ["chown", "1000:100", "/var/cache/install"]
        assert init["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["CHOWN"]}


def test_autopilot_keeps_the_cache_in_the_pod_and_the_image_path_installs_nothing():
    """Autopilot refuses writable hostPath volumes (GKE "Autopilot security capabilities"): an emptyDir there."""
    autopilot = ray_objects(build({**MINIMAL, "clusterMode": "autopilot", "workerEnvironment": "runtime"}),
                            FIXED_BUNDLE)["ray-job"]
    pod = autopilot["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert {v["name"]: v for v in pod["volumes"]}["install-cache"] == {"name": "install-cache", "emptyDir": {}}
    assert "initContainers" not in pod
    image = ray_objects(build({**MINIMAL, "workerEnvironment": "image"}), FIXED_BUNDLE, worker_image="r/w:1")
    pod = image["ray-job"]["spec"]["rayClusterSpec"]["workerGroupSpecs"][0]["template"]["spec"]
    assert "install-cache" not in {v["name"] for v in pod["volumes"]}
    assert yaml.safe_load(image["ray-job"]["spec"]["runtimeEnvYAML"]) == {"working_dir": "/code"} or \
        "uv" not in yaml.safe_load(image["ray-job"]["spec"]["runtimeEnvYAML"])
