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
    # The pod's bash execs this Python, which is then PID 1: the kernel drops a SIGTERM sent to PID 1 from outside
    # its namespace unless PID 1 handles it (pid_namespaces(7)), and JAX installs its own handler only inside
    # jax.distributed.initialize (tsl's SigtermNotifier, which replaces this one with std::signal; from then on
    # a TERM is MaxText's preemption notice and a save). Before that come the imports of MaxText, JAX and the
    # data pipeline, and the wait for every host to join: a TERM there (a Spot notice, an eviction) waited out
    # the whole grace period and ended in SIGKILL. So the handler comes first, before any heavy import; it exits
    # with os._exit, since nothing was trained and a thread an import started must not delay the exit.
    signal.signal(signal.SIGTERM, _leave_on_term)

from trainer import failures, maxtext_runtime, notice  # noqa: E402 - after the TERM handler, on purpose


def main(argv: list[str]) -> int:
    if len(argv) < 1:
        print("trainer.jobset_run: usage: python -m trainer.jobset_run <base.yml> key=value ...", file=sys.stderr)
        return exit_codes.CONFIG_ERROR
    overrides = argv[1:]
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
        return code
    if watch.stopped:
        print(f"trainer.jobset_run: saved at step {watch.notice_step} on notice; exiting "
              f"{exit_codes.PREEMPTED} so the pod is restarted, not counted as done", flush=True)
        return exit_codes.PREEMPTED
    return exit_codes.OK


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
