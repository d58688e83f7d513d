"""Exit codes of the trainer's programs: what a retry can fix and what it cannot.

The trainer (trainer.entrypoint, trainer.smoke, trainer.jobset_run) exits with one of these, and the cluster's
failure policies are keyed on them: a JobSet pod's `podFailurePolicy` fails the Job (and the JobSet) at once on a
code in NOT_RETRYABLE, and restarts on the others; the same split decides what the Ray driver reports. A retry
re-runs the same code on the same settings and data, so a deterministic error is paid for again on every attempt;
only a lost host, a preempted VM or a transient fault can be fixed by one.

Codes 126, 127 and 128+N are the shell's (cannot execute, not found, killed by signal N): none of ours collides
with them, and PREEMPTED deliberately equals the shell's code for SIGTERM (see there).
"""
from __future__ import annotations

OK = 0

# Anything not classified below: an uncaught exception (Python exits 1 by itself), a collective that timed out, a
# host that vanished mid-step. Worth a retry: the next attempt resumes from the last checkpoint.
RUNTIME_FAILURE = 1

# The settings cannot run: refused before anything starts (one line naming the key, the value and what is
# allowed). The same value as argparse's usage error, so a bad flag and a bad value look alike to a policy.
CONFIG_ERROR = 2

# The installed software cannot run the job: a module missing from the image or the lock, a MaxText older than
# the trainer needs, or MaxText building a different model than the preset asks for. Fixed by a new image or
# lock, never by a retry.
IMPORT_ERROR = 3

# The dataset or tokenizer cannot be read or does not fit the model: a path with no files, a tokenizer whose
# vocabulary is not the model's, a record that does not parse. The same data fails the same way again.
DATA_ERROR = 4

# The multislice smoke test failed: the slices did not form one JAX system or a collective did not cross them.
# Training on that group would hang or train on fewer chips than paid for; restarting onto the same nodes
# repeats it, so the run ends and the user looks at the nodes (a missing slice is waited for by the scheduler,
# not detected by a failing smoke test).
SMOKE_FAILED = 5

# XLA ran out of the TPU's HBM (RESOURCE_EXHAUSTED), when it compiled the training step or when the step
# allocated its buffers: the step needs more memory per device than the chip has. The same settings compile to the
# same program on the same chips and need the same bytes again, so a retry is paid for in full and fails the same
# way; the fix is a smaller step (batch, sequence), more chips or another remat/offload/dtype, and the message
# names the nearest configuration the planner accepts (core/advice.py out_of_hbm).
OUT_OF_HBM = 6

# The run stopped making progress (trainer/watchdog.py): no training step within the start-up allowance after a
# (re)start, or none for the stall limit while training, both sized from the plan. A hung collective, a stalled
# install, a group that never starts or restarts that never train again: slices held without training. Restarting
# the same run onto the same nodes repeats it; the run ends and says why.
NO_PROGRESS = 7

# The run was interrupted (a reclaim, an eviction, a drained node, a node that died on SIGTERM, a replica group
# KubeRay deleted) N attempts in a row without training a step it had not trained before (trainer/watchdog.py,
# N from core/run_bounds.py attempts_without_progress). Each interruption alone is worth a retry, and the trainer
# retries it uncounted while the run advances; a run that keeps being interrupted without advancing is a loop
# (a host that fails at every start, an eviction that comes back, a deterministic fault that looks like a
# reclaim) that a backend retry would only repeat with every slice billing. Apart from NO_PROGRESS so the log
# and the exit code say which of the two happened.
INTERRUPTED_WITHOUT_PROGRESS = 8

# The VM is going away (GKE's Spot/maintenance notice is SIGTERM to every container): the trainer saved a
# checkpoint at the step every host agreed on and left. Must not be 0 (a pod exiting 0 counts as a completed
# index: the Job, then the JobSet, would finish "successfully" mid-run). 128 + SIGTERM(15), the code the shell
# gives a process SIGTERM killed before it could save, so "saved and left" and "killed at the notice" are
# handled alike: restart, resume from the newest checkpoint.
PREEMPTED = 143

# For reference: the shell's code for SIGKILL (the grace period ran out, or the kernel's OOM killer). A runtime
# failure as far as retries go.
KILLED = 137

NOT_RETRYABLE = frozenset({CONFIG_ERROR, IMPORT_ERROR, DATA_ERROR, SMOKE_FAILED, OUT_OF_HBM, NO_PROGRESS,
                           INTERRUPTED_WITHOUT_PROGRESS})
RETRYABLE = frozenset({RUNTIME_FAILURE, PREEMPTED, KILLED})

NAMES = {
    OK: "ok", RUNTIME_FAILURE: "runtime failure", CONFIG_ERROR: "configuration error",
    IMPORT_ERROR: "import/environment error", DATA_ERROR: "data error", SMOKE_FAILED: "smoke test failed",
    OUT_OF_HBM: "out of TPU HBM (XLA RESOURCE_EXHAUSTED)", NO_PROGRESS: "no progress (watchdog)",
    INTERRUPTED_WITHOUT_PROGRESS: "interrupted without progress (watchdog)",
    PREEMPTED: "preempted (checkpoint saved at the notice)", KILLED: "killed (SIGKILL)",
}


def describe(code: int) -> str:
    """A short name for an exit code, for logs and the local report."""
    return NAMES.get(code, f"exit {code}")

