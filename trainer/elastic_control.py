"""What an elastic run's Ray Train controller decides differently from Ray's defaults: a Spot reclaim of a slice
above the run's minimum is not a failure, and a running group saves before it is re-formed (trainer/resize.py).

Ray Train 2.60 builds both policies itself from the configs (ray/train/v2/api/data_parallel_trainer.py `fit`:
`create_scaling_policy(scaling_config)`, `create_failure_policy(failure_config)`, always DefaultFailurePolicy)
and hands them to the controller through `_initialize_and_run_controller(**controller_init_kwargs)`. That method
is the one place a trainer can put its own: `policy_trainer` overrides it and replaces the two keyword
arguments, nothing else.

Why the failure budget needs it: every Spot reclaim of any worker fails the whole group as a preemption
(a PreemptionError, or a WorkerGroupError with a preempted worker: ray/train/v2/_internal/execution/
failure_handling/default.py `_is_preemption_failure`), charged to `max_preemption_failures` (the plan's bound,
core/run_bounds.py preemption_budget; at least 3). A 1..2 elastic run on Spot would end at the fourth reclaim of
its optional slice while its minimum slice is healthy. `ElasticFailurePolicy` retries a preemption that leaves the
group at or above its minimum without counting it; a preemption that takes the group below its minimum is counted
as before, and so is a host-memory eviction that hits every slice (it takes the group below the minimum), which is
what the bound is for. A loss that repeats on the optional slice alone does not end the run: the run trains on
its minimum between losses, and a run that stops training ends at the watchdog (trainer/watchdog.py).

The policy is handed only the error; the size of the group that failed comes from `GroupSize`, a controller
callback that records the size of each group the controller schedules. Both are unpickled into the controller's
process (the controller actor), separately, so they share it through a slot of this module in that process,
keyed by the run's name.
"""
from __future__ import annotations

import math

# run name -> workers in the group the controller last scheduled (in the controller's process)
_GROUP_WORKERS: dict[str, int] = {}


def group_workers() -> dict[str, int]:
    """The slot, looked up in the module as imported in this process. The policy and the callback are classes
    made inside functions, which Ray's cloudpickle sends by value with a copy of each global they name: naming
    `_GROUP_WORKERS` in their methods would give each its own dict in the controller (seen: the policy never saw
    a group size). An import at call time finds the one module of the process."""
    from trainer import elastic_control

    return elastic_control._GROUP_WORKERS


def lost_slices(preempted_ranks, workers_per_slice: int) -> int:
    """Slices a preemption of `preempted_ranks` takes (pure). Ray Train's preemption watcher already names every
    rank of a preempted TPU slice (a slice goes as a whole); a worker-death error names only the dead ranks. Each
    slice whose ranks appear counts whole; never fewer than the ranks fill."""
    ranks = sorted(set(preempted_ranks))
    if not ranks:
        return 0
    return max(math.ceil(len(ranks) / workers_per_slice), len({r // workers_per_slice for r in ranks}))


# How Ray 2.60 reports an actor whose node shut down on SIGTERM without the preemption drain (the GCS's death
# reason EXPECTED_TERMINATION with the raylet's "received SIGTERM"): `ray start`'s SIGTERM handler drains the node
# as preempted only on a best-effort basis and, when the drain RPC fails or is refused (a busy GCS), shuts down at
# once (ray/_private/node.py, the SIGTERM drain: "proceeding with immediate shutdown"). Seen in the local elastic
# life run under load: the first of four notices came as this, not as `preempted`.
SIGTERM_SHUTDOWN = "node was terminated expectedly: received SIGTERM"


def _node_shut_down(failure) -> bool:
    """Whether a worker failure is a death of its node by SIGTERM that Ray did not mark as a preemption: the
    kubelet's signal for a Spot reclaim or an eviction all the same."""
    from ray.exceptions import RayActorError

    failure = getattr(failure, "health_check_failure", failure)       # WorkerHealthCheckFailedError wraps it
    return isinstance(failure, RayActorError) and SIGTERM_SHUTDOWN in str(failure)


def preempted_ranks(error) -> list[int] | None:
    """The ranks a preemption error names, or None when `error` is not a preemption (Ray 2.60 default.py
    `_is_preemption_failure`: a PreemptionError, or a WorkerGroupError with a worker a preemption killed; and a
    worker whose node shut down on SIGTERM without Ray's preemption drain, SIGTERM_SHUTDOWN)."""
    from ray.train.v2._internal.execution.worker_group.poll import _is_preempted_actor
    from ray.train.v2.api.exceptions import PreemptionError, WorkerGroupError

    if isinstance(error, PreemptionError):
        return list(error.preemption_info.preempted_ranks)
    if isinstance(error, WorkerGroupError):
        ranks = [rank for rank, failure in error.worker_failures.items()
                 if _is_preempted_actor(failure) or _node_shut_down(failure)]
        return ranks or None
    return None


def elastic_failure_policy(failure_config, run_name: str, min_workers: int, workers_per_slice: int):
    """Ray's DefaultFailurePolicy, except that a preemption leaving the group at or above `min_workers` is
    retried without being counted (module docstring)."""
    from ray.train.v2._internal.execution.failure_handling import DefaultFailurePolicy, FailureDecision

    class ElasticFailurePolicy(DefaultFailurePolicy):
        def make_decision(self, training_failed_error):
            ranks = preempted_ranks(training_failed_error)
            group = group_workers().get(run_name)
            if ranks is not None and group is not None:
                left = group - lost_slices(ranks, workers_per_slice) * workers_per_slice
                if left >= min_workers:
                    print(f"trainer: preemption of ranks {sorted(ranks)} leaves {left} of the group's {group} "
                          f"workers (minimum {min_workers}): retried, not counted as a failure", flush=True)
                    return FailureDecision.RETRY
            return super().make_decision(training_failed_error)

    return ElasticFailurePolicy(failure_config)


def group_size_callback(run_name: str):
    """Records the size of each worker group the controller schedules (SchedulingState carries the
    ResizeDecision it starts: ray/train/v2/_internal/execution/controller/state.py)."""
    from ray.train.v2._internal.execution.callback import ControllerCallback

    class GroupSize(ControllerCallback):
        def after_controller_state_update(self, previous_state, current_state) -> None:
            decision = getattr(current_state, "scaling_decision", None)
            if type(current_state).__name__ == "SchedulingState" and decision is not None:
                group_workers()[run_name] = int(decision.num_workers)

    return GroupSize()


def policy_trainer(policies):
    """JaxTrainer whose controller gets the policies `policies(trainer)` returns (a dict with any of
    `failure_policy`, `scaling_policy`) instead of Ray's defaults (module docstring)."""
    from ray.train.v2.jax import JaxTrainer

    class PolicyJaxTrainer(JaxTrainer):
        def _initialize_and_run_controller(self, **controller_init_kwargs):
            return super()._initialize_and_run_controller(**{**controller_init_kwargs, **policies(self)})

    return PolicyJaxTrainer
