"""Workload backends: `workloadBackend` config → the component that runs training, and its exports.

Every backend gets the same context (cluster, identity, provider, trainer code) and returns the exports that
tell the user where to watch it. Adding a backend = one function here + its component module.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import pulumi
import pulumi_kubernetes as k8s

from infra.config import StackConfig
from workloads.pathways.exports import pathways_exports
from workloads.pathways.component import PathwaysWorkload
from workloads.jobset.exports import jobset_exports
from workloads.jobset.component import JobSetWorkload
from workloads.ray.exports import ray_exports
from workloads.ray.component import RayWorkload
from workloads.smoke_exports import ray_smoke_exports
from workloads.bundle import TrainerBundle
from workloads.jobset import spec as jobset_spec
from workloads.pathways import spec as pathways_spec
from workloads.ray import spec as ray_spec


@dataclass(frozen=True)
class WorkloadContext:
    bundle: TrainerBundle
    namespace: pulumi.Resource          # the training namespace object
    service_account: pulumi.Resource    # the Workload Identity KSA object
    cluster: pulumi.Resource            # the GKE cluster (Kubernetes objects are deleted with it)
    cluster_location: str
    k8s_provider: k8s.Provider
    worker_image: str | None = None     # workerEnvironment=image: the built image every pod runs
    worker_image_ready: list[pulumi.Resource] = field(default_factory=list)   # pods wait for its push
    nodes_ready: list[pulumi.Resource] = field(default_factory=list)   # the CPU pool controllers run on (Standard)

    @property
    def provider_options(self) -> pulumi.ResourceOptions:
        return pulumi.ResourceOptions(providers=[self.k8s_provider])


def _rayjob(config: StackConfig, context: WorkloadContext) -> dict[str, Any]:
    workload = RayWorkload("ray", config, context.bundle, context.namespace, context.service_account,
                           context.cluster, opts=context.provider_options, worker_image=context.worker_image,
                           worker_image_ready=context.worker_image_ready, nodes_ready=context.nodes_ready)
    exports = ray_exports(config, context.cluster_location, workload.job_name)
    if workload.smoke_job_name:
        exports.update(ray_smoke_exports(config.kubernetes.namespace, workload.smoke_job_name))
    return exports


def _jobset(config: StackConfig, context: WorkloadContext) -> dict[str, Any]:
    workload = JobSetWorkload("jobset", config, context.bundle, context.namespace, context.service_account,
                              context.cluster, opts=context.provider_options, worker_image=context.worker_image,
                              worker_image_ready=context.worker_image_ready, nodes_ready=context.nodes_ready)
    return jobset_exports(config, workload.jobset_name, workload.smoke_jobset_name)


def _pathways(config: StackConfig, context: WorkloadContext) -> dict[str, Any]:
    workload = PathwaysWorkload("pathways", config, context.namespace, context.service_account, context.cluster,
                                opts=context.provider_options, nodes_ready=context.nodes_ready)
    return pathways_exports(config, context.cluster_location, workload.jobset_name)


BACKENDS: dict[str, Callable[[StackConfig, WorkloadContext], dict[str, Any]]] = {
    "rayjob": _rayjob,
    "jobset": _jobset,
    "pathways": _pathways,
}


def deploy_workload(config: StackConfig, context: WorkloadContext) -> dict[str, Any]:
    return BACKENDS[config.workload.backend](config, context)


# The MaxText run_name each backend launches (pure). MaxText also uses it as the goodput job name, which is
# the workload_id of the goodput series the dashboard charts (maxtext/common/goodput.py get_goodput_job_name).
RUN_NAMES: dict[str, Callable[[StackConfig], str]] = {
    "rayjob": ray_spec.run_name,
    "jobset": jobset_spec.run_name,
    "pathways": pathways_spec.run_name,
}


def run_name(config: StackConfig) -> str:
    return RUN_NAMES[config.workload.backend](config)
