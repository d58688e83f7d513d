"""Retries: preemptions and real failures both finite (Ray 2.60 FailureConfig).

Source: ray/train/v2/api/config.py (ray 2.60.0), FailureConfig: `max_failures` ("Defaults to 0"; -1 infinite) and
`max_preemption_failures` ("node-preemption interruptions ... counted separately from max_failures (which is
reserved for real failures) ... Setting to -1 leads to infinite preemption retries ... Defaults to -1").
"""
from __future__ import annotations

import math

import pytest
from ray.train.v2.api.config import FailureConfig

from core.interruptions import RESTART_START_S
from core.planner import PlanRequest, plan
from core.preemption import save_estimate
from core.run_time import EXPECTED_MFU, step_seconds

from infra.config import build
from preview.stack_files import load_stack_config
from tests.conftest import REPO
from trainer.entrypoint import DEFAULT_MAX_FAILURES, build_parser, failure_config_kwargs, max_preemptions
from trainer.failures import MIN_PREEMPTIONS, preemption_budget
from workloads.ray import spec as ray_inputs


def entrypoint_args(command: list[str]):
    assert command[:3] == ["python", "-m", "trainer.entrypoint"]
    return build_parser().parse_args(command[3:])


def test_spot_elastic_run_bounds_preemptions_by_the_plan_and_other_failures_finitely():
    """The dev stack is spot and elastic. Preemptions are bounded by the plan's budget (not Ray's unlimited
    default); without --max-failures, other failures are retried DEFAULT_MAX_FAILURES (3) times, not forever."""
    config = build(load_stack_config("dev", REPO))
    command = ray_inputs.entrypoint(config)
    assert "--elastic" in command
    without_flag = [c for i, c in enumerate(command)
                    if c != "--max-failures" and (i == 0 or command[i - 1] != "--max-failures")]
    args = entrypoint_args(without_flag)
    _, plan_, run = prepare_quietly(without_flag[3:])
    budget = preemption_budget(plan_, run.steps)
    assert max_preemptions(args, plan_, run) == budget
    failure_config = FailureConfig(**failure_config_kwargs(args.max_failures, budget))
    assert failure_config.max_preemption_failures == budget >= MIN_PREEMPTIONS
    assert failure_config.max_failures == DEFAULT_MAX_FAILURES == 3


def prepare_quietly(argv):
    from trainer.entrypoint import prepare

    return prepare(argv)


@pytest.mark.parametrize("given, expected", [("0", 0), ("5", 5), ("-1", -1)])
def test_max_failures_flag_is_taken_as_given_including_unlimited(given, expected):
    args = build_parser().parse_args(["--max-failures", given, "--max-preemptions", given])
    assert failure_config_kwargs(args.max_failures, args.max_preemptions) == {
        "max_failures": expected, "max_preemption_failures": expected}


def test_max_failures_below_minus_one_is_refused(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--max-failures", "-2"])
    assert "-1 for unlimited" in capsys.readouterr().err


def test_preemption_budget_is_the_run_s_training_time_over_a_preemption_s_cost():
    """Restarting may cost at most what training costs: steps x step time at EXPECTED_MFU over (save at the
    notice + restart), never below MIN_PREEMPTIONS; more steps allow more preemptions."""
    big = plan(PlanRequest("llama3-70b", "v6e", "8x8", slices=2))
    steps = 5000
    expected = math.ceil(steps * step_seconds(big, EXPECTED_MFU) / (save_estimate(big).seconds + RESTART_START_S))
    assert preemption_budget(big, steps) == expected > MIN_PREEMPTIONS
    assert preemption_budget(big, 2 * steps) > expected
    assert preemption_budget(plan(PlanRequest("tiny", "v6e", "2x4", slices=2)), 30) == MIN_PREEMPTIONS


def _policy(**kwargs):
    from ray.train.v2._internal.execution.failure_handling.default import DefaultFailurePolicy

    return DefaultFailurePolicy(FailureConfig(**kwargs))


def test_ray_stops_retrying_preemptions_at_the_budget():
    """ray/train/v2/_internal/execution/failure_handling/default.py DefaultFailurePolicy.make_decision: a
    PreemptionError is charged to max_preemption_failures; "error_count > retry_limit" raises. With Ray's default
    (-1) it never does: a host-memory eviction that looks like a preemption would restart forever."""
    from ray.train.v2._internal.execution.failure_handling.failure_policy import FailureDecision
    from ray.train.v2.api.exceptions import PreemptionError
    from ray.train.v2.api.preemption import PreemptionInfo

    info = PreemptionInfo(deadline_ms=None, preempted_node_to_ranks={"node": [2, 3]})
    budget = 3
    policy = _policy(**failure_config_kwargs(3, budget))
    decisions = [policy.make_decision(PreemptionError(preemption_info=info)) for _ in range(budget + 1)]
    assert decisions == [FailureDecision.RETRY] * budget + [FailureDecision.RAISE]
    unbounded = _policy(max_failures=3)
    assert all(unbounded.make_decision(PreemptionError(preemption_info=info)) == FailureDecision.RETRY
               for _ in range(50))


def test_worker_group_start_failures_are_retried_without_limit_by_ray_and_env_failures_are_not():
    """Same file: a ControllerError is retried when its cause is in RETRYABLE_CONTROLLER_ERRORS
    (WorkerGroupStartupFailedError, WorkerGroupStartupTimeoutError), charged to controller_failure_limit, whose
    default is -1 (ray/train/v2/api/config.py): a group that never starts is rescheduled forever, which is why the
    trainer's watchdog bounds the start-up in time (trainer/watchdog.py). A RuntimeEnvSetupError (what Ray raises
    when a worker's runtime environment cannot be installed, ray/_private/serialization.py
    RUNTIME_ENV_SETUP_FAILED) is not in that tuple: the run ends at once, and the trainer reports it as the
    environment's fault (exit 3)."""
    from ray.exceptions import RuntimeEnvSetupError
    from ray.train.v2._internal.exceptions import WorkerGroupStartupFailedError, WorkerGroupStartupTimeoutError
    from ray.train.v2._internal.execution.failure_handling.failure_policy import FailureDecision
    from ray.train.v2.api.exceptions import ControllerError

    from core import exit_codes
    from trainer.failures import exit_code_of

    policy = _policy(**failure_config_kwargs(3, 3))
    for _ in range(50):
        assert policy.make_decision(ControllerError(WorkerGroupStartupFailedError("init"))) == FailureDecision.RETRY
        assert policy.make_decision(ControllerError(WorkerGroupStartupTimeoutError(8))) == FailureDecision.RETRY
    env_failure = ControllerError(RuntimeEnvSetupError("uv pip install failed"))
    assert policy.make_decision(env_failure) == FailureDecision.RAISE
    assert exit_code_of(env_failure) == exit_codes.IMPORT_ERROR
    assert exit_code_of(ControllerError(WorkerGroupStartupFailedError("init"))) == exit_codes.RUNTIME_FAILURE


def _scheduled(run_name: str, workers: int) -> None:
    """What the controller does when it starts a group of `workers` (its SchedulingState carries the decision)."""
    from ray.train.v2._internal.execution.controller.state import SchedulingState
    from ray.train.v2._internal.execution.scaling_policy import ResizeDecision

    from trainer.elastic_control import group_size_callback

    group_size_callback(run_name).after_controller_state_update(
        None, SchedulingState(ResizeDecision(num_workers=workers, resources_per_worker={"TPU": 4})))


def test_losing_the_optional_slice_does_not_spend_the_preemption_budget():
    """An elastic 1..2 run of 2-host slices (minimum 2 workers, maximum 4) with the plan's budget of 3: Spot takes
    the optional slice (ranks 2, 3) again and again, each time after it came back. Ray's default policy charges
    each to max_preemption_failures and ends the run at the fourth while the minimum slice is healthy (see
    test_ray_stops_retrying_preemptions_at_the_budget); the trainer's policy retries them uncounted. Losses that
    take the group below its minimum are still counted, and end the run past the budget."""
    from ray.train.v2._internal.execution.failure_handling.failure_policy import FailureDecision
    from ray.train.v2.api.exceptions import PreemptionError
    from ray.train.v2.api.preemption import PreemptionInfo

    from trainer.elastic_control import elastic_failure_policy

    run = "spot-1-2"
    policy = elastic_failure_policy(FailureConfig(**failure_config_kwargs(3, 3)), run, min_workers=2,
                                    workers_per_slice=2)
    optional = PreemptionError(preemption_info=PreemptionInfo(None, {"node-c": [2], "node-d": [3]}))
    for _ in range(10):
        _scheduled(run, 4)                                    # the slice came back: the group grew to 4
        assert policy.make_decision(optional) == FailureDecision.RETRY
    minimum = PreemptionError(preemption_info=PreemptionInfo(None, {"node-a": [0], "node-b": [1]}))
    _scheduled(run, 2)                                        # the group of the minimum slice alone
    assert [policy.make_decision(minimum) for _ in range(4)] == [FailureDecision.RETRY] * 3 + [FailureDecision.RAISE]


def test_a_preemption_of_both_slices_or_of_one_worker_below_the_minimum_is_counted():
    from ray.train.v2._internal.execution.failure_handling.failure_policy import FailureDecision
    from ray.train.v2.api.exceptions import PreemptionError
    from ray.train.v2.api.preemption import PreemptionInfo

    from trainer.elastic_control import elastic_failure_policy, lost_slices

    run = "spot-both"
    policy = elastic_failure_policy(FailureConfig(**failure_config_kwargs(3, 1)), run, min_workers=2,
                                    workers_per_slice=2)
    _scheduled(run, 4)
    both = PreemptionError(preemption_info=PreemptionInfo(None, {"a": [0, 1], "c": [2, 3]}))
    assert [policy.make_decision(both) for _ in range(2)] == [FailureDecision.RETRY, FailureDecision.RAISE]
    # A rank from each slice: both slices are lost (a TPU slice goes as a whole), not "two workers of four".
    assert lost_slices([1, 2], 2) == 2 and lost_slices([2, 3], 2) == 1 and lost_slices([], 2) == 0


def test_a_worker_killed_by_a_preemption_counts_like_the_notice():
    """The other form of a preemption (default.py `_is_preemption_failure`): a WorkerGroupError in which a worker
    died because its node was preempted (RayActorError.preempted), e.g. a reclaim whose notice was not seen."""
    from ray.exceptions import ActorDiedError
    from ray.train.v2._internal.execution.failure_handling.failure_policy import FailureDecision
    from ray.train.v2.api.exceptions import WorkerGroupError

    from trainer.elastic_control import elastic_failure_policy, preempted_ranks

    died = ActorDiedError()
    died._preempted = True
    assert died.preempted
    error = WorkerGroupError("slice lost", {2: died, 3: RuntimeError("collective aborted"), 0: RuntimeError("x")})
    assert preempted_ranks(error) == [2]
    assert preempted_ranks(WorkerGroupError("bug", {0: RuntimeError("bug")})) is None
    run = "spot-died"
    policy = elastic_failure_policy(FailureConfig(**failure_config_kwargs(0, 0)), run, min_workers=2,
                                    workers_per_slice=2)
    _scheduled(run, 4)
    assert policy.make_decision(error) == FailureDecision.RETRY
    # A real failure (no preemption) is still charged to max_failures (0 here: the run ends).
    assert policy.make_decision(WorkerGroupError("bug", {0: RuntimeError("bug")})) == FailureDecision.RAISE


def test_a_worker_whose_node_shut_down_on_sigterm_without_the_drain_counts_like_the_notice():
    """Ray's SIGTERM drain is best-effort (ray/_private/node.py: a failed or refused drain RPC shuts the node down
    at once), and the worker's error then says its node "was terminated expectedly: received SIGTERM", without
    `preempted` (seen on the first notice of a local elastic life run under load). Above the minimum that is a
    Spot reclaim all the same: retried, not counted; below it, or any other death, is counted as Ray counts it."""
    from ray.exceptions import ActorDiedError
    from ray.train.v2._internal.exceptions import WorkerHealthCheckFailedError
    from ray.train.v2._internal.execution.failure_handling.failure_policy import FailureDecision
    from ray.train.v2.api.exceptions import WorkerGroupError

    from trainer.elastic_control import elastic_failure_policy, preempted_ranks

    def node_died(reason: str) -> WorkerHealthCheckFailedError:
        died = ActorDiedError()
        died.error_msg = (f"{ActorDiedError.BASE_ERROR_MSG}\n\tclass_name: RayTrainWorker\nThe actor died because "
                          f"its node has died. Node Id: 2aa5\n\tthe actor's node was {reason}")
        assert not died.preempted
        return WorkerHealthCheckFailedError("A worker health check failed.", died)

    shut_down = node_died("terminated expectedly: received SIGTERM")
    error = WorkerGroupError("slice lost", {2: shut_down, 3: shut_down})
    assert preempted_ranks(error) == [2, 3]
    # A node that died for another reason (a crash, an OOM kill) is no preemption.
    assert preempted_ranks(WorkerGroupError("crash", {2: node_died("terminated unexpectedly: SIGKILL")})) is None
    run = "spot-sigterm"
    policy = elastic_failure_policy(FailureConfig(**failure_config_kwargs(0, 0)), run, min_workers=2,
                                    workers_per_slice=2)
    _scheduled(run, 4)
    assert [policy.make_decision(error) for _ in range(5)] == [FailureDecision.RETRY] * 5


def test_the_elastic_trainer_hands_its_policies_to_ray_s_controller(monkeypatch):
    """Ray 2.60 builds DefaultFailurePolicy and its scaling policy in `fit` and passes them to
    `_initialize_and_run_controller` (ray/train/v2/api/data_parallel_trainer.py); the trainer's JaxTrainer
    replaces those two arguments there. A fixed-size run keeps Ray's JaxTrainer."""
    from ray.train.v2.api.config import RunConfig, ScalingConfig
    from ray.train.v2.jax import JaxTrainer

    from core.maxtext_args import RunSettings
    from trainer.entrypoint import scaling_kwargs, trainer_class

    elastic = plan(PlanRequest("tiny", "v6e", "2x4", slices=2, min_slices=1))
    run = RunSettings("r", "/tmp/out", 100, 10)
    seen = {}
    monkeypatch.setattr(JaxTrainer, "_initialize_and_run_controller", lambda self, **kw: seen.update(kw))
    cls = trainer_class(elastic, run)
    trainer = cls(lambda: None, scaling_config=ScalingConfig(**scaling_kwargs(elastic, 60)),
                  run_config=RunConfig(name="r", storage_path="/tmp/out",
                                       failure_config=FailureConfig(**failure_config_kwargs(3, 3))))
    trainer._initialize_and_run_controller(failure_policy="ray's", scaling_policy="ray's", callbacks=[])
    assert type(seen["failure_policy"]).__name__ == "ElasticFailurePolicy"
    assert type(seen["scaling_policy"]).__name__ == "SaveFirstScaling"
    assert seen["callbacks"] == []
    assert trainer_class(plan(PlanRequest("tiny", "v6e", "2x4", slices=2)), run) is JaxTrainer


def test_the_policy_sees_the_group_size_after_ray_sends_both_to_the_controller():
    """Ray sends the failure policy and the RunConfig callbacks to the controller actor separately, by
    cloudpickle, which copies the globals a function-local class names: each copy must still find the one slot of
    the process (seen without it in the local elastic run: Ray's budget counted the optional slice's loss)."""
    import ray.cloudpickle as cloudpickle
    from ray.train.v2._internal.execution.controller.state import SchedulingState
    from ray.train.v2._internal.execution.failure_handling.failure_policy import FailureDecision
    from ray.train.v2._internal.execution.scaling_policy import ResizeDecision
    from ray.train.v2.api.exceptions import PreemptionError
    from ray.train.v2.api.preemption import PreemptionInfo

    from trainer.elastic_control import elastic_failure_policy, group_size_callback

    run = "pickled"
    policy = cloudpickle.loads(cloudpickle.dumps(
        elastic_failure_policy(FailureConfig(**failure_config_kwargs(0, 0)), run, min_workers=2, workers_per_slice=2)))
    callback = cloudpickle.loads(cloudpickle.dumps(group_size_callback(run)))
    callback.after_controller_state_update(None, SchedulingState(ResizeDecision(num_workers=4,
                                                                                resources_per_worker={"TPU": 4})))
    optional = PreemptionError(preemption_info=PreemptionInfo(None, {"node-c": [2, 3]}))
    assert policy.make_decision(optional) == FailureDecision.RETRY
