"""The Ray path on the cluster: DRANET claim template, trainer code, the RayJob with the RayCluster it owns, the
head's Service, optional dashboard ILB."""
from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from infra.component import child_options, component_type, deleted_with_cluster
from infra.config import StackConfig
from workloads import common, shared_queue
from workloads.ray import manifests as ray_manifests
from workloads.ray.served_schema import RAYJOB_CRD, unserved_problem
from workloads.ray import spec as ray_inputs
from workloads.k8s_objects import register
from workloads.bundle import TrainerBundle, short_digest


def ray_objects(config: StackConfig, bundle: TrainerBundle, worker_image: str | None = None) -> dict[str, dict]:
    """Logical name → manifest, in the order they are registered (pure; the plan and tests use it too)."""
    spec = ray_inputs.ray_spec(config, worker_image)
    objects: dict[str, dict] = {}
    if spec.dranet_claim_template:
        objects["dcn-netdevs"] = common.resource_claim_template(
            spec.dranet_claim_template, spec.namespace, len(config.network.dcn_subnets))
    cluster_spec = ray_manifests.ray_cluster_spec(spec, ray_inputs.ray_version(spec.image))
    # The job's name carries a hash of its code, command and cluster: any change relaunches it (with a new
    # cluster), no change leaves it be.
    job_inputs = ray_inputs.job_command(config), ray_inputs.runtime_env(config, bundle)
    job_digest = short_digest(bundle.digest, repr((job_inputs, cluster_spec)))
    code_name = f"{config.ray.job_name}-code-{bundle.short_digest}"
    # Without the lock: the runtime env carries its pins (workloads/bundle.py LOCK_FILE).
    objects["trainer-code"] = common.code_config_map(code_name, spec.namespace, bundle.code_files)
    objects.update(common.data_storage_classes(config, on_tpu=True))
    if ray_manifests.grows(spec):
        # An elastic run's driver asks KubeRay for its other slices once it has started (trainer/grow.py): the
        # admission policy that keeps it to `replicas` first, then the Role that lets it patch.
        objects["grow-slices-policy"] = ray_manifests.grow_policy(spec)
        objects["grow-slices-policy-binding"] = ray_manifests.grow_policy_binding(spec)
        objects["grow-slices-role"] = ray_manifests.grow_role(spec)
        objects["grow-slices-binding"] = ray_manifests.grow_role_binding(spec)
    job_name = f"{config.ray.job_name}-{job_digest}"
    # The submitter asks KubeRay's objects, not the network, whether its cluster is gone: `get` on them first.
    objects["submitter-role"] = ray_manifests.submitter_role(spec, job_name)
    objects["submitter-binding"] = ray_manifests.submitter_role_binding(spec)
    if config.stack.run:
        objects["local-queue"] = shared_queue.run_local_queue(spec.namespace)
    objects["ray-job"] = ray_manifests.ray_job(
        name=job_name, spec=spec, cluster_spec=cluster_spec, entrypoint=job_inputs[0],
        runtime_env=job_inputs[1], code_config_map_name=code_name, code_files=list(bundle.code_files))
    if config.stack.run:
        objects["ray-job"] = shared_queue.queued_ray_job(objects["ray-job"])
    objects["head-service"] = ray_manifests.head_service(spec)
    if config.ray.dashboard_exposure == "internal-lb":
        # Never a dashboard reachable from outside the cluster without Ray's token auth in front of it.
        if cluster_spec.get("authOptions", {}).get("mode") != "token":
            raise ValueError("the dashboard load balancer needs the RayCluster's token auth (authOptions.mode)")
        objects["dashboard-ilb"] = ray_manifests.dashboard_load_balancer(
            spec, list(config.ray.dashboard_source_ranges))
    return objects


class RayWorkload(pulumi.ComponentResource):
    """Registers the Ray objects through the cluster's Kubernetes provider (passed in `opts.providers`)."""

    def __init__(self, name: str, config: StackConfig, bundle: TrainerBundle, namespace: pulumi.Resource,
                 service_account: pulumi.Resource, cluster: pulumi.Resource,
                 opts: pulumi.ResourceOptions | None = None, worker_image: str | None = None,
                 worker_image_ready: list[pulumi.Resource] | None = None,
                 nodes_ready: list[pulumi.Resource] | None = None):
        super().__init__(component_type("workloads", "RayWorkload"), name, None, opts)
        objects = ray_objects(config, bundle, worker_image)
        # Everything lives in the namespace and runs as the Workload Identity service account; all of it goes
        # away with the cluster, so destroy never waits on KubeRay finalizers of a cluster being deleted.
        # Pods wait for their image's push (workerEnvironment=image).
        base = dict(depends_on=[namespace, service_account, *(worker_image_ready or [])],
                    deleted_with=deleted_with_cluster(cluster))
        self.resources: dict[str, pulumi.CustomResource] = {}
        # The RayJob CRD the cluster's Ray add-on serves: the RayJob is created only if that schema declares every
        # field it sets (workloads/ray/served_schema.py), since the API server would drop an unknown authOptions
        # without an error. Read after the system pool is up, not as soon as the cluster exists: nothing public
        # says the add-on's CRDs are installed when cluster creation returns, and a read is not retried
        # (a failed `get` fails the update). The pool takes minutes after the cluster (docs/assumptions.md).
        served = k8s.apiextensions.v1.CustomResourceDefinition.get(
            f"{name}-rayjob-crd", RAYJOB_CRD,
            opts=pulumi.ResourceOptions(parent=self, depends_on=[cluster, *(nodes_ready or [])]))
        for logical_name, obj in objects.items():
            extra = {}
            if logical_name == "ray-job":
                obj = {**obj, "spec": served.spec.apply(lambda crd_spec, job=obj: _checked_spec(job, crd_spec))}
                # A relaunch must stop the old job before the new one asks for the same TPU hosts.
                # Its cluster's pods mount the code and claim the DCN NICs: both exist first.
                # An elastic run's driver patches its cluster as soon as it starts: the Role is bound first;
                # the submitter reads its RayJob and RayCluster: its Role too.
                # Pods that read data claim their cache disk of the fuse-cache StorageClass: it exists first.
                extra = dict(delete_before_replace=True,
                             depends_on=base["depends_on"] + [self.resources["trainer-code"]]
                             + [self.resources[n] for n in ("dcn-netdevs", "grow-slices-binding",
                                                            "grow-slices-policy-binding", "fuse-cache-class",
                                                            "submitter-binding", "local-queue")
                                if n in self.resources])
            if logical_name == "grow-slices-binding":
                # Never a moment when the service account may patch its cluster without the policy in force.
                extra = dict(depends_on=base["depends_on"] + [self.resources["grow-slices-policy-binding"]])
            if logical_name == "dashboard-ilb":
                # A LoadBalancer Service owns a forwarding rule in the VPC that GKE only tries to remove with the
                # cluster ("Deletion of these resources is not always guaranteed", gcloud container clusters
                # delete; GKE "Deleting a cluster" recommends deleting such Services first), and a leaked rule
                # blocks deleting the subnet and the VPC. So it is deleted on its own (no deleted_with) and before
                # the cluster: it depends on it, and Pulumi deletes dependents first.
                extra = dict(deleted_with=None, depends_on=base["depends_on"] + [cluster])
            self.resources[logical_name] = register(
                logical_name, obj, child_options(self, **{**base, **extra}))
        cluster_name, namespace_name = config.ray.cluster_name, config.kubernetes.namespace
        self.job_name = objects["ray-job"]["metadata"]["name"]
        # The smoke test runs at the start of the training job (see ray_inputs.job_command).
        self.smoke_job_name = self.job_name if config.workload.smoke_test else None
        self.head_service = ray_manifests.head_service_name(cluster_name)
        self.register_outputs({"rayCluster": cluster_name, "rayJob": self.job_name, "namespace": namespace_name})


def _plain(value: object) -> object:
    """Pulumi's output types (dict subclasses keyed by wire names) as plain dicts and lists."""
    if isinstance(value, dict):
        return {key: _plain(item) for key, item in dict.items(value)}
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


def _checked_spec(ray_job: dict, crd_spec: object) -> dict:
    """The RayJob's spec when the served CRD declares all of it; otherwise stop the update, in one line, before
    the RayJob exists (secure default: never a RayJob whose token auth the server would drop)."""
    problem = unserved_problem(ray_job, _plain(crd_spec))
    if problem:
        raise pulumi.RunError(f"RayJob {ray_job['metadata']['name']}: {problem}")
    return ray_job["spec"]
