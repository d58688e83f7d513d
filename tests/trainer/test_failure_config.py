"""Retries: interruptions are never failures, real failures are finite (Ray 2.60 FailureConfig and the trainer's
failure policy, trainer/elastic_control.py).

Source: ray/train/v2/api/config.py (ray 2.60.0), FailureConfig: `max_failures` ("Defaults to 0"; -1 infinite) and
`max_preemption_failures` ("node-preemption interruptions ... counted separately from max_failures (which is
reserved for real failures) ... Setting to -1 leads to infinite preemption retries ... Defaults to -1").
"""
from __future__ import annotations

import math

import pytest
import ray
from ray.train.v2.api.config import FailureConfig

from core.interruptions import RESTART_START_S
from core.planner import PlanRequest, plan
from core.preemption import save_estimate
from core.run_time import EXPECTED_MFU, step_seconds

from infra.config import build
from preview.stack_files import load_stack_config
from tests.conftest import REPO
from core.run_bounds import (MAX_ATTEMPTS_WITHOUT_PROGRESS, MIN_ATTEMPTS_WITHOUT_PROGRESS, NO_PROGRESS_BUDGET_S,
                             attempt_cost_seconds, attempts_without_progress)
from trainer.entrypoint import DEFAULT_MAX_FAILURES, build_parser, failure_config_kwargs, watchdog_limits
from workloads.ray import spec as ray_inputs


def entrypoint_args(command: list[str]):
    assert command[:3] == ["python", "-m", "trainer.entrypoint"]
    return build_parser().parse_args(command[3:])


def test_spot_elastic_run_bounds_attempts_by_the_plan_and_other_failures_finitely():
    """The dev stack is spot and elastic. Attempts without progress are bounded by the plan's N, which the RayJob
    passes on the command line; without --max-failures, other failures are retried DEFAULT_MAX_FAILURES (3)
    times, not forever."""
    config = build(load_stack_config("dev", REPO))
    command = ray_inputs.entrypoint(config)
    assert "--elastic" in command
    without_flag = [c for i, c in enumerate(command)
                    if c != "--max-failures" and (i == 0 or command[i - 1] != "--max-failures")]
    args = entrypoint_args(without_flag)
    _, plan_, run = prepare_quietly(without_flag[3:])
    n = attempts_without_progress(plan_, run.checkpoint_period)
    assert command[command.index("--attempts-without-progress") + 1] == str(n)
    assert watchdog_limits(args, plan_, run).attempts_without_progress == n
    failure_config = FailureConfig(**failure_config_kwargs(args.max_failures))
    assert failure_config.max_failures == DEFAULT_MAX_FAILURES == 3


def prepare_quietly(argv):
    from trainer.entrypoint import prepare

    return prepare(argv)


@pytest.mark.parametrize("given, expected", [("0", 0), ("5", 5), ("-1", -1)])
def test_max_failures_flag_is_taken_as_given_including_unlimited(given, expected):
    args = build_parser().parse_args(["--max-failures", given])
    assert failure_config_kwargs(args.max_failures) == {"max_failures": expected}


def test_max_failures_below_minus_one_is_refused(capsys):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["--max-failures", "-2"])
    assert "-1 for unlimited" in capsys.readouterr().err


@pytest.mark.parametrize("flag, value, says", [("--attempts-without-progress", "0", "use 1 or more"),
                                               ("--capacity-wait", "0", "more than 0 seconds"),
                                               ("--capacity-wait", "soon", "not a number of seconds")])
def test_bad_attempt_and_wait_bounds_are_refused_in_one_line(capsys, flag, value, says):
    with pytest.raises(SystemExit):
        build_parser().parse_args([flag, value])
    assert says in capsys.readouterr().err


def test_attempts_without_progress_is_what_an_hour_of_the_run_s_slices_pays_for():
    """N = attempts whose worst cost (a restart, a save, a checkpoint period trained again) fits an hour of the
    whole run's slices, within 3..10: a cheap restart allows more attempts, a long checkpoint period fewer."""
    big = plan(PlanRequest("llama3-70b", "v6e", "8x8", slices=2))
    cost = RESTART_START_S + save_estimate(big).seconds + 100 * step_seconds(big, EXPECTED_MFU)
    assert attempt_cost_seconds(big, 100) == pytest.approx(cost)
    expected = min(MAX_ATTEMPTS_WITHOUT_PROGRESS, max(MIN_ATTEMPTS_WITHOUT_PROGRESS,
                                                      math.floor(NO_PROGRESS_BUDGET_S / cost)))
    assert attempts_without_progress(big, 100) == expected
    assert attempts_without_progress(big, 100_000) == MIN_ATTEMPTS_WITHOUT_PROGRESS
    tiny = plan(PlanRequest("tiny", "v6e", "2x4", slices=2))
    assert NO_PROGRESS_BUDGET_S / attempt_cost_seconds(tiny, 1) > MAX_ATTEMPTS_WITHOUT_PROGRESS
    assert attempts_without_progress(tiny, 1) == MAX_ATTEMPTS_WITHOUT_PROGRESS


def _policy(**kwargs):
    from ray.train.v2._internal.execution.failure_handling.default import DefaultFailurePolicy

    return DefaultFailurePolicy(FailureConfig(**kwargs))


def test_ray_s_default_policy_charges_a_sigterm_death_to_max_failures():
    """What the trainer's policy replaces (ray/train/v2/_internal/execution/failure_handling/default.py
    `_is_preemption_failure`: only `preempted` deaths are preemptions): a worker whose node died "received
    SIGTERM" (the raylet killed before its drain deadline, src/ray/raylet/main.cc) is a real failure to Ray, so
    a fixed Spot run on plain JaxTrainer with max_failures=3 ends at the fourth such reclaim."""
    from ray.train.v2._internal.execution.failure_handling.failure_policy import FailureDecision

    policy = _policy(**failure_config_kwargs(3))
    error = _sigterm_death()
    assert [policy.make_decision(error) for _ in range(4)] == [FailureDecision.RETRY] * 3 + [FailureDecision.RAISE]


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

    policy = _policy(**failure_config_kwargs(3))
    for _ in range(50):
        assert policy.make_decision(ControllerError(WorkerGroupStartupFailedError("init"))) == FailureDecision.RETRY
        assert policy.make_decision(ControllerError(WorkerGroupStartupTimeoutError(8))) == FailureDecision.RETRY
    env_failure = ControllerError(RuntimeEnvSetupError("uv pip install failed"))
    assert policy.make_decision(env_failure) == FailureDecision.RAISE
    assert exit_code_of(env_failure) == exit_codes.IMPORT_ERROR
    assert exit_code_of(ControllerError(WorkerGroupStartupFailedError("init"))) == exit_codes.RUNTIME_FAILURE


def _node_died(reason: str):
    from ray.exceptions import ActorDiedError
    from ray.train.v2._internal.exceptions import WorkerHealthCheckFailedError

    died = ActorDiedError()
    died.error_msg = (f"{ActorDiedError.BASE_ERROR_MSG}\n\tclass_name: RayTrainWorker\nThe actor died because "
                      f"its node has died. Node Id: 2aa5\n\tthe actor's node was {reason}")
    assert not died.preempted
    return WorkerHealthCheckFailedError("A worker health check failed.", died)


def _sigterm_death():
    from ray.train.v2.api.exceptions import WorkerGroupError

    shut_down = _node_died("terminated expectedly: received SIGTERM")
    return WorkerGroupError("slice lost", {2: shut_down, 3: shut_down})


def _interruption_policy(run: str, max_failures: int, told: list):
    from trainer import elastic_control, watchdog

    original = watchdog.tell_interruption
    watchdog.tell_interruption = lambda run_name, kind: told.append((run_name, kind))
    policy = elastic_control.interruption_failure_policy(FailureConfig(**failure_config_kwargs(max_failures)), run)
    return policy, (lambda: setattr(watchdog, "tell_interruption", original))


def test_interruptions_in_every_form_are_never_failures_and_are_told_to_the_watchdog():
    """Fixed and elastic runs share the policy. A drained preemption (PreemptionError), a worker whose node was
    preempted (ActorDiedError.preempted, python/ray/exceptions.py) and a worker whose node died "received
    SIGTERM" (EXPECTED_TERMINATION, the raylet's signal handler) are retried however often, never charged to
    max_failures (0 here), and each is told to the watchdog, which counts attempts without progress. A real
    failure is still charged: with max_failures=0 the run ends."""
    from ray.exceptions import ActorDiedError
    from ray.train.v2._internal.execution.failure_handling.failure_policy import FailureDecision
    from ray.train.v2.api.exceptions import PreemptionError, WorkerGroupError
    from ray.train.v2.api.preemption import PreemptionInfo

    from trainer.elastic_control import preempted_ranks

    preempted = ActorDiedError()
    preempted._preempted = True
    drained = PreemptionError(preemption_info=PreemptionInfo(None, {"node-c": [2], "node-d": [3]}))
    killed = WorkerGroupError("slice lost", {2: preempted, 3: RuntimeError("collective aborted")})
    sigterm = _sigterm_death()
    assert preempted_ranks(killed) == [2] and preempted_ranks(sigterm) == [2, 3]
    told: list = []
    policy, restore = _interruption_policy("spot", 0, told)
    try:
        for _ in range(10):
            assert [policy.make_decision(e) for e in (drained, killed, sigterm)] == [FailureDecision.RETRY] * 3
        assert [kind for _, kind in told[:3]] == ["a preemption (Ray's drain)", "a preempted node",
                                                   'a node that died on SIGTERM without the drain (Ray: '
                                                   '"received SIGTERM")']
        assert len(told) == 30 and {run for run, _ in told} == {"spot"}
        crash = WorkerGroupError("crash", {2: _node_died("terminated unexpectedly: SIGKILL")})
        assert preempted_ranks(crash) is None
        assert policy.make_decision(crash) == FailureDecision.RAISE
        assert policy.make_decision(WorkerGroupError("bug", {0: RuntimeError("bug")})) == FailureDecision.RAISE
        assert len(told) == 30
    finally:
        restore()


def test_a_node_lost_while_the_group_starts_is_an_interruption_too():
    """Ray 2.60 ray/train/v2/_internal/execution/worker_group/worker_group.py `_start_impl`: the `ray.get` that
    launches `run_train_fn` on every worker is outside the `except RayActorError` that makes earlier deaths a
    WorkerGroupStartupFailedError, and controller/controller.py `run` wraps any other exception of the loop in a
    ControllerError, which Ray's DefaultFailurePolicy raises (default.py RETRYABLE_CONTROLLER_ERRORS). So a reclaim
    in that window ended the run (seen in the local e2e run beside a busy process). The trainer's policy retries it
    uncounted and tells the watchdog, as for a death in training; a crash in the same window still ends the run."""
    from ray.exceptions import ActorDiedError
    from ray.train.v2._internal.execution.failure_handling.failure_policy import FailureDecision
    from ray.train.v2.api.exceptions import ControllerError

    shut_down = ControllerError(_node_died("terminated expectedly: received SIGTERM").health_check_failure)
    preempted = ActorDiedError()
    preempted._preempted = True
    crash = ControllerError(_node_died("terminated unexpectedly: SIGKILL").health_check_failure)
    assert _policy(**failure_config_kwargs(3)).make_decision(shut_down) == FailureDecision.RAISE
    told: list = []
    policy, restore = _interruption_policy("spot", 0, told)
    try:
        assert policy.make_decision(shut_down) == FailureDecision.RETRY
        assert policy.make_decision(ControllerError(preempted)) == FailureDecision.RETRY
        assert [kind for _, kind in told] == [
            'a node that died on SIGTERM without the drain (Ray: "received SIGTERM") while the group started',
            "a preempted node while the group started"]
        assert policy.make_decision(crash) == FailureDecision.RAISE and len(told) == 2
    finally:
        restore()


def test_the_policy_survives_the_trip_to_the_controller():
    """Ray sends the failure policy to the controller actor by cloudpickle."""
    import ray.cloudpickle as cloudpickle
    from ray.train.v2._internal.execution.failure_handling.failure_policy import FailureDecision

    from trainer.elastic_control import interruption_failure_policy

    policy = cloudpickle.loads(cloudpickle.dumps(
        interruption_failure_policy(FailureConfig(**failure_config_kwargs(0)), "pickled")))
    assert policy.make_decision(_sigterm_death()) == FailureDecision.RETRY
    # Telling the watchdog outside a Ray job is a no-op: it must not start a local Ray cluster in this process (a
    # leftover cluster here failed the next tests that start their own).
    assert not ray.is_initialized()


def test_a_run_s_actor_is_never_reached_by_starting_ray():
    """Ray's get_actor, get_runtime_context and the like start a local cluster when called before ray.init
    (ray/_private/auto_init_hook.py): looking up or creating a run's actor outside Ray says so instead."""
    from trainer.head_actors import pinned_actor

    with pytest.raises(ValueError, match="not connected to Ray"):
        pinned_actor(object, "run-progress-x", create=False)
    with pytest.raises(RuntimeError, match="not connected to Ray"):
        pinned_actor(object, "run-progress-x", create=True)
    assert not ray.is_initialized()


class _FakeRay:
    """Just enough of the `ray` module for data_parallel_trainer.fit and _initialize_and_run_controller to run
    without a cluster: the controller actor class is built (ray.remote) and constructed with the keyword
    arguments fit gives it, which are recorded."""

    def __init__(self, seen: dict) -> None:
        import ray

        self.seen, self._raylet = seen, ray._raylet

    def put(self, obj):
        return obj

    def get(self, value, **_):
        return value

    def get_runtime_context(self):
        return type("Context", (), {"get_node_id": staticmethod(lambda: "node")})()

    def remote(self, **_options):
        seen = self.seen

        def wrap(controller_cls):
            class Handle:
                def __init__(self, **kwargs):
                    seen.update(kwargs, controller_cls=controller_cls)
                    self.run = type("M", (), {"remote": staticmethod(lambda: None)})()
                    self.get_result = type("M", (), {"remote": staticmethod(
                        lambda: type("Result", (), {"error": None})())})()

            return type("Remote", (), {"remote": staticmethod(lambda **kw: Handle(**kw))})()
        return wrap


@pytest.mark.parametrize("elastic", [True, False])
def test_fit_hands_the_trainer_s_policies_to_ray_s_controller(monkeypatch, elastic):
    """Item 11 of issue 43: through the public `fit()` (ray/train/v2/api/data_parallel_trainer.py), with only
    the `ray` calls that need a cluster faked: the controller class Ray constructs (TrainController) receives the
    trainer's failure policy, and an elastic run's scaling policy. If Ray renamed the private method the trainer
    overrides, fit would hand Ray's own DefaultFailurePolicy and this fails; check_seam says so at start-up."""
    from ray.train.v2._internal.execution.controller import TrainController
    from ray.train.v2.api import data_parallel_trainer
    from ray.train.v2.api.config import RunConfig, ScalingConfig

    from core.maxtext_args import RunSettings
    from trainer import elastic_control
    from trainer.entrypoint import scaling_kwargs, trainer_class

    chosen = plan(PlanRequest("tiny", "v6e", "2x4", slices=2, min_slices=1 if elastic else None))
    run = RunSettings("r", "/tmp/out", 100, 10)
    seen: dict = {}
    fake = _FakeRay(seen)
    monkeypatch.setattr(data_parallel_trainer, "ray", fake)
    monkeypatch.setattr("ray.train.v2._internal.util.ray", fake)
    cls = trainer_class(chosen, run)
    assert elastic_control.check_seam(cls) is None
    trainer = cls(lambda: None, scaling_config=ScalingConfig(**scaling_kwargs(chosen, 60)),
                  run_config=RunConfig(name="r", storage_path="/tmp/out",
                                       failure_config=FailureConfig(**failure_config_kwargs(3))))
    trainer.fit()
    assert seen["controller_cls"] is TrainController
    assert type(seen["failure_policy"]).__name__ == "InterruptionFailurePolicy"
    assert type(seen["scaling_policy"]).__name__ == ("SaveFirstScaling" if elastic else "FixedScalingPolicy")


def test_the_start_up_check_names_a_broken_seam_in_one_line(monkeypatch):
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

    from trainer import elastic_control

    cls = elastic_control.policy_trainer(lambda trainer: {})

    def fit_without_the_seam(self):
        return self._run_controller_somehow()

    monkeypatch.setattr(DataParallelTrainer, "fit", fit_without_the_seam)
    reason = elastic_control.check_seam(cls)
    assert reason and "no longer calls _initialize_and_run_controller" in reason and "\n" not in reason
