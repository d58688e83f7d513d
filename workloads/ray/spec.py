"""From the validated stack config to the Ray manifests' inputs (pure: no Pulumi import)."""
from __future__ import annotations

import re
import shlex

from core.maxtext_args import RunSettings
from core.maxtext_memory_keys import maxtext_keys_of
from core.tpu_env import pod_dcn_nics
from infra import naming
from core.worker_lock import LOCK_PATH, parse_pins, requirement_lines
from infra.config import StackConfig
from workloads.bundle import TrainerBundle
from workloads import common, install_cache
from core.run_bounds import attempts_without_progress
from workloads.ray.deadline import job_deadline_seconds, pre_running_deadline_seconds
from workloads.ray.manifests import RaySpec

# Packages every Ray image already has at the lock's version, left out of the runtime install.
IMAGE_PROVIDES = frozenset({"ray"})
# Seconds Ray waits for a worker's runtime environment (the lock's install) before failing the worker; Ray's
# default is 600 (ray_constants.DEFAULT_RUNTIME_ENV_TIMEOUT_SECONDS). The lock's install took up to 189 s on a
# shared 2-core machine (benchmarks/startup_bench.py, docs/worker-environment.md); every host of every slice
# (and the head) downloads it from the same index at the same moment, so this allows about six times that.
RUNTIME_ENV_SETUP_TIMEOUT_S = 1200
# Ray version assumed when the image tag does not start with one (e.g. a custom image).
DEFAULT_RAY_VERSION = "2.60.0"


def ray_version(image: str) -> str:
    match = re.match(r"^(\d+\.\d+\.\d+)", naming.image_tag(image))
    return match.group(1) if match else DEFAULT_RAY_VERSION


def ray_spec(config: StackConfig, worker_image: str | None = None) -> RaySpec:
    tpu, ray = config.tpu, config.ray
    return RaySpec(
        namespace=config.kubernetes.namespace,
        service_account=config.kubernetes.service_account,
        cluster_name=ray.cluster_name,
        run_name=config.workload.run.run_name,
        image=worker_image or ray.image,
        shape=tpu.shape,
        pod_size=common.tpu_pod_size(config),
        model=config.workload.model,
        slices=tpu.slices,
        min_slices=config.workload.plan.min_slices,
        bucket=config.storage.bucket_name,
        dranet_claim_template=common.dranet_claim_template_name(config),
        # Ray worker pods have a network namespace of their own: only a DRANET claim gives them DCN NICs.
        dcn_nics=pod_dcn_nics(len(config.network.dcn_subnets), dranet_claim=config.network.dranet,
                              host_network=False),
        system_pool_selector=common.system_pool_selector(config),
        tpu_node_selector_extra=common.capacity_selectors(config),
        termination_grace_s=config.workload.shutdown.pod_grace_s,
        active_deadline_s=job_deadline_seconds(config),
        pre_running_deadline_s=pre_running_deadline_seconds(config),
        install_cache=install_cache.cache_kind(config),
        # The TPU workers read the data: their cache disks are of a type their generation attaches.
        data_volumes=tuple(common.data_volumes(config, on_tpu=True)),
        data_mounts=tuple(common.data_mounts(config)),
    )



# trainer/cli.py flags of what the run reads (core.maxtext_args.RunSettings fields of common.run_inputs).
_RUN_INPUT_FLAGS = (("dataset_type", "--dataset-type"), ("dataset_path", "--dataset-path"),
                    ("eval_dataset_path", "--eval-dataset-path"), ("eval_interval", "--eval-interval"),
                    ("eval_steps", "--eval-steps"),
                    ("load_parameters_path", "--load-parameters-path"))


def run_input_flags(config: StackConfig) -> list[str]:
    """The trainer flags for the run's data, weights and further MaxText settings; none for a synthetic run
    from scratch without settings, so such a job's command is what it was."""
    inputs = common.run_inputs(config)
    flags: list[str] = []
    for field, flag in _RUN_INPUT_FLAGS:
        value = inputs[field]
        if value and value != "synthetic":
            flags += [flag, str(value)]
    for key, value in config.workload.run.maxtext_settings:
        flags += ["--set", f"{key}={value}"]
    return flags


def run_settings(config: StackConfig) -> RunSettings:
    """The run the workers launch: they build MaxText's argv from these (carried by entrypoint's flags) with the
    same core builder (trainer.worker), so the plan reads them here rather than off the command."""
    workload = config.workload
    return RunSettings(run_name=config.workload.run.run_name, base_output_directory=common.output_directory(config),
                       steps=workload.train_steps, checkpoint_period=workload.checkpoint_period,
                       checkpoints_to_keep=workload.checkpoints_to_keep, **common.run_inputs(config),
                       extra=dict(workload.run.maxtext_settings))


def entrypoint(config: StackConfig) -> list[str]:
    """The command the RayJob runs on the head: the trainer entrypoint with the stack's plan."""
    workload, plan, run = config.workload, config.workload.plan, run_settings(config)
    command = [
        "python", "-m", "trainer.entrypoint",
        "--model", workload.model,
        "--generation", config.tpu.shape.generation.name,
        "--topology", config.tpu.shape.topology,
        "--slices", str(config.tpu.slices),
        "--steps", str(run.steps),
        "--checkpoint-period", str(run.checkpoint_period),
        "--checkpoints-to-keep", str(run.checkpoints_to_keep),
        "--per-device-batch-size", str(plan.per_device_batch_size),
        "--max-failures", str(config.ray.max_failures),
        # The plan's bounds on attempts without progress and on a wait for capacity (core/run_bounds.py), given
        # here so the plan shows what the trainer applies.
        "--attempts-without-progress", str(attempts_without_progress(plan, run.checkpoint_period)),
        "--run-name", run.run_name,
        "--base-output-directory", run.base_output_directory,
        "--storage-path", f"gs://{config.storage.bucket_name}/ray-results",
        "--maxtext-version", workload.maxtext_version,
    ]
    if config.ray.capacity_wait_s is not None:
        command += ["--capacity-wait", str(config.ray.capacity_wait_s)]
    if plan.elastic:
        command += ["--elastic", f"{plan.min_slices},{plan.slices}"]
    if not workload.memory_check:
        command.append("--no-memory-check")      # the step config build kept over the limit (memoryCheck: false)
    # The planned maxtextSettings (context parallelism, vocabulary tiling, mu_dtype) travel as --set too: the
    # entrypoint's planner takes them in again (trainer/cli.py plan_request), so it plans what config build did.
    command += [flag for key, value in maxtext_keys_of(plan).items() for flag in ("--set", f"{key}={value}")]
    return command + run_input_flags(config)


def smoke_command(config: StackConfig) -> list[str]:
    """trainer/smoke.py through a JaxTrainer with the training job's scaling: every slice joined (device count)
    and an all-reduce crosses the slices (DCN). An elastic run's smoke test takes the same MIN,MAX and checks the
    whole slices its group got: insisting on MAX would keep a run that may start on MIN from starting at all."""
    shape, plan = config.tpu.shape, config.workload.plan
    command = ["python", "-m", "trainer.smoke", "--ray", "--model", config.workload.model,
               "--generation", shape.generation.name, "--topology", shape.topology,
               "--slices", str(config.tpu.slices), "--run-name", "multislice-smoke",
               "--storage-path", f"gs://{config.storage.bucket_name}/ray-results"]
    if plan.elastic:
        command += ["--elastic", f"{plan.min_slices},{plan.slices}"]
    return command


def job_command(config: StackConfig) -> list[str]:
    """What the RayJob runs. With the smoke test on, it runs first and gates training in the same job: two
    RayJobs on one RayCluster would race for the same TPU workers, and the smoke test is only worth anything
    before the hours of training it protects."""
    train = entrypoint(config)
    if not config.workload.smoke_test:
        return train
    return ["bash", "-c", f"{shlex.join(smoke_command(config))} && exec {shlex.join(train)}"]


def runtime_env(config: StackConfig, bundle: TrainerBundle) -> dict:
    """What every Ray worker installs before the job starts: exactly the locked environment shipped with the code
    (worker_env/requirements.lock), every package at its locked version and nothing resolved again (--no-deps).
    Ray 2.60's runtime_env `uv` field takes the package list and install options
    (ray/_private/runtime_env/validation.py `parse_and_validate_uv`). With workerEnvironment=image the image
    already holds the lock and nothing is installed."""
    if config.workload.worker_environment == "image":
        return {}
    pins = parse_pins(bundle.files[LOCK_PATH])
    # Ray itself comes from the image: Ray's uv plugin builds the environment as a virtualenv over the image's
    # site-packages (ray/_private/runtime_env/virtualenv_utils.py: --system-site-packages) and refuses any other
    # Ray version (dependency_utils.check_ray); the config checks rayImage's Ray is the lock's.
    packages = requirement_lines({name: version for name, version in pins.items() if name not in IMAGE_PROVIDES})
    # Explicit install options replace the plugin's default ["--no-cache"] (ray/_private/runtime_env/uv.py), so
    # uv keeps and reuses its cache (UV_CACHE_DIR on the node, workloads/install_cache.py).
    return {"uv": {"packages": packages, "uv_pip_install_options": ["--no-deps"]},
            "config": {"setup_timeout_seconds": RUNTIME_ENV_SETUP_TIMEOUT_S}}
