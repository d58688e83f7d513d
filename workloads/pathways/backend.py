"""The Pathways backend: a JobSet of Pathways' resource manager, proxy and workers, with one MaxText client
(images of Pathways' own: the stack's worker environment is not used)."""
from __future__ import annotations

from typing import Any

from core.maxtext_args import settings_of
from core.tpu_env import dcn_transport_flags
from infra.config import StackConfig
from workloads.backend import TrainingLaunch, WorkloadContext, relaunch_export
from workloads.common import MEMORY_BOUND_ASSUMPTION
from workloads.failure_policy import ASSUMPTION as FAILURE_POLICY_ASSUMPTION
from workloads.next_steps import RELAUNCH, FOLLOW_LOG, RUN_PODS, WHY_PENDING
from workloads.pathways import spec as pathways_spec
from workloads.pathways.component import PathwaysWorkload
from workloads.pathways.exports import pathways_exports

class PathwaysBackend:
    name = "pathways"
    runs_worker_environment = False
    slices_released = "when the Pathways head's MaxText finishes (JobSet deletes the workers)"
    data_on_tpu_hosts = False
    next_steps = (
        ("pathwaysStatusCommand", "the JobSet's state (add --watch to follow it)"),
        (FOLLOW_LOG, "follow MaxText's log on the Pathways head, elastic recoveries included"),
        RUN_PODS, WHY_PENDING, RELAUNCH,
    )

    def deploy(self, config: StackConfig, context: WorkloadContext) -> dict[str, Any]:
        workload = PathwaysWorkload("pathways", config, context.namespace, context.service_account, context.cluster,
                                    opts=context.provider_options, nodes_ready=context.nodes_ready,
                                    bundle=context.bundle)
        exports = pathways_exports(config, context.cluster_location, workload.jobset_name)
        exports["relaunchCommand"] = relaunch_export(workload.resources["pathways-jobset"])
        return exports

    def maxtext_settings(self, config: StackConfig) -> dict[str, str]:
        return settings_of(pathways_spec.maxtext_argv(config))

    def training_launch(self, config: StackConfig) -> TrainingLaunch:
        # trainer.pathways_run runs exactly this argv (workloads/pathways/spec.py trainer_command).
        # Its TPU workers carry only the megascale transport flags (workloads/pathways/manifests.py).
        return TrainingLaunch(argv=tuple(pathways_spec.maxtext_argv(config)),
                              source="pathways: workloads/pathways/spec.py maxtext_argv",
                              libtpu_init_args=" ".join(dcn_transport_flags(config.tpu.slices,
                                                                            pathways_spec.worker_dcn_nics(config))))

    def runs_smoke_test(self, config: StackConfig) -> bool:
        # The head is the only JAX client: there is no multi-process group to test (config refuses smokeTest).
        return False

    def capacity_wait_notes(self, config: StackConfig) -> list[str]:
        return []

    def images(self, config: StackConfig) -> list[str]:
        pathways = config.pathways
        return [pathways.server_image, pathways.proxy_image, pathways.trainer_image]

    def resizes(self, config: StackConfig) -> bool:
        return config.pathways.elastic

    def assumptions(self, config: StackConfig) -> list[str]:
        lines = [FAILURE_POLICY_ASSUMPTION, MEMORY_BOUND_ASSUMPTION,
                 "Pathways exit codes: the trainer image's MaxText is assumed to have the train.initialize and "
                 "create_data_iterator trainer.pathways_run wraps (MaxText 0.2.5's layout) and bash; otherwise its "
                 "settings and data errors exit 1 and are retried. Check the head's log for "
                 "\"trainer.pathways_run:\" lines"]
        if config.workload.run.dataset_type == "grain":
            lines.append(f"Pathways data: the head's MaxText ({config.pathways.trainer_image.rsplit(':', 1)[-1]}) "
                         "is assumed to read Grain data and resolve the tokenizer by asset name like MaxText 0.2.5; "
                         "every batch is loaded on the head and sent through the proxy")
        return lines


PATHWAYS = PathwaysBackend()
