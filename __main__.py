"""tpu-multislice: load config → compose components → export. Nothing else lives here."""
import pulumi
import pulumi_kubernetes as k8s

from infra.cluster import GkeCluster
from infra.cluster_ref import read_outputs
from infra.config import ConfigError, build, raw_from_pulumi
from infra.config.model import Role
from infra.identity import NodeServiceAccount, WorkloadIdentity
from infra.monitoring import TrainingDashboard, dashboard_inputs
from infra.network import ClusterNetwork
from infra.preflight import PreflightError
from infra.preflight import run as run_preflight
from infra.services import ProjectServices, required_apis
from infra.storage import CheckpointBucket
from infra.tpu_pools import TpuSlicePools
from infra.up_messages import for_pulumi
from workloads import compile_check, stack_programs
from workloads.backend import WorkloadContext
from workloads.backends import deploy_workload, run_name
from workloads.bundle import load_bundle

try:
    # XLA decides before anything registers: the steps compileCheck names that it has not judged are compiled here.
    # A run stack takes its project, zone and cluster name from its cluster stack's outputs, read here.
    config = build(raw_from_pulumi(), compile_step=compile_check.for_program, stack=pulumi.get_stack(),
                   cluster_outputs=read_outputs)
except ConfigError as error:
    # RunError ends the program with the message only: no traceback, and nothing has been registered.
    raise pulumi.RunError(str(error)) from None
# What config build changed of the run's shape that no key asked for (elastic turned fixed, a default size): first.
for change in config.shape_changes:
    pulumi.log.warn(for_pulumi(change.message))
# Autopilot clusters are regional; Standard TPU clusters are zonal so every slice pool sits in the TPU zone.
cluster_location = config.gcp.region if config.cluster.autopilot else config.gcp.zone
try:
    preflight = run_preflight(config, cluster_location)
except (ConfigError, PreflightError) as error:
    raise pulumi.RunError(str(error)) from None
for warning in preflight.warnings:
    pulumi.log.warn(for_pulumi(warning))
if config.stack.role is Role.CLUSTER:
    # A shared cluster with no run, or a run on one: a stack per lifecycle (workloads/stack_programs.py).
    stack_programs.cluster_stack(config, preflight)
elif config.stack.role is Role.RUN:
    stack_programs.run_stack(config, preflight)
else:
    run_facts, read_access = stack_programs.look_up_run_and_say(config, preflight)

    services = ProjectServices("apis", config.gcp.project,
                               required_apis(config.worker_image.builder if config.worker_image else None))
    network = ClusterNetwork("network", config.gcp, config.network, config.names, depends_on=services.ready)
    node_account = NodeServiceAccount("node-identity", config.gcp.project, config.names, depends_on=services.ready,
                                      deployer=preflight.deployer, streams_images=config.worker_image is not None,
                                      admin_managed=config.gcp.admin_bootstrap)
    # Prod data survives destroy: deletionProtection (on by default) also protects the bucket; a kept bucket is adopted.
    bucket = CheckpointBucket("storage", config.gcp, config.storage, depends_on=services.ready,
                              adopt=preflight.adopt_bucket, protect=config.cluster.deletion_protection)
    cluster = GkeCluster("gke", config, network, node_account.email_to_run_as, depends_on=services.ready)
    worker_image = stack_programs.worker_image(config, node_account.email, services, preflight)
    # With the workers' image, no TPU pool exists before its build has pushed: a failed build stops `up` before any
    # slice (a warm one bills at once) is created for an image that is not there.
    pools = None if config.cluster.autopilot else TpuSlicePools(
        "tpu-slices", config, cluster, network, node_account.email_to_run_as, depends_on=services.ready,
        image_ready=worker_image.ready if worker_image else [])

    bundle = load_bundle()

    k8s_provider = k8s.Provider("gke", kubeconfig=cluster.kubeconfig, enable_server_side_apply=True,
                                opts=pulumi.ResourceOptions(deleted_with=cluster.cluster))
    identity = WorkloadIdentity("workload-identity", config, preflight.project_number, bucket.bucket, cluster.cluster,
                                k8s_provider, node_account.email, node_account.unique_id, services=services.ready,
                                read_granted=read_access.granted)
    workload_exports = deploy_workload(config, WorkloadContext(
        bundle=bundle, namespace=identity.namespace, service_account=identity.service_account,
        cluster=cluster.cluster, cluster_location=cluster.location, k8s_provider=k8s_provider,
        worker_image=worker_image.ref if worker_image else None,
        worker_image_ready=worker_image.ready if worker_image else [],
        nodes_ready=[cluster.system_pool] if cluster.system_pool else []))
    # Charts this stack's slices and the launched run's goodput (its workload_id is the backend's run_name).
    dashboard = TrainingDashboard("dashboard", dashboard_inputs(config, cluster.location, run_name(config)),
                                  depends_on=services.ready)

    pulumi.export("clusterName", cluster.name)
    pulumi.export("location", cluster.location)
    pulumi.export("endpoint", cluster.endpoint)
    pulumi.export("kubeconfig", cluster.kubeconfig)
    get_credentials = stack_programs.export_get_credentials(config, cluster.name, cluster.location)
    pulumi.export("bucketUrl", bucket.url)
    pulumi.export("nodePools", pools.names if pools else [])
    pulumi.export("namespace", identity.namespace_name)
    pulumi.export("serviceAccount", identity.service_account_name)
    pulumi.export("slices", config.tpu.slices)
    pulumi.export("hostsPerSlice", config.tpu.shape.hosts)
    pulumi.export("totalHosts", config.tpu.total_hosts)
    pulumi.export("totalChips", config.tpu.total_chips)
    stack_programs.export_run(config, run_facts, dashboard, workload_exports, get_credentials)
