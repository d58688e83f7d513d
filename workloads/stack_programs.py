"""The two split programs (infra/config/stack_role.py): a shared cluster stack, and a run stack on one.

A cluster stack registers the network, the cluster, its system pool, the controllers (KubeRay add-on, JobSet,
Kueue), the queue every run waits in and the goodput log role every run binds to, and exports what runs need. A
run stack reads those exports through a StackReference (infra/cluster_ref.py) and registers only what is its
own, every one named from its stack: slice pools, bucket, image, identity and grants, job objects in its
namespace, dashboard. Its destroy deletes exactly those (its Kubernetes objects are not `deleted_with` a cluster
it does not own), and never touches the cluster or another run. The single stack (`__main__`) is unchanged.
"""
from __future__ import annotations

import pulumi
import pulumi_gcp as gcp
import pulumi_kubernetes as k8s

from infra.bucket_access import look_up as look_up_read_access
from infra.cluster import GkeCluster
from infra.cluster_ref import ClusterRef
from infra.config import ConfigError, StackConfig, stack_role
from infra.data_lookups import gcp_lookups
from infra.data_lookups import look_up as look_up_run
from infra.identity import (TELEMETRY_ROLES, NodeServiceAccount, WorkloadIdentity, admin_goodput_role_id,
                            goodput_reader_role, shared_node_reads)
from infra.monitoring import TrainingDashboard, dashboard_inputs
from infra.network import ClusterNetwork
from infra.preflight import Preflight
from infra.services import ProjectServices, required_apis
from infra.storage import CheckpointBucket
from infra.tpu_pools import TpuSlicePools
from infra.up_messages import for_pulumi
from infra.worker_image import WorkerImage, WorkerImageSpec, image_tag
from workloads import shared_queue
from workloads.backend import WorkloadContext
from workloads.backends import backend_for, deploy_workload, run_name
from workloads.bundle import load_bundle
from workloads.common import RUN_LABEL
from workloads.controllers import WorkloadControllers
from workloads.k8s_objects import register
from workloads.next_steps import next_steps, run_pods_command, watch_command, why_pending_command
from workloads.run_summary import run_summary


def worker_image(config: StackConfig, node_account_email: pulumi.Input[str], services: ProjectServices,
                 preflight: Preflight) -> WorkerImage | None:
    """The workers' image (workerEnvironment=image), built in its build region and pulled by the node account;
    None without it. A single stack and a run stack build it alike."""
    if config.worker_image is None:
        return None
    return WorkerImage(
        "worker-image", WorkerImageSpec(project=config.gcp.project, region=config.gcp.region,
                                        repository_id=config.worker_image.repository_id,
                                        tag=image_tag(), builder=config.worker_image.builder,
                                        staging_bucket=config.worker_image.staging_bucket,
                                        build_account_id=config.worker_image.build_account_id,
                                        build_region=config.worker_image.build_region),
        node_account_email, depends_on=services.ready, deployer=preflight.deployer,
        admin_managed=config.gcp.admin_bootstrap)


def export_get_credentials(config: StackConfig, cluster_name: pulumi.Input[str],
                           location: pulumi.Input[str]) -> pulumi.Output[str]:
    """Exports (and returns) the command that gives kubectl the cluster, through its DNS endpoint."""
    command = pulumi.Output.concat("gcloud container clusters get-credentials ", cluster_name,
                                   f" --location {location} --project {config.gcp.project} --dns-endpoint")
    pulumi.export("getCredentialsCommand", command)
    return command


def export_run(config: StackConfig, run_facts, dashboard: TrainingDashboard, workload_exports: dict,
               get_credentials: pulumi.Output[str], extra_commands: dict[str, str] | None = None) -> None:
    """What a run's stack exports about its run: the plan, what this up trains, the dashboard, the backend's
    commands and the run's own (its pods, why they are Pending, and `extra_commands`), and what to run next."""
    pulumi.export("plan", config.workload.plan.describe())
    # What this up trains: the run's name, whether its job starts, resumes or finds the run finished, and its data.
    pulumi.export("run", run_summary(config, run_facts))
    pulumi.export("dashboardUrl", dashboard.url)
    # The run's pods and why pods are Pending (quota, capacity); each backend exports its driver's log (and on Ray
    # the token).
    workload_exports["runPodsCommand"] = run_pods_command(config.kubernetes.namespace, RUN_LABEL, run_name(config))
    workload_exports["whyPendingCommand"] = why_pending_command(config.kubernetes.namespace)
    workload_exports.update(extra_commands or {})
    for key, value in workload_exports.items():
        pulumi.export(key, value)
    # What to run next (`pulumi stack output nextSteps`), and one command that follows the job.
    pulumi.export("nextSteps", pulumi.Output.all(get_credentials, dashboard.url,
                                                 pulumi.Output.from_input(workload_exports))
                  .apply(lambda values: next_steps(backend_for(config).next_steps, values[0], values[2], values[1])))
    pulumi.export("watchCommand", watch_command(workload_exports))


def cluster_stack(config: StackConfig, preflight: Preflight) -> None:
    """What every run on the cluster shares; no run. While runStacks lists runs, the cluster, its network and its
    node account are protected: `pulumi destroy` refuses to delete them (Pulumi `protect`)."""
    protect = pulumi.ResourceOptions(protect=bool(config.stack.run_stacks))
    services = ProjectServices("apis", config.gcp.project, required_apis(None))
    network = ClusterNetwork("network", config.gcp, config.network, config.names, depends_on=services.ready,
                             opts=protect)
    node_account = NodeServiceAccount("node-identity", config.gcp.project, config.names, depends_on=services.ready,
                                      deployer=preflight.deployer, opts=protect,
                                      # Runs on the cluster pull their images through it (runs decide per run;
                                      # the role is the node account's, so the cluster grants it once).
                                      streams_images=True, admin_managed=config.gcp.admin_bootstrap)
    cluster = GkeCluster("gke", config, network, node_account.email_to_run_as, depends_on=services.ready,
                         opts=protect)
    k8s_provider = k8s.Provider("gke", kubeconfig=cluster.kubeconfig, enable_server_side_apply=True,
                                opts=pulumi.ResourceOptions(deleted_with=cluster.cluster))
    controllers = WorkloadControllers(
        "controllers", config, [cluster.system_pool] if cluster.system_pool else [],
        opts=pulumi.ResourceOptions(providers=[k8s_provider], deleted_with=cluster.cluster))
    queue_objects = shared_queue.cluster_objects(config.stack.tpu_quota, config.cluster.system_pool_machine_type,
                                                 config.cluster.system_pool_nodes)
    for logical_name, obj in queue_objects.items():
        register(logical_name, obj, pulumi.ResourceOptions(provider=k8s_provider, deleted_with=cluster.cluster,
                                                           depends_on=controllers.ready))
    # One goodput log role for every run: the admin's (a fixed id) after the admin's step, else created here (its
    # id from the node account's creation, as a single stack's).
    if config.gcp.admin_bootstrap:
        reader_needs: list[pulumi.Resource] = list(services.ready)
        reader_role = pulumi.Output.concat("projects/", config.gcp.project, "/roles/",
                                           admin_goodput_role_id(config.cluster.name))
    else:
        reader, reader_role = goodput_reader_role(None, config.gcp.project, config.cluster.name,
                                                  node_account.unique_id, services.ready)
        reader_needs = [reader]
    # Runs whose pods use the host network (JobSet) report goodput as the node account: granted here, once for
    # every run, as a single stack grants it (infra/identity.py WorkloadIdentity).
    node_member = pulumi.Output.concat("serviceAccount:", node_account.email)
    grants = [*((f"goodput-{role.split('/')[-1]}", role, []) for role in TELEMETRY_ROLES),
              ("goodput-log-reader", reader_role, reader_needs)]
    for name, role, needs in grants:
        gcp.projects.IAMMember(f"{name}-nodes", project=config.gcp.project, role=role, member=node_member,
                               opts=pulumi.ResourceOptions(depends_on=[cluster.cluster, *needs]))

    pulumi.export("clusterName", cluster.name)
    pulumi.export("location", cluster.location)
    pulumi.export("project", config.gcp.project)
    pulumi.export("region", config.gcp.region)
    pulumi.export("endpoint", cluster.endpoint)
    pulumi.export("kubeconfig", cluster.kubeconfig)
    export_get_credentials(config, cluster.name, cluster.location)
    pulumi.export("network", network.network.self_link)
    pulumi.export("subnet", network.subnet.self_link)
    pulumi.export("nodeServiceAccount", node_account.email)
    pulumi.export("goodputReaderRole", reader_role)
    pulumi.export("clusterQueue", shared_queue.CLUSTER_QUEUE)
    pulumi.export("localQueue", shared_queue.LOCAL_QUEUE)
    pulumi.export("clusterTpuQuota", config.stack.tpu_quota)
    pulumi.export("runStacks", list(config.stack.run_stacks))


def look_up_run_and_say(config: StackConfig, preflight: Preflight):
    """Before anything of the run registers: the run's data globs, its own checkpoints and its starting weights
    from Cloud Storage, and read access on the data and weights buckets (granted in the stack's project, left to
    other buckets' owners), each problem said as a warning; then what the planner says of the run (the largest
    batch that fits, the expected step, a step kept near or over XLA's HBM limit): memory notes are warnings, the
    rest information. Returns (run facts, read access). A single stack and a run stack both start so."""
    try:
        run_facts = look_up_run(config, gcp_lookups())
    except ConfigError as error:
        raise pulumi.RunError(str(error)) from None
    for warning in run_facts.warnings:
        pulumi.log.warn(for_pulumi(warning))
    read_access = look_up_read_access(config, preflight.project_number)
    for line in read_access.owner_grants:
        pulumi.log.warn(for_pulumi(line))
    for note in config.workload.plan.notes:
        (pulumi.log.warn if note.startswith("memory") else pulumi.log.info)(for_pulumi(f"plan: {note}"))
    return run_facts, read_access


def run_stack(config: StackConfig, preflight: Preflight) -> None:
    """A run on the cluster stack config.stack.cluster_stack names."""
    run_facts, read_access = look_up_run_and_say(config, preflight)
    unlisted = stack_role.unlisted_run(config.stack)
    if unlisted:
        pulumi.log.warn(for_pulumi(unlisted))
    for command in shared_node_reads(config):
        pulumi.log.warn(for_pulumi(
            f"the pods read data as the cluster's node account; its owner grants it once:\n  {command}"))

    cluster = ClusterRef(config)
    # Enabling an API twice is harmless, and neither stack disables them on destroy (infra/services.py).
    services = ProjectServices("apis", config.gcp.project,
                               required_apis(config.worker_image.builder if config.worker_image else None))
    bucket = CheckpointBucket("storage", config.gcp, config.storage, depends_on=services.ready,
                              adopt=preflight.adopt_bucket, protect=config.cluster.deletion_protection)
    image = worker_image(config, cluster.node_service_account, services, preflight)
    pools = TpuSlicePools("tpu-slices", config, cluster, cluster.network, cluster.node_service_account,
                          depends_on=services.ready, image_ready=image.ready if image else [])
    # No deleted_with: the cluster outlives the run, so the run's destroy deletes its objects one by one.
    k8s_provider = k8s.Provider("gke", kubeconfig=cluster.kubeconfig, enable_server_side_apply=True)
    identity = WorkloadIdentity("workload-identity", config, preflight.project_number, bucket.bucket,
                                cluster.reference, k8s_provider, cluster.node_service_account, "",
                                services=services.ready, read_granted=read_access.granted,
                                shared_reader_role=cluster.goodput_reader_role)
    workload_exports = deploy_workload(config, WorkloadContext(
        bundle=load_bundle(), namespace=identity.namespace, service_account=identity.service_account,
        cluster=cluster.reference, cluster_location=cluster.location, k8s_provider=k8s_provider,
        worker_image=image.ref if image else None,
        worker_image_ready=image.ready if image else []))
    dashboard = TrainingDashboard("dashboard", dashboard_inputs(config, cluster.location, run_name(config)),
                                  depends_on=services.ready)

    pulumi.export("clusterStack", config.stack.cluster_stack)
    pulumi.export("clusterName", cluster.name)
    pulumi.export("location", cluster.location)
    get_credentials = export_get_credentials(config, cluster.name, cluster.location)
    pulumi.export("queue", f"{config.kubernetes.namespace}/{shared_queue.LOCAL_QUEUE} -> "
                           f"{shared_queue.CLUSTER_QUEUE}")
    pulumi.export("backend", config.workload.backend)
    pulumi.export("tpuShape", f"{config.tpu.slices} x {config.tpu.shape.generation.name} "
                              f"{config.tpu.shape.topology}")
    pulumi.export("capacity", config.tpu.capacity.value)
    pulumi.export("bucketUrl", bucket.url)
    pulumi.export("nodePools", pools.names)
    pulumi.export("namespace", identity.namespace_name)
    pulumi.export("serviceAccount", identity.service_account_name)
    pulumi.export("slices", config.tpu.slices)
    pulumi.export("hostsPerSlice", config.tpu.shape.hosts)
    pulumi.export("totalChips", config.tpu.total_chips)
    export_run(config, run_facts, dashboard, workload_exports, get_credentials, {
        "queueCommand": (f"kubectl get workloads -n {config.kubernetes.namespace} -o wide  "
                         "# QuotaReserved/Admitted, or why it waits")})
