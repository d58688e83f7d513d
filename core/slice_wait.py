"""How long a multislice JobSet waits for a slice that comes up after the others: a slow slice must cost waiting,
never a restart (pure: numbers only).

When Kueue admits the JobSet, every slice pool scales up from zero on its own; one may be ready minutes before the
next (Spot and flex-start capacity arrives when it arrives). The pods of the first slice start, install, and wait
in `jax.distributed.initialize` for every process of every slice (the smoke test's first call, then MaxText's;
JAX's default `initialization_timeout` is 300 s, jax/_src/distributed.py, the same figure as MaxText's
`jax_distributed_initialization_timeout` in base.yml). If that wait runs out first, the pods exit 1, the Job
fails and the JobSet restarts, counted against maxRestarts: a slow slice would burn the restart budget.

Two bounds, in this order:
- Kueue's waitForPodsReady (kubernetes-sigs/kueue v0.19.2, apis/config/v1beta2 WaitForPodsReady; on by default
  since 0.19 with a 30 min timeout, apis/config/v1beta2/defaults.go): a workload whose pods are not all Ready
  `timeout` after admission is evicted and requeued (with the requeuing backoff), which suspends the JobSet:
  its pods are removed, the slices that did come up scale back to zero, nothing counts as a failure. Set here
  from the slice start-up the plan assumes, so a slice far slower than that releases the others instead of
  holding them. `recoveryTimeout` defaults to the same value: after a restart, a slice whose Spot capacity does
  not come back releases the others the same way.
- JAX's distributed-init timeout (the smoke test's and MaxText's) longer than Kueue's timeout plus the time a
  late slice needs from Ready to joining (its install and imports): a slice arriving just inside Kueue's timeout
  still joins before the first slice gives up, and one arriving later is evicted by Kueue before JAX gives up.
"""
from __future__ import annotations

# A multi-host TPU slice pool from zero to its hosts Ready: the offline plan's figure for a TPU pool (a guess, not
# a measurement; preview/timings.py TPU_NODE_POOL uses this value).
SLICE_START_S = 360
# Kueue's PodsReady timeout: three typical slice start-ups. Beyond that the capacity is not coming soon, and the
# slices that did arrive are released rather than held idle.
PODS_READY_TIMEOUT_S = 3 * SLICE_START_S
# From a pod Ready (its container started) to its process calling jax.distributed.initialize: the workers' lock
# installed (a cold install took 141-189 s on the development machine, benchmarks/startup_bench.py), imports and
# the smoke test's start; about three times the measured worst case.
READY_TO_JOIN_S = 600
# What JAX waits for every process before giving up: longer than any wait Kueue lets run.
DISTRIBUTED_INIT_TIMEOUT_S = PODS_READY_TIMEOUT_S + READY_TO_JOIN_S

# ---- how often Kueue puts a workload back in the queue after a PodsReady timeout ----
# Kueue v0.19.2 (apis/config/v1beta2/configuration_types.go RequeuingStrategy, defaults.go): with
# `backoffLimitCount` unset a workload is requeued without end, each time after a backoff of about
# backoffBaseSeconds * 2^(n-1) (60 s by default) capped at backoffMaxSeconds (3600 s by default); set, Kueue
# deactivates the Workload (spec.active=false) once its requeue count would pass it, and nothing bills after that.
# The count is the Workload's whole life, not one wait: pkg/controller/core/workload_controller.go increments
# status.requeueState.count at every PodsReady timeout (`triggerDeactivation`, then pkg/workload/workload.go
# `UpdateRequeueState`), a recovery timeout after a restart included (waitForPodsReady.recoveryTimeout, reason
# WaitForRecovery, defaults to `timeout`), and clears it only when the Workload is deactivated. So on a long Spot
# run every slice reclaimed whose capacity takes longer than the timeout to come back spends one requeue, however
# many days apart they are.
# The limit trades two costs. A stock-out: every requeue admits the workload again, the slices that can come up
# do and bill up to PODS_READY_TIMEOUT_S before they are released, REQUEUE_LIMIT + 1 such waits in all over
# requeue_horizon_s(). A long run: the (REQUEUE_LIMIT + 1)-th slow recovery of its life stops it until someone
# resumes it (one command: workloads/jobset/exports.py kueue_resume_command). 12: a week-long Spot run stops
# only after 13 slow recoveries (about one every 13 h), and a stock-out gives up after about 11 h having
# billed at most 13 x 18 min of the slices that came up; 6 (the earlier value) would stop such a run at its 7th
# slow recovery, every day or two of a week.
REQUEUE_LIMIT = 12
REQUEUE_BACKOFF_BASE_S = 60
REQUEUE_BACKOFF_MAX_S = 3600


def requeue_backoff_s(requeue: int) -> int:
    """Kueue's wait before the `requeue`-th requeue (1-based), without its random jitter."""
    return min(REQUEUE_BACKOFF_BASE_S * 2 ** (requeue - 1), REQUEUE_BACKOFF_MAX_S)


def requeue_horizon_s(limit: int = REQUEUE_LIMIT) -> int:
    """From the first admission to deactivation when no admission ever gets every pod Ready: limit + 1 PodsReady
    timeouts and the backoffs between them."""
    return (limit + 1) * PODS_READY_TIMEOUT_S + sum(requeue_backoff_s(n) for n in range(1, limit + 1))
