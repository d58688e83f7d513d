"""Ctrl-C under `pulumi up` while the program's config build compiles: what Pulumi's own process handling sends the
program, played against the real compile (aot/runner.py run_compile and its guard, aot/guard.py) with a stand-in
for train_compile that starts a helper of its own (tests/preview/fake_train_compile.py, case "helper").

What the program receives (pulumi/pulumi, read at commit 1b5949891b3c):
- The terminal sends SIGINT to its foreground process group, where the `pulumi` CLI runs. The language host is
  not in it: plugins are started in a process group of their own (sdk/go/common/resource/plugin/plugin.go
  newPlugin: cmdutil.RegisterProcessGroup, i.e. Setpgid), and the Python program, the language host's child,
  is in that group (sdk/python/cmd/pulumi-language-python/main.go Run: tc.Command, no process attributes).
- First Ctrl-C: the CLI cancels (pkg/backend/cancellation_scope.go: "^C received; cancelling"), the engine signals
  cancellation to its plugins (pkg/resource/deploy/deployment_executor.go Execute -> Host.SignalCancellation,
  pkg/host/host.go: language hosts last) and the language host's Cancel RPC cancels the program's command, whose
  cmd.Cancel sends SIGINT (os.Interrupt) to the program's pid alone; cmd.WaitDelay = 5 s: a program still running
  5 s later is killed (Go os/exec: os.Kill, SIGKILL) (main.go Run).
- Second Ctrl-C: the CLI terminates (cancelSource.Terminate) and closes the plugins (pkg/engine/deployment.go:
  plugctx and host Close on Terminated); a plugin's kill sends SIGINT to the language host's whole process group
  (cmdutil.InterruptChildren: kill(-pid, SIGINT)), then after 5 s SIGKILL to that group (cmdutil.KillChildren).
The Python program is run as pulumi-language-python-exec does (loop.run_until_complete(run_in_stack(runpy...)),
preview/harness.py run_program), in the main thread, where SIGINT raises KeyboardInterrupt.

The compile runs in a session of its own, so none of these signals reaches it: the program must end it. Pulumi's
5-second grace is a race this test does not time: each outcome is played deterministically, the program acting on
SIGINT before the grace ends (waited for: the program exits), or not (held stopped with SIGSTOP, as a program that
has not ended after 5 s, so the kill comes first and only the guard's parent-death signal can end the compile).
"""
from __future__ import annotations

import os
import signal
import subprocess

import pytest

from tests.conftest import REPO
from tests.infra.test_compile_check import _alive, _gone_within, kill_leftovers, program_compiling

# The program as Pulumi's Python language host runs it (no handler of its own for KeyboardInterrupt: an
# uncaught one ends the process by SIGINT, Python's documented exit for it).
_PROGRAM = """
import sys
from preview.harness import run_program
from tests.infra.test_compile_check import FAKE, FAKE_KERNELS, _near
from workloads.compile_check import ProgramCompiler
run_program(_near(), stack="dev", compile_step=ProgramCompiler(
    compiler=(sys.executable, str(FAKE)), kernel_compiler=(sys.executable, str(FAKE_KERNELS))))
"""


def _program_in_its_own_group(tmp_path):
    """The program, started the way it runs under the language host: a child of this process (playing the
    language host) in a process group apart from the CLI's (the test's); returns it and the compile's two pids
    (the stand-in train_compile and its helper) once both run."""
    return program_compiling(tmp_path, _PROGRAM, process_group=0, stderr=subprocess.DEVNULL)


# (what Pulumi does, whether the program acts on SIGINT within the 5-second grace)
CASES = [("first Ctrl-C: Cancel RPC, SIGINT to the program", "ends within the grace"),
         ("first Ctrl-C: Cancel RPC, SIGINT to the program", "grace runs out: SIGKILL"),
         ("second Ctrl-C: SIGINT to the language host's group", "grace runs out: SIGKILL to the group")]


@pytest.mark.parametrize("pulumi_does, outcome", CASES)
def test_ctrl_c_under_pulumi_leaves_no_compile_behind(tmp_path, pulumi_does, outcome):
    program, (worker, helper) = _program_in_its_own_group(tmp_path)
    group = os.getpgid(program.pid)               # stands for the language host's group (Setpgid at its launch)
    to_group = pulumi_does.startswith("second")
    try:
        assert _alive(worker) and _alive(helper)
        # The compile is outside every group Pulumi signals: neither the CLI's nor the language host's.
        assert os.getpgid(group) != os.getpgid(0)
        assert os.getpgid(worker) != group and os.getpgid(helper) != group

        def send(signum: int) -> None:
            if to_group:
                os.killpg(group, signum)           # cmdutil.InterruptChildren / KillChildren: kill(-pid, sig)
            else:
                program.send_signal(signum)        # cmd.Cancel: os.Interrupt; WaitDelay: os.Kill

        if outcome == "ends within the grace":
            send(signal.SIGINT)
            # The KeyboardInterrupt went through run_compile (which ended the compile) and out of the program.
            assert program.wait(timeout=60) == -signal.SIGINT
        else:
            send(signal.SIGSTOP)                   # not ended when the grace runs out
            send(signal.SIGINT)
            send(signal.SIGKILL)
            assert program.wait(timeout=60) == -signal.SIGKILL
        assert _gone_within((worker, helper), 60), "the compile outlived the program"
    finally:
        kill_leftovers((worker, helper), program)
