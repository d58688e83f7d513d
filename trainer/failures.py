"""What a retry can fix: the trainer's errors, their exit codes (core/exit_codes.py) and Ray Train's fail-fast.

Errors a retry cannot fix are raised as `NotRetryable` subclasses, named by the phase that found them: the settings
(ConfigurationError), the installed software (EnvironmentImportError) or the data (DataError). Anything else is a
runtime failure. `exit_code_of` maps any exception — also one wrapped by Ray Train on its way from a worker to the
driver — to the code the process exits with.

Under Ray Train every worker error is retried (a WorkerGroupError is always retryable in Ray 2.60,
ray/train/v2/_internal/execution/failure_handling/default.py `_is_retryable_error`), so a bad dataset path would
be paid for `max_failures` more times, each a full worker-group restart. `FailFast`, a Ray Train user callback,
sees the workers' exceptions first (`UserCallback.after_exception`, called from the controller's worker poll) and
raises on a not-retryable one; an exception raised in the control loop becomes a ControllerError, which the default
failure policy never retries (`RETRYABLE_CONTROLLER_ERRORS` holds only worker-group start-up errors), so the run
ends at once with the worker's reason.
"""
from __future__ import annotations

import re
import sys
import traceback

from core import exit_codes
from core.errors import PlanError



class NotRetryable(RuntimeError):
    """A deterministic error: the same settings, software and data fail the same way on every attempt."""

    exit_code = exit_codes.RUNTIME_FAILURE   # overridden by each subclass

    def __reduce__(self):
        # Ray pickles worker exceptions to the controller and driver: keep the message and the class.
        return (type(self), (str(self),))


class ConfigurationError(NotRetryable):
    exit_code = exit_codes.CONFIG_ERROR


class EnvironmentImportError(NotRetryable):
    exit_code = exit_codes.IMPORT_ERROR


class DataError(NotRetryable):
    exit_code = exit_codes.DATA_ERROR


class OutOfHbmError(NotRetryable):
    exit_code = exit_codes.OUT_OF_HBM


# XLA's out-of-HBM, as jax raises it (jax.errors.JaxRuntimeError, jaxlib's XlaRuntimeError before): the status
# RESOURCE_EXHAUSTED and the device's memory named in the message. The forms:
# - compiling (libtpu 0.0.50.1, the workers'; what `python -m preview.compile` reports, core/xla_calibration.json):
#   "RESOURCE_EXHAUSTED: E1000: CompileTimeHbmOom: Ran out of memory on HBM, the total memory required for HLO
#   temporaries (32.51G) exceeds available HBM (31.24G)";
# - compiling (older libtpu): "RESOURCE_EXHAUSTED: XLA:TPU compile permanent error. Ran out of memory in memory
#   space hbm. Used 21.95G of 15.48G hbm." (LargeWorldModel/LWM#60);
# - running: "RESOURCE_EXHAUSTED: Error allocating device buffer: Attempting to allocate 196.00M. That was not
#   possible. There are 134.44M free.; (1x0x0_HBM0)" (pytorch/xla#8020, huggingface/diffusers#8358), or loading
#   the program: "Attempting to reserve 6.14G at the bottom of memory" (AI-Hypercomputer/tpu-recipes#151).
# A RESOURCE_EXHAUSTED about anything else (host memory, a quota, gRPC) stays a runtime failure.
_OUT_OF_HBM = re.compile(r"RESOURCE_EXHAUSTED[^\n]*?(hbm|device buffer|at the bottom of memory)", re.I)


def is_out_of_hbm(exc: BaseException) -> bool:
    """XLA ran out of the TPU's HBM, here or in anything `exc` wraps."""
    return any(_OUT_OF_HBM.search(str(item)) for item in errors_in(exc))
class NoProgressError(NotRetryable):
    """The run holds its slices without training (trainer/watchdog.py)."""
    exit_code = exit_codes.NO_PROGRESS


def _is_runtime_env_failure(exc: BaseException) -> bool:
    # Ray raises RuntimeEnvSetupError (ray.exceptions) when a worker's runtime environment (the locked packages
    # the RayJob installs) cannot be set up; Ray Train 2.60 ends the run on it at once (a ControllerError outside
    # RETRYABLE_CONTROLLER_ERRORS). The environment is at fault, as for an import error.
    return type(exc).__name__ == "RuntimeEnvSetupError" and type(exc).__module__ == "ray.exceptions"


def errors_in(exc: BaseException):
    """The exception, what Ray Train and Ray wrapped inside it, and its cause/context chain, each visited once
    (Ray 2.60: ray/train/v2/api/exceptions.py, ray/train/v2/_internal/exceptions.py, ray/exceptions.py). The
    trainer's exit codes and the smoke test's verdicts read failures through this one walk."""
    seen: set[int] = set()
    stack: list[object] = [exc]
    while stack:
        current = stack.pop()
        if not isinstance(current, BaseException) or id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        stack += [current.__cause__, current.__context__]
        # ray.train.v2.api.exceptions: ControllerError.controller_failure, WorkerGroupError.worker_failures;
        # ray.exceptions.RayTaskError keeps the original as .cause.
        stack.append(getattr(current, "controller_failure", None))
        # ray.train.v2._internal.exceptions.UserExceptionWithTraceback (what a worker's error reaches the
        # controller and UserCallback.after_exception as) keeps the worker's exception as ._base_exc.
        stack.append(getattr(current, "_base_exc", None))
        failures = getattr(current, "worker_failures", None)
        if isinstance(failures, dict):
            stack += list(failures.values())
        cause = getattr(current, "cause", None)
        if isinstance(cause, BaseException):
            stack.append(cause)


def exit_code_of(exc: BaseException) -> int:
    """The exit code for `exc`: the most specific not-retryable reason found anywhere in it, else a runtime
    failure. Import errors and a worker runtime environment that cannot be set up count as the environment's fault
    (a module missing from the image or the lock, an install that fails), as do
    trainer.maxtext_runtime's MaxText version and model checks (EnvironmentImportError subclasses); XLA's
    out-of-HBM (RESOURCE_EXHAUSTED on the TPU's memory, at compile or run time) is OUT_OF_HBM."""
    codes = []
    for item in errors_in(exc):
        code = getattr(item, "exit_code", None)
        if isinstance(item, NotRetryable) and code in exit_codes.NOT_RETRYABLE:
            codes.append(code)
        elif isinstance(item, ImportError) or _is_runtime_env_failure(item):
            codes.append(exit_codes.IMPORT_ERROR)
        elif isinstance(item, PlanError):
            codes.append(exit_codes.CONFIG_ERROR)
        elif _OUT_OF_HBM.search(str(item)):
            codes.append(exit_codes.OUT_OF_HBM)
    return min(codes) if codes else exit_codes.RUNTIME_FAILURE


def fail_fast_callback(out_of_hbm_advice=None):
    """A Ray Train UserCallback that ends the run on the first not-retryable worker error (module docstring).
    `out_of_hbm_advice`: a callable giving the line that names the nearest configuration that fits (core/advice.py
    out_of_hbm), added to the reason when XLA ran out of HBM."""
    from ray.train import UserCallback

    class FailFast(UserCallback):
        def after_exception(self, run_context, worker_exceptions):
            for rank, error in sorted(worker_exceptions.items()):
                code = exit_code_of(error)
                if code in exit_codes.NOT_RETRYABLE:
                    reason = f"worker {rank}: {type(error).__name__}: {_first_line(error, code)}"
                    if code == exit_codes.OUT_OF_HBM and out_of_hbm_advice is not None:
                        reason += f"; {out_of_hbm_advice()}"
                    raise _fatal(code, reason)

    return FailFast()


def _first_line(error: BaseException, code: int) -> str:
    """The worker's error; for an out-of-HBM, XLA's own line (the worker's traceback and XLA's memory report
    around it run to hundreds of lines)."""
    text = str(error)
    if code == exit_codes.OUT_OF_HBM:
        for item in errors_in(error):
            match = _OUT_OF_HBM.search(str(item))
            if match:
                return str(item)[match.start():].splitlines()[0]
    return text


def _fatal(code: int, message: str) -> NotRetryable:
    for cls in (ConfigurationError, EnvironmentImportError, DataError, OutOfHbmError, NoProgressError):
        if cls.exit_code == code:
            return cls(message)
    raise ValueError(f"exit code {code} is not a not-retryable one")


def report(program: str, error: BaseException) -> int:
    """The exit code of a failure that ended `program` (exit_code_of), after its traceback and one line naming the
    code, for the pod's log."""
    code = exit_code_of(error)
    traceback.print_exception(error)
    print(f"{program}: {exit_codes.describe(code)}: {type(error).__name__}: {error}", file=sys.stderr, flush=True)
    return code
