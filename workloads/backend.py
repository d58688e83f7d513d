"""The interface every workload backend implements (workloads/<backend>/backend.py) and every caller asks:
the program (`__main__`), the offline plan, the pre-flight compile, the docs tables and the dashboard. The
registry that picks one by its `workloadBackend` name is workloads/backends.py."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

import pulumi
import pulumi_kubernetes as k8s

from infra.config import StackConfig
from workloads.bundle import TrainerBundle
from workloads.next_steps import relaunch_command


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


def relaunch_export(job: pulumi.Resource) -> pulumi.Output[str]:
    """The `relaunchCommand` export: `pulumi up --target-replace` of the training job's object (its URN, known once
    registered), on every backend."""
    stack = pulumi.get_stack()
    return job.urn.apply(lambda urn: relaunch_command(stack, urn))


@dataclass(frozen=True)
class TrainingLaunch:
    """What a backend's training process is started with, for the pre-flight compile.

    argv: MaxText's own argv (`<module> <base.yml> key=value ...`) when the backend writes MaxText's command line
    into its manifests; the trainer's flags (trainer.entrypoint) when its workers build MaxText's argv at run time
    (`argv_built_on_workers`), which the compile then asks the trainer for."""
    argv: tuple[str, ...]
    source: str                     # where the argv comes from, for the compile report
    argv_built_on_workers: bool = False
    # LIBTPU_INIT_ARGS of the backend's TPU pods (core/tpu_env.py), as its manifests set them: the XLA flags change
    # what the compiler does, and the config build compiles before any manifest exists.
    libtpu_init_args: str = ""


class Backend(Protocol):
    """Everything the program and the offline plan ask of a backend."""

    name: str                       # the workloadBackend value
    # Whether its pods run this project's worker environment (the lock, or the worker image built from it);
    # otherwise they run images of their own whose software the stack does not choose.
    runs_worker_environment: bool
    slices_released: str            # when a run's TPU pods go away, so the slices can scale to zero
    # Whether the pods that read the data through Cloud Storage FUSE (each with its own cache disk,
    # workloads/fuse_cache.py) are the TPU hosts, one per VM of every slice; else one head pod on the CPU pool.
    data_on_tpu_hosts: bool
    # What to run after `pulumi up`, after the credentials: (export key, what it shows), in order
    # (workloads/next_steps.py); the exports include logsFollowCommand, the driver's log.
    next_steps: tuple[tuple[str, str], ...]

    def deploy(self, config: StackConfig, context: WorkloadContext) -> dict[str, Any]:
        """Register the backend's component under the cluster's provider; return the stack exports it adds."""
        ...

    def maxtext_settings(self, config: StackConfig) -> dict[str, str]:
        """MaxText's key=value settings of the run it launches, as data."""
        ...

    def training_launch(self, config: StackConfig) -> TrainingLaunch:
        ...

    def runs_smoke_test(self, config: StackConfig) -> bool:
        """Whether a multislice smoke test gates training (it costs its minutes at every restart)."""
        ...

    def resizes(self, config: StackConfig) -> bool:
        """Whether the run goes on with fewer or more slices while it runs (elastic), rather than restarting."""
        ...

    def capacity_wait_notes(self, config: StackConfig) -> list[str]:
        """What waiting for TPU capacity costs before the run starts, and what bounds it, for the plan's costs."""
        ...

    def images(self, config: StackConfig) -> list[str]:
        """Container images the pods pull that the offline plan cannot check exist."""
        ...

    def assumptions(self, config: StackConfig) -> list[str]:
        """What the offline plan cannot verify about this backend's controllers, with how to check it."""
        ...
