"""tpu-multislice: load config → compose components → export. Nothing else lives here."""
import pulumi
import pulumi_kubernetes as k8s

from infra.cluster import GkeCluster
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
from infra.worker_image import WorkerImage, WorkerImageSpec, image_tag
from workloads import compile_check, stack_programs
from workloads.backend import WorkloadContext
from workloads.backends import backend_for, deploy_workload, run_name
from workloads.bundle import load_bundle
from workloads.common import RUN_LABEL
from workloads.next_steps import next_steps, run_pods_command, watch_command, why_pending_command
from workloads.run_summary import run_summary

try:
    # XLA decides before anything registers: the steps compileCheck names that it has not judged are compiled here.
    config = build(raw_from_pulumi(), compile_step=compile_check.for_program, stack=pulumi.get_stack())
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
    worker_image = None if config.worker_image is None else WorkerImage(
        "worker-image", WorkerImageSpec(project=config.gcp.project, region=config.gcp.region,
                                        repository_id=config.worker_image.repository_id,
                                        tag=image_tag(), builder=config.worker_image.builder,
                                        staging_bucket=config.worker_image.staging_bucket,
                                        build_account_id=config.worker_image.build_account_id,
                                        build_region=config.worker_image.build_region),
        node_account.email, depends_on=services.ready, deployer=preflight.deployer,
        admin_managed=config.gcp.admin_bootstrap)
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
    get_credentials = pulumi.Output.concat(
        "gcloud container clusters get-credentials ", cluster.name,
        f" --location {cluster.location} --project {config.gcp.project} --dns-endpoint")
    pulumi.export("getCredentialsCommand", get_credentials)
    pulumi.export("bucketUrl", bucket.url)
    pulumi.export("nodePools", pools.names if pools else [])
    pulumi.export("namespace", identity.namespace_name)
    pulumi.export("serviceAccount", identity.service_account_name)
    pulumi.export("slices", config.tpu.slices)
    pulumi.export("hostsPerSlice", config.tpu.shape.hosts)
    pulumi.export("totalHosts", config.tpu.total_hosts)
    pulumi.export("totalChips", config.tpu.total_chips)
    pulumi.export("plan", config.workload.plan.describe())
    # What this up trains: the run's name, whether its job starts, resumes or finds the run finished, and its data.
    pulumi.export("run", run_summary(config, run_facts))
    pulumi.export("dashboardUrl", dashboard.url)
    # The run's pods and why pods are Pending (quota, capacity); each backend exports its driver's log (and on Ray the
    # token).
    workload_exports["runPodsCommand"] = run_pods_command(config.kubernetes.namespace, RUN_LABEL, run_name(config))
    workload_exports["whyPendingCommand"] = why_pending_command(config.kubernetes.namespace)
    for key, value in workload_exports.items():
        pulumi.export(key, value)
    # What to run next (`pulumi stack output nextSteps`), and one command that follows the job.
    pulumi.export("nextSteps", pulumi.Output.all(get_credentials, dashboard.url,
                                                 pulumi.Output.from_input(workload_exports))
                  .apply(lambda values: next_steps(backend_for(config).next_steps, values[0], values[2], values[1])))
    pulumi.export("watchCommand", watch_command(workload_exports))
