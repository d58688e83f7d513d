"""What the trainer's Ray Train controller decides differently from Ray's defaults: an interruption (a reclaim, an
eviction, a drained node, a node that died on SIGTERM) is never a failure, for fixed and elastic runs alike, and an
elastic run's running group saves before it is re-formed (trainer/resize.py).

Ray Train 2.60 builds both policies itself from the configs (ray/train/v2/api/data_parallel_trainer.py `fit`:
`create_scaling_policy(scaling_config)`, `create_failure_policy(failure_config)`, always DefaultFailurePolicy)
and hands them to the controller through `_initialize_and_run_controller(**controller_init_kwargs)`. That method
is the one place a trainer can put its own: `policy_trainer` overrides it and replaces the two keyword
arguments, nothing else. Because it is private, `check_seam` checks at start-up that `fit` still calls it with
those arguments (one line and exit 3 otherwise), and tests/trainer/test_failure_config.py goes through `fit()`.

Why the failure budget needs it. A Spot reclaim, a maintenance event or an eviction is SIGTERM to the host's pod;
`ray start` drains its node as preempted and kills the raylet when the drain deadline ends
(python/ray/_private/node.py, the SIGTERM drain). The raylet reports AUTOSCALER_DRAIN_PREEMPTED only if that
deadline has already passed, otherwise EXPECTED_TERMINATION "received SIGTERM" (src/ray/raylet/main.cc, its
signal handler), and ActorDiedError.preempted is set only for the former (python/ray/exceptions.py). Ray Train's
controller looks at the workers' errors before the preemption deadline (controller.py `_handle_preempting_state`:
"A worker failed for a reason other than the preemption should fail fast"), and DefaultFailurePolicy charges a
death that is not `preempted` to max_failures (failure_handling/default.py `_is_preemption_failure`). So a fixed
Spot run ended after about four reclaims that landed on the wrong side of that race; the sibling hosts of a
replica group KubeRay deletes whole (raycluster_controller.go reconcileMultiHostWorkerGroup) die the same way.

`interruption_failure_policy` is DefaultFailurePolicy except that an interruption, in any form (also a node lost
while a new group starts: `_lost_while_starting`), is retried and
never charged to a budget: it tells the run's RunProgress what ended the attempt (trainer/watchdog.py), which
ends the run after N attempts in a row without a new step (core/run_bounds.py attempts_without_progress). Real
failures (any other error) keep Ray's max_failures budget; worker-group start-up errors keep Ray's unlimited
controller retries, now bounded in time by the watchdog's wait for capacity.
"""
from __future__ import annotations

from core.cli_errors import fit_columns

# How Ray 2.60 reports an actor whose node shut down on SIGTERM without being marked preempted (the GCS's death
# reason EXPECTED_TERMINATION with the raylet's "received SIGTERM", src/ray/raylet/main.cc): the raylet was killed
# before its drain deadline passed, or `ray start`'s best-effort drain RPC failed and it shut down at once
# (ray/_private/node.py, the SIGTERM drain). Seen in the local elastic life run under load: the first of four
# notices came as this, not as `preempted`.
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


def _lost_while_starting(error) -> str | None:
    """What killed a worker while Ray Train launched the training function on a new group, or None. Ray 2.60's
    worker_group.py `_start_impl` runs `ray.get([... run_train_fn.remote(...) ...])` outside the RayActorError
    handler that turns the deaths before it into a retryable WorkerGroupStartupFailedError, so a node lost in that
    window reaches the failure policy as a ControllerError around the bare ActorDiedError, which DefaultFailurePolicy
    never retries (failure_handling/default.py RETRYABLE_CONTROLLER_ERRORS). Seen in the local e2e run beside a
    CPU-bound process: the SIGTERM of a new group's first step landed while the group started, and the run ended.
    Ray also keeps that group's placement group in this window: trainer/failed_launch.py releases it."""
    from ray.train.v2._internal.execution.worker_group.poll import _is_preempted_actor
    from ray.train.v2.api.exceptions import ControllerError

    if not isinstance(error, ControllerError):
        return None
    failure = error.controller_failure
    if _node_shut_down(failure):
        return "a node that died on SIGTERM without the drain (Ray: \"received SIGTERM\") while the group started"
    if _is_preempted_actor(failure):
        return "a preempted node while the group started"
    return None


def interruption_kind(error) -> str | None:
    """What interrupted the group, in words, or None when `error` is not an interruption (preempted_ranks, or a
    node lost while the group started: _lost_while_starting)."""
    from ray.train.v2.api.exceptions import PreemptionError, WorkerGroupError

    if isinstance(error, PreemptionError):
        return "a preemption (Ray's drain)"
    starting = _lost_while_starting(error)
    if starting is not None:
        return starting
    if isinstance(error, WorkerGroupError) and preempted_ranks(error):
        failures = [getattr(f, "health_check_failure", f) for f in error.worker_failures.values()]
        if any(SIGTERM_SHUTDOWN in str(f) for f in failures):
            return "a node that died on SIGTERM without the drain (Ray: \"received SIGTERM\")"
        return "a preempted node"
    return None


def interruption_failure_policy(failure_config, run_name: str):
    """Ray's DefaultFailurePolicy, except that an interruption is retried uncounted and told to the watchdog
    (module docstring)."""
    from ray.train.v2._internal.execution.failure_handling import DefaultFailurePolicy, FailureDecision

    from trainer import watchdog

    class InterruptionFailurePolicy(DefaultFailurePolicy):
        def make_decision(self, training_failed_error):
            kind = interruption_kind(training_failed_error)
            if kind is None:
                return super().make_decision(training_failed_error)
            # The phrase first: it stays whole on the first line however the rest wraps.
            print(fit_columns(f"trainer: retried, not counted as a failure: {kind} (the watchdog counts "
                              "attempts without progress)"), flush=True)
            watchdog.tell_interruption(run_name, kind)
            return FailureDecision.RETRY

    return InterruptionFailurePolicy(failure_config)


# The keyword arguments of Ray 2.60's controller that carry the policies (TrainController.__init__), and the
# private method of the trainer `fit` calls with them (data_parallel_trainer.py).
POLICY_KWARGS = ("failure_policy", "scaling_policy")
SEAM = "_initialize_and_run_controller"


def check_seam(trainer_cls) -> str | None:
    """Why the trainer's policies would not reach Ray's controller through `trainer_cls.fit`, or None."""
    import inspect

    from ray.train.v2._internal.execution.controller import TrainController

    if SEAM not in trainer_cls.fit.__code__.co_names or getattr(trainer_cls, SEAM, None) is None:
        return f"Ray Train's fit no longer calls {SEAM}: the trainer's failure policy would not reach it"
    missing = [k for k in POLICY_KWARGS if k not in inspect.signature(TrainController.__init__).parameters]
    if missing:
        return f"Ray Train's controller takes no {', '.join(missing)}: the trainer's policies would not reach it"
    return None


def policy_trainer(policies):
    """JaxTrainer whose controller gets the policies `policies(trainer)` returns (a dict with any of
    `failure_policy`, `scaling_policy`) instead of Ray's defaults (module docstring)."""
    from ray.train.v2.jax import JaxTrainer

    class PolicyJaxTrainer(JaxTrainer):
        def _initialize_and_run_controller(self, **controller_init_kwargs):
            ours = policies(self)
            unknown = sorted(set(ours) - set(controller_init_kwargs))
            if unknown:     # Ray renamed what it hands the controller: ours would be dropped or refused
                raise RuntimeError(f"Ray Train hands its controller no {', '.join(unknown)}")
            return super()._initialize_and_run_controller(**{**controller_init_kwargs, **ours})

    return PolicyJaxTrainer
