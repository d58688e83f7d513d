"""The compile dies with the program that started it: `python -m aot.guard COMMAND...` runs COMMAND (MaxText's
train_compile) in its own process group and ends that whole group when the program that started the guard dies,
even by SIGKILL (which no handler in the program can catch: Pulumi kills its program that way on a second Ctrl-C).

How: run_compile starts the guard with the parent-death signal set (parent_death_preexec: Linux prctl
PR_SET_PDEATHSIG, man 2 prctl: "the signal that the calling process will get when its parent dies"), as the leader
of a new session, so the guard's SIGTERM handler kills the group, train_compile and any helper it started (the
parent-death signal is not inherited across fork, so train_compile's own children would otherwise outlive it).
"""
from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys

PR_SET_PDEATHSIG = 1    # linux/prctl.h


def parent_death_preexec(signum: int = signal.SIGTERM):
    """A preexec_fn for subprocess.Popen: the child gets `signum` when the process that started it dies. Closes
    the race where the parent died before prctl (then the child is already orphaned: it ends at once). None where
    prctl does not exist (not Linux): the compile then ends only with the program's own handlers."""
    if not sys.platform.startswith("linux"):
        return None
    parent = os.getpid()

    def preexec() -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0)
        if os.getppid() != parent:
            os.kill(os.getpid(), signum)
    return preexec


def main(command: list[str]) -> int:
    def stop(signum, frame) -> None:
        # The whole group: train_compile and whatever it started (the guard leads the group, see run_compile).
        os.killpg(os.getpgrp(), signal.SIGKILL)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    child = subprocess.Popen(command)
    returncode = child.wait()
    if returncode < 0:       # died of a signal: so does the guard, so that run_compile sees the same status
        signal.signal(-returncode, signal.SIG_DFL)
        os.kill(os.getpid(), -returncode)
    return returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
