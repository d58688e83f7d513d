"""The Ray smoke test tells infrastructure errors from a failed smoke test (trainer/smoke.py `ray_failure_code`).

The errors are Ray 2.60's own classes, wrapped as Ray Train wraps them on their way to `trainer.fit()`:
- ray/train/v2/api/exceptions.py: ControllerError(controller_failure) for the controller (worker group start-up,
  placement), WorkerGroupError(message, worker_failures) for the workers' errors;
- ray/train/v2/_internal/execution/worker_group/worker_group.py: `WorkerGroupStartupFailedError(...) from
  actor_error` when a worker actor fails to start, `WorkerGroupStartupTimeoutError` when the slices cannot be
  reserved in time, `InsufficientClusterResourcesError` when the cluster can never hold the group;
- ray/_private/serialization.py: an actor whose runtime env fails to install raises RuntimeEnvSetupError
  (ErrorType RUNTIME_ENV_SETUP_FAILED); a dead node's actor raises ActorDiedError.
"""
from __future__ import annotations

import pytest

from core import exit_codes
from trainer import smoke
from trainer.failures import DataError
from trainer.smoke import SmokeFailure


def ray_errors():
    import ray.exceptions as core
    from ray.train.v2._internal import exceptions as internal
    from ray.train.v2.api.exceptions import ControllerError, WorkerGroupError
    return core, internal, ControllerError, WorkerGroupError


def runtime_env_failure_at_start():
    core, internal, ControllerError, _ = ray_errors()
    try:
        try:
            raise core.RuntimeEnvSetupError("uv pip install failed: No solution found when resolving dependencies")
        except core.RuntimeEnvSetupError as setup:
            raise internal.WorkerGroupStartupFailedError("At least one of the worker actors failed") from setup
    except internal.WorkerGroupStartupFailedError as startup:
        return ControllerError(startup)


def worker_group(failures):
    _, _, _, WorkerGroupError = ray_errors()
    return WorkerGroupError("Training failed due to worker errors", failures)


def infrastructure_cases():
    core, internal, ControllerError, _ = ray_errors()
    return {
        "slices could not be reserved in time": ControllerError(internal.WorkerGroupStartupTimeoutError(8)),
        "the cluster can never hold the group": ControllerError(
            internal.InsufficientClusterResourcesError("requires {\"TPU\": 32}")),
        "the actor could not be scheduled": worker_group({0: core.ActorUnschedulableError("node is dead")}),
        "a worker's node died": worker_group({0: core.ActorDiedError(), 1: RuntimeError("collective aborted")}),
    }


@pytest.mark.parametrize("case", list(infrastructure_cases()))
def test_infrastructure_errors_are_reported_as_infrastructure_not_as_a_failed_smoke_test(case, capsys):
    error = infrastructure_cases()[case]
    assert smoke.report_ray_failure(error) == exit_codes.RUNTIME_FAILURE
    assert exit_codes.RUNTIME_FAILURE in exit_codes.RETRYABLE
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("SMOKE NOT RUN (infrastructure): ") and "SMOKE FAILED" not in line


def runtime_env_cases():
    core, _, ControllerError, _ = ray_errors()
    return {
        "runtime env install failed while starting the workers": runtime_env_failure_at_start(),
        "runtime env install failed, raised by the controller": ControllerError(
            core.RuntimeEnvSetupError("pip install failed")),
    }


@pytest.mark.parametrize("case", list(runtime_env_cases()))
def test_a_runtime_env_that_does_not_install_is_the_environments_fault_as_in_training(case, capsys):
    """Not a failed smoke test (5) either: the same exit as the trainer's (trainer/failures.py exit_code_of)."""
    assert smoke.report_ray_failure(runtime_env_cases()[case]) == exit_codes.IMPORT_ERROR
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("SMOKE NOT RUN (import/environment error): RuntimeEnvSetupError: ")


def test_a_check_that_failed_stays_a_failed_smoke_test_even_when_a_node_died_too(capsys):
    core, *_ = ray_errors()
    error = worker_group({0: SmokeFailure("jax.device_count()=16 but ... = 32"), 1: core.ActorDiedError()})
    assert smoke.report_ray_failure(error) == exit_codes.SMOKE_FAILED
    assert capsys.readouterr().err.startswith("SMOKE FAILED: ")


def test_an_error_in_the_collective_itself_is_a_failed_smoke_test():
    # Not a known infrastructure error: the check ran and broke (a DCN path that fails the all-reduce).
    error = worker_group({0: RuntimeError("INTERNAL: Mosaic failed: all-reduce across slices timed out")})
    assert smoke.ray_failure_code(error) == exit_codes.SMOKE_FAILED


@pytest.mark.parametrize("failure, code", [
    (ImportError("No module named 'jax'"), exit_codes.IMPORT_ERROR),
    (DataError("no files match gs://bucket/data/*.parquet"), exit_codes.DATA_ERROR),
])
def test_not_retryable_errors_in_a_worker_keep_their_own_code(failure, code):
    assert smoke.ray_failure_code(worker_group({0: failure})) == code


def test_run_ray_maps_what_fit_raises(monkeypatch, capsys, tmp_path):
    """The whole driver path: `trainer.fit()` raising Ray Train's wrapped runtime-env failure exits 3."""
    import ray
    from ray.train.v2 import jax as ray_jax

    class FailingTrainer:
        def __init__(self, **kwargs):
            self.kwargs = kwargs

        def fit(self):
            raise runtime_env_failure_at_start()

    monkeypatch.setattr(ray, "init", lambda *args, **kwargs: None)
    monkeypatch.setattr(ray_jax, "JaxTrainer", FailingTrainer)
    code = smoke.main(["--ray", "--model", "llama3-8b", "--generation", "v6e", "--topology", "4x4", "--slices", "2",
                       "--storage-path", str(tmp_path)])
    assert code == exit_codes.IMPORT_ERROR
    err = capsys.readouterr().err
    assert "SMOKE NOT RUN (import/environment error): RuntimeEnvSetupError: Failed to set up runtime environment." in err


def test_the_smoke_verdict_and_the_exit_code_read_the_same_walk_of_wrapped_errors():
    """One walk over what Ray wrapped (trainer/failures.py errors_in): the smoke test's verdict and the trainer's
    exit code cannot disagree about what an error holds. A Ray wrapper attribute that is not an exception (the
    controller_failure Ray sets to None, a cause that is a string) is stepped over."""
    import inspect

    from trainer import failures

    assert "__context__" not in inspect.getsource(smoke)
    setup = runtime_env_failure_at_start()
    walked = list(failures.errors_in(setup))
    assert [type(e).__name__ for e in walked][:1] == ["ControllerError"]
    assert "RuntimeEnvSetupError" in {type(e).__name__ for e in walked}
    odd = RuntimeError("wrapped")
    odd.cause = "not an exception"
    odd.controller_failure = None
    assert list(failures.errors_in(odd)) == [odd]
