"""SIGTERM reaches a JobSet pod and the Pathways head before MaxText starts: a real process test.

A container's main process is PID 1 of its PID namespace, and the kernel drops a signal sent there from an
ancestor namespace (the container runtime's SIGTERM) unless PID 1 installed a handler for it (pid_namespaces(7),
"Signals and the init process"; FACTS §11). So the rendered command is run here as PID 1 of a new PID namespace
(util-linux `unshare --user --map-root-user --pid --fork`), with a stand-in for the slow first minutes (the lock's
install, MaxText's import) that never ends, and SIGTERM is sent from outside, as the kubelet's runtime does. The
pod must end within seconds with 143 (core/exit_codes.py PREEMPTED), the step it was waiting for told too, not
after the grace period with SIGKILL.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from core import exit_codes
from infra.config import build
from preview.stack_files import load_stack_config
from tests.conftest import REPO
from workloads.bundle import load_bundle
from workloads.jobset import spec as jobset_inputs
from workloads.pathways import spec as pathways_inputs

# Long enough that only a forwarded signal ends it within the test.
NEVER_S = 600
# From SIGTERM to the process gone, with a loaded 2-core machine's slack.
PROMPT_S = 10


def _namespaces_available() -> bool:
    if not shutil.which("unshare"):
        return False
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "--pid", "--fork", "sh", "-c", "echo $$"],
                           capture_output=True, text=True, timeout=30)
    return probe.returncode == 0 and probe.stdout.strip() == "1"


pytestmark = pytest.mark.skipif(not _namespaces_available(),
                                reason="needs unprivileged user and PID namespaces (unshare)")


def _init_pid(launcher: subprocess.Popen) -> int:
    """The PID, seen from here, of the command unshare forked as PID 1 of the new namespace."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        children = Path(f"/proc/{launcher.pid}/task/{launcher.pid}/children").read_text().split()
        if children:
            return int(children[0])
        time.sleep(0.05)
    raise AssertionError("unshare forked no child")


def run_as_pid1_and_terminate(argv: list[str], env: dict[str, str], started: Path, tmp: Path) -> int:
    """Run `argv` as PID 1 of a new PID namespace, wait until `started` exists (the slow step is running), send
    SIGTERM to PID 1 from outside and return its exit status (None: still running PROMPT_S later)."""
    launcher = subprocess.Popen(["unshare", "--user", "--map-root-user", "--pid", "--fork", "--kill-child",
                                 *argv], env=env, cwd=tmp)
    try:
        init = _init_pid(launcher)
        deadline = time.monotonic() + 120
        while not started.exists():
            assert launcher.poll() is None, f"ended before its slow step: {launcher.returncode}"
            assert time.monotonic() < deadline, "the slow step never started"
            time.sleep(0.1)
        os.kill(init, signal.SIGTERM)
        try:
            return launcher.wait(timeout=PROMPT_S)
        except subprocess.TimeoutExpired:
            return None
    finally:
        if launcher.poll() is None:
            launcher.kill()      # --kill-child: its namespace goes with it
            launcher.wait()


def _executable(path: Path, text: str) -> None:
    path.write_text(textwrap.dedent(text))
    path.chmod(0o755)


def test_a_jobset_pod_terminated_during_its_install_exits_at_once(tmp_path):
    # The runtime install (workerEnvironment=runtime): the pods install the lock at start.
    config = build({**load_stack_config("jobset", REPO), "workerEnvironment": "runtime"})
    jobset = jobset_inputs.jobset_objects(config, load_bundle())["jobset"]
    container = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    assert container["command"][:2] == ["bash", "-c"]
    assert "pip install" in container["command"][2], "the stack installs the lock at start"
    # `python` of the image: here a stand-in whose every run is an install that never ends and that records the
    # SIGTERM it is given.
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    started, told = tmp_path / "install-started", tmp_path / "install-got-term"
    _executable(bin_dir / "python", f"""\
        #!/bin/bash
        trap 'touch {told}; exit 143' TERM
        touch {started}
        sleep {NEVER_S} &
        wait
        """)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    status = run_as_pid1_and_terminate([*container["command"], *container.get("args", [])], env, started, tmp_path)
    assert status == exit_codes.PREEMPTED, f"bash as PID 1 did not end on SIGTERM (status {status})"
    assert told.exists(), "the install was not told to stop"


def test_the_pathways_head_terminated_while_maxtext_imports_exits_at_once(tmp_path):
    command = pathways_inputs.trainer_command(build(load_stack_config("pathways", REPO)))
    assert command[:2] == ["bash", "-c"] and "exec python3 -m trainer.pathways_run" in command[2]
    # The image's MaxText: here one whose import never ends (MaxText and JAX take a while to import).
    started = tmp_path / "import-started"
    package = tmp_path / "fake" / "maxtext" / "trainers" / "pre_train"
    package.mkdir(parents=True)
    for directory in (package.parent.parent, package.parent, package):
        (directory / "__init__.py").write_text("")
    (package / "train.py").write_text(
        f"import pathlib, time\npathlib.Path({str(started)!r}).touch()\ntime.sleep({NEVER_S})\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python3").symlink_to(sys.executable)
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
           "PYTHONPATH": f"{REPO}:{tmp_path / 'fake'}", "PYTHONDONTWRITEBYTECODE": "1"}
    status = run_as_pid1_and_terminate(command, env, started, tmp_path)
    assert status == exit_codes.PREEMPTED, f"the head's Python as PID 1 did not end on SIGTERM (status {status})"


def test_a_failed_install_still_ends_the_pod_with_its_own_code(tmp_path):
    """The steps run as background jobs: their failures must end the script as they did in the foreground."""
    config = build(load_stack_config("jobset", REPO))
    jobset = jobset_inputs.jobset_objects(config, load_bundle())["jobset"]
    container = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]["containers"][0]
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _executable(bin_dir / "python", "#!/bin/sh\nexit 5\n")
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    done = subprocess.run([*container["command"], *container.get("args", [])], env=env, cwd=tmp_path,
                          capture_output=True, timeout=60)
    assert done.returncode == exit_codes.RUNTIME_FAILURE, done.stderr
