"""From the validated stack config to the Pathways JobSet's inputs (pure: no Pulumi import).

MaxText's command line comes from the shared argv builder (core.maxtext_args), so the Pathways run trains
the same plan as the Ray and JobSet paths; only the single-controller and elastic keys are added here.
"""
from __future__ import annotations

import shlex

from core.maxtext_args import PRE_TRAIN_MODULE, RunSettings, pre_train_argv
from core.tpu_env import pod_dcn_nics
from infra.config import PathwaysSettings, StackConfig
from workloads import common, pid_one
from workloads.bundle import TrainerBundle
from workloads.pathways.manifests import PathwaysSpec

# Where base.yml sits in MaxText's pre-training image, relative to its working directory: the path MaxText's
# elastic-training guide passes to `python3 -m maxtext.trainers.pre_train.train`.
IMAGE_BASE_CONFIG = "src/maxtext/configs/base.yml"


def settings(config: StackConfig) -> PathwaysSettings:
    return config.pathways



def scratch_location(config: StackConfig) -> str:
    """GCS directory the resource manager, proxy and workers share (xpk --pathways-gcs-location)."""
    return f"gs://{config.storage.bucket_name}/pathways"


def maxtext_extra(config: StackConfig) -> dict[str, str]:
    """MaxText keys the Pathways path adds to the shared overrides (names from maxtext/configs/base.yml)."""
    pathways = settings(config)
    # MaxText runs as the Pathways client: one process drives every slice through the proxy.
    # enable_pathways_goodput: the goodput monitor of that single client accounts for every slice
    # (maxtext/common/goodput.py passes it as GoodputMonitor(pathway_enabled=...)); the shared goodput keys
    # come from core.maxtext_args.
    extra = {"enable_single_controller": "True", "enable_pathways_goodput": "true"}
    if pathways.elastic:
        extra.update({
            "elastic_enabled": "true",
            # 'checkpoint': recover by restoring the last committed Orbax checkpoint. MaxText 0.2.4/0.2.5 default
            # to 'snapshot' but only newer releases branch on it, and there elastic_retry wraps training only
            # with 'checkpoint' — set it so the recovery path does not depend on the image's release.
            "elastic_backup_kind": "checkpoint",
            "elastic_timeout_seconds": str(pathways.elastic_timeout_seconds),
            "elastic_max_retries": str(pathways.elastic_max_retries),
        })
    if pathways.profiling:
        # The config refuses profiling with elastic; without this key MaxText's default (no profiler) applies.
        extra["profiler"] = "xplane"
    # The user's further MaxText settings (maxtextSettings; config build refused any of the keys above).
    extra.update(config.workload.run.maxtext_settings)
    return extra


def run_settings(config: StackConfig) -> RunSettings:
    workload = config.workload
    return RunSettings(
        run_name=config.workload.run.run_name,
        # gs:// rather than a FUSE mount: Orbax writes commit_success markers there, which elastic recovery
        # relies on to discard a checkpoint cut off by the failure (docs/platform-notes.md §6).
        base_output_directory=common.output_directory(config),
        steps=workload.train_steps,
        checkpoint_period=workload.checkpoint_period,
        checkpoints_to_keep=workload.checkpoints_to_keep,
        # The head's MaxText client loads the data (through the FUSE mount of its pod) and sends every batch
        # through the proxy (infra/config/data_rules.py says why only without elastic slices).
        **common.run_inputs(config),
        extra=maxtext_extra(config),
    )


def maxtext_argv(config: StackConfig) -> list[str]:
    """MaxText's own pre_train argv: module, base.yml (in the image), key=value overrides."""
    return pre_train_argv(config.workload.plan, run_settings(config), IMAGE_BASE_CONFIG)


def trainer_command(config: StackConfig) -> list[str]:
    """MaxText's pre_train argv run through trainer.pathways_run (shipped in the code ConfigMap at CODE_MOUNT), which
    exits with core/exit_codes.py so the failure policy can end the run on what a retry cannot fix. The overrides
    travel as bash's positional arguments ("$@"), never re-quoted."""
    module, base_config, *overrides = maxtext_argv(config)
    if module != PRE_TRAIN_MODULE:
        raise ValueError(f"trainer.pathways_run runs {PRE_TRAIN_MODULE}, not {module}")
    script = "\n".join([
        # bash stays PID 1 and answers TERM from its first statement (workloads/pid_one.py): with `exec`, Python
        # was PID 1 and a TERM during the interpreter's start-up, before trainer.pathways_run's handler, was lost.
        pid_one.TRAP_FIRST,
        # The shipped trainer code first on the path; the image's MaxText stays where the image put it.
        f'export PYTHONPATH={shlex.quote(common.CODE_MOUNT)}"${{PYTHONPATH:+:$PYTHONPATH}}"',
        *pid_one.supervise(f'python3 -m trainer.pathways_run {shlex.quote(base_config)} "$@"'),
    ])
    return ["bash", "-c", script, "pathways_run", *overrides]


def code_config_map_name(config: StackConfig, bundle: TrainerBundle) -> str:
    return f"{settings(config).job_name}-code-{bundle.short_digest}"


def worker_dcn_nics(config: StackConfig) -> int:
    """The DCN NICs a Pathways worker pod sees: they run on the host network (the config refuses DRANET here), so
    the node's."""
    return pod_dcn_nics(len(config.network.dcn_subnets), dranet_claim=False, host_network=True)


def pathways_spec(config: StackConfig, bundle: TrainerBundle) -> PathwaysSpec:
    pathways = settings(config)
    return PathwaysSpec(
        name=pathways.job_name,
        run_name=config.workload.run.run_name,
        namespace=config.kubernetes.namespace,
        service_account=config.kubernetes.service_account,
        shape=config.tpu.shape,
        slices=config.tpu.slices,
        elastic_slices=pathways.elastic_slices,
        max_slice_restarts=pathways.max_slice_restarts,
        max_restarts=pathways.max_restarts,
        server_image=pathways.server_image,
        proxy_image=pathways.proxy_image,
        trainer_image=pathways.trainer_image,
        scratch_location=scratch_location(config),
        trainer_command=tuple(trainer_command(config)),
        code_config_map=code_config_map_name(config, bundle),
        code_files=tuple(sorted(bundle.code_files)),
        head_node_selector=dict(common.SYSTEM_POOL_SELECTOR),
        worker_size=common.tpu_pod_size(config),
        dcn_nics=worker_dcn_nics(config),
        # The head (CPU pool) reads the data: its cache disk is a Balanced Persistent Disk (fuse_cache.py).
        data_volumes=tuple(common.data_volumes(config, on_tpu=False)),
        data_mounts=tuple(common.data_mounts(config)),
    )
