"""Stack config: raw Pulumi config in, one validated, typed, frozen StackConfig out.

Every check happens here, before any resource is registered: step 1 parses and checks each key on its own
(parse.py, with the checks the schema keeps beside each key), step 2 applies the rules between keys
(rules.py: the cluster's; plan_rules, run_rules, worker_env_rules, pathways_rules and data_rules: the run's).
All problems are raised together as one ConfigError, one line per mistake.
"""
from __future__ import annotations

from typing import Any, Mapping

from core.compile_verdicts import CompileStep
from infra.config import (data_rules, pathways_rules, plan_rules, rules, run_rules, shape_changes, stack_role,
                          worker_env_rules)
from infra.config.model import (Capacity, ClusterMode, ClusterSettings, ConfigError, GcpSettings, JobSetSettings,
                                KubernetesSettings, NetworkSettings, PathwaysSettings, RaySettings, StackConfig,
                                StorageSettings, TpuSettings, WorkloadSettings, BackendSettings, WorkerImageSettings)
from infra import naming
from infra.config.build_region import build_region
from infra.config.parse import parse_values
from infra.config.preemption import stack_shutdown_budget


def build(raw: Mapping[str, Any], compile_step: CompileStep | None = None, stack: str | None = None,
          cluster_outputs: stack_role.ClusterOutputs | None = None) -> StackConfig:
    """Validate raw config (key without namespace → value as Pulumi stores it) into a StackConfig.

    compile_step: how the calling program compiles a step with XLA (the Pulumi program's, workloads/compile_check.py).
    With it, the run's steps are looked up under their complete keys and those XLA has not judged are compiled
    here, their verdicts kept (infra/config/compile_check.py); the config is then built again on those verdicts,
    so a step XLA refuses is refused like any other mistake, before anything registers. Without it no verdict
    is read (a verdict's key is the backend's argv, which only a compiler builds).
    stack: the Pulumi stack's name; a run stack (clusterStack) names what it creates from it.
    cluster_outputs: reads a stack's outputs by name; a run stack takes its project, zone and cluster name from
    its cluster stack's (stack_role.with_cluster_exports). Without it a run stack must set them itself."""
    raw, read_problems, listed = stack_role.with_cluster_exports(raw, cluster_outputs, stack)
    if read_problems and any(key not in raw for key, _ in stack_role.FROM_CLUSTER):
        raise ConfigError(read_problems)    # the cluster stack could not be read: every other check would guess
    raw = stack_role.with_run_names(raw, stack)
    config = _build(raw, stack=stack, prior=read_problems, listed=listed)
    if compile_step is None or not config.stack.has_run:    # a shared cluster runs nothing: nothing to compile
        return config
    from infra.config.compile_check import compile_undecided

    return _build(raw, compile_undecided(config, compile_step), stack, read_problems, listed)


def _build(raw: Mapping[str, Any], compiled=None, stack: str | None = None, prior: list[str] = (),
           listed: tuple[str, ...] | None = None) -> StackConfig:
    """build() without compiling; `compiled`: what this build's compiles gave (compile_check.CompileOutcome);
    `prior`: problems found reading the cluster stack's outputs; `listed`: the cluster's runStacks as read."""
    problems: list[str] = list(prior)
    v = parse_values(raw, problems)
    rules.check_applies(v, raw, problems)
    role = stack_role.check_role(v, raw, stack, problems)
    region = rules.check_location(v, raw, problems)
    rules.check_tpu_zone(v, raw, region, problems)
    shape = rules.check_tpu(v, raw, problems)
    rules.check_warm_slices(v, raw, problems)
    networks = rules.check_networks(v, problems)
    rules.check_range_sizes(v, raw, shape, networks, problems)
    rules.check_dranet_machine(v, shape, problems)
    floors = rules.check_version(v, shape, problems)
    rules.check_autopilot(v, raw, problems)
    rules.check_authorized_networks(v, problems)
    bucket, bucket_location = rules.check_storage(v, raw, region, problems)
    run_rules.check_workload(v, problems)
    worker_env_rules.check_worker_environment(v, problems)
    run_rules.check_jobset(v, shape, problems)
    run_rules.check_capacity_wait(v, raw, problems)
    pathways_rules.check_pathways(v, raw, shape, problems)
    maxtext_settings = data_rules.accepted_maxtext_settings(v, problems)
    changes: list[shape_changes.ShapeChange] = []
    workload_plan = plan_rules.plan_workload(v, raw, shape, problems, maxtext_settings, changes)
    workload_plan = plan_rules.check_xla_verdicts(v, workload_plan, problems, compiled)
    stack_role.check_run_plan(role, v, workload_plan, problems)
    tpu_pod = plan_rules.check_pod_size(v, raw, workload_plan, problems)
    data_rules.check_data(v, raw, workload_plan, maxtext_settings, problems)
    problems = stack_role.without_unread_requirements(raw, problems)
    if problems:
        raise ConfigError(problems)
    assert shape is not None and region is not None and workload_plan is not None and tpu_pod is not None
    shutdown = stack_shutdown_budget(v, workload_plan, run_rules.checkpoint_period(v), floors)
    # Needs the shutdown budget, which needs a valid plan: checked once the rest is.
    eval_problems = data_rules.check_eval_pass(v, workload_plan, shutdown)
    if eval_problems:
        raise ConfigError(eval_problems)
    return StackConfig(
        gcp=GcpSettings(project=v["project"], region=region, zone=v["zone"], admin_bootstrap=v["adminBootstrap"]),
        cluster=ClusterSettings(
            name=v["clusterName"], mode=ClusterMode(v["clusterMode"]), gke_version=v["gkeVersion"],
            release_channel=v["releaseChannel"], version_floors=tuple(floors.items()),
            deletion_protection=v["deletionProtection"], system_pool_machine_type=rules.system_pool_machine_type(v),
            system_pool_nodes=v["systemPoolNodes"],
            authorized_networks=tuple(v["controlPlaneAuthorizedNetworks"] or ())),
        tpu=TpuSettings(shape=shape, slices=v["slices"], capacity=Capacity(v["capacity"]),
                        reservation_name=v["reservationName"], warm_slices=rules.warm_slices(v)),
        network=NetworkSettings(
            node_cidr=v["nodeCidr"], pod_cidr=v["podCidr"], service_cidr=v["serviceCidr"], dcn=v["dcn"],
            dcn_mtu=v["dcnMtu"], dcn_subnets=tuple(v["dcnSubnets"]) if v["dcn"] else (), dranet=v["dranet"]),
        storage=StorageSettings(bucket_name=bucket, location=bucket_location,
                                keep_on_destroy=v["keepCheckpointsOnDestroy"], soft_delete_days=v["softDeleteDays"]),
        kubernetes=KubernetesSettings(namespace=v["namespace"], service_account=v["serviceAccount"]),
        workload=WorkloadSettings(
            backend=v["workloadBackend"], plan=workload_plan, tpu_pod=tpu_pod, train_steps=v["trainSteps"],
            checkpoint_period=run_rules.checkpoint_period(v), checkpoints_to_keep=v["checkpointsToKeep"],
            maxtext_version=v["maxtextVersion"],
            smoke_test=v["smokeTest"], worker_environment=v["workerEnvironment"],
            shutdown=shutdown,
            run=data_rules.training_run(v, maxtext_settings, run_rules.checkpoint_period(v)),
            memory_check=v["memoryCheck"] is not False, compile_check=v["compileCheck"]),
        backend=_backend_settings(v, raw, shape.chips),
        # A shared cluster runs nothing, so builds no image; its runs build theirs.
        worker_image=_worker_image_settings(v, role.run or v["clusterName"], region) if role.has_run else None,
        # A shared cluster has no run whose shape could change.
        shape_changes=(*changes, *filter(None, [shape_changes.size_default(v, raw, workload_plan)]))
        if role.has_run else (),
        stack=stack_role.with_listing(role, listed),
    )


def _worker_image_settings(v: dict[str, Any], stem: str, region: str) -> WorkerImageSettings | None:
    """workerEnvironment=image on a backend that runs the workers' environment (Pathways runs its own images).
    stem: what its names start with, the cluster's name (a run on a shared cluster: its run stack's)."""
    if v["workerEnvironment"] != "image" or v["workloadBackend"] not in ("rayjob", "jobset"):
        return None
    builder = v["imageBuilder"]
    return WorkerImageSettings(
        repository_id=naming.fit(f"{stem}-images", 63), builder=builder,
        # Bucket names are global: the project's ID keeps two projects' stacks of one cluster name apart.
        staging_bucket=(naming.fit(f"{v['project']}-{stem}-builds", 63)
                        if builder == "cloud-build" else None),
        build_account_id=(naming.Names(stem).build_service_account
                          if builder == "cloud-build" else None),
        build_region=build_region(v["imageBuildRegion"], region) if builder == "cloud-build" else None)


def _backend_settings(v: dict[str, Any], raw: Mapping[str, Any], chips_per_slice: int) -> BackendSettings:
    backend = v["workloadBackend"]
    if backend == "jobset":
        quota = v["kueueTpuQuota"]
        return JobSetSettings(image=v["jobsetImage"], name_prefix=v["jobsetName"], max_restarts=v["maxRestarts"],
                              tpu_quota=quota if quota is not None else v["slices"] * chips_per_slice)
    if backend == "pathways":
        return PathwaysSettings(
            job_name=data_rules.pathways_job_name(v, raw), elastic_slices=v["pathwaysElasticSlices"],
            max_slice_restarts=v["pathwaysMaxSliceRestarts"], max_restarts=v["maxRestarts"],
            elastic_max_retries=v["pathwaysElasticMaxRetries"],
            elastic_timeout_seconds=v["pathwaysElasticTimeoutSeconds"], profiling=v["pathwaysProfiling"],
            server_image=v["pathwaysServerImage"], proxy_image=v["pathwaysProxyImage"],
            trainer_image=v["pathwaysTrainerImage"])
    return RaySettings(
        image=v["rayImage"], cluster_name=v["rayClusterName"], job_name=v["rayJobName"],
        max_failures=v["maxFailures"],
        dashboard_exposure=v["dashboardExposure"], dashboard_source_ranges=tuple(v["dashboardSourceRanges"]),
        capacity_wait_s=run_rules.capacity_wait_seconds(v, raw) or None)
