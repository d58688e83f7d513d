"""workloads/pid_one.py: bash as a container's PID 1 forwards TERM to its child and ends with the child's status.

The PID 1 rule itself is played in tests/workloads/test_term_before_start.py (a new PID namespace); here the
forwarding and the exit status, with bash as an ordinary process: a child that handles TERM, saves (a stand-in
that waits for the test's go-ahead, so no timing is guessed) and exits with its own code must be waited for, and
its code, not the interrupted `wait`'s 143, must be bash's.
"""
from __future__ import annotations

import os
import select
import signal
import subprocess
import textwrap

from workloads import pid_one

BOUND_S = 60     # only a broken script reaches it


def _script(child: str) -> str:
    return "\n".join(["set -euo pipefail", pid_one.TRAP_FIRST, *pid_one.supervise(child)])


def test_a_term_reaches_the_child_and_bash_ends_with_the_child_s_own_code(tmp_path):
    ready, told, go_on = tmp_path / "ready", tmp_path / "told", tmp_path / "go-on"
    for fifo in (ready, told, go_on):
        os.mkfifo(fifo)
    # The child: on TERM it records it and "saves" until the test lets it finish, then exits 7 (its own code).
    child = tmp_path / "child.sh"
    child.write_text(textwrap.dedent(f"""\
        trap 'echo term > {told}; read line < {go_on}; exit 7' TERM
        echo ready > {ready}
        while :; do sleep 1; done
        """))
    bash = subprocess.Popen(["bash", "-c", _script(f"bash {child}")], cwd=tmp_path)
    try:
        with open(ready) as fifo:
            assert fifo.readline() == "ready\n"
        reader = os.open(told, os.O_RDONLY | os.O_NONBLOCK)
        try:
            bash.send_signal(signal.SIGTERM)
            message = b""
            while not message:
                # The bound only ends a broken script; the child's line ends the wait as soon as it is written.
                assert select.select([reader], [], [], BOUND_S)[0], "the TERM was not forwarded to the child"
                message = os.read(reader, 16)
        finally:
            os.close(reader)
        # The child is still saving: bash must not have ended (it would leave with the interrupted wait's 143).
        assert bash.poll() is None, "bash ended before its child"
        with open(go_on, "w") as fifo:
            fifo.write("done\n")
        assert bash.wait(timeout=BOUND_S) == 7
    finally:
        if bash.poll() is None:
            bash.kill()
            bash.wait()


def test_a_child_without_a_handler_is_ended_by_the_term_and_bash_exits_143(tmp_path):
    ready = tmp_path / "ready"
    os.mkfifo(ready)
    bash = subprocess.Popen(["bash", "-c", _script(f"sh -c 'echo ready > {ready}; exec sleep 600'")],
                            cwd=tmp_path)
    try:
        with open(ready) as fifo:
            assert fifo.readline() == "ready\n"
        bash.send_signal(signal.SIGTERM)
        assert bash.wait(timeout=BOUND_S) == 128 + signal.SIGTERM
    finally:
        if bash.poll() is None:
            bash.kill()
            bash.wait()


def test_without_a_term_bash_ends_with_the_child_s_code():
    assert subprocess.run(["bash", "-c", _script("sh -c 'exit 5'")], timeout=BOUND_S).returncode == 5
    assert subprocess.run(["bash", "-c", _script("true")], timeout=BOUND_S).returncode == 0
