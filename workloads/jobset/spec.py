"""From the validated stack config to the JobSet backend's objects (pure: no Pulumi import)."""
from __future__ import annotations

import json

from core.maxtext_args import RunSettings, pre_train_argv
from core.run_bounds import attempts_without_progress
from core.slice_wait import DISTRIBUTED_INIT_TIMEOUT_S
from core.tpu_env import pod_dcn_nics
from core.worker_lock import LOCK_PATH
from infra.config import StackConfig
from workloads import common, install_cache, shared_queue
from workloads.bundle import TrainerBundle, short_digest
from workloads.jobset import manifests as jm
from workloads.jobset.manifests import TRAINING_PRIORITY

LOCAL_QUEUE = "tpu-training"
CLUSTER_QUEUE = "tpu-slices"
BASE_CONFIG_PLACEHOLDER = "$BASE_CONFIG"


def flavor_name(config: StackConfig) -> str:
    shape = config.tpu.shape
    return f"{shape.generation.accelerator_label}-{shape.topology}"


def jobset_spec(config: StackConfig, worker_image: str | None = None) -> jm.JobSetSpec:
    return jm.JobSetSpec(
        namespace=config.kubernetes.namespace,
        service_account=config.kubernetes.service_account,
        run_name=config.workload.run.run_name,
        image=worker_image or config.jobset.image,
        shape=config.tpu.shape,
        pod_size=common.tpu_pod_size(config),
        model=config.workload.model,
        slices=config.tpu.slices,
        # A run on a shared cluster queues in the cluster stack's ClusterQueue through a LocalQueue of its own.
        local_queue=shared_queue.LOCAL_QUEUE if config.stack.run else LOCAL_QUEUE,
        cluster_queue=shared_queue.CLUSTER_QUEUE if config.stack.run else CLUSTER_QUEUE,
        flavor=flavor_name(config),
        tpu_quota=config.jobset.tpu_quota,
        dranet_claim_template=common.dranet_claim_template_name(config),
        # Without DRANET the pods run on the host network (jm._pod_spec) and see the node's DCN NICs.
        dcn_nics=pod_dcn_nics(len(config.network.dcn_subnets), dranet_claim=config.network.dranet,
                              host_network=not config.network.dranet),
        # Same Autopilot capacity selectors as the Ray workers.
        tpu_node_selector_extra=common.capacity_selectors(config),
        termination_grace_s=config.workload.shutdown.pod_grace_s,
        attempts_without_progress=attempts_without_progress(config.workload.plan,
                                                            config.workload.checkpoint_period),
    )



def run_settings(config: StackConfig) -> RunSettings:
    # MaxText joins the slices itself too (max_utils.maybe_initialize_jax_distributed_system): without a smoke test
    # it is the first to, and must wait for a late slice as long as the smoke test would (core/slice_wait.py).
    return RunSettings(run_name=config.workload.run.run_name, base_output_directory=common.output_directory(config),
                       steps=config.workload.train_steps, checkpoint_period=config.workload.checkpoint_period,
                       checkpoints_to_keep=config.workload.checkpoints_to_keep, **common.run_inputs(config),
                       extra={**dict(config.workload.run.maxtext_settings),
                              "jax_distributed_initialization_timeout": str(DISTRIBUTED_INIT_TIMEOUT_S)})


def training_argv(config: StackConfig) -> list[str]:
    """The Ray trainer's argv builder, with the full (fixed-size) plan: a JobSet always runs on every slice."""
    return pre_train_argv(config.workload.plan, run_settings(config), BASE_CONFIG_PLACEHOLDER)


def _named(build, prefix: str) -> dict:
    """Build a JobSet under a name that carries a hash of its content: any change relaunches it (a JobSet's
    pod template is immutable), no change leaves it running."""
    draft = build("name-placeholder")
    return build(f"{prefix}-{short_digest(json.dumps(draft, sort_keys=True))}")


def jobset_objects(config: StackConfig, bundle: TrainerBundle, worker_image: str | None = None) -> dict[str, dict]:
    """Logical name → manifest, in registration order (pure; tests and the offline plan use it)."""
    spec = jobset_spec(config, worker_image)
    prefix = config.jobset.name_prefix
    objects: dict[str, dict] = {}
    if spec.dranet_claim_template:
        objects["dcn-netdevs"] = common.resource_claim_template(spec.dranet_claim_template, spec.namespace,
                                                         len(config.network.dcn_subnets))
    if config.stack.run:
        # The flavor, the ClusterQueue and the priority class are the cluster stack's (workloads/shared_queue.py).
        objects["local-queue"] = jm.local_queue(spec)
    else:
        objects["resource-flavor"] = jm.resource_flavor(spec.flavor, spec.shape)
        objects["cluster-queue"] = jm.cluster_queue(spec)
        objects["local-queue"] = jm.local_queue(spec)
        objects["priority-training"] = jm.workload_priority_class(*TRAINING_PRIORITY)
    # The shipped code holds the workers' lock (installed at start) and trainer/smoke.py, which runs at the start
    # of every training pod: training starts only where it passed, on the TPUs Kueue admitted once.
    code_name = f"{prefix}-code-{bundle.short_digest}"
    objects["trainer-code"] = common.code_config_map(code_name, spec.namespace, bundle.code_files)
    # The TPU pods read the data: their cache disks are of a type their generation attaches (fuse_cache.py).
    objects.update(common.data_storage_classes(config, on_tpu=True))
    cache = install_cache.cache_kind(config)
    if cache:
        # The lock in a ConfigMap of its own, mounted beside the code (workloads/bundle.py LOCK_FILE).
        objects["worker-lock"] = common.code_config_map(f"{code_name}-lock", spec.namespace, bundle.lock_files)
        code = common.code_volume(code_name, list(bundle.code_files), f"{code_name}-lock", list(bundle.lock_files))
    else:
        code = common.code_volume(code_name, list(bundle.code_files))
    volumes = [code, *common.data_volumes(config, on_tpu=True)]
    smoke = jm.smoke_argv(spec) if config.workload.smoke_test else None
    install = None
    if cache:
        # The plain Python image runs as root: the node's cache directory needs no owner change.
        install = jm.install_lock(LOCK_PATH, install_cache.UV_CACHE_DIR)
        volumes.append(install_cache.cache_volume(on_node=cache == "node"))
    argv = training_argv(config)

    def container(name: str) -> dict:
        built = jm.pre_train_container(spec, name, argv, BASE_CONFIG_PLACEHOLDER, install, smoke=smoke)
        built["volumeMounts"] += common.data_mounts(config)
        if install:
            built["volumeMounts"].append(install_cache.cache_mount())
        return built

    def training_jobset(name: str) -> dict:
        built = jm.jobset(name=name, spec=spec, priority_class=TRAINING_PRIORITY[0],
                          max_restarts=config.jobset.max_restarts, container=container(name), volumes=volumes)
        for replicated in built["spec"]["replicatedJobs"]:
            pod = replicated["template"]["spec"]["template"]
            common.add_pod_annotations(pod, common.data_pod_annotations(config))
            if security := common.data_pod_security_context(config):
                pod["spec"]["securityContext"] = {**pod["spec"].get("securityContext", {}), **security}
        return built

    objects["jobset"] = _named(training_jobset, prefix)
    return objects


def shape_problems(config: StackConfig, objects: dict[str, dict]) -> list[str]:
    """Every JobSet against the slices and the queue quota (refused before anything is registered)."""
    return [problem for obj in objects.values() if obj["kind"] == "JobSet"
            for problem in jm.shape_problems(obj, config.tpu.shape, config.tpu.slices, config.jobset.tpu_quota)]
