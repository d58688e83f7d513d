"""Exit codes: what a retry can fix and what it cannot (core/exit_codes.py, trainer/failures.py).

Sources:
- Ray 2.60 retries every worker-group error (ray/train/v2/_internal/execution/failure_handling/default.py
  `_is_retryable_error`: WorkerGroupError -> True) and never a ControllerError that is not a start-up error
  (`RETRYABLE_CONTROLLER_ERRORS`); an exception raised in the control loop is wrapped in ControllerError
  (ray/train/v2/_internal/execution/controller/controller.py `_run_control_loop_iteration`), and
  `UserCallback.after_exception` runs in that loop (ray/train/v2/_internal/callbacks/user_callback.py).
- The shell reports a process killed by signal N as 128+N (SIGTERM 143, SIGKILL 137).
"""
from __future__ import annotations

import pickle
import signal

import pytest

from core import exit_codes
from core.errors import PlanError
from trainer import failures
from trainer.maxtext_runtime import MaxTextVersionError, ModelMismatchError


def test_codes_are_distinct_and_clear_of_the_shells():
    codes = [exit_codes.OK, exit_codes.RUNTIME_FAILURE, exit_codes.CONFIG_ERROR, exit_codes.IMPORT_ERROR,
             exit_codes.DATA_ERROR, exit_codes.SMOKE_FAILED, exit_codes.PREEMPTED]
    assert len(set(codes)) == len(codes)
    # Ours stay below the shell's 126/127/128+N, except PREEMPTED, which is SIGTERM's on purpose.
    assert all(c < 126 for c in codes if c != exit_codes.PREEMPTED)
    assert exit_codes.PREEMPTED == 128 + signal.SIGTERM and exit_codes.KILLED == 128 + signal.SIGKILL
    assert exit_codes.NOT_RETRYABLE.isdisjoint(exit_codes.RETRYABLE)
    assert exit_codes.OK not in exit_codes.RETRYABLE | exit_codes.NOT_RETRYABLE


@pytest.mark.parametrize("error, code", [
    (failures.ConfigurationError("x"), exit_codes.CONFIG_ERROR),
    (PlanError("steps=0"), exit_codes.CONFIG_ERROR),
    (failures.DataError("no files"), exit_codes.DATA_ERROR),
    (ModuleNotFoundError("No module named 'tensorflow'", name="tensorflow"), exit_codes.IMPORT_ERROR),
    (MaxTextVersionError("0.2.1"), exit_codes.IMPORT_ERROR),
    (ModelMismatchError("1B, not 8B"), exit_codes.IMPORT_ERROR),
    (RuntimeError("collective timed out"), exit_codes.RUNTIME_FAILURE),
    (FileNotFoundError("gs://b/x"), exit_codes.RUNTIME_FAILURE),
])
def test_exit_code_of(error, code):
    assert failures.exit_code_of(error) == code


def test_reason_is_found_inside_rays_wrappers():
    """fit() raises Ray's TrainingFailedError subclasses; the worker's own error is inside them."""
    from ray.train.v2.api.exceptions import ControllerError, WorkerGroupError

    worker = failures.DataError("dataset_type=grain: no files match")
    group = WorkerGroupError("worker 1 failed", {0: RuntimeError("peer died"), 1: worker})
    assert failures.exit_code_of(group) == exit_codes.DATA_ERROR
    assert failures.exit_code_of(ControllerError(failures.ConfigurationError("bad"))) == exit_codes.CONFIG_ERROR
    chained = RuntimeError("wrapper")
    chained.__cause__ = ImportError("no grain")
    assert failures.exit_code_of(chained) == exit_codes.IMPORT_ERROR


def test_not_retryable_errors_survive_pickling():
    """Ray pickles worker exceptions to the controller: the class (and so the code) must survive."""
    for cls in (failures.ConfigurationError, failures.EnvironmentImportError, failures.DataError):
        again = pickle.loads(pickle.dumps(cls("reason")))
        assert type(again) is cls and str(again) == "reason" and again.exit_code in exit_codes.NOT_RETRYABLE


def test_fail_fast_callback_ends_the_run_on_a_deterministic_worker_error():
    callback = failures.fail_fast_callback()
    from ray.train import UserCallback

    assert isinstance(callback, UserCallback)
    callback.after_exception(None, {0: RuntimeError("host lost")})          # retryable: Ray's budget decides
    with pytest.raises(failures.DataError, match="worker 3"):
        callback.after_exception(None, {0: RuntimeError("peer"), 3: failures.DataError("no files")})


def test_a_callback_error_is_not_retried_by_ray():
    """What FailFast relies on: Ray 2.60's default policy raises (does not retry) on a ControllerError that wraps
    a callback's exception, while it retries a worker-group error."""
    from ray.train.v2._internal.execution.failure_handling.default import DefaultFailurePolicy
    from ray.train.v2._internal.execution.failure_handling.failure_policy import FailureDecision
    from ray.train.v2.api.config import FailureConfig
    from ray.train.v2.api.exceptions import ControllerError, WorkerGroupError

    policy = DefaultFailurePolicy(FailureConfig(max_failures=3))
    assert policy.make_decision(WorkerGroupError("x", {0: failures.DataError("d")})) == FailureDecision.RETRY
    assert policy.make_decision(ControllerError(failures.DataError("d"))) == FailureDecision.RAISE
