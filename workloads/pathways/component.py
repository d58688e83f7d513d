"""The Pathways path on the cluster: the JobSet controller (shared installer) and one Pathways JobSet."""
from __future__ import annotations

import pulumi

from infra.component import child_options, component_type
from infra.config import StackConfig
from workloads.pathways import manifests as pathways_manifests
from workloads.pathways import spec as pathways_inputs
from workloads.controllers import WorkloadControllers
from workloads.k8s_objects import register
from workloads import common
from workloads.bundle import TrainerBundle, load_bundle


def pathways_objects(config: StackConfig, bundle: TrainerBundle | None = None) -> dict[str, dict]:
    """Logical name → manifest, in registration order (pure; the tests and the offline plan use it too). The head
    runs MaxText through the shipped trainer code (`bundle`, the repository's when None)."""
    bundle = bundle or load_bundle()
    spec = pathways_inputs.pathways_spec(config, bundle)
    return {"trainer-code": common.code_config_map(spec.code_config_map, config.kubernetes.namespace,
                                                    bundle.code_files),
            **common.data_storage_classes(config, on_tpu=False),
            "pathways-jobset": pathways_manifests.pathways_jobset(spec)}


class PathwaysWorkload(pulumi.ComponentResource):
    """Registers the Pathways JobSet through the cluster's Kubernetes provider (passed in `opts.providers`)."""

    def __init__(self, name: str, config: StackConfig, namespace: pulumi.Resource,
                 service_account: pulumi.Resource, cluster: pulumi.Resource,
                 opts: pulumi.ResourceOptions | None = None, nodes_ready: list[pulumi.Resource] | None = None,
                 bundle: TrainerBundle | None = None):
        super().__init__(component_type("workloads", "PathwaysWorkload"), name, None, opts)
        objects = pathways_objects(config, bundle)
        # Pathways on GKE is a JobSet: its controller and webhooks must serve before the JobSet is applied.
        self.controllers = WorkloadControllers("controllers", config, nodes_ready,
                                               opts=child_options(self, deleted_with=cluster))
        self.resources: dict[str, pulumi.CustomResource] = {}
        for logical_name, obj in objects.items():
            # The JobSet after the code ConfigMap its head mounts.
            extra: dict = {}
            if obj["kind"] == "JobSet":
                # JobSet's webhook refuses changes to replicatedJobs, so any spec change is a replacement, and
                # the old JobSet must release the TPU slices before the new one asks for them.
                extra = dict(replace_on_changes=["spec"], delete_before_replace=True)
            self.resources[logical_name] = register(logical_name, obj, child_options(
                self,
                depends_on=[namespace, service_account, *self.controllers.ready, *self.resources.values()],
                # Gone with the cluster: destroy does not wait on the JobSet controller of a dying cluster.
                deleted_with=cluster,
                **extra,
            ))
        jobset = objects["pathways-jobset"]
        self.jobset_name = jobset["metadata"]["name"]
        self.run_name = config.workload.run.run_name
        self.register_outputs({"pathwaysJobSet": self.jobset_name, "namespace": config.kubernetes.namespace,
                               "runName": self.run_name})
