"""MaxText pre-training as the Pathways client (the Pathways head's trainer container), exiting with the trainer's
exit codes.

    python3 -m trainer.pathways_run <maxtext base.yml> key=value ...     (MaxText's own pre_train argv)

The Pathways trainer image runs MaxText's `train.main`, which exits 1 on every error: a wrong setting, a module
missing from the image or a dataset that cannot be opened looked like any runtime failure, and the JobSet retried
it up to maxRestarts, each time bringing every slice up again. Run through this wrapper, the same errors end with
core/exit_codes.py's codes (trainer/failures.py: MaxText's settings, data and import errors, named by the phase
that raised them, trainer/maxtext_runtime.py install_phase_guards), which the Pathways JobSet's failure policy turns
into the end of the run (workloads/failure_policy.py NotRetryableExit). Unlike trainer.jobset_run, no preemption
notice is watched: the head runs on a CPU node, and MaxText's elastic recovery (or a JobSet restart) handles a
lost TPU slice. The image's MaxText is used as it is (its release is the image's, not the workers' lock).
"""
from __future__ import annotations

import signal
import sys

from core import exit_codes


def _leave_on_term(signum: int, frame: object) -> None:
    raise SystemExit(exit_codes.PREEMPTED)


if __name__ == "__main__":
    # The head's bash (PID 1) forwards TERM to this Python (workloads/pid_one.py). Run as PID 1 itself, as an
    # `exec` would make it, the kernel drops a SIGTERM sent from outside its namespace unless PID 1 handles it
    # (pid_namespaces(7)), and a deletion of the head waited out the grace period for SIGKILL. Installed as the
    # module's first statements, before any import of ours or MaxText's; SystemExit is not an Exception, so the
    # failure reporting below does not swallow it.
    signal.signal(signal.SIGTERM, _leave_on_term)

from trainer import failures  # noqa: E402 - after the TERM handler, on purpose


def main(argv: list[str]) -> int:
    if len(argv) < 1:
        print("trainer.pathways_run: usage: python3 -m trainer.pathways_run <base.yml> key=value ...",
              file=sys.stderr)
        return exit_codes.CONFIG_ERROR
    from trainer import deferred_imports

    deferred_imports.install()
    try:
        from maxtext.trainers.pre_train import train
    except ImportError as err:
        print(f"trainer.pathways_run: {exit_codes.describe(exit_codes.IMPORT_ERROR)}: {err}", file=sys.stderr)
        return exit_codes.IMPORT_ERROR
    from trainer import maxtext_runtime

    try:
        maxtext_runtime.install_phase_guards()
    except (AttributeError, ImportError) as err:
        # A MaxText laid out differently from the one the guards know: train anyway; its errors then exit as
        # runtime failures (import errors still as IMPORT_ERROR), as MaxText's own exits would.
        print(f"trainer.pathways_run: this MaxText has no {err}; settings and data errors will be retried",
              file=sys.stderr, flush=True)
    try:
        train.main(["maxtext.trainers.pre_train.train", *argv])
    except Exception as err:  # noqa: BLE001 - every failure leaves with a code the failure policy understands
        return failures.report("trainer.pathways_run", err)
    return exit_codes.OK


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
