"""MaxText pre-training in a JobSet pod (plain JAX processes, no Ray), exiting with the trainer's exit codes.

    python -m trainer.jobset_run <maxtext base.yml> key=value ...     (MaxText's own pre_train argv)

MaxText's `train.main` on its own exits 0 when it stops at a preemption notice (train_loop catches StopTraining and
returns): the pod would count as a completed index and the JobSet would finish "successfully" mid-run. And every
error exits 1, so a failure policy cannot tell a bad setting from a lost host. Here the same run ends with
core/exit_codes.py: PREEMPTED after saving at the notice (JAX's preemption sync point on the kubelet's SIGTERM,
MaxText's enable_autocheckpoint; trainer/notice.py), CONFIG_ERROR / IMPORT_ERROR / DATA_ERROR / OUT_OF_HBM for
what a restart cannot fix (trainer/failures.py; out of HBM with the nearest batch that fits), RUNTIME_FAILURE for
the rest.
"""
from __future__ import annotations

import os
import signal
import sys

from core import exit_codes


def _leave_on_term(signum: int, frame: object) -> None:
    """A TERM before JAX listens for it: nothing trained yet, so leave at once as a preempted pod."""
    print("trainer.jobset_run: SIGTERM before training started; exiting "
          f"{exit_codes.PREEMPTED} (nothing to save)", file=sys.stderr, flush=True)
    os._exit(exit_codes.PREEMPTED)


if __name__ == "__main__":
    # The pod's bash (PID 1) forwards TERM to this Python (workloads/pid_one.py); run as PID 1 itself, the kernel
    # drops a SIGTERM sent from outside its namespace unless PID 1 handles it (pid_namespaces(7)). JAX installs
    # its own handler only inside jax.distributed.initialize (tsl's SigtermNotifier, which replaces this one
    # with std::signal; from then on a TERM is MaxText's preemption notice and a save). Before that come the
    # imports of MaxText, JAX and the data pipeline, and the wait for every host to join: a TERM there (a Spot
    # notice, an eviction) must end the pod at once with PREEMPTED and a line. So the handler comes first, before
    # any heavy import; it exits with os._exit, since nothing was trained and a thread an import started must
    # not delay the exit.
    signal.signal(signal.SIGTERM, _leave_on_term)

from core.cli_errors import fit_columns  # noqa: E402 - after the TERM handler, on purpose
from trainer import deferred_imports, failures, jobset_attempts, maxtext_runtime, notice  # noqa: E402


def main(argv: list[str]) -> int:
    if len(argv) < 1:
        print("trainer.jobset_run: usage: python -m trainer.jobset_run <base.yml> key=value ...", file=sys.stderr)
        return exit_codes.CONFIG_ERROR
    overrides = argv[1:]
    deferred_imports.install()
    try:
        maxtext_runtime.require_version()
        maxtext_runtime.pin_assets_root()
        notice.require_autocheckpoint(overrides)
    except maxtext_runtime.MaxTextVersionError as err:
        print(f"trainer.jobset_run: {err}", file=sys.stderr)
        return exit_codes.IMPORT_ERROR
    except ValueError as err:
        print(f"trainer.jobset_run: {err}", file=sys.stderr)
        return exit_codes.CONFIG_ERROR
    try:
        attempt = jobset_attempts.pod_attempt(dict(os.environ), overrides)
    except jobset_attempts.NotCounted as err:
        print(fit_columns(f"trainer.jobset_run: {err}"), file=sys.stderr, flush=True)
        attempt = None
    except ValueError as err:
        print(fit_columns(f"trainer.jobset_run: {err}"), file=sys.stderr)
        return exit_codes.CONFIG_ERROR
    if attempt is not None and (ended := start_attempt(attempt)):
        print(fit_columns(jobset_attempts.exit_line(ended)), file=sys.stderr, flush=True)
        return exit_codes.INTERRUPTED_WITHOUT_PROGRESS
    # MaxText logs through absl at INFO (steps, saves, restores); its own __main__ gets that level from absl's
    # app.run, which this program does not use.
    from absl import logging as absl_logging

    absl_logging.set_verbosity(absl_logging.INFO)
    # JAX's notice only: no Ray here. `at` asks the poll once per step; nothing to ask.
    watch = notice.NoticeWatch(lambda step: None,
                               lambda step, reason: print(f"trainer: notice at step {step}: {reason}", flush=True))
    try:
        notice.install(watch)
        maxtext_runtime.run_pre_train(["maxtext.trainers.pre_train.train", *argv])
    except Exception as err:  # noqa: BLE001 - every failure leaves with a code the failure policy understands
        code = failures.report("trainer.jobset_run", err)
        if code == exit_codes.OUT_OF_HBM:
            print(f"trainer.jobset_run: {out_of_hbm_advice(overrides)}", file=sys.stderr, flush=True)
        note_ending(attempt, f"host 0 exit {code} ({exit_codes.describe(code)})")
        return code
    if watch.stopped:
        note_ending(attempt, "a notice (saved)")
        print(f"trainer.jobset_run: saved at step {watch.notice_step} on notice; exiting "
              f"{exit_codes.PREEMPTED} so the pod is restarted, not counted as done", flush=True)
        return exit_codes.PREEMPTED
    return exit_codes.OK


def start_attempt(attempt: jobset_attempts.PodAttempt) -> str | None:
    """Host 0's count of attempts without progress (trainer/jobset_attempts.py): the reason the run must end, or
    None. A record that cannot be read or written is said in one line and the run trains: a missed count is
    cheaper than a run ended by a transient storage error (which would fail MaxText's own saves too)."""
    try:
        return jobset_attempts.start_attempt(
            jobset_attempts.record_store(attempt.run_directory),
            lambda: jobset_attempts.newest_saved_step(attempt.checkpoint_dir),
            attempt.jobset_uid, attempt.attempt, attempt.limit)
    except Exception as err:  # noqa: BLE001 - storage, auth or a corrupt record: say it, keep training
        print(fit_columns(f"trainer.jobset_run: attempts without progress not counted this attempt "
                          f"({type(err).__name__}: {err})"), file=sys.stderr, flush=True)
        return None


def note_ending(attempt: jobset_attempts.PodAttempt | None, ending: str) -> None:
    """How host 0 saw its attempt end, for the line that ends a streak (best effort, like start_attempt)."""
    if attempt is None:
        return
    try:
        jobset_attempts.note_ending(jobset_attempts.record_store(attempt.run_directory), attempt.jobset_uid,
                                    attempt.attempt, ending)
    except Exception as err:  # noqa: BLE001
        print(f"trainer.jobset_run: ending not recorded ({type(err).__name__})", file=sys.stderr, flush=True)


def out_of_hbm_advice(overrides: list[str], env=os.environ) -> str:
    """The nearest configuration that fits, from the plan this argv runs on this pod's slice (GKE's TPU
    environment names it: TPU_ACCELERATOR_TYPE, e.g. v6e-16, and TPU_TOPOLOGY)."""
    from core import advice

    keys = dict(item.partition("=")[::2] for item in overrides)
    chosen = advice.plan_of_maxtext_keys(keys, env.get("TPU_ACCELERATOR_TYPE", "").rpartition("-")[0],
                                         env.get("TPU_TOPOLOGY", ""))
    if chosen is None:
        return ("XLA ran out of HBM: lower perDeviceBatchSize (now "
                f"{keys.get('per_device_batch_size', '?')}); python -m preview --stack NAME --compile checks it")
    return advice.out_of_hbm(chosen)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
