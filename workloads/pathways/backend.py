"""The Pathways backend: a JobSet of Pathways' resource manager, proxy and workers, with one MaxText client
(images of Pathways' own: the stack's worker environment is not used)."""
from __future__ import annotations

from typing import Any

from infra.config import StackConfig
from workloads.backend import TrainingLaunch, WorkloadContext
from workloads.failure_policy import ASSUMPTION as FAILURE_POLICY_ASSUMPTION
from workloads.pathways import spec as pathways_spec
from workloads.pathways.component import PathwaysWorkload
from workloads.pathways.exports import pathways_exports

PYTHON_MODULE = ["python3", "-m"]


class PathwaysBackend:
    name = "pathways"
    runs_worker_environment = False
    slices_released = "when the Pathways head's MaxText finishes (JobSet deletes the workers)"

    def deploy(self, config: StackConfig, context: WorkloadContext) -> dict[str, Any]:
        workload = PathwaysWorkload("pathways", config, context.namespace, context.service_account, context.cluster,
                                    opts=context.provider_options, nodes_ready=context.nodes_ready)
        return pathways_exports(config, context.cluster_location, workload.jobset_name)

    def run_name(self, config: StackConfig) -> str:
        return pathways_spec.run_name(config)

    def maxtext_settings(self, config: StackConfig) -> dict[str, str]:
        return dict(item.split("=", 1) for item in pathways_spec.trainer_command(config) if "=" in item)

    def training_launch(self, config: StackConfig) -> TrainingLaunch:
        command = pathways_spec.trainer_command(config)
        if command[:len(PYTHON_MODULE)] != PYTHON_MODULE:
            raise RuntimeError(f"the Pathways trainer runs {command[:3]}, not a Python module")
        return TrainingLaunch(argv=tuple(command[len(PYTHON_MODULE):]),
                              source="pathways: workloads/pathways/spec.py trainer_command")

    def runs_smoke_test(self, config: StackConfig) -> bool:
        # The head is the only JAX client: there is no multi-process group to test (config refuses smokeTest).
        return False

    def images(self, config: StackConfig) -> list[str]:
        pathways = config.pathways
        return [pathways.server_image, pathways.proxy_image, pathways.trainer_image]

    def resizes(self, config: StackConfig) -> bool:
        return config.pathways.elastic

    def assumptions(self, config: StackConfig) -> list[str]:
        lines = [FAILURE_POLICY_ASSUMPTION]
        if config.workload.run.dataset_type == "grain":
            lines.append(f"Pathways data: the head's MaxText ({config.pathways.trainer_image.rsplit(':', 1)[-1]}) "
                         "is assumed to read Grain data and resolve the tokenizer by asset name like MaxText 0.2.5; "
                         "every batch is loaded on the head and sent through the proxy")
        return lines


PATHWAYS = PathwaysBackend()
