"""The JobSet backend: a JobSet admitted by Kueue, whose pods run MaxText's argv written into the manifest
(trainer.jobset_run wraps it for the exit codes the failure policy reads)."""
from __future__ import annotations

from typing import Any

from core.maxtext_args import settings_of
from core.run_bounds import attempt_cost_seconds, attempts_without_progress
from core.tpu_env import libtpu_init_args
from core.slice_wait import (DISTRIBUTED_INIT_TIMEOUT_S, PODS_READY_TIMEOUT_S, READY_TO_JOIN_S, REQUEUE_LIMIT,
                             SLICE_START_S, requeue_horizon_s)
from infra.config import StackConfig
from workloads.backend import TrainingLaunch, WorkloadContext, relaunch_export
from workloads.common import MEMORY_BOUND_ASSUMPTION
from workloads.failure_policy import ASSUMPTION as FAILURE_POLICY_ASSUMPTION, OUT_OF_HBM_ASSUMPTION
from workloads.jobset import spec as jobset_spec
from workloads.next_steps import RELAUNCH, FOLLOW_LOG, RUN_PODS, SMOKE_RESULT, TENSORBOARD, WHY_PENDING
from workloads.jobset.component import JobSetWorkload
from workloads.jobset.exports import jobset_exports


def attempts_note(config: StackConfig) -> str:
    """N and what it can cost, as the pods apply it (workloads/jobset/spec.py passes the same N)."""
    plan, period = config.workload.plan, config.workload.checkpoint_period
    n = attempts_without_progress(plan, period)
    cost_min = n * attempt_cost_seconds(plan, period) / 60
    return (f"JobSet run bounds: {n} restarts in a row that save no checkpoint newer than the newest any attempt "
            "saved end the run, whatever ended them (notices, evictions, failures: exit 8, not retried; at most "
            f"~{cost_min:.0f} min of every slice); host 0 keeps the count in the run's directory "
            "(attempts-without-progress.json, trainer/jobset_attempts.py) and reads JobSet's restart-attempt "
            "annotation; it rests on the plan's estimated step time")


class JobSetBackend:
    name = "jobset"
    runs_worker_environment = True
    slices_released = "when the JobSet finishes (it deletes its Jobs; Kueue frees the quota)"
    data_on_tpu_hosts = True
    next_steps = (
        ("kueueWorkloadsCommand", "is the JobSet admitted by Kueue?"),
        ("jobsetStatusCommand", "the JobSet's state (add --watch to follow it)"),
        (FOLLOW_LOG, "follow the training log (slice 0, host 0)"),
        RUN_PODS, WHY_PENDING, SMOKE_RESULT,
        ("jobsetLogsCommand", "the training pods' last lines"),
        TENSORBOARD, RELAUNCH,
    )

    def deploy(self, config: StackConfig, context: WorkloadContext) -> dict[str, Any]:
        workload = JobSetWorkload("jobset", config, context.bundle, context.namespace, context.service_account,
                                  context.cluster, opts=context.provider_options, worker_image=context.worker_image,
                                  worker_image_ready=context.worker_image_ready, nodes_ready=context.nodes_ready)
        exports = jobset_exports(config, context.cluster_location, workload.jobset_name, workload.smoke_jobset_name)
        exports["relaunchCommand"] = relaunch_export(workload.resources["jobset"])
        return exports

    def maxtext_settings(self, config: StackConfig) -> dict[str, str]:
        return settings_of(jobset_spec.training_argv(config))

    def training_launch(self, config: StackConfig) -> TrainingLaunch:
        spec = jobset_spec.jobset_spec(config)
        return TrainingLaunch(argv=tuple(jobset_spec.training_argv(config)),
                              source="jobset: workloads/jobset/spec.py training_argv",
                              libtpu_init_args=libtpu_init_args(spec.model, spec.shape.generation, spec.slices,
                                                                spec.dcn_nics))

    def runs_smoke_test(self, config: StackConfig) -> bool:
        return config.workload.smoke_test

    def capacity_wait_notes(self, config: StackConfig) -> list[str]:
        timeout_min = PODS_READY_TIMEOUT_S // 60
        return [f"waiting for capacity: each time Kueue admits the JobSet, the slices that come up bill for up to "
                f"{timeout_min} min until every pod is Ready (waitForPodsReady), then are released and the JobSet is "
                f"requeued; after {REQUEUE_LIMIT} requeues (about {requeue_horizon_s() / 3600:.0f} h of stock-out, at "
                f"most {REQUEUE_LIMIT + 1} x {timeout_min} min of partial slices billed) Kueue deactivates it and "
                "nothing bills. The count is the JobSet's whole life: a slice that takes more than "
                f"{timeout_min} min to come back after a restart (recoveryTimeout) spends one too, and only the "
                f"deactivation clears it, so a long Spot run stops at its {REQUEUE_LIMIT + 1}th slow recovery. "
                "Resume (from the last checkpoint, a fresh count): `pulumi stack output kueueResumeCommand` "
                "(sets the Workload's spec.active back to true); or `relaunchCommand` (backoffLimitCount; "
                "docs/backends.md)"]

    def images(self, config: StackConfig) -> list[str]:
        return [] if config.workload.worker_environment == "image" else [config.jobset.image]

    def resizes(self, config: StackConfig) -> bool:
        return False    # a JobSet always runs on every slice

    def assumptions(self, config: StackConfig) -> list[str]:
        return [
            FAILURE_POLICY_ASSUMPTION, OUT_OF_HBM_ASSUMPTION, MEMORY_BOUND_ASSUMPTION, attempts_note(config),
            f"late slice: Kueue's waitForPodsReady (timeout {PODS_READY_TIMEOUT_S // 60} min, from the assumed "
            f"{SLICE_START_S // 60} min slice start-up) is assumed to suspend and requeue the JobSet without failing "
            f"a Job (Kueue v0.19.2), and a slice's pods to reach jax.distributed.initialize within "
            f"{READY_TO_JOIN_S // 60} min of Ready; JAX waits {DISTRIBUTED_INIT_TIMEOUT_S // 60} min. Check "
            "`kubectl get workloads -n NAMESPACE` shows Evicted/PodsReadyTimeout, not a restart",
            "Spot notice: every slice is assumed to save at JAX's preemption sync and exit 143 (the rule "
            "SavedAtPreemptionNotice restarts them without counting toward maxRestarts); a trainer that exits 143 "
            "for another reason would also restart uncounted there, bounded only by the restarts without a new "
            "checkpoint (exit 8). Check `kubectl get jobset -n NAMESPACE -o "
            "jsonpath='{.items[*].status.restartsCountTowardsMax}'` stays 0 after a preemption"]


JOBSET = JobSetBackend()
