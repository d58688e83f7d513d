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


# XLA's out-of-HBM as the workers' libtpu 0.0.50.1 words it at compile time (a compile of llama3-8b on one v6e-64 at
# per-device batch 13, core/xla_calibration.json row llama3-8b-1xv6e-64-b13), an older libtpu's compile-time form
# (LargeWorldModel/LWM#60) and the run-time allocation failure (pytorch/xla#8020).
XLA_OOM_MESSAGES = (
    "RESOURCE_EXHAUSTED: E1000: CompileTimeHbmOom: Ran out of memory on HBM, the total memory required for HLO "
    "temporaries (32.51G) exceeds available HBM (31.24G). HLO module: jit_train_step.",
    "RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory space hbm. Used 21.95G of "
    "15.48G hbm.\n Exceeded hbm capacity by 6.47G.",
    "RESOURCE_EXHAUSTED: Error allocating device buffer: Attempting to allocate 196.00M. That was not possible. "
    "There are 134.44M free.; (1x0x0_HBM0): while running replica 0 and partition 0 of a replicated computation",
)


def _jax_error(message: str) -> BaseException:
    import jax

    return jax.errors.JaxRuntimeError(message)


@pytest.mark.parametrize("message", XLA_OOM_MESSAGES)
def test_xla_out_of_hbm_is_not_retryable(message):
    """An out-of-HBM compiles the same step to the same bytes on every attempt: it ends the run (the JobSet's
    podFailurePolicy fails the Job on a code in NOT_RETRYABLE, workloads/failure_policy.py; FailFast on Ray)."""
    assert exit_codes.OUT_OF_HBM in exit_codes.NOT_RETRYABLE
    assert failures.exit_code_of(_jax_error(message)) == exit_codes.OUT_OF_HBM
    wrapped = RuntimeError("train step failed")
    wrapped.__cause__ = _jax_error(message)
    assert failures.exit_code_of(wrapped) == exit_codes.OUT_OF_HBM


@pytest.mark.parametrize("message", [
    "RESOURCE_EXHAUSTED: failed to allocate 12.0G of pinned host memory",
    "RESOURCE_EXHAUSTED: Quota exceeded for quota metric 'Read requests'",
    "collective timed out; the hbm of the peer is fine",
])
def test_other_resource_exhaustion_stays_a_runtime_failure(message):
    assert failures.exit_code_of(_jax_error(message)) == exit_codes.RUNTIME_FAILURE


def test_out_of_hbm_is_found_as_ray_train_hands_it_to_the_callback_and_the_driver():
    """Ray Train 2.60 wraps a worker's error in UserExceptionWithTraceback (ray/train/v2/_internal/util.py
    construct_user_exception_with_traceback), whose str() is the worker's traceback, before it reaches
    UserCallback.after_exception (ray/train/v2/_internal/callbacks/user_callback.py) and WorkerGroupError."""
    from ray.train.v2._internal.exceptions import UserExceptionWithTraceback
    from ray.train.v2.api.exceptions import WorkerGroupError

    traceback_text = ("Traceback (most recent call last):\n  File \"train.py\", line 1, in <module>\n"
                      f"jax.errors.JaxRuntimeError: {XLA_OOM_MESSAGES[0]}\n")
    worker = UserExceptionWithTraceback(_jax_error(XLA_OOM_MESSAGES[0]), traceback_text)
    assert failures.exit_code_of(worker) == exit_codes.OUT_OF_HBM
    assert failures.exit_code_of(WorkerGroupError("worker 0 failed", {0: worker})) == exit_codes.OUT_OF_HBM
    # Also when only the traceback text survived (the base exception did not unpickle on the driver).
    assert failures.exit_code_of(UserExceptionWithTraceback(RuntimeError("?"), traceback_text)) == \
        exit_codes.OUT_OF_HBM

    callback = failures.fail_fast_callback(lambda: "nearest that fits: --per-device-batch-size 2")
    with pytest.raises(failures.OutOfHbmError) as raised:
        callback.after_exception(None, {0: RuntimeError("peer"), 1: worker})
    text = str(raised.value)
    assert text.startswith("worker 1: UserExceptionWithTraceback: RESOURCE_EXHAUSTED: E1000: CompileTimeHbmOom")
    assert "most recent call last" not in text and text.endswith("nearest that fits: --per-device-batch-size 2")
    assert raised.value.exit_code == exit_codes.OUT_OF_HBM
    again = pickle.loads(pickle.dumps(raised.value))
    assert type(again) is failures.OutOfHbmError and str(again) == text


def test_the_entrypoint_ends_an_out_of_hbm_run_once_naming_a_fit(capsys):
    """What the RayJob's driver prints and exits with when XLA ran out of HBM: the code the failure policies know,
    and the nearest configuration the planner accepts with fewer bytes per device."""
    from core.planner import PlanRequest, plan
    from trainer import entrypoint

    chosen = plan(PlanRequest("llama3-8b", "v6e", "4x4", slices=2))
    assert entrypoint._failed(_jax_error(XLA_OOM_MESSAGES[0]), chosen) == exit_codes.OUT_OF_HBM
    err = capsys.readouterr().err
    assert "out of TPU HBM" in err and "nearest that fits: " in err and "--per-device-batch-size 2" in err
    assert "python -m preview --stack NAME --compile" in err


def test_the_jobset_trainer_names_a_fit_from_its_own_argv_and_slice():
    """trainer.jobset_run knows the plan only as MaxText keys; the slice comes from GKE's TPU environment
    (TPU_ACCELERATOR_TYPE, TPU_TOPOLOGY; trainer/local/cluster.py sets the same on its fake hosts)."""
    from core.planner import PlanRequest, plan
    from trainer import jobset_run

    chosen = plan(PlanRequest("llama3-8b", "v6e", "4x4", slices=2))
    argv = [f"{key}={value}" for key, value in chosen.overrides().items()]
    advice = jobset_run.out_of_hbm_advice(argv, {"TPU_ACCELERATOR_TYPE": "v6e-16", "TPU_TOPOLOGY": "4x4"})
    assert "nearest that fits: " in advice and "--per-device-batch-size 2" in advice
    bare = jobset_run.out_of_hbm_advice(argv, {})
    assert "perDeviceBatchSize (now 3)" in bare and "--compile" in bare


def test_the_jobset_and_pathways_failure_policies_end_an_out_of_hbm_run():
    """The child Jobs' podFailurePolicy (workloads/failure_policy.py, derived from NOT_RETRYABLE) fails the Job on
    exit 6, and the JobSet rule matching that Job's message fails the JobSet instead of restarting it
    (kubernetes-sigs/jobset pkg/controllers/failure_policy.go: the first matching rule's action)."""
    from workloads.failure_policy import pod_failure_policy

    rules = pod_failure_policy("trainer")["rules"]
    (codes,) = [rule["onExitCodes"] for rule in rules if "onExitCodes" in rule]
    assert codes["operator"] == "In" and exit_codes.OUT_OF_HBM in codes["values"]
