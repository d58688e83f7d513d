"""Shell lines that keep a container's PID 1 answering SIGTERM for the whole life of the program it runs.

A container's first process is PID 1 of its PID namespace, and the kernel drops a signal sent to PID 1 from an
ancestor namespace (the container runtime's SIGTERM when the kubelet stops the pod) unless PID 1 has installed a
handler for it (pid_namespaces(7), "Signals and the init process"). The kubelet then waits out the pod's
terminationGracePeriodSeconds and sends SIGKILL (https://kubernetes.io/docs/concepts/workloads/pods/pod-lifecycle/
#pod-termination). `exec python ...` makes Python PID 1, and Python handles nothing until its program's first
statement runs: the interpreter's start-up (the image's `.pth` files and `sitecustomize`, the `-m` package's
imports) is a window in which a TERM is lost for good, not delayed.

So bash stays PID 1: its trap is the script's first statement, the program runs as its child (a child is not
PID 1, so until the program installs a handler TERM's default action ends it at once), every TERM is forwarded
to that child, and bash exits with the child's own status (143 when TERM's default action or the program's own
handler ended it). The program's handlers (the trainer's early exit, then JAX's preemption notifier from
`jax.distributed.initialize` on) receive the forwarded TERM as they would have received the kubelet's.
"""
from __future__ import annotations

# The script's first statement. `term` remembers a TERM that arrives before the child exists.
TRAP_FIRST = ('trap \'term=1; if [ -n "${child:-}" ]; then kill -TERM "$child" 2>/dev/null || true; fi\' TERM')


def supervise(command_line: str) -> list[str]:
    """Shell lines: `command_line` run as bash's child under TRAP_FIRST (which must be installed before them, as
    the script's first line), bash's exit status the child's. Safe under `set -euo pipefail`."""
    return [
        # Job control off for the child: it stays in bash's process group, and its stdin is /dev/null (it
        # reads none). With `set -m` bash would also report the job's state changes on stderr.
        "set +m",
        f"{command_line} &",
        "child=$!",
        # A TERM between the trap and `child=$!` found no child to forward to.
        'if [ -n "${term:-}" ]; then kill -TERM "$child" 2>/dev/null || true; fi',
        # A trapped TERM interrupts `wait` (status > 128) while the child runs on: wait again until it is gone.
        'while kill -0 "$child" 2>/dev/null; do wait "$child" || true; done',
        # bash keeps a reaped child's status: `wait` returns the child's own code, not the interrupted wait's.
        'status=0; wait "$child" || status=$?',
        'exit "$status"',
    ]
