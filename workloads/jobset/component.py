"""The JobSet backend on the cluster: controllers, DRANET claim, Kueue queues, trainer code, training JobSet."""
from __future__ import annotations

import pulumi

from infra.component import child_options, component_type, deleted_with_cluster
from infra.config import StackConfig
from workloads.jobset import spec as jobset_inputs
from workloads.controllers import WorkloadControllers
from workloads.k8s_objects import register
from workloads.bundle import TrainerBundle

# Kinds that only exist once the Kueue chart has installed its CRDs (and JobSet's, for JobSet).
_KUEUE_KINDS = {"ResourceFlavor", "ClusterQueue", "LocalQueue", "WorkloadPriorityClass"}


class JobSetWorkload(pulumi.ComponentResource):
    """Registers the JobSet backend's objects through the cluster's Kubernetes provider (`opts.providers`)."""

    def __init__(self, name: str, config: StackConfig, bundle: TrainerBundle, namespace: pulumi.Resource,
                 service_account: pulumi.Resource, cluster: pulumi.Resource,
                 opts: pulumi.ResourceOptions | None = None, worker_image: str | None = None,
                 worker_image_ready: list[pulumi.Resource] | None = None,
                 nodes_ready: list[pulumi.Resource] | None = None):
        objects = jobset_inputs.jobset_objects(config, bundle, worker_image)
        super().__init__(component_type("workloads", "JobSetWorkload"), name, None, opts)
        # A run on a shared cluster uses the cluster stack's controllers (workloads/stack_programs.py).
        self.controllers = None if config.stack.run else WorkloadControllers(
            "controllers", config, nodes_ready, opts=child_options(self, deleted_with=cluster))
        controllers_ready = self.controllers.ready if self.controllers else []
        # Everything goes away with the cluster, so destroy never waits on finalizers of a cluster being deleted.
        base = [namespace, service_account, *(worker_image_ready or [])]   # pods wait for their image's push
        self.resources: dict[str, pulumi.CustomResource] = {}
        for logical_name, obj in objects.items():
            kind = obj["kind"]
            depends_on = list(base)
            extra: dict = {}
            if kind in _KUEUE_KINDS:
                depends_on += controllers_ready
            if kind == "JobSet":
                # Queued through the LocalQueue at the priority it names; the pods need the claim template,
                # the code and the controllers' webhooks. A changed JobSet (new name) stops the old one first:
                # both would ask for the same TPU hosts.
                depends_on += controllers_ready + list(self.resources.values())
                extra = dict(delete_before_replace=True)
            self.resources[logical_name] = register(
                logical_name, obj, child_options(self, depends_on=depends_on,
                                                 deleted_with=deleted_with_cluster(cluster), **extra))
        self.jobset_name = objects["jobset"]["metadata"]["name"]
        # The smoke test runs at the start of the training JobSet's pods (jobset_inputs.jobset_objects).
        self.smoke_jobset_name = self.jobset_name if config.workload.smoke_test else None
        self.register_outputs({"jobset": self.jobset_name, "smokeJobSet": self.smoke_jobset_name or "",
                               "namespace": config.kubernetes.namespace})
