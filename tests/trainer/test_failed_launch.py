"""A worker group whose training launch loses a worker leaves nothing reserved: the next group starts
(trainer/failed_launch.py).

Played on a real single-node Ray 2.60 cluster with Ray Train's real controller, through `fit()`: the node has
two "slot"s and each group asks for two workers of one slot each, so the next group fits only if the failed
group's placement group was removed. A worker-group callback kills one worker at the end of the first group's
start, just before Ray launches the training function (ray/train/v2/_internal/execution/worker_group/
worker_group.py `_start_impl`: the `ray.get` of `run_train_fn` after the group's state is built, outside the
`except RayActorError`), as a host reclaimed while the group starts does. Without the clean-up Ray keeps the
failed group's placement group (`_start` skips its clean-up once `has_started()`, and the controller never holds
the group) and the second start times out after Ray's own 60 s (seen: TrainingFailedError with
WorkerGroupStartupTimeoutError "waiting for 2 workers"). Nothing here waits on the wall clock beyond Ray's own
start-up timeout.
"""
from __future__ import annotations

from pathlib import Path

import pytest

ray = pytest.importorskip("ray")
pytest.importorskip("ray.train")


@pytest.fixture(scope="module")
def two_slot_cluster():
    # address="local": a cluster of its own, never the local runs the suite starts in the background.
    ray.init(address="local", num_cpus=2, resources={"slot": 2}, include_dashboard=False, logging_level="ERROR")
    yield
    ray.shutdown()


def _kill_one_worker_at_the_first_launch():
    from ray.exceptions import RayActorError
    from ray.train.v2._internal.execution.callback import WorkerGroupCallback

    class KillAtFirstLaunch(WorkerGroupCallback):
        def __init__(self) -> None:
            self.killed = False

        def after_worker_group_start(self, worker_group) -> None:
            if self.killed:
                return
            self.killed = True
            victim = worker_group.get_workers()[-1].actor
            ray.kill(victim, no_restart=True)
            try:    # dead before the launch reaches it: the launch's ray.get then raises ActorDiedError
                ray.get(victim.__ray_ready__.remote(), timeout=120)
            except RayActorError:
                return
            raise AssertionError("the killed worker still answers")

    return KillAtFirstLaunch()


def _retry_once_policy(failure_config, record: Path):
    """Ray's default policy, except that the first error is retried and written to `record` (the controller runs
    in its own process)."""
    from ray.train.v2._internal.execution.failure_handling import DefaultFailurePolicy, FailureDecision

    class RetryOnce(DefaultFailurePolicy):
        def make_decision(self, training_failed_error):
            cause = getattr(training_failed_error, "controller_failure", training_failed_error)
            with record.open("a") as out:
                out.write(f"{type(training_failed_error).__name__}:{type(cause).__name__}\n")
            if len(record.read_text().splitlines()) == 1:
                return FailureDecision.RETRY
            return FailureDecision.RAISE

    return RetryOnce(failure_config)


def _fit(tmp_path: Path, callbacks: list):
    from ray.train.v2.api.config import FailureConfig, RunConfig, ScalingConfig
    from ray.train.v2.api.data_parallel_trainer import DataParallelTrainer

    record = tmp_path / "decisions"

    class Trainer(DataParallelTrainer):
        def _initialize_and_run_controller(self, **kwargs):
            kwargs["failure_policy"] = _retry_once_policy(self.run_config.failure_config, record)
            return super()._initialize_and_run_controller(**kwargs)

    trainer = Trainer(lambda: None, scaling_config=ScalingConfig(num_workers=2, resources_per_worker={"slot": 1}),
                      run_config=RunConfig(name="failed-launch", storage_path=str(tmp_path / "storage"),
                                           failure_config=FailureConfig(max_failures=0), callbacks=callbacks))
    return trainer.fit(), record


def test_the_group_after_a_failed_launch_gets_the_failed_group_s_resources(two_slot_cluster, tmp_path):
    from trainer.failed_launch import cleanup_callback

    result, record = _fit(tmp_path, [cleanup_callback(), _kill_one_worker_at_the_first_launch()])
    # The one error the controller met was the launch's: ActorDiedError out of the bare ray.get, wrapped in a
    # ControllerError by the control loop (not a WorkerGroupStartupFailedError: the window the clean-up is for).
    assert record.read_text().splitlines() == ["ControllerError:ActorDiedError"]
    assert result.error is None
