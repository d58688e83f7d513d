"""The RayJob's retries and deadline: what KubeRay itself may retry, and when it gives up on a run (pure).

KubeRay v1.7.0 (ray-operator/apis/ray/v1/rayjob_types.go, controllers/ray/rayjob_controller.go):
- `submitterConfig.backoffLimit` is the submitter Job's backoffLimit (default 2). The stack's submitter
  (trainer/submitter.py, in place of KubeRay's `ray job submit --no-wait; ray job logs --follow`, common/job.go)
  submits the job once and polls its status until it ends, so a retry fixes a submitter pod that could not be
  scheduled or reach the head, never the job: one retry (workloads/ray/manifests.py SUBMITTER_BACKOFF_LIMIT). It
  exits 0 when its cluster is deleted under it (below), so that retry is not spent waiting for a dead head.
- `backoffLimit` (default 0) retries the whole RayJob on a new RayCluster. Ray Train already recovers from
  failures inside the job (FailureConfig: max_failures, preemptions counted apart), so what is left when the job
  fails is what a retry cannot fix: 0, spelled out (JOB_BACKOFF_LIMIT).
- `activeDeadlineSeconds` fails the RayJob (reason DeadlineExceeded) that long after it started initialising,
  cluster creation and waiting for TPU nodes included; KubeRay then deletes the RayCluster, not the submitter
  Job (rayjob_controller.go deleteClusterResources), which sees its head gone and stops. A deadline is a backstop for a run that hangs with every
  slice paid for, and it must not end a slow but healthy one:
  * on-demand and reservation capacity: core/run_time.run_deadline_seconds: an hour to start, then
    (maxFailures + 1) whole runs at 10 % MFU with their periodic saves, far beyond any real run;
  * Spot and flex-start: none. Preemptions are retried without limit (each costs a restart and, with the save at
    the notice, no steps) and capacity can be away for hours, so no finite wall clock separates a hung run
    from a healthy run on such capacity; the run is bounded by its steps and by maxFailures instead;
  * maxFailures=-1 (unlimited failures): none, for the same reason.
- `preRunningDeadlineSeconds` (KubeRay >= 1.6) fails the RayJob (reason PreRunningDeadlineExceeded) when it has
  not reached Running that long after it started initialising (checkPreRunningDeadlineAndUpdateStatusIfNeeded, in
  the Initializing and Waiting states). In K8sJobMode a RayJob turns Running as soon as its RayCluster is Ready and
  the submitter Job is created, so this bounds exactly the wait for capacity: the head and the first slices' pods
  Running and Ready. That wait is what has no bound on Spot and flex-start, where capacity can stay away for
  hours while the head and any slices that did arrive bill; a failed RayJob's cluster is deleted
  (shutdownAfterJobFinishes) and backoffLimit 0 does not retry it, nor does `pulumi up` (the spec is unchanged):
  the stack exports `relaunchCommand` for that. Every capacity gets it (capacityWaitSeconds, default
  infra/config/schema.py DEFAULT_CAPACITY_WAIT_S; 0: none; rayPreRunningDeadlineSeconds is its older name): on
  on-demand and reservation capacity a stock-out is a wait like any other. Later waits (a fixed run waiting for
  a reclaimed slice, an elastic run below its minimum) are bounded by the same value in the trainer
  (trainer/watchdog.py, `--capacity-wait`).
- Both deadlines count from the same instant, the RayJob's Status.StartTime, set when its status is initialised
  (rayjob_controller.go checkActiveDeadlineAndUpdateStatusIfNeeded and checkPreRunningDeadlineAndUpdateStatus-
  IfNeeded both compare time.Now() with Status.StartTime plus their seconds), so the
  active deadline is composed as the pre-running deadline plus the run's own time: a first wait that uses its
  whole allowance never takes time from the run.
"""
from __future__ import annotations

from core.preemption import save_estimate
from core.run_time import run_deadline_seconds
from infra.config import Capacity, StackConfig

NO_DEADLINE_CAPACITY = (Capacity.SPOT, Capacity.FLEX_START)


def job_deadline_seconds(config: StackConfig) -> int | None:
    """activeDeadlineSeconds for the stack's RayJob, or None (see the module docstring)."""
    max_failures = config.ray.max_failures
    if config.tpu.capacity in NO_DEADLINE_CAPACITY or max_failures < 0:
        return None
    workload = config.workload
    own = run_deadline_seconds(workload.plan, steps=workload.train_steps, attempts=max_failures + 1,
                               seconds_per_save=save_estimate(workload.plan).seconds,
                               checkpoint_period=workload.checkpoint_period)
    return own + (pre_running_deadline_seconds(config) or 0)


def pre_running_deadline_seconds(config: StackConfig) -> int | None:
    """preRunningDeadlineSeconds for the stack's RayJob, or None (see the module docstring)."""
    return config.ray.pre_running_deadline_s
